package panto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// Durable turns (durable.go) against the scripted server: deferred calls (approval,
// rejection, external results, DeferTools), checkpoints resumed in a new agent from
// their JSON, steering, undelivered steering, hostile checkpoints. The second exchange
// of each scenario matches only a request carrying the first call's result, so a
// response the checkpoint already holds, asked for again, would find no exchange.

// answerTo is a text answer served only to a request carrying callID's result.
func answerTo(callID string, text ...string) obj {
	return exchange(sseResponse(textSSE(text...)), `"tool_call_id":"`+callID+`"`)
}

// drain reads s to its end and returns its events; a failure fails the test.
func drain(t *testing.T, s *Stream) []Event {
	t.Helper()
	defer s.Close()
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream failed: %v (after %s)", err, types(evs))
	}
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	return evs
}

// complete is the turn's last event, its MessageComplete.
func complete(t *testing.T, evs []Event) *MessageComplete {
	t.Helper()
	mc, ok := evs[len(evs)-1].(*MessageComplete)
	if !ok {
		t.Fatalf("last event is not MessageComplete: %s", types(evs))
	}
	return mc
}

// toolMessages are the "tool" messages of the request body req, as the model reads them.
func toolMessages(t *testing.T, req map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range req["messages"].([]any) {
		if m := m.(map[string]any); m["role"] == "tool" {
			out = append(out, m)
		}
	}
	return out
}

// toolContents are the contents of the tool messages of req.
func toolContents(t *testing.T, req map[string]any) []string {
	t.Helper()
	var out []string
	for _, m := range toolMessages(t, req) {
		out = append(out, m["content"].(string))
	}
	return out
}

// pausedTurn runs input to its pause (StopDeferred) and returns its MessageComplete and
// the stream's checkpoint, taken after the end.
func pausedTurn(t *testing.T, a *Agent, input string, opts TurnOptions) (*MessageComplete, Checkpoint) {
	t.Helper()
	s, err := a.StreamWith(context.Background(), input, opts)
	if err != nil {
		t.Fatal(err)
	}
	mc := complete(t, drain(t, s))
	if mc.StopReason != StopDeferred {
		t.Fatalf("stop reason %q, want %q", mc.StopReason, StopDeferred)
	}
	cp, err := s.Checkpoint()
	if err != nil || cp == nil {
		t.Fatalf("Checkpoint after the pause: %v, %v", cp, err)
	}
	return mc, cp
}

// rmTool records the paths it "deletes"; it needs approval.
func rmTool(mu *sync.Mutex, ran *[]string) Tool {
	return Tool{
		Name: "rm", Description: "Deletes a file", NeedsApproval: Bool(true),
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ Path string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			mu.Lock()
			*ran = append(*ran, in.Path)
			mu.Unlock()
			return "deleted " + in.Path, nil
		},
	}
}

