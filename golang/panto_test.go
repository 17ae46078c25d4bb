package panto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pantoThreads counts this process's threads named by panto's Rust side.
func pantoThreads() (workers, others int) {
	entries, _ := os.ReadDir("/proc/self/task")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/comm")
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(b))
		switch {
		case strings.HasPrefix(name, "panto-worker"):
			workers++
		case strings.HasPrefix(name, "panto-"):
			others++
		}
	}
	return
}

func TestMain(m *testing.M) {
	stopProvider, err := startExampleProvider()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the examples' stand-in provider:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopProvider()
	if code == 0 {
		if n := liveStreams.Load(); n != 0 {
			fmt.Fprintf(os.Stderr, "%d C stream handles were never freed\n", n)
			code = 1
		}
		// The worker pool is fixed (one per core but one, 1..64); its name-resolution helpers
		// may exist only while resolving. Nothing panto started per stream survives.
		workers, others := pantoThreads()
		if workers > 64 || others > workers {
			fmt.Fprintf(os.Stderr, "panto threads not back to baseline: %d workers, %d others\n", workers, others)
			code = 1
		}
	}
	if code == 0 {
		// (goleak.VerifyTestMain would run every test a second time.)
		if err := goleak.Find(ignoreDispatcher); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func weatherScenario() obj {
	return scenario(
		exchange(sseResponse(toolCallSSE([3]string{"call_1", "weather", `{"city":"Paris"}`}))),
		exchange(sseResponse(textSSE("It is", " 18°C", " in Paris.")), "call_1"),
	)
}

var weatherParams = json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)

func TestToolTurnWithGoTool(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, weatherScenario())
	cfg := testConfig(srv)
	var gotArgs json.RawMessage
	cfg.Tools = []Tool{{
		Name: "weather", Description: "current weather", Parameters: weatherParams,
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			gotArgs = args
			return "18°C, sunny", nil
		},
	}}
	agent := newTestAgent(t, cfg)

	var canon []string
	canonicalHook.Store(&canonicalRecorder{fn: func(js string) { canon = append(canon, js) }})
	defer canonicalHook.Store(nil)

	s, err := agent.Stream(context.Background(), "weather in Paris?")
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if string(gotArgs) != `{"city":"Paris"}` {
		t.Errorf("tool args %s", gotArgs)
	}
	var tr *ToolResult
	var tc *ToolCallStart
	for _, e := range evs {
		switch e := e.(type) {
		case *ToolResult:
			tr = e
		case *ToolCallStart:
			tc = e
		}
	}
	if tc == nil || !tc.Host || tc.Name != "weather" || tr == nil || tr.Output != "18°C, sunny" || tr.IsError {
		t.Fatalf("tool events: %+v %+v (%s)", tc, tr, types(evs))
	}
	mc, ok := evs[len(evs)-1].(*MessageComplete)
	if !ok || mc.Text != "It is 18°C in Paris." || mc.Messages != 2 || mc.StopReason != "end_turn" {
		t.Fatalf("last event %s", mustJSON(t, evs[len(evs)-1]))
	}
	// json.Marshal of every event equals the library's canonical JSON (as JSON).
	if len(canon) != len(evs) {
		t.Fatalf("%d canonical lines for %d events", len(canon), len(evs))
	}
	for i, e := range evs {
		var got, want any
		_ = json.Unmarshal([]byte(mustJSON(t, e)), &got)
		_ = json.Unmarshal([]byte(canon[i]), &want)
		if mustJSON(t, got) != mustJSON(t, want) {
			t.Errorf("event %d:\n go: %s\n  C: %s", i, mustJSON(t, e), canon[i])
		}
	}
	if _, err := s.Next(); err != ErrDone {
		t.Errorf("Next after the end: %v, want ErrDone", err)
	}
	if _, err := s.Next(); err != ErrDone {
		t.Errorf("Next after the end, again: %v, want ErrDone", err)
	}

	// History: save, clear, restore.
	h, err := agent.SaveHistory()
	if err != nil || !strings.Contains(string(h), `"version":1`) || !strings.Contains(string(h), "18°C, sunny") {
		t.Fatalf("SaveHistory: %s %v", h, err)
	}
	if err := agent.ClearHistory(); err != nil {
		t.Fatal(err)
	}
	empty, _ := agent.SaveHistory()
	if strings.Contains(string(empty), "Paris") {
		t.Fatalf("history after clear: %s", empty)
	}
	if err := agent.LoadHistory(h); err != nil {
		t.Fatal(err)
	}
	back, _ := agent.SaveHistory()
	if string(back) != string(h) {
		t.Fatalf("restored history differs:\n%s\n%s", back, h)
	}
	if err := agent.LoadHistory([]byte(`{"version":1,"messages":[{"role":"nobody"}]}`)); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad history: %v", err)
	}
}

func TestHostToolAnsweredByHand(t *testing.T) {
	srv := startServer(t, weatherScenario())
	cfg := testConfig(srv)
	cfg.Tools = []Tool{{Name: "weather", Parameters: weatherParams}}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "weather?")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var text string
	for ev, err := range s.All() {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *ToolCallStart:
			if !e.Host {
				t.Fatal("host tool call without Host")
			}
			if err := s.SubmitToolResult("no-such-call", "x", false); !errors.Is(err, ErrTool) {
				t.Fatalf("unknown call id: %v", err)
			}
			if err := s.SubmitToolResult(e.CallID, "rainy", false); err != nil {
				t.Fatal(err)
			}
		case *MessageComplete:
			text = e.Text
		}
	}
	if text != "It is 18°C in Paris." {
		t.Fatalf("text %q", text)
	}
}

