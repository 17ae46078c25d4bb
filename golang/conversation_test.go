package panto

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedScenario loads one of the scenarios every language replays
// (tests/server/scenarios).
func sharedScenario(tb testing.TB, name string) json.RawMessage {
	tb.Helper()
	js, err := os.ReadFile(filepath.Join("..", "tests", "server", "scenarios", name))
	if err != nil {
		tb.Fatal(err)
	}
	return json.RawMessage(js)
}

func drainTurn(tb testing.TB, s *Stream) []Event {
	tb.Helper()
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
	}
	if err := s.Err(); err != nil {
		tb.Fatalf("turn: %v", err)
	}
	return evs
}

func TestReasoningCachingAndTranscript(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "conversation-reasoning-caching.json"))
	cfg := Config{
		Provider: "anthropic", Model: "claude-x", BaseURL: srv.url, APIKey: "sk-test-secret-key",
		System: "You are terse.", Retry: Retry{MaxRetries: Int(0)},
		Reasoning: &Reasoning{Effort: "low"},
		Tools: []Tool{{Name: "weather", Func: func(context.Context, json.RawMessage) (string, error) {
			return "sunny", nil
		}}},
	}
	agent := newTestAgent(t, cfg)
	if _, err := agent.StreamWith(context.Background(), "x", TurnOptions{Reasoning: &Reasoning{Effort: "max"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a bad per-turn effort: %v", err)
	}
	// The scenario only answers requests with the high-effort budget and the cache
	// breakpoints.
	s, err := agent.StreamWith(context.Background(), "Weather in Paris?", TurnOptions{Reasoning: &Reasoning{Effort: "high"}})
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	done, ok := evs[len(evs)-1].(*MessageComplete)
	if !ok || done.Text != "Sunny in Paris." || done.Usage.CacheReadTokens != 1500 {
		t.Fatalf("last event %#v", evs[len(evs)-1])
	}
	tr, err := agent.Transcript()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range tr {
		kinds = append(kinds, e.Kind)
	}
	if strings.Join(kinds, ",") != "text,reasoning,tool_call,tool_result,text" {
		t.Fatalf("transcript kinds %v", kinds)
	}
	if tr[3].Text != "sunny" || tr[3].IsError == nil || *tr[3].IsError || tr[2].Name != "weather" {
		t.Fatalf("tool entries %#v %#v", tr[2], tr[3])
	}
}

func TestManualCompaction(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "conversation-compaction.json"))
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.Stream(context.Background(), "What is the capital of France?")
	if err != nil {
		t.Fatal(err)
	}
	drainTurn(t, s)
	if _, err := agent.Compact(context.Background(), CompactOptions{KeepLast: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad keep_last: %v", err)
	}
	r, err := agent.Compact(context.Background(), CompactOptions{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Changed || r.MessagesBefore != 2 || r.MessagesAfter != 2 || r.TokensBefore != 108 || r.TokensAfter == 0 {
		t.Fatalf("result %+v", r)
	}
	history, err := agent.SaveHistory()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(history), "[Summary of the earlier conversation]") {
		t.Fatalf("history %s", history)
	}
	// The next turn's request must carry the summary (the scenario matches on it).
	s, err = agent.Stream(context.Background(), "And its population?")
	if err != nil {
		t.Fatal(err)
	}
	drainTurn(t, s)
}

func TestAutomaticCompactionIsAnnounced(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "conversation-compaction.json"))
	cfg := testConfig(srv)
	cfg.Compaction = &Compaction{ThresholdTokens: 50, KeepLast: 1}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "What is the capital of France?")
	if err != nil {
		t.Fatal(err)
	}
	drainTurn(t, s)
	s, err = agent.Stream(context.Background(), "And its population?")
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	hc, ok := evs[0].(*HistoryCompacted)
	if !ok || hc.MessagesBefore != 3 || hc.MessagesAfter != 3 || hc.TokensBefore < 108 {
		t.Fatalf("first event %#v", evs[0])
	}
	js, err := json.Marshal(hc)
	if err != nil || !strings.HasPrefix(string(js), `{"type":"history_compacted","messages_before":3,"messages_after":3,`) {
		t.Fatalf("canonical JSON %s %v", js, err)
	}
	if _, ok := evs[1].(*MessageStart); !ok {
		t.Fatalf("second event %#v", evs[1])
	}
}

// compactableHistory is two complete exchanges: with KeepLast 1 the first three
// messages are summarized.
const compactableHistory = `{"version":1,"messages":[` +
	`{"role":"user","content":[{"type":"text","text":"one"}]},` +
	`{"role":"assistant","content":[{"type":"text","text":"a"}]},` +
	`{"role":"user","content":[{"type":"text","text":"two"}]},` +
	`{"role":"assistant","content":[{"type":"text","text":"b"}]}]}`

func TestCompactionCancelledByContext(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	if err := agent.LoadHistory([]byte(compactableHistory)); err != nil {
		t.Fatal(err)
	}
	before, err := agent.SaveHistory()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := agent.Compact(ctx, CompactOptions{KeepLast: 1})
		res <- err
	}()
	// The summary request waits at the server's gate: Compact is blocked on it.
	eventually(t, "the server to hold the summary request", func() bool { return srv.stats(t)["held"] == 1 })
	select {
	case err := <-res:
		t.Fatalf("Compact returned while its request was held: %v", err)
	default:
	}
	if _, err := agent.Stream(context.Background(), "x"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a turn during compaction: %v", err)
	}
	cancel()
	select {
	case err = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("Compact did not return after its context was cancelled")
	}
	var perr *Error
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) || !errors.As(err, &perr) {
		t.Fatalf("err %v", err)
	}
	after, err := agent.SaveHistory()
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("history changed:\n%s\n%s", before, after)
	}
	// The request was dropped: only the stats request itself is connected.
	eventually(t, "the summary connection to close", func() bool { return srv.stats(t)["connections_open"] == 1 })
}

func TestCompactionWithDoneContextSendsNothing(t *testing.T) {
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	if err := agent.LoadHistory([]byte(compactableHistory)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	total := srv.stats(t)["connections_total"]
	_, err := agent.Compact(ctx, CompactOptions{KeepLast: 1})
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	// One more connection: the stats request asking.
	if now := srv.stats(t)["connections_total"]; now != total+1 {
		t.Fatalf("connections %d, then %d: a request was sent", total, now)
	}
}