func TestDurableApprovalPausesAndApproveRunsTheToolInANewAgent(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "rm", `{"path":"/tmp/x"}`}))),
		answerTo("c1", "gone"),
	))
	var mu sync.Mutex
	var ran []string
	cfg := testConfig(srv)
	cfg.Tools = []Tool{rmTool(&mu, &ran)}
	first := newTestAgent(t, cfg)
	mc, cp := pausedTurn(t, first, "delete /tmp/x", TurnOptions{})
	calls, err := mc.DeferredCalls()
	if err != nil {
		t.Fatal(err)
	}
	want := []DeferredCall{{CallID: "c1", Name: "rm", Arguments: json.RawMessage(`{"path":"/tmp/x"}`), Reason: DeferApproval}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("deferred calls %s, want %s", mustJSON(t, calls), mustJSON(t, want))
	}
	if len(ran) != 0 {
		t.Fatalf("the tool ran before its approval: %v", ran)
	}
	if n := len(srv.requests(t)); n != 1 {
		t.Fatalf("%d requests before the resume, want 1", n)
	}
	if !bytes.Contains(cp, []byte(`"panto_checkpoint":1`)) {
		t.Fatalf("not a checkpoint: %s", cp)
	}

	// Stored as a field of a document and read back (as JSON, not base64), then resumed
	// by a new agent with the same tools.
	stored, err := json.Marshal(struct{ Turn Checkpoint }{cp})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stored, []byte(`{"Turn":{"panto_checkpoint":1`)) {
		t.Fatalf("the checkpoint is not stored as the JSON object it is: %.80s", stored)
	}
	var back struct{ Turn Checkpoint }
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	second := newTestAgent(t, cfg)
	s, err := second.Resume(context.Background(), back.Turn, Answers{}.Approve("c1"))
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, s)
	done := complete(t, evs)
	if done.StopReason != "end_turn" || done.Text != "gone" || done.Messages != 2 || len(done.Deferred) != 0 {
		t.Fatalf("resumed turn ended with %s", mustJSON(t, done))
	}
	// The whole turn's usage: both responses (20 + 10 input tokens).
	if done.Usage.InputTokens != 30 {
		t.Errorf("usage %+v, want both responses'", done.Usage)
	}
	if calls, _ := done.DeferredCalls(); calls != nil {
		t.Errorf("deferred calls of a finished turn: %v", calls)
	}
	var results []*ToolResult
	for _, e := range evs {
		if r, ok := e.(*ToolResult); ok {
			results = append(results, r)
		}
	}
	if len(results) != 1 || results[0].CallID != "c1" || results[0].Output != "deleted /tmp/x" || results[0].IsError {
		t.Fatalf("tool results %s", mustJSON(t, results))
	}
	if !reflect.DeepEqual(ran, []string{"/tmp/x"}) {
		t.Fatalf("the approved tool ran for %v", ran)
	}
	reqs := srv.requests(t)
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if got := toolContents(t, reqs[1]); !reflect.DeepEqual(got, []string{"deleted /tmp/x"}) {
		t.Fatalf("the model read %q", got)
	}
	// The new agent's history is the whole turn.
	h, err := second.SaveHistory()
	if err != nil || !bytes.Contains(h, []byte("delete /tmp/x")) || !bytes.Contains(h, []byte("deleted /tmp/x")) || !bytes.Contains(h, []byte("gone")) {
		t.Fatalf("history after the resume: %s %v", h, err)
	}
}

func TestDurableRejectReachesTheModelAsAnErrorResult(t *testing.T) {
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "rm", `{"path":"/"}`}))),
		answerTo("c1", "ok, not deleting"),
	))
	var mu sync.Mutex
	var ran []string
	cfg := testConfig(srv)
	cfg.Tools = []Tool{rmTool(&mu, &ran)}
	a := newTestAgent(t, cfg)
	_, cp := pausedTurn(t, a, "delete /", TurnOptions{})
	s, err := newTestAgent(t, cfg).Resume(context.Background(), Checkpoint(cp.String()), Answers{}.Reject("c1", "never the root"))
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, s)
	if done := complete(t, evs); done.Text != "ok, not deleting" || done.StopReason != "end_turn" {
		t.Fatalf("resumed turn ended with %s", mustJSON(t, done))
	}
	if len(ran) != 0 {
		t.Fatalf("a rejected call ran: %v", ran)
	}
	for _, e := range evs {
		if r, ok := e.(*ToolResult); ok && (r.CallID != "c1" || !r.IsError || !strings.Contains(r.Output, "never the root")) {
			t.Errorf("tool result %s", mustJSON(t, r))
		}
	}
	reqs := srv.requests(t)
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	got := toolContents(t, reqs[1])
	if len(got) != 1 || !strings.Contains(got[0], "rejected") || !strings.Contains(got[0], "never the root") {
		t.Fatalf("the model read %q, want the rejection and its reason", got)
	}
}