// holdScenario sends a first text chunk, then holds the response until the gate opens.
func holdScenario() obj {
	return scenario(exchange(obj{
		"status": 200, "sse": textSSE("first", " second"),
		"fault": obj{"kind": "hold", "after_bytes": 400},
	}))
}

func TestBreakOutOfIterEarlyLeaksNothing(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(textSSE("a", "b", "c", "d"))),
		exchange(sseResponse(textSSE("again"))),
	))
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev := range s.Iter() {
		if _, ok := ev.(*ContentDelta); ok {
			n++
			break
		}
	}
	if n != 1 || s.Err() != nil {
		t.Fatalf("n=%d err=%v", n, s.Err())
	}
	if liveStreams.Load() != 0 {
		t.Fatal("the C stream was not freed when the loop broke")
	}
	// The agent is free for the next turn; a second Iter on the used stream yields nothing.
	for range s.Iter() {
		t.Fatal("a second Iter yielded")
	}
	s2, err := agent.Stream(context.Background(), "again")
	if err != nil {
		t.Fatal(err)
	}
	var last Event
	for ev := range s2.Iter() {
		last = ev
	}
	if mc, ok := last.(*MessageComplete); !ok || mc.Text != "again" || s2.Err() != nil {
		t.Fatalf("second turn: %v %v", last, s2.Err())
	}
}

// blockedNext takes the first event, then starts Next on another goroutine and
// returns once that goroutine waits for the ready set's report (no thread, no cgo
// call; the set's dispatcher parked in the netpoller), with the server holding the rest
// of the response (so nothing can arrive).
func blockedNext(t *testing.T, srv *testServer, s *Stream) <-chan error {
	t.Helper()
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		for {
			_, err := s.Next()
			if err != nil {
				res <- err
				return
			}
		}
	}()
	eventually(t, "the server to hold the response", func() bool { return srv.stats(t)["held"] == 1 })
	eventually(t, "Next to wait", s.consumerWaiting)
	eventually(t, "Next to wait for the ready set, not in the library", func() bool {
		n, inC, inSet, _ := waitingInNext()
		return n == 1 && inC == 0 && inSet == 1 && dispatcherInPoller()
	})
	return res
}

func TestDeadlineOfStreamContext(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	s, err := agent.Stream(ctx, "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := blockedNext(t, srv, s)
	cancel() // what the deadline does when it passes, observed the same way
	err = <-res
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	var perr *Error
	if !errors.As(err, &perr) || perr.Kind != KindCancelled {
		t.Fatalf("errors.As: %v", err)
	}
	if _, again := s.Next(); again != err {
		t.Fatalf("a failure repeats: %v", again)
	}
}

func TestContextDeadlineWhileBlockedInNext(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	deadline := time.Now().Add(time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s, err := agent.Stream(ctx, "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := blockedNext(t, srv, s)
	if !time.Now().Before(deadline) {
		t.Fatal("the deadline passed before Next blocked; the test proves nothing")
	}
	err = <-res
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v (cause %v, ctx %v)", err, errors.Unwrap(err), ctx.Err())
	}
	if late := time.Since(deadline); late > time.Second {
		t.Fatalf("Next woke %v after the deadline", late)
	}
}

func TestCloseRacesBlockedNext(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	res := blockedNext(t, srv, s)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Close() }()
	}
	wg.Wait()
	err = <-res
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v", err)
	}
	if _, err := s.Next(); err == nil {
		t.Fatal("Next after Close returned an event")
	}
	_ = s.Close()
	s.Cancel()
	if err := s.SubmitToolResult("x", "y", false); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v", err)
	}
}

func TestCloseRacesNextRepeatedly(t *testing.T) {
	defer verifyNoLeaks(t)
	for i := range 20 {
		srv := startServer(t, scenario(exchange(sseResponse(textSSE(strings.Split(strings.Repeat("y", 50), "")...)))))
		agent := newTestAgent(t, testConfig(srv))
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := s.Next(); err != nil {
					return
				}
			}
		}()
		if i%2 == 0 {
			runtime.Gosched()
		}
		_ = s.Close()
		<-done
	}
}

