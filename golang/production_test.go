package panto

import (
	"context"
	"errors"
	"runtime/pprof"
	"sync"
	"testing"
)

// Token counts: the provider's count endpoint (Anthropic) and the estimate (Chat
// Completions, nothing sent).
func TestCountTokens(t *testing.T) {
	srv := startServer(t, scenario(obj{
		"match":    obj{"method": "POST", "path": "/v1/messages/count_tokens", "body_contains": []string{"How long is this?"}},
		"response": obj{"status": 200, "json": obj{"input_tokens": 42}},
	}))
	a := newTestAgent(t, Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.url, APIKey: "sk-test-secret-key"})
	got, err := a.CountTokens("How long is this?")
	if err != nil {
		t.Fatal(err)
	}
	if got != (TokenCount{Tokens: 42, Estimated: false}) {
		t.Fatalf("%+v", got)
	}
	o := newTestAgent(t, testConfig(srv))
	before := srv.stats(t)["connections_total"]
	short, err := o.CountTokens("hi")
	if err != nil {
		t.Fatal(err)
	}
	long, err := o.CountTokens(string(make([]byte, 4000)))
	if err != nil {
		t.Fatal(err)
	}
	if !short.Estimated || long.Tokens < short.Tokens+900 {
		t.Fatalf("%+v %+v", short, long)
	}
	// The only new connection is the stats request's own.
	if n := srv.stats(t)["connections_total"]; n != before+1 {
		t.Fatalf("an estimate sends nothing: %d connections, %d before", n, before)
	}
}

// 40 agents over a bound of 2: the server never has more than 2 in flight, and the
// queued requests hold no thread each.
func TestMaxConcurrentRequestsHoldsNoThreadPerQueuedRequest(t *testing.T) {
	held := sseResponse(textSSE("ok"))
	held["fault"] = obj{"kind": "hold", "after_bytes": 0}
	srv := startServer(t, obj{"exchanges": []obj{{"times": 40, "response": held}}})
	cfg := testConfig(srv)
	cfg.APIKey = "sk-test-go-bound"
	cfg.MaxConcurrentRequests = 2
	cfg.MaxQueuedRequests = Int(100)
	threads := pprof.Lookup("threadcreate").Count()
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		a := newTestAgent(t, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := a.Stream(context.Background(), "hi")
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			for range s.Iter() {
			}
			errs[i] = s.Err()
		}()
	}
	eventually(t, "two requests held", func() bool { return srv.stats(t)["held"] == 2 })
	if grown := pprof.Lookup("threadcreate").Count() - threads; grown >= n/2 {
		t.Errorf("%d threads created for %d turns", grown, n)
	}
	srv.control(t, "/_panto/gate/open")
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, ErrDone) {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if most := srv.stats(t)["max_in_flight"]; most > 2 || most < 1 {
		t.Fatalf("%d requests in flight at once", most)
	}
}
