package panto

/*
#include "panto.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"unsafe"
)

// Durable turns: checkpoints, resuming a turn (in this process or another) with answers
// to its deferred calls, and steering a running turn. See docs/durable-turns.md.

// StopDeferred is MessageComplete.StopReason of a turn that paused for deferred calls
// (MessageComplete.Deferred lists them; DeferredCalls decodes the list). The turn goes
// on with Agent.Resume on its checkpoint.
const StopDeferred = "deferred"

// Why a call is deferred: DeferredCall.Reason.
const (
	// DeferApproval: the tool has Tool.NeedsApproval; approve or reject it.
	DeferApproval = "approval"
	// DeferExternal: the tool has Tool.External; give its result.
	DeferExternal = "external"
	// DeferDeferred: the turn had TurnOptions.DeferTools; approve (run it), reject, or
	// give its result.
	DeferDeferred = "deferred"
)

// DeferredCall is a call a paused turn waits for (MessageComplete.DeferredCalls).
type DeferredCall struct {
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Reason    string          `json:"reason"` // DeferApproval, DeferExternal or DeferDeferred
}

// DeferredCalls decodes Deferred: the calls the turn paused for, in call order; nil
// unless StopReason is StopDeferred.
func (e *MessageComplete) DeferredCalls() ([]DeferredCall, error) {
	if len(e.Deferred) == 0 {
		return nil, nil
	}
	var calls []DeferredCall
	if err := json.Unmarshal(e.Deferred, &calls); err != nil {
		return nil, &Error{Kind: KindInternal, Message: "unreadable deferred calls: " + err.Error()}
	}
	return calls, nil
}

// Checkpoint is a turn at a step boundary: the versioned JSON document
// {"panto_checkpoint": 1, …} that Agent.Resume continues, in this process or another.
// It is the JSON text itself: store it as bytes (os.WriteFile(path, cp, 0o600)), read it
// back with Checkpoint(data); as a field of a struct, json.Marshal writes it as the JSON
// object it is (not base64). It holds no API key, header value or MCP secret, but it
// holds the turn's conversation, attachments by value, so it is as large as that. A
// library reads the checkpoints of its own and every older version.
type Checkpoint []byte

// String returns the JSON text.
func (c Checkpoint) String() string { return string(c) }

// MarshalJSON writes the document as it is (null for an empty Checkpoint).
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	if len(c) == 0 {
		return []byte("null"), nil
	}
	return append([]byte(nil), c...), nil
}

// UnmarshalJSON keeps the JSON text as it is (null: an empty Checkpoint).
func (c *Checkpoint) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*c = nil
		return nil
	}
	*c = append((*c)[:0], data...)
	return nil
}

// Answers answers the deferred calls of a paused turn, by call id, for Agent.Resume.
// The zero value answers nothing (a resume that only continues). Each method returns a
// new Answers with one more answer, so they chain:
//
//	answers := panto.Answers{}.Approve("call_1").Reject("call_2", "not on weekends")
type Answers struct{ m map[string]any }

func (a Answers) with(callID string, answer any) Answers {
	m := make(map[string]any, len(a.m)+1)
	for k, v := range a.m {
		m[k] = v
	}
	m[callID] = answer
	return Answers{m: m}
}

// Approve runs callID: a call of a Tool with NeedsApproval (it then runs as the tool
// does: its Func, or a ToolCallStart to answer with SubmitToolResult), or one the turn
// deferred (DeferTools).
func (a Answers) Approve(callID string) Answers {
	return a.with(callID, map[string]bool{"approve": true})
}

// Reject does not run callID: the model reads an error result saying it was rejected,
// and reason.
func (a Answers) Reject(callID, reason string) Answers {
	return a.with(callID, map[string]string{"reject": reason})
}

// Result gives callID's result: the output the model reads, an error result if isError.
// For a call of an External tool, or one the turn deferred (DeferTools).
func (a Answers) Result(callID, output string, isError bool) Answers {
	return a.with(callID, map[string]any{"output": strings.ToValidUTF8(output, "\uFFFD"), "is_error": isError})
}

// Len is the number of calls answered.
func (a Answers) Len() int { return len(a.m) }

// Checkpoint returns the turn at its latest step boundary. Once Next has returned the
// ToolResult of a call, or the first event after a response's MessageEnd, the
// checkpoint includes that result or that response. After the stream's end (its
// MessageComplete, a failure, a cancel, Close) it is the last boundary the turn reached,
// kept by the Stream (the library side is freed then): so the checkpoint of a turn that
// paused (StopDeferred) is what Agent.Resume continues. Before the turn has started on
// panto's worker threads there is none yet: (nil, nil). Any goroutine, also while
// another one is in Next.
func (s *Stream) Checkpoint() (Checkpoint, error) {
	st := s.state()
	if st == nil {
		return nil, errNilStream()
	}
	defer runtime.KeepAlive(s)
	h := st.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.p == nil {
		return h.final, nil
	}
	return h.checkpoint()
}

// checkpoint asks the library for the live stream's checkpoint (h.p is not nil, a lock
// of h.mu is held).
func (h *streamHandle) checkpoint() (Checkpoint, error) {
	var s C.PantoString
	var cerr *C.PantoError
	var st C.PantoStatus
	// Serializing the conversation is the one slow part.
	short(func() { st = C.panto_stream_checkpoint(h.p, &s, &cerr) })
	switch st {
	case C.PANTO_OK:
		defer C.panto_string_free(&s)
		return Checkpoint(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len))), nil
	case C.PANTO_PENDING:
		return nil, nil
	default:
		return nil, takeError(cerr)
	}
}

// takeUndelivered asks the library for the steering messages the turn did not deliver
// (h.p is not nil, a lock of h.mu is held).
func (h *streamHandle) takeUndelivered() ([][]json.RawMessage, error) {
	var s C.PantoString
	var cerr *C.PantoError
	var st C.PantoStatus
	short(func() { st = C.panto_stream_take_undelivered(h.p, &s, &cerr) })
	if st != C.PANTO_OK {
		return nil, takeError(cerr)
	}
	defer C.panto_string_free(&s)
	var out [][]json.RawMessage
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), &out); err != nil {
		return nil, &Error{Kind: KindInternal, Message: "unreadable undelivered messages: " + err.Error()}
	}
	return out, nil
}

// keepFinal records what the stream's caller may still ask for once the library side
// is freed: the last checkpoint and the undelivered steering messages (h.p is not nil,
// the write lock of h.mu is held).
func (h *streamHandle) keepFinal() {
	if cp, err := h.checkpoint(); err == nil {
		h.final = cp
	}
	if left, err := h.takeUndelivered(); err == nil && len(left) > 0 {
		h.finalMu.Lock()
		h.undelivered = append(h.undelivered, left...)
		h.finalMu.Unlock()
	}
}

// Steer queues a user message into the running turn: text, or text and attachments in
// order (Text, ImageFile, …; a file is read during the call). It is delivered at the
// next step boundary — after the current step's tool results, before the next request —
// and Next returns a SteeringDelivered then; if the model's message would have ended the
// turn, the turn goes on so that the model answers it. Any goroutine, also while another
// one is in Next. The caller's parts are neither changed nor kept. An *Error of
// KindConfig once the turn has ended (the message was not queued), or for a part the
// library refuses; one matching ErrClosed after Close ended the stream before its end.
func (s *Stream) Steer(text string, parts ...Part) error {
	st := s.state()
	if st == nil {
		return errNilStream()
	}
	defer runtime.KeepAlive(s)
	var js []byte
	if len(parts) > 0 {
		all := parts
		if text != "" {
			all = append([]Part{Text(text)}, parts...)
		}
		var err error
		if js, err = json.Marshal(validUTF8(all)); err != nil {
			return &Error{Kind: KindConfig, Message: "cannot encode the parts: " + err.Error()}
		}
		text = ""
	}
	h := st.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.p == nil {
		if h.end != nil {
			return &Error{Kind: KindConfig, Message: "the turn has ended: the message was not queued"}
		}
		return closedError("the stream")
	}
	in, n := cString(strings.ToValidUTF8(text, "\uFFFD"))
	var j *C.char
	var jn C.size_t
	if js != nil {
		j, jn = cString(string(js))
	}
	var cerr *C.PantoError
	var status C.PantoStatus
	short(func() { status = C.panto_stream_steer(h.p, in, n, j, jn, &cerr) })
	if status != C.PANTO_OK {
		return takeError(cerr)
	}
	return nil
}

// Undelivered returns the messages Steer queued that the turn did not deliver because
// it ended first (it failed, was cancelled, paused or reached max_steps), oldest first,
// each as its parts in the saved history's block form (e.g. {"text":"…","type":"text"}).
// Each message is returned once. While the turn runs it returns none (a queued message
// may still be delivered). Any goroutine.
func (s *Stream) Undelivered() ([][]json.RawMessage, error) {
	st := s.state()
	if st == nil {
		return nil, errNilStream()
	}
	defer runtime.KeepAlive(s)
	h := st.h
	h.mu.RLock()
	defer h.mu.RUnlock()
	h.finalMu.Lock()
	left := h.undelivered
	h.undelivered = nil
	h.finalMu.Unlock()
	if h.p == nil {
		return left, nil
	}
	more, err := h.takeUndelivered()
	return append(left, more...), err
}

// Resume continues the turn cp holds, with answers to its deferred calls, as a new
// stream of this agent (read it like one from Stream: Next, Iter, All or Chan). The
// agent's history becomes the checkpoint's conversation, then grows as the turn goes on,
// so that afterwards it equals what an uninterrupted turn would have left. A model
// response the checkpoint holds is never requested again; a call with no result in it
// runs again (tools are at-least-once). A deferred call left unanswered stays deferred:
// the turn pauses again. The resumed stream's MessageComplete reports the whole turn.
//
// A checkpoint that is not one (garbage, truncated, tampered with), one of a newer
// panto, answers that do not fit it (a call that is not deferred, an approval of an
// external call, a result for one that needs approval), or a checkpoint past this
// agent's limits is an *Error of KindConfig naming the problem, and nothing is sent; a
// tool the agent lacks fails the stream's first Next with KindConfig. Busy, ctx and the
// tools with a Func behave as for Stream.
func (a *Agent) Resume(ctx context.Context, cp Checkpoint, answers Answers) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: KindCancelled, Message: "the context was done before the turn resumed", cause: err}
	}
	var ajs []byte
	if len(answers.m) > 0 {
		var err error
		if ajs, err = json.Marshal(answers.m); err != nil {
			return nil, &Error{Kind: KindConfig, Message: "cannot encode the answers: " + err.Error()}
		}
	}
	h, uerr := a.use()
	if uerr != nil {
		return nil, uerr
	}
	defer h.mu.RUnlock()
	c, cn := cString(string(cp))
	if c == nil { // the library takes no NULL checkpoint; an empty one is refused as such
		c, cn = cString(" ")
	}
	var ap *C.char
	var an C.size_t
	if ajs != nil {
		ap, an = cString(string(ajs))
	}
	var out *C.PantoStream
	if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
		return C.panto_agent_resume(a.h.p, c, cn, ap, an, &out, cerr)
	}); e != nil {
		return nil, e
	}
	return a.observed(a.remember(newStream(ctx, out, a.tools)), "", true), nil
}
