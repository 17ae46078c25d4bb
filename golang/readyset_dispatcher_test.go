package panto

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// Around the dispatcher's gathering threshold (coalesceFrom attached streams): with
// fewer, more and exactly that many streams waiting on the process's ready set, every
// stream is woken to its end while half of them are closed from other goroutines as
// their reports fly (the gate opens at the same time): no lost wake-up (every stream
// left open ends with its text), no send on a closed channel, no goroutine or stream
// left behind.
func TestReadySetAroundTheGatheringThreshold(t *testing.T) {
	for _, n := range []int{coalesceFrom - 1, coalesceFrom, coalesceFrom + 1, 2*coalesceFrom + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			defer verifyNoLeaks(t)
			ex := exchange(obj{"status": 200, "sse": textSSE("first", " second"), "fault": obj{"kind": "hold", "after_bytes": 400}})
			ex["times"] = n
			srv := startServer(t, scenario(ex))
			streams := make([]*Stream, n)
			for i := range n {
				agent := newTestAgent(t, testConfig(srv))
				s, err := agent.Stream(context.Background(), fmt.Sprint("q", i))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				streams[i] = s
			}
			type result struct {
				text string
				err  error
			}
			results := make([]chan result, n)
			for i, s := range streams {
				results[i] = make(chan result, 1)
				go func() {
					var text string
					for ev := range s.Iter() {
						if d, ok := ev.(*ContentDelta); ok {
							text += d.Text
						}
					}
					results[i] <- result{text, s.Err()}
				}()
			}
			eventually(t, "every response to be held", func() bool { return srv.stats(t)["held"] == n })
			eventually(t, "every Next to wait on the set", func() bool {
				w, inC, inSet, parked := waitingInNext()
				return w == n && inC == 0 && inSet == n && parked
			})
			if c := theSet.Load().count.Load(); c < int64(n) {
				t.Fatalf("%d streams attached, want at least %d", c, n)
			}
			var wg sync.WaitGroup
			for i := 0; i < n; i += 2 {
				wg.Add(1)
				go func() { defer wg.Done(); _ = streams[i].Close() }()
			}
			srv.control(t, "/_panto/gate/open")
			wg.Wait()
			for i := range n {
				r := <-results[i]
				switch {
				case i%2 == 0:
					// Closed: cancelled, unless the whole turn won the race.
					if r.err != nil && !errors.Is(r.err, ErrClosed) {
						t.Errorf("stream %d (closed): %v", i, r.err)
					}
				case r.err != nil || r.text != "first second":
					t.Errorf("stream %d: %q %v", i, r.text, r.err)
				}
			}
			for _, s := range streams {
				_ = s.Close()
			}
			eventually(t, "every C stream to be freed", func() bool { return liveStreams.Load() == 0 })
			eventually(t, "the set's table to be empty", func() bool { return theSet.Load().count.Load() == 0 })
		})
	}
}

// A stream attached to the ready set (its handle in the dispatcher's table) and dropped
// without Close while its turn still runs is freed by the garbage collector, and its
// handle leaves the table: a program that forgets Close does not grow the table.
func TestUnclosedAttachedStreamLeavesTheSetsTable(t *testing.T) {
	srv := startServer(t, holdScenario())
	agent := newTestAgent(t, testConfig(srv))
	live := liveStreams.Load()
	attached := func() int64 {
		s, err := agent.Stream(context.Background(), "hi")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
		h := s.s.h
		h.mu.RLock()
		set := h.attached() // what its next wait would do first (maybe done already)
		token := h.token
		h.mu.RUnlock()
		if set == nil || token == 0 {
			t.Fatal("the stream could not be attached to the set")
		}
		eventually(t, "the server to hold the rest", func() bool { return srv.stats(t)["held"] == 1 })
		return theSet.Load().count.Load()
	}()
	eventually(t, "the cleanup to free the stream and take it out of the table", func() bool {
		runtime.GC()
		return liveStreams.Load() == live && theSet.Load().count.Load() == attached-1
	})
}