func TestHundredParallelStreams(t *testing.T) {
	defer verifyNoLeaks(t)
	ex := exchange(sseResponse(textSSE("one", " two", " three")))
	ex["times"] = 100
	srv := startServer(t, scenario(ex))
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent, err := NewAgent(testConfig(srv))
			if err != nil {
				errs <- err
				return
			}
			defer agent.Close()
			s, err := agent.Stream(context.Background(), fmt.Sprint("n", i))
			if err != nil {
				errs <- err
				return
			}
			var text string
			for ev := range s.Iter() {
				if mc, ok := ev.(*MessageComplete); ok {
					text = mc.Text
				}
			}
			if s.Err() != nil || text != "one two three" {
				errs <- fmt.Errorf("stream %d: %q %v", i, text, s.Err())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func errorResponse(status int, typ string) obj {
	return obj{"status": status, "json": obj{"error": obj{"type": typ, "message": "failure " + typ}}}
}

func TestEveryErrorKind(t *testing.T) {
	defer verifyNoLeaks(t)
	cases := []struct {
		kind     ErrorKind
		sentinel error
		response obj
		cfg      func(*Config)
	}{
		{KindAuthentication, ErrAuthentication, errorResponse(401, "invalid_api_key"), nil},
		{KindPermission, ErrPermission, errorResponse(403, "forbidden"), nil},
		{KindNotFound, ErrNotFound, errorResponse(404, "model_not_found"), nil},
		{KindBadRequest, ErrBadRequest, errorResponse(400, "invalid_request_error"), nil},
		{KindRateLimited, ErrRateLimited, errorResponse(429, "rate_limit_exceeded"), nil},
		{KindServer, ErrServer, errorResponse(500, "server_error"), nil},
		{KindProtocol, ErrProtocol, sseResponse([]any{"data: {not json\n\n"}), nil},
		{KindProvider, ErrProvider, sseResponse([]any{obj{"data": obj{"error": obj{"type": "server_error", "message": "boom"}}}}), nil},
		{KindIncomplete, ErrIncomplete, sseResponse([]any{chunk(obj{"role": "assistant", "content": "cut"}, nil)}), nil},
		{KindTimeout, ErrTimeout, obj{"status": 200, "sse": textSSE("a"), "fault": obj{"kind": "stall", "after_bytes": 10}},
			func(c *Config) { c.Timeouts.Idle = 200 * time.Millisecond }},
		{KindConnection, ErrConnection, obj{"status": 200, "sse": textSSE("a"), "fault": obj{"kind": "reset", "after_bytes": 10}}, nil},
	}
	for _, c := range cases {
		t.Run(string(c.kind), func(t *testing.T) {
			srv := startServer(t, scenario(exchange(c.response)))
			cfg := testConfig(srv)
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			agent := newTestAgent(t, cfg)
			s, err := agent.Stream(context.Background(), "hi")
			if err != nil {
				t.Fatal(err)
			}
			for range s.Iter() {
			}
			err = s.Err()
			var perr *Error
			if !errors.Is(err, c.sentinel) || !errors.As(err, &perr) || perr.Kind != c.kind {
				t.Fatalf("got %v, want kind %s", err, c.kind)
			}
			if strings.Contains(err.Error(), "sk-test-secret-key") {
				t.Fatal("the API key is in the error")
			}
			// Every other sentinel does not match.
			for _, k := range ErrorKinds() {
				if k != c.kind && errors.Is(err, sentinel(k)) {
					t.Fatalf("%v matches %s", err, k)
				}
			}
		})
	}

	t.Run("config", func(t *testing.T) {
		_, err := NewAgent(Config{Model: "m", Provider: "nope", APIKey: "sk-test-secret-key"})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "provider") || strings.Contains(err.Error(), "sk-test-secret-key") {
			t.Fatalf("err %v", err)
		}
		_, err = NewAgent(Config{Model: "m", MaxTokens: -5, APIKey: "k"})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "max_tokens") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		agent := newTestAgent(t, Config{Model: "m", APIKey: "k", BaseURL: "http://127.0.0.1:1/v1", Retry: Retry{MaxRetries: Int(0)}})
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		for range s.Iter() {
		}
		if !errors.Is(s.Err(), ErrConnection) {
			t.Fatalf("err %v", s.Err())
		}
	})
	t.Run("busy, cancelled and tool", func(t *testing.T) {
		srv := startServer(t, holdScenario())
		agent := newTestAgent(t, testConfig(srv))
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := agent.Stream(context.Background(), "again"); !errors.Is(err, ErrBusy) {
			t.Fatalf("second stream: %v", err)
		}
		if err := agent.ClearHistory(); !errors.Is(err, ErrBusy) {
			t.Fatalf("clear during a turn: %v", err)
		}
		if err := s.SubmitToolResult("nope", "", false); !errors.Is(err, ErrTool) {
			t.Fatalf("submit: %v", err)
		}
		s.Cancel()
		var last error
		for _, err := range s.All() {
			last = err
		}
		if !errors.Is(last, ErrCancelled) || !errors.Is(s.Err(), ErrCancelled) || errors.Is(last, context.Canceled) {
			t.Fatalf("cancel: %v", last)
		}
	})
	t.Run("retry event then success", func(t *testing.T) {
		srv := startServer(t, scenario(
			exchange(obj{"status": 429, "headers": obj{"retry-after": "0"}, "json": obj{"error": obj{"type": "rate_limit_exceeded", "message": "slow down"}}}),
			exchange(sseResponse(textSSE("ok"))),
		))
		cfg := testConfig(srv)
		cfg.Retry = Retry{MaxRetries: Int(2), InitialDelay: time.Millisecond, MaxDelay: time.Millisecond}
		agent := newTestAgent(t, cfg)
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		var evs []Event
		for ev := range s.Iter() {
			evs = append(evs, ev)
		}
		if s.Err() != nil {
			t.Fatal(s.Err())
		}
		if r, ok := evs[0].(*ProviderRetry); !ok || r.Status != 429 || r.Attempt != 2 {
			t.Fatalf("first event %s", mustJSON(t, evs[0]))
		}
	})
}

