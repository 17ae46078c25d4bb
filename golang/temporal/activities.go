package temporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/panto/panto/panto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// AgentFactory gives the configuration of a registered agent: the activities build
// their panto.Agent from it, and run its Go tools (Tool.Func) as tool activities. Turn
// panto's own retries off in it (Retry.MaxRetries 0): Temporal retries.
type AgentFactory func() (panto.Config, error)

// How often a running activity heartbeats, and at most how often a model step sends its
// text to the workflow (each send is a workflow-history event).
const (
	heartbeatInterval = time.Second
	streamInterval    = 250 * time.Millisecond
)

// RegisterTurn registers TurnWorkflow and its activities with w, for the agents given by
// name (the names a TurnRequest gives).
func RegisterTurn(w worker.Registry, agents map[string]AgentFactory) {
	w.RegisterWorkflowWithOptions(TurnWorkflow, workflow.RegisterOptions{Name: TurnWorkflowName})
	a := &activities{factories: agents, idle: map[string][]*panto.Agent{}, shared: map[string]*panto.Agent{}}
	w.RegisterActivityWithOptions(a.modelStep, activity.RegisterOptions{Name: ModelStepActivity})
	w.RegisterActivityWithOptions(a.toolCall, activity.RegisterOptions{Name: ToolCallActivity})
}

type activities struct {
	factories map[string]AgentFactory
	mu        sync.Mutex
	idle      map[string][]*panto.Agent
	shared    map[string]*panto.Agent
}

func configError(msg string) error {
	return temporal.NewApplicationErrorWithOptions("config: "+msg, "config", temporal.ApplicationErrorOptions{NonRetryable: true})
}

// activityError is panto's error as the activity's failure: the kind is the type, and
// the kinds no retry fixes are non-retryable.
func activityError(err error) error {
	var pe *panto.Error
	if errors.As(err, &pe) {
		kind := string(pe.Kind)
		non := false
		for _, k := range NonRetryableKinds {
			non = non || k == kind
		}
		return temporal.NewApplicationErrorWithOptions(kind+": "+pe.Message, kind, temporal.ApplicationErrorOptions{NonRetryable: non})
	}
	return err
}

func (a *activities) config(name string) (panto.Config, error) {
	f, ok := a.factories[name]
	if !ok {
		names := make([]string, 0, len(a.factories))
		for n := range a.factories {
			names = append(names, n)
		}
		sort.Strings(names)
		return panto.Config{}, configError(fmt.Sprintf("this worker has no agent named %q (it has %v)", name, names))
	}
	return f()
}

func (a *activities) take(name string) (*panto.Agent, error) {
	a.mu.Lock()
	if idle := a.idle[name]; len(idle) > 0 {
		ag := idle[len(idle)-1]
		a.idle[name] = idle[:len(idle)-1]
		a.mu.Unlock()
		return ag, nil
	}
	a.mu.Unlock()
	cfg, err := a.config(name)
	if err != nil {
		return nil, err
	}
	ag, err := panto.NewAgent(cfg)
	if err != nil {
		return nil, activityError(err)
	}
	return ag, nil
}

func (a *activities) giveBack(name string, ag *panto.Agent) {
	if ag.ClearHistory() != nil {
		_ = ag.Close()
		return
	}
	a.mu.Lock()
	a.idle[name] = append(a.idle[name], ag)
	a.mu.Unlock()
}

func (a *activities) sharedAgent(name string) (*panto.Agent, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ag, ok := a.shared[name]; ok {
		return ag, nil
	}
	cfg, err := a.config(name)
	if err != nil {
		return nil, err
	}
	ag, err := panto.NewAgent(cfg)
	if err != nil {
		return nil, activityError(err)
	}
	a.shared[name] = ag
	return ag, nil
}

