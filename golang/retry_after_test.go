package panto

import (
	"context"
	"errors"
	"testing"
	"time"
)

func rateLimited(header, value string) obj {
	return exchange(obj{"status": 429, "headers": obj{header: value},
		"json": obj{"error": obj{"type": "rate_limit_exceeded", "message": "slow down"}}})
}

// A server's wait past Retry.MaxRetryAfter (default 60 s) fails the stream at once,
// with the wait on the error; were it ignored (the backoff used instead), the retry
// would get the second exchange and the stream would succeed.
func TestRetryAfterPastTheCapFailsAtOnceWithTheWait(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(rateLimited("retry-after", "120"), exchange(sseResponse(textSSE("too early")))))
	cfg := testConfig(srv)
	cfg.Retry = Retry{MaxRetries: Int(2), InitialDelay: time.Millisecond, MaxDelay: time.Millisecond}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for ev := range s.Iter() {
		t.Fatalf("no event expected (no retry is announced), got %s", mustJSON(t, ev))
	}
	var perr *Error
	if !errors.Is(s.Err(), ErrRateLimited) || !errors.As(s.Err(), &perr) {
		t.Fatalf("err %v", s.Err())
	}
	if perr.RetryAfter != 2*time.Minute || perr.Status != 429 {
		t.Fatalf("RetryAfter %v, status %d: %v", perr.RetryAfter, perr.Status, perr)
	}
}

// Retry.MaxRetryAfter raises the cap: a 90 s wait becomes the retry's delay, though the
// backoff is 1 ms.
func TestRetryAfterUpToTheCapIsTheDelay(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(rateLimited("retry-after", "90"), exchange(sseResponse(textSSE("late")))))
	cfg := testConfig(srv)
	cfg.Retry = Retry{MaxRetries: Int(2), InitialDelay: time.Millisecond, MaxDelay: time.Millisecond,
		MaxRetryAfter: 2 * time.Minute}
	agent := newTestAgent(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := agent.Stream(ctx, "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := ev.(*ProviderRetry); !ok || r.DelayMS != 90_000 {
		t.Fatalf("first event %s", mustJSON(t, ev))
	}
	cancel() // not waiting 90 s
	if _, err := s.Next(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("after cancel: %v", err)
	}
}