func TestGoToolPanicsOrIgnoresContext(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"call_p", "panicky", `{}`},
			[3]string{"call_s", "stubborn", `{}`},
			[3]string{"call_e", "failing", `{}`},
		))),
		exchange(sseResponse(textSSE("done")), "call_p", "call_s", "call_e"),
	))
	stubbornDone := make(chan struct{})
	release := make(chan struct{})
	cfg := testConfig(srv)
	cfg.ToolTimeout = 300 * time.Millisecond
	cfg.Tools = []Tool{
		{Name: "panicky", Func: func(context.Context, json.RawMessage) (string, error) { panic("kaboom") }},
		{Name: "stubborn", Func: func(context.Context, json.RawMessage) (string, error) {
			defer close(stubbornDone)
			<-release // ignores ctx
			return "too late", nil
		}},
		{Name: "failing", Func: func(context.Context, json.RawMessage) (string, error) { return "", errors.New("no data") }},
	}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]*ToolResult{}
	var mc *MessageComplete
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *ToolResult:
			results[e.Name] = e
		case *MessageComplete:
			mc = e
		}
	}
	close(release)
	<-stubbornDone
	if s.Err() != nil || mc == nil || mc.Text != "done" {
		t.Fatalf("turn: %v %v", mc, s.Err())
	}
	if r := results["panicky"]; r == nil || !r.IsError || !strings.Contains(r.Output, "kaboom") {
		t.Fatalf("panicky: %+v", r)
	}
	if r := results["failing"]; r == nil || !r.IsError || r.Output != "no data" {
		t.Fatalf("failing: %+v", r)
	}
	if r := results["stubborn"]; r == nil || !r.IsError {
		t.Fatalf("stubborn: %+v", r)
	}
}

func TestChanDeliversEverythingAndCloses(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("a", "b")))))
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for ev := range s.Chan() {
		evs = append(evs, ev)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if got := types(evs); got != "message_start block_start content_delta content_delta block_complete message_end message_complete" {
		t.Fatalf("events: %s", got)
	}
}

func TestChanAbandonedThenClosedOrCancelled(t *testing.T) {
	defer verifyNoLeaks(t)
	for _, how := range []string{"close", "ctx"} {
		srv := startServer(t, scenario(exchange(sseResponse(textSSE("a", "b")))))
		agent := newTestAgent(t, testConfig(srv))
		ctx, cancel := context.WithCancel(context.Background())
		s, err := agent.Stream(ctx, "hi")
		if err != nil {
			t.Fatal(err)
		}
		ch := s.Chan()
		<-ch // then stop receiving: the sender waits
		if how == "close" {
			_ = s.Close()
		} else {
			cancel()
		}
		for range ch { // drains what was in flight; ends because the channel closes
		}
		if how == "close" && !errors.Is(s.Err(), ErrClosed) {
			t.Fatalf("Err after Close: %v", s.Err())
		}
		if how == "ctx" && !errors.Is(s.Err(), context.Canceled) {
			t.Fatalf("Err after ctx: %v", s.Err())
		}
		cancel()
	}
}

func TestUnclosedStreamIsFreedByGC(t *testing.T) {
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	func() {
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
	}()
	eventually(t, "the cleanup to free the stream", func() bool {
		runtime.GC()
		return liveStreams.Load() == 0
	})
	// The agent is usable again: the freed stream no longer holds it.
	srv.control(t, "/_panto/reset")
	srv.control(t, "/_panto/gate/open")
	s, err := agent.Stream(context.Background(), "again")
	if err != nil {
		t.Fatal(err)
	}
	for range s.Iter() {
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

func TestKindsAndTypesMatchTheLibrary(t *testing.T) {
	for i, k := range ErrorKinds() {
		if got := libErrorKindName(uint32(i + 1)); got != string(k) {
			t.Errorf("error kind %d: library %q, Go %q", i+1, got, k)
		}
	}
	if got := libErrorKindName(uint32(len(ErrorKinds()) + 1)); got != "unknown" {
		t.Errorf("the library knows an error kind Go does not: %q", got)
	}
	for i, typ := range EventTypes() {
		if got := libEventKindName(uint32(i + 1)); got != typ {
			t.Errorf("event %d: library %q, Go %q", i+1, got, typ)
		}
	}
	if got := libEventKindName(uint32(len(EventTypes()) + 1)); got != "unknown" {
		t.Errorf("the library knows an event type Go does not: %q", got)
	}
	if ABIVersion()>>16 != 1 {
		t.Errorf("ABI version %#x", ABIVersion())
	}
}

// The library, not this package, says when a stream has ended: Next hands out
// MessageComplete, then ErrDone from the library, which frees the C stream; the freed
// stream keeps answering ErrDone, also after Close.
func TestTheLibrarysDoneEndsAndFreesTheStream(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("a", "b")))))
	agent := newTestAgent(t, testConfig(srv))
	before := liveStreams.Load()
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	var last Event
	for {
		ev, err := s.Next()
		if err == ErrDone {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	if _, ok := last.(*MessageComplete); !ok {
		t.Fatalf("last event %T", last)
	}
	if n := liveStreams.Load(); n != before {
		t.Fatalf("%d C streams left after ErrDone (%d before)", n, before)
	}
	for range 2 {
		if _, err := s.Next(); err != ErrDone {
			t.Fatalf("after ErrDone: %v", err)
		}
	}
	s.Cancel()
	_ = s.Close()
	if _, err := s.Next(); err != ErrDone {
		t.Fatalf("after Close: %v", err)
	}
}

// A Go tool's output, error and panic text may hold any bytes; the library takes only
// UTF-8. Invalid bytes become U+FFFD and the call is answered at once, not left to its
// timeout (the result was refused and dropped, so each call waited for tool_timeout_ms
// and the model was told the tool timed out).
func TestToolTextWithInvalidUTF8IsAnswered(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"call_o", "output", `{}`},
			[3]string{"call_e", "failing", `{}`},
			[3]string{"call_p", "panicky", `{}`},
		))),
		exchange(sseResponse(textSSE("done")), "call_o", "call_e", "call_p"),
	))
	cfg := testConfig(srv)
	// A hang-catcher: every answer is immediate, while a refused one would come back
	// as a "timed out" result after this.
	cfg.ToolTimeout = 10 * time.Second
	cfg.Tools = []Tool{
		{Name: "output", Func: func(context.Context, json.RawMessage) (string, error) { return "out \xff\xfe put", nil }},
		{Name: "failing", Func: func(context.Context, json.RawMessage) (string, error) { return "", errors.New("bad \xc3(") }},
		{Name: "panicky", Func: func(context.Context, json.RawMessage) (string, error) { panic("pan\x80ic") }},
	}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]*ToolResult{}
	var mc *MessageComplete
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *ToolResult:
			results[e.Name] = e
		case *MessageComplete:
			mc = e
		}
	}
	if s.Err() != nil || mc == nil || mc.Text != "done" {
		t.Fatalf("turn: %v %v", mc, s.Err())
	}
	want := map[string]struct {
		output string
		isErr  bool
	}{
		"output":  {"out \uFFFD put", false},
		"failing": {"bad \uFFFD(", true},
		"panicky": {"tool panicky panicked: pan\uFFFDic", true},
	}
	for name, w := range want {
		r := results[name]
		if r == nil || r.Output != w.output || r.IsError != w.isErr {
			t.Errorf("%s: %+v, want %q (error %v)", name, r, w.output, w.isErr)
		}
	}
}

