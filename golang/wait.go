package panto

/*
#include "panto.h"
*/
import "C"

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// How a Next waits for the library.
//
// A goroutine inside a blocking cgo call holds its OS thread for as long as the call
// lasts, and a Go program dies past 10,000 threads (runtime/debug.SetMaxThreads). So a
// Next never blocks in the library when it can help it: it takes what is ready with
// non-blocking calls (panto_next_events with a timeout of 0) and otherwise parks its goroutine
// on a channel of its own, holding no thread, until the library reports the stream
// ready.
//
// The reports come through one ready set for the whole process (panto_ready_set_new,
// ABI 1.2): every stream that has waited once is attached to it under a token of its
// own (panto_stream_attach), and the set's one descriptor is readable while a token
// waits to be taken. One dispatcher goroutine parks in Go's netpoller on that descriptor
// (os.NewFile + SyscallConn().Read), takes the tokens in batches
// (panto_ready_set_take) and wakes each token's waiter through its channel. So a waiting
// stream costs no descriptor (a stream's own readiness descriptor would cost one on top
// of its socket, and Go's os.NewFile would have needed a dup of it: three per stream,
// 30,000 for 10,000 streams) and a burst of streams turning ready costs one netpoller
// wake-up, not one per stream. The library reports a stream once per turn to ready after
// it last answered PANTO_PENDING (or an event with more false: nothing else ready), and
// never answers either with a report pending, so a Next that got one of them and then
// waits cannot miss the report that follows.
//
// The set and its descriptor live as long as the process: they are never freed, so
// nothing closes the descriptor the netpoller holds (the *os.File is kept reachable, so
// its finalizer never runs either), and no descriptor number is ever reused under the
// dispatcher. A stream leaves the set when it is freed (the library never reports a
// freed stream's token), and its token is taken out of the dispatcher's table before
// that, under the handle's write lock, which no waiter holds (Close cancels first, which
// wakes the waiter through the handle's cancelled channel). Tokens are never reused.
//
// Without a set (a platform without descriptors, the process out of them, a netpoller
// that refuses the descriptor) a Next waits inside the library, bounded: at most
// MaxBlockedWaits goroutines wait there at once, each holding a slot; the others wait
// in Go, on the slots, holding no thread. A slot is held for one wait of at most
// waitSliceMS and given back after it whenever another goroutine waits for one, so
// every waiting stream gets its turn (a stream whose events are ready takes them
// without a slot). Cancel, Close and the stream's ctx wake a goroutine waiting for a
// slot at once too.

// Short calls are bounded too. A goroutine in a cgo call keeps its thread, and when the
// call outlasts a scheduler tick (20 µs) while goroutines wait to run — a call that
// meets a lock held by a thread the OS preempted, or is preempted itself — Go gives its
// P to another thread, starting one if none is idle. Thousands of streams taking their
// events at once on a loaded machine would so grow the threads well past what the
// process needs (137 for 2,000 streams, measured). At most cap(calls) = GOMAXPROCS
// goroutines are in the library's calls at once — the non-blocking polls, attaching to
// the set, and also making agents, starting streams, cancelling and freeing them
// (6,000 goroutines each making an agent and starting a stream at once, unbounded, took
// the threads to 17–41) — the others wait in Go for a moment, holding no thread; so the
// process needs at most GOMAXPROCS threads running Go, GOMAXPROCS in the library, and
// the runtime's own few. Only a wait inside the library (no set) takes one of
// MaxBlockedWaits slots instead.

// MaxBlockedWaits is the most goroutines that wait inside the library at once, each on
// an OS thread of its own, when streams have no readiness descriptor to wait on (see
// Stream.Next); more concurrent Next calls wait in Go for a turn.
const MaxBlockedWaits = 1024

// waitSliceMS bounds one wait inside the library while others wait for a slot.
const waitSliceMS = 50

type waitSlots struct {
	ch      chan struct{}
	waiters atomic.Int64 // goroutines waiting in Go for a slot
}

var slots atomic.Pointer[waitSlots]

// calls holds a token per goroutine inside a library call (see above).
var calls = make(chan struct{}, runtime.GOMAXPROCS(0))