func TestDurableExternalToolResultIsTaken(t *testing.T) {
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"c1", "lookup", `{"sku":"A-1"}`},
			[3]string{"c2", "ticket", `{"title":"t"}`},
		))),
		answerTo("c2", "12 in stock, ticket 7"),
	))
	cfg := testConfig(srv)
	cfg.Tools = []Tool{
		{Name: "lookup", Description: "Stock of a product", External: Bool(true)},
		{Name: "ticket", Description: "Opens a ticket", External: Bool(true)},
	}
	a := newTestAgent(t, cfg)
	mc, cp := pausedTurn(t, a, "stock of A-1?", TurnOptions{})
	calls, err := mc.DeferredCalls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].CallID != "c1" || calls[0].Reason != DeferExternal ||
		calls[1].CallID != "c2" || calls[1].Reason != DeferExternal || string(calls[1].Arguments) != `{"title":"t"}` {
		t.Fatalf("deferred calls %s", mustJSON(t, calls))
	}
	// An approval is not an answer for an external call; nothing starts.
	if _, err := a.Resume(context.Background(), cp, Answers{}.Approve("c1")); !errors.Is(err, ErrConfig) {
		t.Fatalf("approving an external call: %v, want ErrConfig", err)
	}
	answers := Answers{}.Result("c1", "12", false).Result("c2", "ticket 7 opened", false)
	if answers.Len() != 2 {
		t.Fatalf("Len %d", answers.Len())
	}
	s, err := a.Resume(context.Background(), cp, answers)
	if err != nil {
		t.Fatal(err)
	}
	if done := complete(t, drain(t, s)); done.Text != "12 in stock, ticket 7" {
		t.Fatalf("resumed turn ended with %s", mustJSON(t, done))
	}
	reqs := srv.requests(t)
	if got := toolContents(t, reqs[len(reqs)-1]); !reflect.DeepEqual(got, []string{"12", "ticket 7 opened"}) {
		t.Fatalf("the model read %q", got)
	}
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
}

func TestDurableDeferToolsDefersEveryCall(t *testing.T) {
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"c1", "weather", `{"city":"Paris"}`},
			[3]string{"c2", "weather", `{"city":"Rome"}`},
		))),
		answerTo("c2", "Paris 18, Rome 25"),
	))
	var mu sync.Mutex
	var ran []string
	cfg := testConfig(srv)
	cfg.Tools = []Tool{{
		Name: "weather", Parameters: weatherParams,
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ City string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			mu.Lock()
			ran = append(ran, in.City)
			mu.Unlock()
			return in.City + ": 18", nil
		},
	}}
	a := newTestAgent(t, cfg)
	mc, cp := pausedTurn(t, a, "weather?", TurnOptions{DeferTools: true})
	calls, err := mc.DeferredCalls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].Reason != DeferDeferred || calls[1].Reason != DeferDeferred {
		t.Fatalf("deferred calls %s", mustJSON(t, calls))
	}
	if len(ran) != 0 {
		t.Fatalf("a deferred call ran: %v", ran)
	}
	// The option is part of the checkpoint.
	if !bytes.Contains(cp, []byte(`"defer_tools":true`)) {
		t.Fatalf("checkpoint without the turn's option: %s", cp)
	}
	s, err := a.Resume(context.Background(), cp, Answers{}.Approve("c1").Result("c2", "Rome: 25", false))
	if err != nil {
		t.Fatal(err)
	}
	if done := complete(t, drain(t, s)); done.Text != "Paris 18, Rome 25" {
		t.Fatalf("resumed turn ended with %s", mustJSON(t, done))
	}
	if !reflect.DeepEqual(ran, []string{"Paris"}) {
		t.Fatalf("ran %v, want only the approved call", ran)
	}
	reqs := srv.requests(t)
	if got := toolContents(t, reqs[len(reqs)-1]); !reflect.DeepEqual(got, []string{"Paris: 18", "Rome: 25"}) {
		t.Fatalf("the model read %q", got)
	}
}

func TestDurableAnswersChainWithoutSharing(t *testing.T) {
	base := Answers{}.Approve("c1")
	a := base.Reject("c2", "no")
	b := base.Result("c2", "bad \xff byte", true)
	if base.Len() != 1 || a.Len() != 2 || b.Len() != 2 {
		t.Fatalf("lengths %d %d %d", base.Len(), a.Len(), b.Len())
	}
	if got := mustJSON(t, a.m); got != `{"c1":{"approve":true},"c2":{"reject":"no"}}` {
		t.Errorf("a = %s", got)
	}
	if got := mustJSON(t, b.m); got != "{\"c1\":{\"approve\":true},\"c2\":{\"is_error\":true,\"output\":\"bad \ufffd byte\"}}" {
		t.Errorf("b = %s", got)
	}
}