// A receiver that leaves a Chan loop and drops the stream without Close: the goroutine
// waiting to send must not keep the Stream reachable (it did, so neither it nor the C
// stream, its socket or the agent's turn were ever freed).
func TestChanAbandonedWithoutCloseIsFreed(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("a", "b", "c")))))
	agent := newTestAgent(t, testConfig(srv))
	before := liveStreams.Load()
	func() {
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		for range s.Chan() {
			break // the goroutine now waits to send the next event
		}
	}()
	eventually(t, "the abandoned stream to be freed", func() bool {
		runtime.GC()
		return liveStreams.Load() == before
	})
}

// A stream read up to MessageComplete holds nothing, closed or not: the C stream is
// freed when MessageComplete is delivered (it was freed only by the call after it, by
// Close, or by the GC), and the stream answers ErrDone from then on.
func TestMessageCompleteEndsTheTurnsResources(t *testing.T) {
	defer verifyNoLeaks(t)
	ex := exchange(sseResponse(textSSE("a", "b")))
	ex["times"] = 2
	srv := startServer(t, scenario(ex))
	agent := newTestAgent(t, testConfig(srv))
	before := liveStreams.Load()
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := s.Next()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*MessageComplete); ok {
			break // neither Next again nor Close
		}
	}
	if n := liveStreams.Load(); n != before {
		t.Fatalf("%d C streams left after MessageComplete (%d before)", n, before)
	}
	if _, err := s.Next(); err != ErrDone {
		t.Fatalf("after MessageComplete: %v", err)
	}
	// The agent is free for the next turn (nothing was closed and no GC ran).
	s2, err := agent.Stream(context.Background(), "again")
	if err != nil {
		t.Fatal(err)
	}
	drainTurn(t, s2)
	runtime.KeepAlive(s)
}

// A stream dropped in the middle of its turn, without Close, does not keep its agent
// busy until a garbage collection happens to run: the next call on the agent finds it
// unreachable and closes it. A stream still referenced keeps the agent busy.
func TestDroppedStreamDoesNotHoldTheAgent(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(obj{"status": 200, "sse": textSSE("first", " second"), "fault": obj{"kind": "hold", "after_bytes": 400}}),
		exchange(obj{"status": 200, "sse": textSSE("first", " second"), "fault": obj{"kind": "hold", "after_bytes": 400}}),
		exchange(sseResponse(textSSE("third"))),
		exchange(sseResponse(textSSE("fourth"))),
	))
	agent := newTestAgent(t, testConfig(srv))
	kept, err := agent.Stream(context.Background(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Stream(context.Background(), "x"); !errors.Is(err, ErrBusy) {
		t.Fatalf("a stream in use must keep the agent busy: %v", err)
	}
	if _, err := kept.Next(); err != nil { // still usable
		t.Fatal(err)
	}
	_ = kept.Close()

	func() {
		s, err := agent.Stream(context.Background(), "dropped")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
	}()
	eventually(t, "the server to hold the dropped stream's response", func() bool { return srv.stats(t)["held"] == 1 })
	s, err := agent.Stream(context.Background(), "third")
	if err != nil {
		t.Fatalf("the dropped stream still holds the agent: %v", err)
	}
	drainTurn(t, s)
	eventually(t, "the dropped stream's connection to close", func() bool { return srv.stats(t)["held"] == 0 })
	func() {
		s, err := agent.Stream(context.Background(), "dropped")
		if err != nil {
			t.Fatal(err)
		}
		_ = s // never read
	}()
	if err := agent.ClearHistory(); err != nil {
		t.Fatalf("ClearHistory with a dropped stream: %v", err)
	}
}

// A Go tool's ctx ends when its call times out, not when the turn ends: the library
// stops waiting for the call and tells the model, and the function should stop too.
func TestToolContextEndsAtTheToolTimeout(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"call_s", "slow", `{}`}))),
		exchange(sseResponse(textSSE("done")), "call_s"),
	))
	returned := make(chan error, 1)
	cfg := testConfig(srv)
	cfg.ToolTimeout = 100 * time.Millisecond
	cfg.Tools = []Tool{{Name: "slow", Func: func(ctx context.Context, _ json.RawMessage) (string, error) {
		<-ctx.Done()
		returned <- context.Cause(ctx)
		return "late", nil
	}}}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	var sawResult bool
	for ev := range s.Iter() {
		if r, ok := ev.(*ToolResult); ok {
			sawResult = true
			if !r.IsError || !strings.Contains(r.Output, "timed out") {
				t.Fatalf("result %+v", r)
			}
			// The turn has not ended (this loop body holds it): the tool's ctx must
			// have ended anyway.
			select {
			case cause := <-returned:
				var perr *Error
				if !errors.As(cause, &perr) || perr.Kind != KindTimeout || !errors.Is(cause, ErrTimeout) {
					t.Fatalf("cause %v", cause)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the tool's ctx did not end at its timeout")
			}
		}
	}
	if !sawResult || s.Err() != nil {
		t.Fatalf("result seen %v, err %v", sawResult, s.Err())
	}
}