// short runs f, a library call, holding one of the calls tokens.
func short(f func()) {
	calls <- struct{}{}
	defer func() { <-calls }()
	f()
}

// poll takes what the library has ready for the stream, never waiting: a next call's
// answer, PANTO_PENDING if nothing is. It is panto_next_events with room for one event
// (ABI 1.3), which also says whether anything else is ready (h.dry): a Next after an
// event that left the stream dry goes straight to waiting, so a sparse event costs one
// library call, not an event and then a PANTO_PENDING.
func (h *streamHandle) poll() C.PantoStatus {
	return h.nextEvents(0)
}

// nextEvents is one panto_next_events call of at most timeoutMS into h.ev, recording
// in h.dry whether the stream was left with nothing ready (its readiness then reports
// the next arrival, as after PANTO_PENDING).
func (h *streamHandle) nextEvents(timeoutMS C.int32_t) C.PantoStatus {
	var filled C.size_t
	var more C.bool
	if timeoutMS == 0 {
		calls <- struct{}{}
	}
	st := C.panto_next_events(h.p, h.ev, 1, timeoutMS, &filled, &more)
	if timeoutMS == 0 {
		<-calls
	}
	h.dry = st == C.PANTO_EVENT && !bool(more)
	return st
}

// acquire takes a slot, waiting in Go while none is free (counted in waiters, so that
// holders hand theirs on); false if cancelled was closed first.
func (w *waitSlots) acquire(cancelled <-chan struct{}) bool {
	select {
	case w.ch <- struct{}{}:
		return true
	default:
	}
	w.waiters.Add(1)
	defer w.waiters.Add(-1)
	select {
	case w.ch <- struct{}{}:
		return true
	case <-cancelled:
		return false
	}
}

func (w *waitSlots) release() { <-w.ch }

// noReadiness makes every stream wait inside the library (tests of that path).
var noReadiness atomic.Bool

func init() { slots.Store(newWaitSlots(MaxBlockedWaits)) }

func newWaitSlots(n int) *waitSlots { return &waitSlots{ch: make(chan struct{}, n)} }

// wait waits until the library has something for the stream (an event, the end, a
// failure, a cancel), or for the handle's cancel; it takes nothing (PANTO_PENDING: the
// caller polls again) unless it waited inside the library. The caller holds h.mu's read
// lock, is the stream's one consumer (next is serialized), and has just been answered
// PANTO_PENDING.
func (h *streamHandle) wait() C.PantoStatus {
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	if set := h.attached(); set != nil {
		select {
		case <-h.ready:
		case <-h.cancelled:
		case <-set.broken:
		}
		return C.PANTO_PENDING
	}
	return h.waitInLibrary()
}

// attached returns the process's ready set with the stream attached to it, attaching it
// on its first wait; nil when there is no set to wait on (the handle then waits in the
// library from now on).
func (h *streamHandle) attached() *readySet {
	if h.token != 0 {
		if set := theSet.Load(); !set.failed.Load() {
			return set
		}
		return nil
	}
	if h.rfailed || noReadiness.Load() {
		return nil
	}
	set := processSet()
	if set == nil || set.failed.Load() {
		h.rfailed = true
		return nil
	}
	token := set.add(h)
	var ok bool
	short(func() { ok = C.panto_stream_attach(h.p, set.p, C.uint64_t(token)) == C.PANTO_OK })
	if !ok {
		set.remove(token)
		h.rfailed = true
		return nil
	}
	h.token = token
	return set
}

// detach takes the stream out of the dispatcher's table (under the write lock, before
// the C stream is freed).
func (h *streamHandle) detach() {
	if h.token != 0 {
		theSet.Load().remove(h.token)
		h.token = 0
	}
}

// readySet is the process's one ready set and its dispatcher (see above).
type readySet struct {
	p    *C.PantoReadySet
	file *os.File // the set's descriptor in the netpoller; kept reachable for good

	mu      sync.Mutex
	waiters map[uint64]*streamHandle
	next    uint64
	count   atomic.Int64 // len(waiters), read without the lock

	failed atomic.Bool
	broken chan struct{} // closed if the dispatcher stops (then streams wait in the library)
}

