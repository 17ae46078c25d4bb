package panto

/*
#include <stdlib.h>
#include <string.h>
#include "panto.h"

static PantoEvent *panto_go_event_new(void) {
	PantoEvent *ev = calloc(1, sizeof(PantoEvent));
	if (ev) ev->struct_size = (uint32_t)sizeof(PantoEvent);
	return ev;
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// canonicalHook, when set (by tests), receives the library's canonical JSON of every
// event Next returns.
var canonicalHook atomic.Pointer[canonicalRecorder]

type canonicalRecorder struct{ fn func(string) }

// liveStreams counts C stream handles not yet freed (tests check it returns to 0).
var liveStreams atomic.Int64

// streamHandle owns the C stream. It is separate from Stream so that a cleanup attached
// to an unreachable Stream can free it, and so tool goroutines can answer through it
// without keeping the Stream alive.
//
// The read lock covers every call that may run concurrently with a blocked next
// (next itself, cancel, submit, diagnostics); the write lock covers free, which the C
// contract forbids racing any other call. Close therefore cancels first (waking a
// blocked next, which drops its read lock) and then frees.
//
// The library decides when the stream has ended (it delivered MessageComplete, after
// which it answers PANTO_DONE, or PANTO_ERROR with the same failure on every later
// call). Once it has said so the C stream is freed, and the handle answers in its place
// with what it said last (end).
type streamHandle struct {
	mu   sync.RWMutex
	p    *C.PantoStream
	ev   *C.PantoEvent // in C memory: the library writes C pointers into it
	stop func() bool   // unregisters the ctx watcher
	done context.CancelFunc
	end  error // ErrDone or the failure Next returned, once the stream was freed

	cancelOnce sync.Once
	cancelled  chan struct{} // closed by cancel: wakes a Next waiting for a slot (wait.go)

	// The stream's token in the process's ready set (wait.go), 0 until its first wait:
	// set by the consumer under the read lock, taken out of the set's table under the
	// write lock before the stream is freed. ready is how the dispatcher wakes it.
	token   uint64
	ready   chan struct{}
	rfailed bool         // no set to wait on: wait in the library
	waiting atomic.Int32 // Nexts waiting (tests)

	// The library's last answer was an event with nothing else ready (panto_next_events'
	// more was false): the next Next waits before it polls. Only the consumer (under the
	// read lock, one Next at a time) reads and writes it.
	dry bool

	// What Checkpoint and Undelivered answer once the C stream is freed (durable.go):
	// kept by finish just before it frees it. final is written under the write lock;
	// undelivered under finalMu, which Undelivered takes under the read lock.
	final       Checkpoint
	finalMu     sync.Mutex
	undelivered [][]json.RawMessage
}

func (h *streamHandle) cancel() {
	h.cancelOnce.Do(func() { close(h.cancelled) })
	h.mu.RLock()
	if h.p != nil {
		short(func() { C.panto_stream_cancel(h.p) })
	}
	h.mu.RUnlock()
}

// release cancels and frees the C stream; idempotent.
func (h *streamHandle) release() { h.finish(nil) }

// finish frees the C stream after Next returned end (ErrDone or a failure), which the
// handle then answers in its place; with end nil, it is release. It returns what the
// handle answers from now on: the first end recorded, so a failure repeats as the same
// value.
func (h *streamHandle) finish(end error) error {
	h.stop()
	h.done()
	h.cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end == nil {
		h.end = end
	}
	if h.p != nil {
		h.detach()
		h.keepFinal()
		p := h.p
		// Freeing a running stream waits for its turn to stop (promptly: it was just
		// cancelled); a finished one's turn is already over.
		ev := h.ev
		short(func() {
			C.panto_stream_free(p)
			C.free(unsafe.Pointer(ev))
		})
		h.p, h.ev = nil, nil
		liveStreams.Add(-1)
	}
	return h.end
}

// submit answers a host-tool call. The library takes only UTF-8, so invalid bytes in
// output (a tool's output, error or panic text may hold any bytes) become U+FFFD, as
// strings.ToValidUTF8 writes them; refusing them would leave the call unanswered until
// its timeout.
func (h *streamHandle) submit(callID, output string, isError bool) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.p == nil {
		return closedError("the stream")
	}
	id, idn := cString(callID)
	out, outn := cString(strings.ToValidUTF8(output, "\uFFFD"))
	var cerr *C.PantoError
	var st C.PantoStatus
	short(func() { st = C.panto_stream_submit_tool_result(h.p, id, idn, out, outn, C.bool(isError), &cerr) })
	if st != C.PANTO_OK {
		return takeError(cerr)
	}
	return nil
}

// submitParts answers a host-tool call with text and image parts, sent in the input
// form the C ABI takes (panto_stream_submit_tool_result_parts).
func (h *streamHandle) submitParts(callID string, parts []Part, isError bool) error {
	js, err := json.Marshal(validUTF8(parts))
	if err != nil {
		return &Error{Kind: KindTool, Message: "cannot encode the parts: " + err.Error()}
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.p == nil {
		return closedError("the stream")
	}
	id, idn := cString(callID)
	cjs, n := cString(string(js))
	var cerr *C.PantoError
	var st C.PantoStatus
	// Reading a file named by a part is the one slow thing this call may do.
	short(func() {
		st = C.panto_stream_submit_tool_result_parts(h.p, id, idn, cjs, n, C.bool(isError), &cerr)
	})
	if st != C.PANTO_OK {
		return takeError(cerr)
	}
	return nil
}

// Stream is one turn as a pull stream of events. Read it with exactly one of Next, Iter,
// All or Chan. Next must not be called from two goroutines at once (it is serialized);
// Cancel, Close and SubmitToolResult may be called from any goroutine at any time. A
// Stream that becomes unreachable without Close is still freed, later, by the garbage
// collector; Close frees it at once.
//
// A Stream is only the caller's reference to the turn (stream): nothing panto runs —
// the goroutine of Chan, the ctx watcher, tool goroutines — refers to it, so the
// garbage collector can tell when the caller has dropped it.
//
// The methods of a nil or zero *Stream do not panic: Close and Cancel do nothing, and
// the others fail with an *Error of kind config (so `defer s.Close()` may come before
// the check of Agent.Stream's error).
type Stream struct{ s *stream }

// stream is the state of one turn shared by the Stream and what runs for it.
type stream struct {
	h       *streamHandle
	userCtx context.Context
	toolCtx context.Context
	tools   map[string]Tool

	// The Go tools running, by call id: each one's ctx is cancelled when the library
	// stops waiting for its call (see next).
	toolsMu sync.Mutex
	running map[string]context.CancelCauseFunc

	nextMu sync.Mutex

	errMu sync.Mutex
	err   error

	closeOnce sync.Once
	closedCh  chan struct{}
	closed    atomic.Bool
	used      atomic.Bool

	// The turn's spans when the agent is instrumented (Agent.Instrument).
	obs *observer
}

func newStream(ctx context.Context, p *C.PantoStream, tools map[string]Tool) *Stream {
	toolCtx, done := context.WithCancel(ctx)
	var ev *C.PantoEvent
	short(func() { ev = C.panto_go_event_new() })
	h := &streamHandle{p: p, ev: ev, done: done, cancelled: make(chan struct{}), ready: make(chan struct{}, 1)}
	liveStreams.Add(1)
	h.stop = context.AfterFunc(ctx, h.cancel)
	st := &stream{h: h, userCtx: ctx, toolCtx: toolCtx, tools: tools, closedCh: make(chan struct{})}
	s := &Stream{s: st}
	// Dropped without Close: close it then (which also ends a Chan goroutine waiting to
	// send to a receiver that is gone).
	runtime.AddCleanup(s, func(st *stream) { st.close() }, st)
	return s
}

// Next returns the next event of the turn. After MessageComplete it returns (nil, ErrDone),
// then again on every later call. A failure is an *Error (match it with errors.Is and
// the Err* sentinels); after one, every later call returns it again. Next blocks until
// an event arrives, the turn fails, or the stream is cancelled (Cancel, Close, or the
// stream's ctx). Tool calls of Tools with a Func are started here, in goroutines.
func (s *Stream) Next() (Event, error) {
	st := s.state()
	if st == nil {
		return nil, errNilStream()
	}
	defer runtime.KeepAlive(s)
	return st.next()
}

// state is the stream's state, nil for a nil or zero *Stream (whose methods then do
// nothing, or fail with errNilStream, rather than panic: `defer s.Close()` may come
// before the error check of Agent.Stream).
func (s *Stream) state() *stream {
	if s == nil {
		return nil
	}
	return s.s
}

func errNilStream() *Error { return nilError("*Stream", "Agent.Stream") }

func (s *stream) next() (Event, error) {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	ev, err := s.pull()
	if err != nil {
		// The library says the stream has ended: free it, and answer this from now on.
		err = s.h.finish(err)
		if s.obs != nil {
			s.obs.end(err)
		}
		return nil, err
	}
	if s.obs != nil {
		s.obs.observe(ev)
	}
	if _, ok := ev.(*MessageComplete); ok {
		// The last event (the contract's rule 1): the library has already ended the
		// turn on its side (its task, socket and the agent's slot). Free the C stream
		// now too, so a stream read this far holds nothing whether or not it is read
		// on to ErrDone or closed; from here the handle answers ErrDone.
		s.h.finish(ErrDone)
	}
	switch e := ev.(type) {
	case *ToolCallStart:
		if t, ok := s.tools[e.Name]; ok && e.Host {
			ctx, cancel := context.WithCancelCause(s.toolCtx)
			s.toolsMu.Lock()
			if s.running == nil {
				s.running = map[string]context.CancelCauseFunc{}
			}
			s.running[e.CallID] = cancel
			s.toolsMu.Unlock()
			go s.runTool(ctx, t, e.CallID, e.Arguments)
		}
	case *ToolResult:
		// The result of a call whose Go function is still running: the library gave
		// up on it (tool_timeout_ms passed) and told the model so. The function's ctx
		// ends now rather than with the turn.
		s.toolsMu.Lock()
		cancel := s.running[e.CallID]
		delete(s.running, e.CallID)
		s.toolsMu.Unlock()
		if cancel != nil {
			cancel(&Error{Kind: KindTimeout, Message: e.Output})
		}
	}
	return ev, nil
}

// pull takes the library's next answer: an event, ErrDone, or a failure. A freed stream
// answers what it answered last, or, closed before it ended, a cancelled *Error.
func (s *stream) pull() (Event, error) {
	h := s.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.p == nil {
		if h.end != nil {
			return nil, h.end
		}
		return nil, closedError("the stream")
	}
	for {
		st := C.PantoStatus(C.PANTO_PENDING)
		if !h.dry {
			st = h.poll() // what is ready, never waiting
		}
		if st == C.PANTO_PENDING {
			// Nothing ready (this poll said so, or the last one that delivered an
			// event did): the stream's readiness reports the next arrival.
			h.dry = false
			if st = h.wait(); st == C.PANTO_PENDING {
				continue
			}
		}
		switch st {
		case C.PANTO_EVENT:
			if ev := convert(h.ev); ev != nil {
				if r := canonicalHook.Load(); r != nil {
					var js C.PantoStr
					if C.panto_event_to_json(h.ev, &js) == C.PANTO_OK {
						r.fn(goStr(js))
					}
				}
				return ev, nil
			}
			// A kind added by a newer library: skip it.
		case C.PANTO_DONE:
			return nil, ErrDone
		default:
			return nil, s.failure(h.ev)
		}
	}
}

func (s *stream) failure(ev *C.PantoEvent) *Error {
	if ev.kind != C.PANTO_EV_ERROR {
		return &Error{Kind: KindInternal, Message: "panto_next_event failed without an error payload"}
	}
	p := (*C.PantoErrorInfo)(unsafe.Pointer(&ev.payload))
	e := &Error{
		Kind:         kindOf(uint32(p.kind)),
		Message:      goStr(p.message),
		Status:       int(p.status),
		Retryable:    bool(p.retryable),
		ProviderCode: goStr(p.provider_code),
		RetryAfter:   millis(uint64(p.retry_after_ms)),
		Output:       goStr(p.output),
	}
	if e.Kind == KindCancelled {
		if err := s.userCtx.Err(); err != nil {
			e.cause = err
		} else if s.closed.Load() {
			e.closed = true
		}
	}
	return e
}

// runTool runs one Go tool and answers its call. An answer the library refuses is
// not dropped: the call is answered instead with an error result saying why, which the
// model reads. Only when that is refused too is nobody waiting for the call any more
// (the library gave up after tool_timeout_ms and told the model so, or the stream
// ended), and there is no one left to tell.
func (s *stream) runTool(ctx context.Context, t Tool, callID string, args json.RawMessage) {
	var out string
	var parts []Part
	var isErr bool
	if t.Func == nil {
		parts, out, isErr = callPartsTool(ctx, t, args)
	} else {
		out, isErr = callTool(ctx, t, args)
	}
	s.toolsMu.Lock()
	if cancel := s.running[callID]; cancel != nil {
		delete(s.running, callID)
		defer cancel(nil) // after the answer: the ctx is the function's, which returned
	}
	s.toolsMu.Unlock()
	var err error
	if parts != nil {
		err = s.h.submitParts(callID, parts, isErr)
	} else {
		err = s.h.submit(callID, out, isErr)
	}
	if err == nil || errors.Is(err, ErrClosed) {
		return
	}
	_ = s.h.submit(callID, fmt.Sprintf("the result of tool %s was refused: %v", t.Name, err), true)
}

func callTool(ctx context.Context, t Tool, args json.RawMessage) (out string, isErr bool) {
	defer func() {
		if r := recover(); r != nil {
			out, isErr = fmt.Sprintf("tool %s panicked: %v", t.Name, r), true
		}
	}()
	out, err := t.Func(ctx, args)
	if err != nil {
		return err.Error(), true
	}
	return out, false
}

// callPartsTool runs a PartsFunc: its parts (nil when it failed: out then says why).
func callPartsTool(ctx context.Context, t Tool, args json.RawMessage) (parts []Part, out string, isErr bool) {
	defer func() {
		if r := recover(); r != nil {
			parts, out, isErr = nil, fmt.Sprintf("tool %s panicked: %v", t.Name, r), true
		}
	}()
	parts, err := t.PartsFunc(ctx, args)
	if err != nil {
		return nil, err.Error(), true
	}
	if parts == nil {
		parts = []Part{}
	}
	return parts, "", false
}

// SubmitToolParts answers the host tool call callID with text and image parts in order
// (Text, ImageBytes, ImageFile, ImageURL): the model reads the text parts joined by
// newlines and sees the images. A part the library refuses (a document, an unreadable
// file: the message names it) and an id that is not waiting for a result are an *Error
// of kind tool, and the call stays unanswered. Safe from any goroutine, also during a
// blocked Next.
func (s *Stream) SubmitToolParts(callID string, parts []Part, isError bool) error {
	st := s.state()
	if st == nil {
		return errNilStream()
	}
	return st.h.submitParts(callID, append([]Part(nil), parts...), isError)
}

// SubmitToolResult answers the host tool call callID (from a ToolCallStart with Host
// set whose Tool has no Func). Invalid UTF-8 in output is replaced by U+FFFD. An id
// that is not waiting for a result is an *Error of kind tool; the stream goes on. Safe
// from any goroutine, also during a blocked Next.
func (s *Stream) SubmitToolResult(callID, output string, isError bool) error {
	st := s.state()
	if st == nil {
		return errNilStream()
	}
	return st.h.submit(callID, output, isError)
}

// Cancel cancels the turn: a blocked Next wakes up and it, or the next one, fails with
// kind cancelled (unless MessageComplete was already delivered). Idempotent; any
// goroutine.
func (s *Stream) Cancel() {
	if st := s.state(); st != nil {
		st.h.cancel()
	}
}

// Close cancels the turn if it is still running and frees the stream. Idempotent and
// safe concurrently with a blocked Next (which then returns a cancelled *Error that
// also matches ErrClosed). Always returns nil, so `defer s.Close()` is fine.
func (s *Stream) Close() error {
	if st := s.state(); st != nil {
		st.close()
	}
	return nil
}

func (s *stream) close() {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closedCh)
	})
	s.h.release()
	if s.obs != nil {
		s.obs.end(nil)
	}
}

// Err returns the failure that ended Iter, All or Chan (All also yields it last): nil
// after a clean end or when the loop stopped early (break, return); an error matching
// ErrClosed when Close ended the turn before its end (from another goroutine while the
// loop waited, or Close with Chan's goroutine still sending), so that a loop ended by
// Close is never taken for a complete turn.
func (s *Stream) Err() error {
	st := s.state()
	if st == nil {
		return errNilStream()
	}
	st.errMu.Lock()
	defer st.errMu.Unlock()
	return st.err
}

func (s *stream) setErr(err error) {
	if err == ErrDone {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
}

// claim marks the stream as read by Iter, All or Chan; false if it already was (a
// stream is read once).
func (s *stream) claim() bool { return !s.used.Swap(true) }

// consume is the one loop under Iter, All and Chan, on a claimed stream: it hands every
// event to emit, in order, until the library reports the end (next returns ErrDone, right
// after MessageComplete) or a failure, or emit returns false; then it closes the stream
// and returns the failure (nil after the end or an early stop), also kept in Err.
func (s *stream) consume(emit func(Event) bool) error {
	defer s.close()
	for {
		ev, err := s.next()
		if err == ErrDone {
			return nil
		}
		if err != nil {
			s.setErr(err)
			return err
		}
		if !emit(ev) {
			return nil
		}
	}
}

// Iter returns the events as a range-over-func sequence, in the bufio.Scanner style:
// check Err after the loop. It ends right after yielding MessageComplete, or at a
// failure, and closes the stream however the loop ends (break included). A stream is
// read once: a second Iter, All or Chan yields nothing.
func (s *Stream) Iter() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		defer runtime.KeepAlive(s)
		if st := s.state(); st != nil && st.claim() {
			_ = st.consume(yield)
		}
	}
}

// All returns the events as (event, nil) pairs, then a failure, if any, as one last
// (nil, err) pair (also kept in Err). It ends after MessageComplete and closes the
// stream however the loop ends.
func (s *Stream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		defer runtime.KeepAlive(s)
		st := s.state()
		if st == nil {
			yield(nil, errNilStream())
			return
		}
		if !st.claim() {
			return
		}
		if err := st.consume(func(ev Event) bool { return yield(ev, nil) }); err != nil {
			yield(nil, err)
		}
	}
}

// Chan delivers the events on a channel from a goroutine. Every send waits for the
// receiver, the stream's ctx or Close, whichever comes first, so no event is dropped.
// The channel is closed at the end (after MessageComplete, at a failure, on ctx's end
// or Close) and the stream with it; Err then tells why. A receiver that stops early
// should Close the stream (or end its ctx), which ends the goroutine at once; the
// goroutine does not keep the Stream reachable, so a Stream dropped without that is
// closed when the garbage collector finds it unreachable, and the goroutine ends then.
// Prefer Iter or Next: they need no goroutine.
func (s *Stream) Chan() <-chan Event {
	ch := make(chan Event)
	st := s.state()
	if st == nil || !st.claim() {
		close(ch)
		return ch
	}
	// Only st from here: the goroutine must not refer to s.
	go func() {
		defer close(ch)
		_ = st.consume(func(ev Event) bool {
			select {
			case ch <- ev:
				return true
			case <-st.userCtx.Done():
				st.setErr(&Error{Kind: KindCancelled, Message: "the context ended while an event waited for its receiver", cause: st.userCtx.Err()})
				return false
			case <-st.closedCh:
				st.setErr(closedError("the stream"))
				return false
			}
		})
	}()
	return ch
}

// consumerWaiting reports whether a Next waits for the library's next answer (for
// tests): parked on the readiness descriptor, for a slot, or inside the library.
func (s *Stream) consumerWaiting() bool { return s.state().h.waiting.Load() > 0 }

// live reports whether the C stream is still allocated.
func (h *streamHandle) live() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.p != nil
}