// osThreads is this process's thread count (Linux).
func osThreads(tb testing.TB) int {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no Threads line in /proc/self/status")
	return 0
}

// waitingInNext reports how many goroutines are inside a stream's pull, and whether
// every one of them is parked: in a cgo call ("syscall", holding an OS thread), waiting
// for the ready set's report (a select in streamHandle.wait, holding nothing; the set's
// dispatcher is the one goroutine in the netpoller for all of them, see
// dispatcherInPoller) or waiting in Go otherwise; inC counts the first kind, inSet the
// second.
func waitingInNext() (n, inC, inSet int, parked bool) {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	parked = true
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, ".(*stream).pull(") {
			continue
		}
		n++
		head, _, _ := strings.Cut(g, "\n")
		switch {
		case strings.Contains(head, "[syscall"):
			inC++
		case strings.Contains(head, "[select") && strings.Contains(g, ".(*streamHandle).wait("):
			inSet++
		case strings.Contains(head, "[select"), strings.Contains(head, "[chan send"):
		default:
			parked = false
		}
	}
	return n, inC, inSet, parked
}

// dispatcherInPoller reports whether the ready set's dispatcher goroutine is parked in
// the netpoller on the set's descriptor.
func dispatcherInPoller() bool {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		if strings.Contains(g, ".(*readySet).dispatch(") && strings.Contains(head, "[IO wait") {
			return true
		}
	}
	return false
}

// openFDs is this process's count of open descriptors (Linux).
func openFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}

// Many streams waiting at once must not each hold an OS thread: past 10,000 the Go
// runtime kills the process. Streams without a readiness descriptor wait inside the
// library, bounded: here 400 streams wait (the server holds every response) with those
// waits bounded to 32 at a time, and the thread count stays near that bound, not near
// 400.
func TestManyWaitingStreamsBoundTheThreads(t *testing.T) {
	defer verifyNoLeaks(t)
	const streams, bound = 400, 32
	restore := setMaxBlockedWaits(bound)
	defer restore()
	noReadiness.Store(true)
	defer noReadiness.Store(false)
	ex := exchange(obj{"status": 200, "sse": textSSE("first", " second"), "fault": obj{"kind": "hold", "after_bytes": 400}})
	ex["times"] = streams
	srv := startServer(t, scenario(ex))
	base := osThreads(t)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		agent := newTestAgent(t, testConfig(srv))
		s, err := agent.Stream(context.Background(), fmt.Sprint("n", i))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			var text string
			for ev := range s.Iter() {
				if mc, ok := ev.(*MessageComplete); ok {
					text = mc.Text
				}
			}
			if s.Err() != nil || text != "first second" {
				errs <- fmt.Errorf("stream %d: %q %v", i, text, s.Err())
			}
		}()
	}
	eventually(t, "every response to be held", func() bool { return srv.stats(t)["held"] == streams })
	eventually(t, "every Next to wait", func() bool {
		n, _, _, parked := waitingInNext()
		return n == streams && parked
	})
	if n, limit := osThreads(t), base+bound+runtime.GOMAXPROCS(0)+32; n > limit {
		t.Errorf("%d threads with %d streams waiting (%d before; at most %d expected)", n, streams, base, limit)
	}
	srv.control(t, "/_panto/gate/open")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// ErrClosed is an *Error of kind cancelled, like every error Close causes, and matches
// only those: errors.As finds the details, ErrCancelled matches them too, and a
// cancellation that Close did not cause does not match ErrClosed.
func TestErrClosedIsAPantoError(t *testing.T) {
	defer verifyNoLeaks(t)
	var perr *Error
	if !errors.As(ErrClosed, &perr) || perr.Kind != KindCancelled || !errors.Is(ErrClosed, ErrCancelled) {
		t.Fatalf("ErrClosed: %#v", ErrClosed)
	}
	srv := startServer(t, holdScenario())
	agent, err := NewAgent(testConfig(srv))
	if err != nil {
		t.Fatal(err)
	}
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	s.Cancel()
	_, cancelled := s.Next()
	if !errors.Is(cancelled, ErrCancelled) || errors.Is(cancelled, ErrClosed) {
		t.Fatalf("a cancel that Close did not cause: %v", cancelled)
	}
	_ = s.Close()
	_ = agent.Close()
	for _, err := range []error{
		s.SubmitToolResult("x", "y", false),
		agent.ClearHistory(),
		func() error { _, err := agent.Stream(context.Background(), "x"); return err }(),
		func() error { _, err := agent.SaveHistory(); return err }(),
	} {
		perr = nil
		if !errors.As(err, &perr) || perr.Kind != KindCancelled || !errors.Is(err, ErrClosed) || !errors.Is(err, ErrCancelled) {
			t.Errorf("after Close: %#v", err)
		}
	}
}