func TestDurableResumeAfterTheFirstResponseRequestsNothingTheCheckpointHolds(t *testing.T) {
	defer verifyNoLeaks(t)
	sc := func() obj {
		return scenario(
			exchange(sseResponse(toolCallSSE([3]string{"c1", "slow", `{"x":1}`}))),
			answerTo("c1", "the answer ", "is 2"),
		)
	}
	srv := startServer(t, sc())
	slow := func(ctx context.Context, args json.RawMessage) (string, error) {
		var in struct{ X int }
		if err := json.Unmarshal(args, &in); err != nil {
			return "", err
		}
		return string(rune('0' + in.X + 1)), nil
	}
	cfg := testConfig(srv)
	cfg.Tools = []Tool{{Name: "slow", Func: slow}}

	// The uninterrupted turn, for comparison.
	straight := newTestAgent(t, cfg)
	s, err := straight.Stream(context.Background(), "compute")
	if err != nil {
		t.Fatal(err)
	}
	expected := complete(t, drain(t, s))
	expectedHistory, err := straight.SaveHistory()
	if err != nil {
		t.Fatal(err)
	}
	uninterrupted := srv.requests(t)
	if len(uninterrupted) != 2 {
		t.Fatalf("%d requests in the uninterrupted turn", len(uninterrupted))
	}

	// The interrupted one: the checkpoint is taken while the call runs (the first
	// response complete), then the stream is closed, as if the process died.
	if err := srv.setScenario(sc()); err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	release := make(chan struct{})
	blocking := cfg
	blocking.Tools = []Tool{{Name: "slow", Func: func(ctx context.Context, args json.RawMessage) (string, error) {
		close(running)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "never read", nil
	}}}
	first := newTestAgent(t, blocking)
	s, err = first.Stream(context.Background(), "compute")
	if err != nil {
		t.Fatal(err)
	}
	var cp Checkpoint
	for ev, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*ToolCallStart); ok {
			<-running
			if cp, err = s.Checkpoint(); err != nil || cp == nil {
				t.Fatalf("Checkpoint while the call runs: %v, %v", cp, err)
			}
			break
		}
	}
	// Closed before the tool returns: the turn is cancelled while the call runs, so it
	// never sends the next request (released first, it could, before Close).
	s.Close()
	close(release)
	if bytes.Contains(cp, []byte(`"result"`)) || !bytes.Contains(cp, []byte(`"c1"`)) {
		t.Fatalf("the checkpoint should hold the call without its result: %s", cp)
	}
	if n := len(srv.requests(t)); n != 1 {
		t.Fatalf("%d requests before the resume, want 1", n)
	}

	// A new agent resumes it: the call with no result runs again, the first response is
	// not requested again, and everything is as if the turn had not been interrupted.
	fresh := newTestAgent(t, cfg)
	s, err = fresh.Resume(context.Background(), cp, Answers{})
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, s)
	done := complete(t, evs)
	var starts int
	for _, e := range evs {
		if _, ok := e.(*MessageStart); ok {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("%d messages streamed on resume, want 1 (%s)", starts, types(evs))
	}
	if done.Text != expected.Text || done.Messages != expected.Messages || done.Usage != expected.Usage || done.StopReason != expected.StopReason {
		t.Fatalf("resumed: %s\nuninterrupted: %s", mustJSON(t, done), mustJSON(t, expected))
	}
	reqs := srv.requests(t)
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2: one for the response the checkpoint lacked", len(reqs))
	}
	if !reflect.DeepEqual(reqs[1], uninterrupted[1]) {
		t.Errorf("the resumed request differs from the uninterrupted one:\n%s\n%s", mustJSON(t, reqs[1]), mustJSON(t, uninterrupted[1]))
	}
	h, err := fresh.SaveHistory()
	if err != nil || !bytes.Equal(h, expectedHistory) {
		t.Fatalf("history after the resume:\n%s\nwant\n%s (%v)", h, expectedHistory, err)
	}
}

// slowTool blocks until release (or its ctx ends), after saying on running that it runs.
func slowTool(running, release chan struct{}) Tool {
	return Tool{Name: "slow", Func: func(ctx context.Context, args json.RawMessage) (string, error) {
		close(running)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "data", nil
	}}
}

