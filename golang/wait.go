package panto

/*
#include "panto.h"
*/
import "C"

import (
	"os"
	"runtime"
	"sync/atomic"
)

// How a Next waits for the library.
//
// A goroutine inside a blocking cgo call holds its OS thread for as long as the call
// lasts, and a Go program dies past 10,000 threads (runtime/debug.SetMaxThreads). So a
// Next never blocks in the library when it can help it: it takes what is ready with
// non-blocking calls (panto_next_event_timeout with 0) and otherwise parks its goroutine
// on the stream's readiness descriptor (panto_stream_readiness_fd) in Go's netpoller,
// like a goroutine reading a socket, holding no thread. The descriptor is readable
// exactly while a non-blocking call would answer something, and becomes so on a cancel
// too, so Cancel, Close and the stream's ctx (which all cancel) wake the waiter at once.
//
// The descriptor belongs to the C stream; os.NewFile would close what it is given, so
// the netpoller gets a dup of it (close-on-exec), which the handle closes — taking it
// out of the netpoller — before panto_stream_free closes the library's. It is asked for
// on the first wait only: a stream whose events are always ready never makes one.
//
// Without a descriptor (a platform without them, the process out of descriptors) a Next
// waits inside the library, bounded: at most MaxBlockedWaits goroutines wait there at
// once, each holding a slot; the others wait in Go, on the slots, holding no thread. A
// slot is held for one wait of at most waitSliceMS and given back after it whenever
// another goroutine waits for one, so every waiting stream gets its turn (a stream whose
// events are ready takes them without a slot). Cancel, Close and the stream's ctx wake a
// goroutine waiting for a slot at once too.

// Short calls are bounded too. A goroutine in a cgo call keeps its thread, and when the
// call outlasts a scheduler tick (20 µs) while goroutines wait to run — a call that
// meets a lock held by a thread the OS preempted, or is preempted itself — Go gives its
// P to another thread, starting one if none is idle. Thousands of streams taking their
// events at once on a loaded machine would so grow the threads well past what the
// process needs (137 for 2,000 streams, measured). At most callSlots goroutines are in
// the library's short calls at once (the non-blocking polls, making the descriptor);
// the others wait in Go for a moment, holding no thread. Calls that may block (freeing
// a running stream waits for its turn to stop, a wait inside the library) take one of
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

// calls holds a token per goroutine inside a short library call (see above).
var calls = make(chan struct{}, 2*runtime.GOMAXPROCS(0)+2)

// poll takes what the library has ready for the stream, never waiting: a next call's
// answer, PANTO_PENDING if nothing is.
func (h *streamHandle) poll() C.PantoStatus {
	calls <- struct{}{}
	st := C.panto_next_event_timeout(h.p, h.ev, 0)
	<-calls
	return st
}

// blocking runs f, a library call that may block, holding a MaxBlockedWaits slot.
func blocking(f func()) {
	w := slots.Load()
	w.acquire(nil)
	defer w.release()
	f()
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
// failure, a cancel) and takes it into h.ev: a next call's answer, or PANTO_PENDING when
// the wait ended with nothing taken (the caller polls and waits again). The caller holds
// h.mu's read lock and is the stream's one consumer (next is serialized), and has found
// nothing ready.
func (h *streamHandle) wait() C.PantoStatus {
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	if f := h.readiness(); f != nil {
		if st, ok := h.waitReadable(f); ok {
			return st
		}
	}
	return h.waitInLibrary()
}

// readiness returns the netpoller's file for the stream's readiness descriptor, made on
// the first call; nil when there is none to be had (then never asked again).
func (h *streamHandle) readiness() *os.File {
	if h.rfile != nil || h.rfailed || noReadiness.Load() {
		return h.rfile
	}
	var fd C.int64_t
	calls <- struct{}{}
	ok := C.panto_stream_readiness_fd(h.p, &fd) == C.PANTO_OK
	<-calls
	if ok {
		h.rfile = pollable(int64(fd))
	}
	h.rfailed = h.rfile == nil
	return h.rfile
}

// waitReadable parks the goroutine in the netpoller until the descriptor is readable,
// taking what the library has then. False if the netpoller cannot wait on it (the
// handle then waits in the library from now on).
func (h *streamHandle) waitReadable(f *os.File) (C.PantoStatus, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		h.rfailed = true
		return C.PANTO_PENDING, false
	}
	st := C.PantoStatus(C.PANTO_PENDING)
	// The function runs at once, then each time the descriptor turns readable, until it
	// returns true. Go's netpoller is edge-triggered: it wakes a waiter only when the
	// descriptor turns readable, and Read forgets an edge that came before it started
	// (it resets the descriptor's readiness first). So the function takes what is ready
	// on its first run too, after that reset: the library never answers PANTO_PENDING
	// with the descriptor left readable (what arrived while it looked is taken
	// instead), so after a PENDING here the next hand-off makes an edge Read sees.
	err = rc.Read(func(uintptr) bool {
		st = h.poll()
		return st != C.PANTO_PENDING
	})
	if err != nil && st == C.PANTO_PENDING {
		h.rfailed = true
		return st, false
	}
	return st, true
}

// closeReadiness takes the descriptor out of the netpoller and closes the dup (under
// the write lock, before the C stream is freed).
func (h *streamHandle) closeReadiness() {
	if h.rfile != nil {
		_ = h.rfile.Close()
		h.rfile = nil
	}
}

// waitInLibrary waits inside the library holding one of the slots (see above).
func (h *streamHandle) waitInLibrary() C.PantoStatus {
	w := slots.Load()
	if !w.acquire(h.cancelled) {
		return C.PANTO_PENDING // the poll that follows reports the cancel
	}
	defer w.release()
	for {
		st := C.panto_next_event_timeout(h.p, h.ev, waitSliceMS)
		if st != C.PANTO_PENDING || w.waiters.Load() > 0 {
			return st
		}
	}
}