// A loop ended by a Close from another goroutine is not a complete turn: Err says the
// stream was closed (it was nil, as after a clean end).
func TestErrAfterCloseFromAnotherGoroutine(t *testing.T) {
	defer verifyNoLeaks(t)
	for _, how := range []string{"Iter", "All", "Chan"} {
		t.Run(how, func(t *testing.T) {
			srv := startServer(t, holdScenario())
			agent := newTestAgent(t, testConfig(srv))
			s, err := agent.Stream(context.Background(), "hi")
			if err != nil {
				t.Fatal(err)
			}
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				switch how {
				case "Iter":
					for range s.Iter() {
					}
				case "All":
					for range s.All() {
					}
				case "Chan":
					for range s.Chan() {
					}
				}
			}()
			eventually(t, "the server to hold the response", func() bool { return srv.stats(t)["held"] == 1 })
			eventually(t, "the loop to wait for the held events", s.consumerWaiting)
			_ = s.Close()
			<-ended
			var perr *Error
			if err := s.Err(); !errors.Is(err, ErrClosed) || !errors.As(err, &perr) || perr.Kind != KindCancelled {
				t.Fatalf("Err after Close mid-turn: %v", err)
			}
		})
	}
}

// `defer s.Close()` before the error check: every method of a nil or zero *Stream or
// *Agent is safe (they panicked), Close and Cancel doing nothing and the others
// failing with an *Error of kind config.
func TestNilAndZeroStreamsAndAgents(t *testing.T) {
	defer verifyNoLeaks(t)
	isConfig := func(what string, err error) {
		t.Helper()
		var perr *Error
		if !errors.As(err, &perr) || perr.Kind != KindConfig {
			t.Errorf("%s: %v", what, err)
		}
	}
	for name, s := range map[string]*Stream{"nil": nil, "zero": {}} {
		t.Run("Stream "+name, func(t *testing.T) {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			s.Cancel()
			_, err := s.Next()
			isConfig("Next", err)
			isConfig("Err", s.Err())
			isConfig("SubmitToolResult", s.SubmitToolResult("id", "x", false))
			for range s.Iter() {
				t.Error("Iter yielded")
			}
			n := 0
			for ev, err := range s.All() {
				n++
				if ev != nil {
					t.Error("All yielded an event")
				}
				isConfig("All", err)
			}
			if n != 1 {
				t.Errorf("All yielded %d pairs", n)
			}
			for range s.Chan() {
				t.Error("Chan delivered")
			}
		})
	}
	for name, a := range map[string]*Agent{"nil": nil, "zero": {}} {
		t.Run("Agent "+name, func(t *testing.T) {
			if err := a.Close(); err != nil {
				t.Error(err)
			}
			s, err := a.Stream(context.Background(), "x")
			isConfig("Stream", err)
			_ = s.Close() // the nil *Stream Stream returned
			_, err = a.StreamWith(context.Background(), "x", TurnOptions{Model: "m"})
			isConfig("StreamWith", err)
			_, err = a.SaveHistory()
			isConfig("SaveHistory", err)
			isConfig("LoadHistory", a.LoadHistory([]byte("{}")))
			isConfig("ClearHistory", a.ClearHistory())
			_, err = a.Compact(context.Background(), CompactOptions{})
			isConfig("Compact", err)
			_, err = a.Transcript()
			isConfig("Transcript", err)
		})
	}
}

// The exported lists are copies: changing one changes neither what another call returns
// nor how the library's codes decode (ErrorKinds was a package variable kindOf read).
func TestKindAndTypeListsAreCopies(t *testing.T) {
	kinds, types := ErrorKinds(), EventTypes()
	kinds[0], types[0] = "mutated", "mutated"
	if ErrorKinds()[0] != KindConfig || EventTypes()[0] != "message_start" {
		t.Fatal("a returned list shares the package's")
	}
	_, err := NewAgent(Config{Model: "m", Provider: "nope"})
	var perr *Error
	if !errors.As(err, &perr) || perr.Kind != KindConfig || !errors.Is(err, ErrConfig) {
		t.Fatalf("decoded %#v", err)
	}
}

// Retry{MaxRetries: Int(0)} means no retry, as openai-go's WithMaxRetries(0) does (a
// zero MaxRetries meant "the default", two retries); nil keeps the default.
func TestZeroMaxRetriesMeansNoRetry(t *testing.T) {
	defer verifyNoLeaks(t)
	limited := exchange(obj{"status": 429, "headers": obj{"retry-after": "0"}, "json": obj{"error": obj{"type": "rate_limit_exceeded", "message": "slow down"}}})
	srv := startServer(t, scenario(limited, exchange(sseResponse(textSSE("ok")))))
	cfg := testConfig(srv)
	cfg.Retry = Retry{MaxRetries: Int(0), InitialDelay: time.Millisecond}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	for ev := range s.Iter() {
		t.Fatalf("an event: %s", mustJSON(t, ev))
	}
	if !errors.Is(s.Err(), ErrRateLimited) {
		t.Fatalf("Err %v", s.Err())
	}
	// The default (nil) retries.
	srv.control(t, "/_panto/reset")
	cfg.Retry = Retry{InitialDelay: time.Millisecond}
	agent = newTestAgent(t, cfg)
	s, err = agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	if _, ok := evs[0].(*ProviderRetry); !ok {
		t.Fatalf("first event %s", mustJSON(t, evs[0]))
	}
}