func TestDurableSteerDuringAHostToolCallIsDeliveredBeforeTheNextRequest(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "slow", `{}`}))),
		answerTo("c1", "noted: ", "use metric"),
	))
	running, release := make(chan struct{}), make(chan struct{})
	cfg := testConfig(srv)
	cfg.Tools = []Tool{slowTool(running, release)}
	a := newTestAgent(t, cfg)
	s, err := a.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	// The caller's parts, with a byte that is not UTF-8: Steer must neither change nor
	// keep them.
	parts := []Part{Text("use metric"), Text("units \xff")}
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
		if _, ok := ev.(*ToolCallStart); ok {
			<-running
			// From another goroutine, as a UI would, and a checkpoint meanwhile.
			steered := make(chan error, 2)
			go func() {
				steered <- s.Steer("", parts...)
				_, err := s.Checkpoint()
				steered <- err
			}()
			for range 2 {
				if err := <-steered; err != nil {
					t.Errorf("Steer or Checkpoint: %v", err)
				}
			}
			parts[0] = Text("changed after the call")
			close(release)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if parts[1].text != "units \xff" {
		t.Errorf("Steer changed the caller's part to %q", parts[1].text)
	}
	var delivered []*SteeringDelivered
	order := map[string]int{}
	for i, e := range evs {
		if _, seen := order[e.Type()]; !seen {
			order[e.Type()] = i
		}
		if d, ok := e.(*SteeringDelivered); ok {
			delivered = append(delivered, d)
		}
	}
	want := "use metricunits \ufffd" // the text parts joined
	if len(delivered) != 1 || delivered[0].Message != 1 || delivered[0].Text != want {
		t.Fatalf("steering delivered: %s (%s)", mustJSON(t, delivered), types(evs))
	}
	// After the tool's result, before the next message, which answers it.
	sd := order["steering_delivered"]
	if !(order["tool_result"] < sd && sd < len(evs)-1) {
		t.Fatalf("order of events: %s", types(evs))
	}
	var starts []int
	for i, e := range evs {
		if _, ok := e.(*MessageStart); ok {
			starts = append(starts, i)
		}
	}
	if len(starts) != 2 || starts[1] < sd {
		t.Fatalf("the message answering the steering does not follow its delivery: %s", types(evs))
	}
	reqs := srv.requests(t)
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	msgs := reqs[1]["messages"].([]any)
	var roles []string
	for _, m := range msgs[len(msgs)-3:] {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if !reflect.DeepEqual(roles, []string{"assistant", "tool", "user"}) {
		t.Fatalf("last roles of the second request: %v", roles)
	}
	last := mustJSON(t, msgs[len(msgs)-1])
	if !strings.Contains(last, "use metric") || !strings.Contains(last, "units \ufffd") || strings.Contains(last, "changed") {
		t.Fatalf("the steering message sent: %s", last)
	}
	if left, err := s.Undelivered(); err != nil || len(left) != 0 {
		t.Fatalf("Undelivered after a delivery: %v, %v", left, err)
	}
	// The turn is over: a message is no longer queued.
	var perr *Error
	if err := s.Steer("too late"); !errors.As(err, &perr) || perr.Kind != KindConfig || !strings.Contains(perr.Message, "ended") {
		t.Fatalf("Steer after the end: %v", err)
	}
}

func TestDurableUndeliveredSteeringAfterCancelIsGivenBackOnce(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(toolCallSSE([3]string{"c1", "slow", `{}`})))))
	running, release := make(chan struct{}), make(chan struct{})
	cfg := testConfig(srv)
	cfg.Tools = []Tool{slowTool(running, release)}
	a := newTestAgent(t, cfg)
	s, err := a.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("Next before the call: %v", err)
		}
		if _, ok := ev.(*ToolCallStart); ok {
			break
		}
	}
	<-running
	if err := s.Steer("first", Text("second part")); err != nil {
		t.Fatal(err)
	}
	// While the turn runs, the message may still be delivered: none is given back.
	if left, err := s.Undelivered(); err != nil || len(left) != 0 {
		t.Fatalf("Undelivered while running: %v, %v", left, err)
	}
	s.Cancel()
	close(release)
	var err2 error
	for err2 == nil {
		var ev Event
		ev, err2 = s.Next()
		if _, ok := ev.(*SteeringDelivered); ok {
			t.Fatal("delivered after the cancel")
		}
	}
	if !errors.Is(err2, ErrCancelled) {
		t.Fatalf("Next after Cancel: %v", err2)
	}
	left, err := s.Undelivered()
	if err != nil {
		t.Fatal(err)
	}
	if got := mustJSON(t, left); got != `[[{"text":"first","type":"text"},{"text":"second part","type":"text"}]]` {
		t.Fatalf("Undelivered: %s", got)
	}
	if again, err := s.Undelivered(); err != nil || len(again) != 0 {
		t.Fatalf("Undelivered a second time: %v, %v", again, err)
	}
	var perr *Error
	if err := s.Steer("too late"); !errors.As(err, &perr) || perr.Kind != KindConfig {
		t.Fatalf("Steer after the cancel: %v", err)
	}
	// Closed, the stream still answers (it has nothing left) and does not panic.
	s.Close()
	if again, err := s.Undelivered(); err != nil || len(again) != 0 {
		t.Fatalf("Undelivered after Close: %v, %v", again, err)
	}
}

