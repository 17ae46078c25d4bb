// Package temporal runs panto turns on Temporal: a turn that survives a crashed worker
// and moves between machines (docs/durable-execution.md). It is its own Go module, so
// that the panto module does not depend on the Temporal SDK.
//
// A worker registers the workflow and the activities of its agents with RegisterTurn;
// a client starts TurnWorkflow with a TurnRequest. Each model response is one activity
// (ModelStepActivity: the turn resumed from its checkpoint with every call deferred),
// each tool call one activity (ToolCallActivity: a Go tool of the agent, or a tool of
// its MCP servers through Agent.CallMCPTool), at most MaxConcurrentTools at once. Calls
// that need approval and external calls wait for the "decide" signal. The text streams
// live to the "text" query; the workflow's result is what is durable. The names and the
// JSON of the inputs are those of the Python package panto.temporal.
package temporal

import (
	"errors"
	"maps"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The names of the workflow and its activities: stable across deploys (a renamed
// activity strands the turns in flight), and the same in Python.
const (
	TurnWorkflowName  = "panto.Turn"
	ModelStepActivity = "panto.model_step"
	ToolCallActivity  = "panto.tool_call"
)

// DefaultMaxConcurrentTools bounds the tool calls of one step that run at once; the
// others wait their turn.
const DefaultMaxConcurrentTools = 4

// DefaultMaxCheckpointBytes bounds the checkpoint a step hands the workflow: under
// Temporal's default payload limit (2 MB), with room for the rest of the event.
const DefaultMaxCheckpointBytes = 1_500_000

// NonRetryableKinds are panto's error kinds that no retry fixes: an activity that fails
// with one fails the turn at once, with the kind as the error's type.
var NonRetryableKinds = []string{
	"config", "authentication", "permission", "not_found", "bad_request",
	"output_invalid", "output_refused", "output_truncated", "cancelled", "busy", "internal",
}

// TurnRequest is TurnWorkflow's input: one turn of the agent registered as Agent, on
// Input. Checkpoint (a panto.Checkpoint's JSON) continues that turn instead; History
// (Agent.SaveHistory) is the conversation the turn starts from. NeedsApproval names
// tools whose calls wait for approval besides those that declare it (MCP tools, for
// example). The zero values of the rest are the defaults.
type TurnRequest struct {
	Agent              string   `json:"agent"`
	Input              string   `json:"input"`
	Checkpoint         string   `json:"checkpoint,omitempty"`
	History            string   `json:"history,omitempty"`
	Model              string   `json:"model,omitempty"`
	NeedsApproval      []string `json:"needs_approval,omitempty"`
	MaxConcurrentTools int      `json:"max_concurrent_tools,omitempty"`
	MaxCheckpointBytes int      `json:"max_checkpoint_bytes,omitempty"`
	ModelTimeoutS      float64  `json:"model_timeout_s,omitempty"`
	ToolTimeoutS       float64  `json:"tool_timeout_s,omitempty"`
	HeartbeatTimeoutS  float64  `json:"heartbeat_timeout_s,omitempty"`
	RetryInitialS      float64  `json:"retry_initial_interval_s,omitempty"`
	MaxAttempts        int      `json:"max_attempts,omitempty"`
}

// TurnResult is what a finished turn returns: its text, stop reason, number of steps and
// last checkpoint (whose "conversation" is the whole history).
type TurnResult struct {
	Text       string `json:"text"`
	StopReason string `json:"stop_reason"`
	Steps      int    `json:"steps"`
	Checkpoint string `json:"checkpoint"`
}

// StepInput is the model-step activity's input: start the turn (Checkpoint empty) or
// resume Checkpoint with Answers (by call id, the answer JSON) and Results (results of
// approved calls that ran as their own activities).
type StepInput struct {
	Agent              string                    `json:"agent"`
	WorkflowID         string                    `json:"workflow_id"`
	Step               int                       `json:"step"`
	Input              string                    `json:"input"`
	Checkpoint         *string                   `json:"checkpoint"`
	History            *string                   `json:"history"`
	Model              *string                   `json:"model"`
	Answers            map[string]map[string]any `json:"answers"`
	Results            map[string]map[string]any `json:"results"`
	MaxCheckpointBytes int                       `json:"max_checkpoint_bytes"`
}

// DeferredCall is a call a step left to the workflow: Reason is "approval", "external"
// or "deferred"; MCP says a tool of an MCP server runs it.
type DeferredCall struct {
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
	Reason    string `json:"reason"`
	MCP       bool   `json:"mcp"`
}

// StepOutput is the model-step activity's result.
type StepOutput struct {
	Checkpoint string         `json:"checkpoint"`
	Finished   bool           `json:"finished"`
	Text       string         `json:"text"`
	StopReason string         `json:"stop_reason"`
	Steps      int            `json:"steps"`
	Deferred   []DeferredCall `json:"deferred"`
}

// ToolInput is the tool activity's input: one call, run by the agent's Go tool or, with
// MCP, by its MCP server.
type ToolInput struct {
	Agent     string `json:"agent"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
	MCP       bool   `json:"mcp"`
}

// Streamed is what a model step has streamed so far (the "panto_text" signal).
type Streamed struct {
	Step int    `json:"step"`
	Text string `json:"text"`
}

// Decision answers a waiting call (the "decide" signal): Approve runs it; otherwise
// Reason rejects it; for an external call, Output (and IsError) is its result.
type Decision struct {
	CallID  string  `json:"call_id"`
	Approve bool    `json:"approve"`
	Reason  string  `json:"reason"`
	Output  *string `json:"output"`
	IsError bool    `json:"is_error"`
}

func seconds(s, def float64) time.Duration {
	if s <= 0 {
		s = def
	}
	return time.Duration(s * float64(time.Second))
}

// TurnWorkflow drives one turn through its checkpoints (see the package doc). Queries:
// "text" (the text streamed so far), "waiting" (the calls waiting for a decision).
// Cancelling the workflow cancels the model request and the tool calls in flight.
func TurnWorkflow(ctx workflow.Context, req TurnRequest) (TurnResult, error) {
	streamed := map[int]string{}
	waiting := map[string]DeferredCall{}
	decisions := map[string]Decision{}
	var order []string
	if err := workflow.SetQueryHandler(ctx, "text", func() (string, error) {
		text := ""
		for _, step := range slices.Sorted(maps.Keys(streamed)) {
			text += streamed[step]
		}
		return text, nil
	}); err != nil {
		return TurnResult{}, err
	}
	if err := workflow.SetQueryHandler(ctx, "waiting", func() ([]DeferredCall, error) {
		out := []DeferredCall{}
		for _, id := range order {
			if c, ok := waiting[id]; ok {
				if _, done := decisions[id]; !done {
					out = append(out, c)
				}
			}
		}
		return out, nil
	}); err != nil {
		return TurnResult{}, err
	}
	decide := workflow.GetSignalChannel(ctx, "decide")
	text := workflow.GetSignalChannel(ctx, "panto_text")
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			s := workflow.NewSelector(ctx)
			s.AddReceive(decide, func(c workflow.ReceiveChannel, _ bool) {
				var d Decision
				c.Receive(ctx, &d)
				if _, ok := waiting[d.CallID]; ok {
					decisions[d.CallID] = d
				}
			})
			s.AddReceive(text, func(c workflow.ReceiveChannel, _ bool) {
				var st Streamed
				c.Receive(ctx, &st)
				streamed[st.Step] = st.Text
			})
			s.Select(ctx)
		}
	})

	retry := &temporal.RetryPolicy{
		InitialInterval:        seconds(req.RetryInitialS, 1),
		BackoffCoefficient:     2,
		MaximumAttempts:        int32(max(req.MaxAttempts, 0)),
		NonRetryableErrorTypes: NonRetryableKinds,
	}
	if req.MaxAttempts == 0 {
		retry.MaximumAttempts = 10
	}
	options := func(timeout float64) workflow.ActivityOptions {
		return workflow.ActivityOptions{
			StartToCloseTimeout: seconds(timeout, 600),
			HeartbeatTimeout:    seconds(req.HeartbeatTimeoutS, 30),
			RetryPolicy:         retry,
			WaitForCancellation: true,
		}
	}
	modelCtx := workflow.WithActivityOptions(ctx, options(req.ModelTimeoutS))
	toolCtx := workflow.WithActivityOptions(ctx, options(req.ToolTimeoutS))
	bound := req.MaxConcurrentTools
	if bound <= 0 {
		bound = DefaultMaxConcurrentTools
	}
	maxBytes := req.MaxCheckpointBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxCheckpointBytes
	}
	approval := map[string]bool{}
	for _, n := range req.NeedsApproval {
		approval[n] = true
	}
	in := StepInput{
		Agent: req.Agent, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Input: req.Input,
		MaxCheckpointBytes: maxBytes,
	}
	if req.Checkpoint != "" {
		in.Checkpoint = &req.Checkpoint
	}
	if req.History != "" {
		in.History = &req.History
	}
	if req.Model != "" {
		in.Model = &req.Model
	}
	for {
		var out StepOutput
		if err := workflow.ExecuteActivity(modelCtx, ModelStepActivity, in).Get(ctx, &out); err != nil {
			return TurnResult{}, turnError(ctx, err)
		}
		if out.Finished {
			return TurnResult{Text: out.Text, StopReason: out.StopReason, Steps: out.Steps, Checkpoint: out.Checkpoint}, nil
		}
		order = order[:0]
		for _, c := range out.Deferred {
			if c.Reason == "approval" || c.Reason == "external" || approval[c.Name] {
				waiting[c.CallID] = c
				order = append(order, c.CallID)
			}
		}
		if len(waiting) > 0 {
			if err := workflow.Await(ctx, func() bool {
				for id := range waiting {
					if _, ok := decisions[id]; !ok {
						return false
					}
				}
				return true
			}); err != nil {
				return TurnResult{}, err
			}
		}
		answers := map[string]map[string]any{}
		results := map[string]map[string]any{}
		var run []DeferredCall
		for _, c := range out.Deferred {
			d, decided := decisions[c.CallID]
			switch {
			case c.Reason == "external" && d.Output != nil:
				answers[c.CallID] = map[string]any{"output": *d.Output, "is_error": d.IsError}
			case c.Reason == "external":
				answers[c.CallID] = map[string]any{"reject": d.Reason}
			case decided && !d.Approve:
				answers[c.CallID] = map[string]any{"reject": d.Reason}
			default:
				run = append(run, c)
			}
		}
		clear(waiting)
		clear(decisions)
		sem := workflow.NewSemaphore(ctx, int64(bound))
		var firstErr error
		done := 0
		for _, c := range run {
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer func() { done++ }()
				if err := sem.Acquire(ctx, 1); err != nil {
					firstErr = err
					return
				}
				defer sem.Release(1)
				var r map[string]any
				err := workflow.ExecuteActivity(toolCtx, ToolCallActivity,
					ToolInput{Agent: req.Agent, CallID: c.CallID, Name: c.Name, Arguments: c.Arguments, MCP: c.MCP}).Get(ctx, &r)
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				// A call that needed approval takes its result into the checkpoint (a
				// result answer is for deferred calls only); the others as answers.
				if c.Reason == "approval" {
					results[c.CallID] = r
				} else {
					answers[c.CallID] = r
				}
			})
		}
		if err := workflow.Await(ctx, func() bool { return done == len(run) }); err != nil {
			return TurnResult{}, err
		}
		if firstErr != nil {
			return TurnResult{}, turnError(ctx, firstErr)
		}
		cp := out.Checkpoint
		in = StepInput{
			Agent: req.Agent, WorkflowID: in.WorkflowID, Step: out.Steps, Checkpoint: &cp, Model: in.Model,
			Answers: answers, Results: results, MaxCheckpointBytes: maxBytes,
		}
	}
}

// turnError is an activity's failure as the turn's: panto's kind as the error's type,
// non-retryable; a cancelled workflow's own cancellation.
func turnError(ctx workflow.Context, err error) error {
	if ctx.Err() != nil {
		// The workflow was cancelled: it ends cancelled, whatever its activity said.
		return ctx.Err()
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return temporal.NewApplicationErrorWithOptions(app.Error(), app.Type(), temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return err
}