var (
	theSet     atomic.Pointer[readySet]
	theSetOnce sync.Once
)

// processSet makes the process's set and starts its dispatcher on first use; nil if
// there can be none.
func processSet() *readySet {
	theSetOnce.Do(func() {
		var p *C.PantoReadySet
		if C.panto_ready_set_new(&p) != C.PANTO_OK {
			return
		}
		var fd C.int64_t
		if C.panto_ready_set_fd(p, &fd) != C.PANTO_OK {
			C.panto_ready_set_free(p)
			return
		}
		rc, file := pollable(int64(fd))
		if rc == nil {
			C.panto_ready_set_free(p)
			return
		}
		set := &readySet{p: p, file: file, waiters: map[uint64]*streamHandle{}, broken: make(chan struct{})}
		theSet.Store(set)
		go set.dispatch(rc)
	})
	return theSet.Load()
}

func (s *readySet) add(h *streamHandle) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.waiters[s.next] = h
	s.count.Store(int64(len(s.waiters)))
	return s.next
}

func (s *readySet) remove(token uint64) {
	s.mu.Lock()
	delete(s.waiters, token)
	s.count.Store(int64(len(s.waiters)))
	s.mu.Unlock()
}

// takeBatch is how many tokens the dispatcher takes per library call.
const takeBatch = 256

// With at least coalesceFrom streams attached, the dispatcher wakes at most once per
// coalesceEvery (see dispatch): far below what a reader of thousands of streams can
// tell, and a twenty-fifth of the 25 ms added-gap target at 10,000 streams.
const (
	coalesceFrom  = 64
	coalesceEvery = time.Millisecond
)

// dispatch runs for the life of the process: parked in the netpoller until the set's
// descriptor turns readable, then takes every token and wakes each one's waiter.
func (s *readySet) dispatch(rc syscall.RawConn) {
	var tokens [takeBatch]uint64
	woken := make([]*streamHandle, 0, takeBatch)
	// The function runs at once, then each time the descriptor turns readable; it never
	// says it is done. Go's netpoller is edge-triggered: the library clears the
	// descriptor only when a take empties the set, so a report after the last take is
	// an edge the netpoller sees.
	takeAll := func() (total int) {
		for {
			var n int
			short(func() {
				n = int(C.panto_ready_set_take(s.p, (*C.uint64_t)(unsafe.Pointer(&tokens[0])), takeBatch))
			})
			total += n
			woken = woken[:0]
			s.mu.Lock()
			for _, t := range tokens[:n] {
				if h := s.waiters[t]; h != nil {
					woken = append(woken, h)
				}
			}
			s.mu.Unlock()
			for _, h := range woken {
				select {
				case h.ready <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
			if n < takeBatch {
				return total
			}
		}
	}
	err := rc.Read(func(uintptr) bool {
		// With many streams attached, reports come one stream at a time (thousands of
		// slow streams: 15,000 a second at 3,000 streams of 5 events a second), and
		// waking for each cost a library write, a netpoller wake-up and a thread
		// switch per event. Then the dispatcher gathers them: after a wake-up it takes
		// again every coalesceEvery until a whole interval brought nothing, and only
		// then parks in the netpoller — at most one wake-up per interval, at most that
		// much added to a report's way. Few streams (a fast stream's consumer waiting
		// for its next burst) are woken at once.
		for takeAll() > 0 && s.count.Load() >= coalesceFrom {
			time.Sleep(coalesceEvery)
		}
		return false
	})
	// Not expected (the set is never closed); streams then wait in the library.
	_ = err
	s.failed.Store(true)
	close(s.broken)
}

// waitInLibrary waits inside the library holding one of the slots (see above).
func (h *streamHandle) waitInLibrary() C.PantoStatus {
	w := slots.Load()
	if !w.acquire(h.cancelled) {
		return C.PANTO_PENDING // the poll that follows reports the cancel
	}
	defer w.release()
	for {
		st := h.nextEvents(waitSliceMS)
		if st != C.PANTO_PENDING || w.waiters.Load() > 0 {
			return st
		}
	}
}
