package panto

/*
#include "panto.h"
*/
import "C"

import (
	"sync/atomic"
)

// How a Next waits for the library.
//
// A goroutine inside a blocking cgo call holds its OS thread for as long as the call
// lasts, and a Go program dies past 10,000 threads (runtime/debug.SetMaxThreads): ten
// thousand streams each waiting in the library would kill it. So at most MaxBlockedWaits
// goroutines wait inside the library at once, each holding a slot; the others wait in
// Go, on the slots, holding no thread. A slot is held for one wait of at most
// waitSliceMS and given back after it whenever another goroutine waits for one, so
// every waiting stream gets its turn and none can keep another from seeing its events
// for good (a stream whose events are ready takes them without a slot: Next polls
// first). Cancel, Close and the stream's ctx wake a goroutine waiting for a slot at
// once.

// MaxBlockedWaits is the most goroutines that wait inside the library at once, each on
// an OS thread of its own; more concurrent Next calls wait in Go for a turn.
const MaxBlockedWaits = 1024

// waitSliceMS bounds one wait inside the library while others wait for a slot.
const waitSliceMS = 50

type waitSlots struct {
	ch      chan struct{}
	waiters atomic.Int64 // goroutines waiting in Go for a slot
}

var slots atomic.Pointer[waitSlots]

func init() { slots.Store(newWaitSlots(MaxBlockedWaits)) }

func newWaitSlots(n int) *waitSlots { return &waitSlots{ch: make(chan struct{}, n)} }

// wait waits until the library has something for the stream (an event, the end, a
// failure, a cancel) and takes it into h.ev: panto_next_event's answer, or PANTO_PENDING
// when a wait slice ended with nothing (the caller polls and waits again). The caller
// holds h.mu's read lock and has polled already.
func (h *streamHandle) wait() C.PantoStatus {
	w := slots.Load()
	select {
	case w.ch <- struct{}{}:
	default:
		w.waiters.Add(1)
		select {
		case w.ch <- struct{}{}:
			w.waiters.Add(-1)
		case <-h.cancelled:
			w.waiters.Add(-1)
			return C.PANTO_PENDING // the poll that follows reports the cancel
		}
	}
	defer func() { <-w.ch }()
	for {
		st := C.panto_next_event_timeout(h.p, h.ev, waitSliceMS)
		if st != C.PANTO_PENDING || w.waiters.Load() > 0 {
			return st
		}
	}
}