// heartbeat records a heartbeat every heartbeatInterval until the returned stop is called.
func heartbeat(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(heartbeatInterval)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// settle takes the results of approved calls that ran as their own activities into the
// checkpoint's pending step (a result answer is for deferred calls only).
func settle(checkpoint string, results map[string]map[string]any) (string, error) {
	if len(results) == 0 {
		return checkpoint, nil
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(checkpoint), &doc); err != nil {
		return "", configError("the checkpoint is not JSON: " + err.Error())
	}
	if pending, ok := doc["pending"].(map[string]any); ok {
		calls, _ := pending["calls"].([]any)
		for _, c := range calls {
			call, ok := c.(map[string]any)
			if !ok {
				continue
			}
			id, _ := call["call_id"].(string)
			if r, ok := results[id]; ok && call["result"] == nil {
				delete(call, "deferred")
				kept := map[string]any{}
				for _, k := range []string{"output", "is_error", "parts"} {
					if v, ok := r[k]; ok && v != nil {
						kept[k] = v
					}
				}
				call["result"] = kept
			}
		}
	}
	out, err := json.Marshal(doc)
	return string(out), err
}

func (a *activities) modelStep(ctx context.Context, in StepInput) (StepOutput, error) {
	ag, err := a.take(in.Agent)
	if err != nil {
		return StepOutput{}, err
	}
	stop := heartbeat(ctx)
	out, err := a.runStep(ctx, ag, in)
	stop()
	if err != nil {
		_ = ag.Close()
		return StepOutput{}, activityError(err)
	}
	a.giveBack(in.Agent, ag)
	return out, nil
}

func (a *activities) runStep(ctx context.Context, ag *panto.Agent, in StepInput) (StepOutput, error) {
	var s *panto.Stream
	var err error
	if in.Checkpoint != nil {
		cp, serr := settle(*in.Checkpoint, in.Results)
		if serr != nil {
			return StepOutput{}, serr
		}
		answers := panto.Answers{}
		for id, ans := range in.Answers {
			switch {
			case ans["approve"] == true:
				answers = answers.Approve(id)
			case ans["reject"] != nil:
				reason, _ := ans["reject"].(string)
				answers = answers.Reject(id, reason)
			default:
				js, _ := json.Marshal(ans)
				var r panto.CallResult
				if err := json.Unmarshal(js, &r); err != nil {
					return StepOutput{}, configError("an answer is not a result: " + err.Error())
				}
				answers = answers.CallResult(id, r)
			}
		}
		s, err = ag.Resume(ctx, panto.Checkpoint(cp), answers)
	} else {
		if in.History != nil {
			if err := ag.LoadHistory([]byte(*in.History)); err != nil {
				return StepOutput{}, err
			}
		}
		opts := panto.TurnOptions{DeferTools: true}
		if in.Model != nil {
			opts.Model = *in.Model
		}
		s, err = ag.StreamWith(ctx, in.Input, opts)
	}
	if err != nil {
		return StepOutput{}, err
	}
	defer s.Close()
	handle := activity.GetClient(ctx)
	send := func(text string) {
		// The live view is best effort: a failure to send never fails the turn.
		_ = handle.SignalWorkflow(ctx, in.WorkflowID, "", "panto_text", Streamed{Step: in.Step, Text: text})
	}
	text, sent := "", ""
	var last time.Time
	var done *panto.MessageComplete
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ContentDelta:
			if e.Kind == "text" {
				text += e.Text
				if time.Since(last) >= streamInterval {
					send(text)
					sent, last = text, time.Now()
				}
			}
		case *panto.MessageEnd:
			if text != "" && text[len(text)-1] != '\n' {
				text += "\n"
			}
		case *panto.MessageComplete:
			done = e
		}
	}
	if err := s.Err(); err != nil {
		return StepOutput{}, err
	}
	if text != sent {
		send(text)
	}
	cp, err := s.Checkpoint()
	if err != nil {
		return StepOutput{}, err
	}
	if done == nil || len(cp) == 0 {
		return StepOutput{}, errors.New("the turn ended without its checkpoint")
	}
	if len(cp) > in.MaxCheckpointBytes && in.MaxCheckpointBytes > 0 {
		return StepOutput{}, configError(fmt.Sprintf(
			"the turn's checkpoint is %d bytes, past the bound of %d (TurnRequest.MaxCheckpointBytes; "+
				"Temporal's payload limit is 2 MB): keep large attachments out of the conversation "+
				"(see docs/durable-execution.md)", len(cp), in.MaxCheckpointBytes))
	}
	var doc struct {
		Steps int `json:"steps"`
	}
	_ = json.Unmarshal(cp, &doc)
	out := StepOutput{
		Checkpoint: string(cp), Finished: done.StopReason != panto.StopDeferred, Text: done.Text,
		StopReason: done.StopReason, Steps: doc.Steps, Deferred: []DeferredCall{},
	}
	if !out.Finished {
		calls, err := done.DeferredCalls()
		if err != nil {
			return StepOutput{}, err
		}
		cfg, err := a.config(in.Agent)
		if err != nil {
			return StepOutput{}, err
		}
		for _, c := range calls {
			var args any
			_ = json.Unmarshal(c.Arguments, &args)
			out.Deferred = append(out.Deferred, DeferredCall{
				CallID: c.CallID, Name: c.Name, Arguments: args, Reason: c.Reason, MCP: !hasTool(cfg, c.Name),
			})
		}
	}
	return out, nil
}

func hasTool(cfg panto.Config, name string) bool {
	for _, t := range cfg.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

func (a *activities) toolCall(ctx context.Context, in ToolInput) (map[string]any, error) {
	stop := heartbeat(ctx)
	defer stop()
	args, err := json.Marshal(in.Arguments)
	if err != nil || string(args) == "null" {
		args = []byte("{}")
	}
	if in.MCP {
		ag, err := a.sharedAgent(in.Agent)
		if err != nil {
			return nil, err
		}
		r, err := ag.CallMCPTool(ctx, in.Name, json.RawMessage(args))
		if err != nil {
			return nil, activityError(err)
		}
		out := map[string]any{"output": r.Output, "is_error": r.IsError}
		if len(r.Parts) > 0 {
			out["parts"] = r.Parts
		}
		return out, nil
	}
	cfg, err := a.config(in.Agent)
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.Tools {
		if t.Name != in.Name || t.Func == nil {
			continue
		}
		out, err := t.Func(ctx, args)
		if err != nil {
			// The model reads the error, as in a turn.
			return map[string]any{"output": err.Error(), "is_error": true}, nil
		}
		return map[string]any{"output": out, "is_error": false}, nil
	}
	return nil, configError(fmt.Sprintf("the agent %q has no Go tool %q", in.Agent, in.Name))
}