func TestDurableHostileCheckpointsAreConfigErrors(t *testing.T) {
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "rm", `{"path":"/tmp/x"}`}))),
		answerTo("c1", "gone"),
	))
	var mu sync.Mutex
	var ran []string
	cfg := testConfig(srv)
	cfg.Tools = []Tool{rmTool(&mu, &ran)}
	a := newTestAgent(t, cfg)
	_, cp := pausedTurn(t, a, "delete /tmp/x", TurnOptions{})
	newer := bytes.Replace(cp, []byte(`"panto_checkpoint":1`), []byte(`"panto_checkpoint":99`), 1)
	if bytes.Equal(newer, cp) {
		t.Fatalf("no version in %s", cp)
	}
	forged := bytes.Replace(cp, []byte(`"call_id":"c1"`), []byte(`"call_id":"forged"`), 1)
	cases := []struct {
		name    string
		cp      Checkpoint
		answers Answers
		says    string
	}{
		{"empty", nil, Answers{}, "checkpoint"},
		{"garbage", Checkpoint("garbage"), Answers{}, "checkpoint"},
		{"not a checkpoint", Checkpoint("{}"), Answers{}, "not a panto checkpoint"},
		{"an array", Checkpoint("[1,2]"), Answers{}, "checkpoint"},
		{"truncated", cp[:len(cp)/2], Answers{}, "checkpoint"},
		{"newer version", newer, Answers{}, "newer"},
		{"forged call id", forged, Answers{}, "did not make"},
		{"deep nesting", Checkpoint(`{"panto_checkpoint":` + strings.Repeat("[", 100000)), Answers{}, "checkpoint"},
		{"answer for no deferred call", cp, Answers{}.Approve("c9"), "c9"},
		{"a result for an approval", cp, Answers{}.Result("c1", "done", false), "c1"},
	}
	for _, c := range cases {
		s, err := a.Resume(context.Background(), c.cp, c.answers)
		var perr *Error
		if s != nil || !errors.As(err, &perr) || perr.Kind != KindConfig || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, %v; want an *Error of KindConfig", c.name, s, err)
			continue
		}
		if !strings.Contains(perr.Message, c.says) {
			t.Errorf("%s: %q does not say %q", c.name, perr.Message, c.says)
		}
	}
	if n := len(srv.requests(t)); n != 1 {
		t.Fatalf("%d requests: a refused checkpoint sent something", n)
	}

	// A tool the agent lacks: known once the stream runs, its first Next fails with
	// KindConfig before any request, and the history is unchanged.
	without := newTestAgent(t, testConfig(srv))
	history, _ := a.SaveHistory()
	if err := without.LoadHistory(history); err != nil {
		t.Fatal(err)
	}
	s, err := without.Resume(context.Background(), cp, Answers{}.Approve("c1"))
	if err != nil {
		var perr *Error
		if !errors.As(err, &perr) || perr.Kind != KindConfig {
			t.Fatalf("a missing tool: %v", err)
		}
	} else {
		_, err = s.Next()
		s.Close()
		var perr *Error
		if !errors.As(err, &perr) || perr.Kind != KindConfig || !strings.Contains(perr.Message, `"rm"`) {
			t.Fatalf("a missing tool: first Next %v", err)
		}
	}
	if after, _ := without.SaveHistory(); !bytes.Equal(after, history) {
		t.Fatalf("history changed by a refused resume:\n%s\n%s", after, history)
	}
	if n := len(srv.requests(t)); n != 1 || len(ran) != 0 {
		t.Fatalf("%d requests, ran %v: a refused resume did something", n, ran)
	}

	// After all that, the valid checkpoint still resumes.
	s, err = a.Resume(context.Background(), cp, Answers{}.Approve("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if done := complete(t, drain(t, s)); done.Text != "gone" {
		t.Fatalf("resumed turn ended with %s", mustJSON(t, done))
	}
}