// A config error names the Go field (and the key the core named), not only the JSON
// key a Go program never wrote.
func TestConfigErrorsNameTheGoField(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "m", Retry: Retry{MaxRetries: Int(101)}}, "Config.Retry.MaxRetries (retry.max_retries): "},
		{Config{Model: "m", MaxTokens: -5}, "Config.MaxTokens (max_tokens): "},
		{Config{Model: "m", Provider: "nope"}, "Config.Provider (provider): "},
		{Config{Model: "m", ToolTimeout: -time.Second}, "Config.ToolTimeout (tool_timeout_ms): "},
		{Config{Model: "m", Tools: []Tool{{Name: "a"}, {Name: "a"}}}, "Config.Tools[1].Name (tools[1].name): "},
		{Config{Model: "m", APIKey: "k", Headers: map[string]string{"Authorization": "x"}},
			`Config.Headers["Authorization"] (headers.Authorization): `},
		{Config{Model: "m", Reasoning: &Reasoning{Effort: "max"}}, "Config.Reasoning.Effort (reasoning.effort): "},
		{Config{}, "Config.Model (model): "},
	} {
		_, err := NewAgent(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), "panto: config: "+c.want) {
			t.Errorf("got %v, want it to start with %q", err, c.want)
		}
	}
	agent := newTestAgent(t, Config{Model: "m", APIKey: "k", BaseURL: "http://127.0.0.1:1/v1"})
	_, err := agent.StreamWith(context.Background(), "x", TurnOptions{Reasoning: &Reasoning{Effort: "max"}})
	if want := "panto: config: TurnOptions.Reasoning.Effort (options.reasoning.effort): "; !strings.HasPrefix(fmt.Sprint(err), want) {
		t.Errorf("got %v, want it to start with %q", err, want)
	}
}

// Streams wait for the process's ready set, not in the library: with 2,000 streams
// waiting at once (the server holds every response) every one of their goroutines is
// parked waiting for the set's report and none in a cgo call, the set's one dispatcher
// is parked in the netpoller, the streams hold no descriptor but their sockets, and the
// threads number what Go and panto need whatever the count of streams: GOMAXPROCS,
// panto's workers, the library calls' bound (wait.go) and a few for the Go runtime —
// also while the 2,000 agents are made and their streams started, from 2,000
// goroutines at once. Then they all finish. It runs in a process of its own: Go keeps
// every thread it made, so this process's count would include other tests' threads.
func TestWaitingStreamsHoldNoThread(t *testing.T) {
	if os.Getenv("PANTO_GO_OWN_PROCESS") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWaitingStreamsHoldNoThread$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "PANTO_GO_OWN_PROCESS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "threads") {
				t.Log(strings.TrimSpace(line))
			}
		}
		return
	}
	defer verifyNoLeaks(t)
	const streams = 2000
	ex := exchange(obj{"status": 200, "sse": textSSE("first", " second"), "fault": obj{"kind": "hold", "after_bytes": 400}})
	ex["times"] = streams
	srv := startServer(t, scenario(ex))
	fdsBefore := openFDs(t)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent, err := NewAgent(testConfig(srv))
			if err != nil {
				errs <- err
				return
			}
			defer agent.Close()
			s, err := agent.Stream(context.Background(), fmt.Sprint("n", i))
			if err != nil {
				errs <- err
				return
			}
			var text string
			for ev := range s.Iter() {
				if mc, ok := ev.(*MessageComplete); ok {
					text = mc.Text
				}
			}
			if s.Err() != nil || text != "first second" {
				errs <- fmt.Errorf("stream %d: %q %v", i, text, s.Err())
			}
		}()
	}
	eventually(t, "every response to be held", func() bool { return srv.stats(t)["held"] == streams })
	eventually(t, "every Next to wait", func() bool {
		n, inC, inSet, parked := waitingInNext()
		return n == streams && inC == 0 && inSet == streams && parked && dispatcherInPoller()
	})
	// A socket per stream, and the ready set's one descriptor: none per stream.
	if fds, limit := openFDs(t), fdsBefore+streams+16; fds > limit {
		t.Errorf("%d descriptors with %d streams waiting (%d before, at most %d expected)", fds, streams, fdsBefore, limit)
	}
	workers, others := pantoThreads()
	n, limit := osThreads(t), runtime.GOMAXPROCS(0)+workers+others+8
	t.Logf("%d threads with %d streams waiting (GOMAXPROCS %d, %d panto workers, %d other panto threads)",
		n, streams, runtime.GOMAXPROCS(0), workers, others)
	if n > limit {
		t.Errorf("more than %d threads", limit)
		dumpThreads(t)
	}
	srv.control(t, "/_panto/gate/open")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The end of a stream is ErrDone, named as Go names error values (staticcheck ST1012;
// it was Done): not a failure, so no *Error and no kind matches it.
func TestErrDoneIsTheEndNotAFailure(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("a")))))
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		_, err := s.Next()
		if errors.Is(err, ErrDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var perr *Error
	if errors.As(ErrDone, &perr) || errors.Is(ErrDone, ErrCancelled) || errors.Is(ErrDone, ErrClosed) {
		t.Fatal("ErrDone is a failure")
	}
}

// dumpThreads logs what each thread of this process is doing (for a thread count past
// its bound).
func dumpThreads(t *testing.T) {
	ents, _ := os.ReadDir("/proc/self/task")
	for _, e := range ents {
		read := func(f string) string {
			b, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/" + f)
			return strings.TrimSpace(string(b))
		}
		sc := read("syscall")
		if i := strings.IndexByte(sc, ' '); i > 0 {
			sc = sc[:i]
		}
		t.Logf("thread %s %s: wchan %s, syscall %s", e.Name(), read("comm"), read("wchan"), sc)
	}
}