func TestDurableResumeOnACancelledContextOrClosedAgent(t *testing.T) {
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("unused")))))
	a := newTestAgent(t, testConfig(srv))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Resume(ctx, Checkpoint("{}"), Answers{}); !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Resume on a done context: %v", err)
	}
	_ = a.Close()
	if _, err := a.Resume(context.Background(), Checkpoint("{}"), Answers{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resume on a closed agent: %v", err)
	}
	var nilAgent *Agent
	if _, err := nilAgent.Resume(context.Background(), Checkpoint("{}"), Answers{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("Resume on a nil agent: %v", err)
	}
	var nilStream *Stream
	if _, err := nilStream.Checkpoint(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Checkpoint of a nil stream: %v", err)
	}
	if err := nilStream.Steer("x"); !errors.Is(err, ErrConfig) {
		t.Fatalf("Steer on a nil stream: %v", err)
	}
	if _, err := nilStream.Undelivered(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Undelivered of a nil stream: %v", err)
	}
}

func TestDurableCheckpointHoldsNoAPIKey(t *testing.T) {
	const key = "sk-test-secret-key"
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "env", `{}`}))),
		answerTo("c1", "done"),
	))
	cfg := testConfig(srv)
	if cfg.APIKey != key {
		t.Fatalf("the test config's key is %q", cfg.APIKey)
	}
	// A tool that leaks the key into the conversation: the checkpoint redacts it too.
	cfg.Tools = []Tool{{Name: "env", NeedsApproval: Bool(true), Func: func(ctx context.Context, args json.RawMessage) (string, error) {
		return "OPENAI_API_KEY=" + key, nil
	}}}
	a := newTestAgent(t, cfg)
	_, cp := pausedTurn(t, a, "print the environment", TurnOptions{})
	if bytes.Contains(cp, []byte(key)) || bytes.Contains(cp, []byte("secret")) {
		t.Fatalf("the paused turn's checkpoint holds the API key: %s", cp)
	}
	s, err := a.Resume(context.Background(), cp, Answers{}.Approve("c1"))
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, s)
	final, err := s.Checkpoint()
	if err != nil || final == nil {
		t.Fatalf("Checkpoint of the finished turn: %v, %v", final, err)
	}
	if !bytes.Contains(final, []byte(`"finished"`)) || !bytes.Contains(final, []byte("OPENAI_API_KEY=")) {
		t.Fatalf("the finished turn's checkpoint lacks the tool's result: %s (%s)", final, types(evs))
	}
	if bytes.Contains(final, []byte(key)) {
		t.Fatalf("the finished turn's checkpoint holds the API key: %s", final)
	}
	// Close keeps it; the library side is gone but the stream answers the same.
	_ = s.Close()
	again, err := s.Checkpoint()
	if err != nil || !bytes.Equal(again, final) {
		t.Fatalf("Checkpoint after Close: %s, %v", again, err)
	}
}

func TestDurableCheckpointOfAStreamClosedBeforeItsFirstEvent(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("hi")))))
	a := newTestAgent(t, testConfig(srv))
	s, err := a.Stream(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// Either no checkpoint (the turn had not started) or one holding the input: never
	// an error, never a panic, and the same answer twice.
	cp, err := s.Checkpoint()
	if err != nil {
		t.Fatalf("Checkpoint after Close: %v", err)
	}
	if cp != nil && !bytes.Contains(cp, []byte("hello")) {
		t.Fatalf("checkpoint without the input: %s", cp)
	}
	again, err := s.Checkpoint()
	if err != nil || !bytes.Equal(again, cp) {
		t.Fatalf("Checkpoint twice: %s then %s (%v)", cp, again, err)
	}
	var perr *Error
	if err := s.Steer("x"); !errors.As(err, &perr) || !errors.Is(err, ErrClosed) {
		t.Fatalf("Steer on a closed stream: %v", err)
	}
}
