// Package panto embeds panto, an LLM agent runtime, in Go programs. An Agent holds one
// conversation with one provider; each input starts a turn, and the whole turn — the
// model's text, its tool calls, their results, further requests, until the model is
// done — is one pull Stream of events:
//
//	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", Tools: tools})
//	...
//	s, err := agent.Stream(ctx, "What is the weather in Paris?")
//	...
//	defer s.Close()
//	for ev := range s.Iter() {
//		if d, ok := ev.(*panto.ContentDelta); ok {
//			fmt.Print(d.Text)
//		}
//	}
//	if err := s.Err(); err != nil { ... }
//
// The stream contract is the same in every language panto supports: MessageComplete
// comes exactly once and last; failures are errors (an *Error), never events; Cancel
// and Close may be called from any goroutine at any time and wake a blocked Next.
//
// The package is a thin layer over the C ABI (libpanto, capi/include/panto.h) through
// cgo. The Rust core runs every turn on its own few worker threads. A Next with nothing
// to take parks its goroutine in Go's netpoller on the stream's readiness descriptor,
// as a goroutine reading a socket does: waiting streams hold no OS thread, so tens of
// thousands of them stay far from Go's limit of 10,000 threads. Where no descriptor can
// be had, a Next waits inside the library instead, on a thread, at most MaxBlockedWaits
// of them at once (the others wait in Go for their turn).
//
// # Linking
//
// By default the package links libpanto.a statically: build it with
// `cargo build --release -p panto-capi` (found in ../target/release relative to this
// directory) or point CGO_LDFLAGS at it, e.g. CGO_LDFLAGS=-L$CARGO_TARGET_DIR/release,
// or -L/usr/local/lib after scripts/install-capi.sh /usr/local. With the build tag
// panto_shared it links libpanto.so through pkg-config (`#cgo pkg-config: panto`).
// Two Rust static libraries in one program may clash on runtime symbols; use the shared
// library then.
package panto

/*
#cgo CFLAGS: -I${SRCDIR}/include
#include <stdlib.h>
#include "panto.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"go.opentelemetry.io/otel/attribute"
)

// Agent is one conversation with one provider configuration. Its methods may be called
// from any goroutine. An agent has at most one open Stream at a time. The methods of a
// nil or zero *Agent do not panic: Close does nothing, and the others fail with an
// *Error of kind config.
type Agent struct {
	h     *agentHandle
	tools map[string]Tool

	// The agent's latest stream, to tell a busy agent whose stream the caller dropped
	// without Close from one whose stream is in use (see reclaim).
	lastMu  sync.Mutex
	last    *stream
	lastRef weak.Pointer[Stream]

	// Instrument's providers, and what the spans say of the agent.
	instr        atomic.Pointer[instruments]
	model        string
	providerName string
	server       []attribute.KeyValue
}

type agentHandle struct {
	mu sync.RWMutex // read: any call; write: free
	p  *C.PantoAgent
}

// ABIVersion returns the C ABI version of the linked library, (major << 16) | minor.
func ABIVersion() uint32 { return uint32(C.panto_abi_version()) }

func goStr(s C.PantoStr) string {
	if s.ptr == nil || s.len == 0 {
		return ""
	}
	return C.GoStringN(s.ptr, C.int(s.len))
}

func goRaw(s C.PantoStr) json.RawMessage {
	if s.ptr == nil {
		return nil
	}
	return json.RawMessage(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)))
}

// cString passes s to the library as its (pointer, length) input: a pointer into the
// string's own bytes, which hold no Go pointers, so cgo allows it, and the library
// never keeps an input pointer after the call. No C allocation: a malloc and a free per
// argument were two more cgo calls per turn, unbounded (see wait.go, calls), and each
// one that a loaded machine preempted handed its P to a new thread.
func cString(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// takeError converts and frees a PantoError.
func takeError(e *C.PantoError) *Error {
	if e == nil {
		return &Error{Kind: KindInternal, Message: "the library reported a failure without details"}
	}
	defer C.panto_error_free(e)
	return &Error{
		Kind:         kindOf(uint32(C.panto_error_kind(e))),
		Message:      goStr(C.panto_error_message(e)),
		Status:       int(C.panto_error_status(e)),
		Retryable:    bool(C.panto_error_retryable(e)),
		ProviderCode: goStr(C.panto_error_provider_code(e)),
	}
}

func kindOf(code uint32) ErrorKind {
	if code >= 1 && int(code) <= len(errorKinds) {
		return errorKinds[code-1]
	}
	return ErrorKind(libErrorKindName(code))
}

// libErrorKindName and libEventKindName ask the library for its names (tests compare
// them with this package's lists).
func libErrorKindName(code uint32) string { return goStr(C.panto_error_kind_name(C.uint32_t(code))) }
func libEventKindName(code uint32) string { return goStr(C.panto_event_kind_name(C.uint32_t(code))) }

// NewAgent creates an agent from cfg. It does not touch the network. A bad
// configuration is an *Error of kind config naming the field and its key, e.g.
// "Config.Retry.MaxRetries (retry.max_retries): at most 100 (got 101)".
func NewAgent(cfg Config) (*Agent, error) {
	js, err := cfg.configJSON()
	if err != nil {
		return nil, &Error{Kind: KindConfig, Message: "cannot encode the configuration: " + err.Error()}
	}
	tools := map[string]Tool{}
	for _, t := range cfg.Tools {
		if t.Func != nil || t.PartsFunc != nil {
			tools[t.Name] = t
		}
	}
	cjs, n := cString(string(js))
	var out *C.PantoAgent
	var cerr *C.PantoError
	var st C.PantoStatus
	short(func() { st = C.panto_agent_new(cjs, n, &out, &cerr) })
	if st != C.PANTO_OK {
		return nil, withGoField(takeError(cerr), "Config", "")
	}
	if err := setMCPOAuth(out, &cfg); err != nil {
		short(func() { C.panto_agent_free(out) })
		return nil, err
	}
	if err := setMCPClientHooks(out, &cfg); err != nil {
		short(func() { C.panto_agent_free(out) })
		return nil, err
	}
	h := &agentHandle{p: out}
	a := &Agent{h: h, tools: tools, model: cfg.Model, providerName: otelProviderName(cfg.Provider, cfg.BaseURL),
		server: otelServer(cfg.Provider, cfg.BaseURL)}
	runtime.AddCleanup(a, func(h *agentHandle) { h.free() }, h)
	return a, nil
}

func (h *agentHandle) free() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.p != nil {
		p := h.p
		short(func() { C.panto_agent_free(p) })
		h.p = nil
	}
}

// Close frees the agent. Idempotent. Its open streams stay valid until they are
// closed; later calls on the agent return an error matching ErrClosed. Close on a nil
// or zero *Agent does nothing.
func (a *Agent) Close() error {
	if a != nil && a.h != nil {
		a.h.free()
	}
	return nil
}

// use read-locks the agent's handle for one call (the caller unlocks it), or says why
// there is none: a nil or zero *Agent, or one that was closed.
func (a *Agent) use() (*agentHandle, *Error) {
	if a == nil || a.h == nil {
		return nil, nilError("*Agent", "NewAgent")
	}
	a.h.mu.RLock()
	if a.h.p == nil {
		a.h.mu.RUnlock()
		return nil, closedError("the agent")
	}
	return a.h, nil
}

// SaveHistory returns the conversation (complete messages only) as versioned JSON,
// {"version":1,"messages":[…]}. Allowed during a turn.
func (a *Agent) SaveHistory() ([]byte, error) {
	h, uerr := a.use()
	if uerr != nil {
		return nil, uerr
	}
	defer h.mu.RUnlock()
	var s C.PantoString
	var cerr *C.PantoError
	if C.panto_agent_save_history(a.h.p, &s, &cerr) != C.PANTO_OK {
		return nil, takeError(cerr)
	}
	defer C.panto_string_free(&s)
	return C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), nil
}

// LoadHistory replaces the conversation with one saved by SaveHistory (validated; an
// *Error of kind busy while a stream of this agent is open).
func (a *Agent) LoadHistory(history []byte) error {
	h, uerr := a.use()
	if uerr != nil {
		return uerr
	}
	defer h.mu.RUnlock()
	p, n := cString(string(history))
	if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
		return C.panto_agent_load_history(a.h.p, p, n, cerr)
	}); e != nil {
		return e
	}
	return nil
}

// ClearHistory empties the conversation (an *Error of kind busy while a stream of this
// agent is open).
func (a *Agent) ClearHistory() error {
	h, uerr := a.use()
	if uerr != nil {
		return uerr
	}
	defer h.mu.RUnlock()
	if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
		return C.panto_agent_clear_history(a.h.p, cerr)
	}); e != nil {
		return e
	}
	return nil
}

// reclaim frees the agent's latest stream if the caller dropped it without Close and
// reports whether it did: called when the library says the agent is busy, so that the
// next call does not wait for the garbage collector to find the dropped stream. A
// Stream still reachable is left alone (the agent is busy then). One collection is
// forced at most, and only on this failure path.
func (a *Agent) reclaim() bool {
	a.lastMu.Lock()
	defer a.lastMu.Unlock()
	if a.last == nil || !a.last.h.live() {
		return false
	}
	if a.lastRef.Value() != nil {
		runtime.GC() // clears the weak pointer if the Stream is unreachable
		if a.lastRef.Value() != nil {
			return false
		}
	}
	a.last.close() // also what its cleanup will do; close is idempotent
	a.last = nil
	return true
}

// retryBusy runs call (a library call taking its PantoError out-pointer), and runs it
// once more if it failed with kind busy and reclaim freed a dropped stream.
func (a *Agent) retryBusy(call func(**C.PantoError) C.PantoStatus) *Error {
	var cerr *C.PantoError
	var st C.PantoStatus
	// Starting a turn is short, but 6,000 of them at once outlast scheduler ticks: bounded
	// like every library call (wait.go).
	short(func() { st = call(&cerr) })
	if st == C.PANTO_OK {
		return nil
	}
	e := takeError(cerr)
	if e.Kind != KindBusy || !a.reclaim() {
		return e
	}
	cerr = nil
	short(func() { st = call(&cerr) })
	if st == C.PANTO_OK {
		return nil
	}
	return takeError(cerr)
}

// remember records s as the agent's latest stream (see reclaim).
// observed gives the stream its observer when the agent is instrumented.
func (a *Agent) observed(s *Stream, input string, resumed bool) *Stream {
	if ins := a.instr.Load(); ins != nil {
		s.s.obs = ins.start(s.s.userCtx, input, resumed)
	}
	return s
}

func (a *Agent) remember(s *Stream) *Stream {
	a.lastMu.Lock()
	a.last, a.lastRef = s.s, weak.Make(s)
	a.lastMu.Unlock()
	return s
}

// Stream starts a turn with input as the user message. It returns at once; the request
// is sent on panto's worker threads and its failures come from Next. Cancelling ctx
// cancels the turn, waking a Next blocked in the library; the error Next then returns
// matches both ErrCancelled and ctx's error. Tools of the Config that have a Func run
// automatically, in goroutines given a context derived from ctx.
//
// Close the stream when done with it (Iter, All and Chan close it when they end; a stream
// is also done once Next has returned MessageComplete). While a stream is open, another
// Stream call fails with an *Error of kind busy, unless the caller has dropped that
// stream without Close (no reference to it is left): it is closed then, and the new turn
// starts. LoadHistory, ClearHistory and Compact do the same.
func (a *Agent) Stream(ctx context.Context, input string) (*Stream, error) {
	return a.StreamWith(ctx, input, TurnOptions{})
}

// TurnOptions apply to one turn only: Model and Reasoning replace the configuration's.
// Input, when not nil, is the turn's input as text and attachments in order (the input
// string must then be ""); see StreamParts.
//
// OutputSchema, when not nil, replaces Config.OutputSchema for this turn: a JSON Schema
// object (the turn's MessageComplete.Output is then the validated answer; see RunAs),
// or the JSON false for a plain text turn on an agent that has a schema.
//
// DeferTools pauses the turn at its tool calls instead of running them (StopDeferred,
// reason DeferDeferred): for engines that run each call as a step of their own and
// answer it with Agent.Resume (Answers.Result, or Approve to let panto run it).
type TurnOptions struct {
	Model        string
	Reasoning    *Reasoning
	Input        []Part
	OutputSchema json.RawMessage
	DeferTools   bool
}

// StreamParts starts a turn whose input is text and attachments, in the order the model
// reads them:
//
//	stream, err := agent.StreamParts(ctx, panto.Text("What is in this picture?"), panto.ImageFile("cat.png"))
//
// A part of no known type, an unreadable file (the error names its path), an
// attachment larger than max_message_bytes or a PDF by URL for provider openai is an
// *Error of KindConfig, and nothing is sent.
func (a *Agent) StreamParts(ctx context.Context, parts ...Part) (*Stream, error) {
	if parts == nil {
		parts = []Part{}
	}
	return a.StreamWith(ctx, "", TurnOptions{Input: parts})
}

// StreamWith is Stream with per-turn options.
func (a *Agent) StreamWith(ctx context.Context, input string, opts TurnOptions) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: KindCancelled, Message: "the context was done before the turn started", cause: err}
	}
	h, uerr := a.use()
	if uerr != nil {
		return nil, uerr
	}
	defer h.mu.RUnlock()
	in, n := cString(input)
	var out *C.PantoStream
	if opts.Model == "" && opts.Reasoning == nil && opts.Input == nil && opts.OutputSchema == nil && !opts.DeferTools {
		if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
			return C.panto_agent_stream(a.h.p, in, n, &out, cerr)
		}); e != nil {
			return nil, e
		}
		return a.observed(a.remember(newStream(ctx, out, a.tools)), input, false), nil
	}
	m := map[string]any{}
	if opts.Model != "" {
		m["model"] = opts.Model
	}
	if opts.Reasoning != nil {
		m["reasoning"] = opts.Reasoning
	}
	if opts.Input != nil {
		m["input"] = opts.Input
	}
	if opts.OutputSchema != nil {
		m["output_schema"] = opts.OutputSchema
	}
	if opts.DeferTools {
		m["defer_tools"] = true
	}
	js, err := json.Marshal(m)
	if err != nil {
		return nil, &Error{Kind: KindConfig, Message: "cannot encode the turn options: " + err.Error()}
	}
	o, on := cString(string(js))
	if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
		return C.panto_agent_stream_with(a.h.p, in, n, o, on, &out, cerr)
	}); e != nil {
		return nil, withGoField(e, "TurnOptions", "options.")
	}
	return a.observed(a.remember(newStream(ctx, out, a.tools)), input, false), nil
}

// CompactOptions configure Agent.Compact: keep the last KeepLast messages verbatim (0:
// 6); Model and Prompt (empty: the agent's model, the documented default prompt) write
// the summary.
type CompactOptions struct {
	KeepLast int    `json:"keep_last,omitempty"`
	Model    string `json:"model,omitempty"`
	Prompt   string `json:"prompt,omitempty"`
}

// CompactResult says what Agent.Compact did. Changed is false when nothing was older
// than the kept messages (no request is made then). TokensBefore comes from the
// provider's usage when the history has not changed since; TokensAfter (and
// TokensBefore otherwise) is estimated as bytes / 4.
type CompactResult struct {
	Changed        bool   `json:"changed"`
	MessagesBefore uint64 `json:"messages_before"`
	MessagesAfter  uint64 `json:"messages_after"`
	TokensBefore   uint64 `json:"tokens_before"`
	TokensAfter    uint64 `json:"tokens_after"`
}

// Compact summarizes the older part of the conversation into one synthetic exchange
// with the agent's provider, keeping the last messages verbatim (a tool call and its
// results are never separated). It blocks for the provider's answer, bounded by the
// configured timeouts and by ctx: when ctx is done the request is dropped and Compact
// returns an *Error of kind cancelled that also matches ctx's error (a ctx already done
// sends nothing). On failure the conversation is untouched. An *Error of kind busy
// while a stream of this agent is open.
func (a *Agent) Compact(ctx context.Context, opts CompactOptions) (CompactResult, error) {
	if err := ctx.Err(); err != nil {
		return CompactResult{}, &Error{Kind: KindCancelled, Message: "the context was done before the compaction started", cause: err}
	}
	js, err := json.Marshal(opts)
	if err != nil {
		return CompactResult{}, &Error{Kind: KindConfig, Message: "cannot encode the options: " + err.Error()}
	}
	h, uerr := a.use()
	if uerr != nil {
		return CompactResult{}, uerr
	}
	defer h.mu.RUnlock()
	token, release, terr := cancelToken(ctx)
	if terr != nil {
		return CompactResult{}, terr
	}
	defer release()
	o, on := cString(string(js))
	var s C.PantoString
	if e := a.retryBusy(func(cerr **C.PantoError) C.PantoStatus {
		return C.panto_agent_compact(a.h.p, o, on, token, &s, cerr)
	}); e != nil {
		if e.Kind == KindCancelled {
			e.cause = ctx.Err()
		}
		return CompactResult{}, e
	}
	defer C.panto_string_free(&s)
	var r CompactResult
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), &r); err != nil {
		return CompactResult{}, &Error{Kind: KindInternal, Message: "unreadable compaction result: " + err.Error()}
	}
	return r, nil
}

// cancelToken makes the library's cancel token for one long blocking call (Compact,
// CallMCPTool, the MCP resource and prompt calls), cancelled when ctx is done: nil, and
// a release that does nothing, for a ctx that can never end. The token exists before
// the call starts, so a ctx that ends while the call is starting still cancels it. The
// caller defers release once the token exists: it waits for a cancel already under way,
// then frees the token.
func cancelToken(ctx context.Context) (*C.PantoCancelToken, func(), *Error) {
	if ctx.Done() == nil {
		return nil, func() {}, nil
	}
	token := C.panto_cancel_token_new()
	if token == nil {
		return nil, nil, &Error{Kind: KindInternal, Message: "cannot create a cancel token"}
	}
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.panto_cancel_token_cancel(token)
		close(cancelled)
	})
	release := func() {
		// A cancel already under way finishes before the token is freed.
		if !stop() {
			<-cancelled
		}
		C.panto_cancel_token_free(token)
	}
	return token, release, nil
}

// TokenCount is the size of a request in tokens (Agent.CountTokens). Estimated is true
// when panto estimated it because the provider has no count endpoint (Chat Completions).
type TokenCount struct {
	Tokens    uint64 `json:"tokens"`
	Estimated bool   `json:"estimated"`
}

// CountTokens returns how many tokens the request of a turn with input would be now:
// the conversation, the tools, the system prompt and the input. The provider counts
// where it has a count endpoint (Anthropic, Gemini, OpenAI Responses); otherwise it is
// an estimate and nothing is sent. Nothing enters the conversation. It blocks for the
// provider's answer (bounded by the agent's timeouts); allowed during a turn.
func (a *Agent) CountTokens(input string) (TokenCount, error) {
	h, uerr := a.use()
	if uerr != nil {
		return TokenCount{}, uerr
	}
	defer h.mu.RUnlock()
	in, n := cString(input)
	var s C.PantoString
	var cerr *C.PantoError
	if C.panto_agent_count_tokens(a.h.p, in, n, &s, &cerr) != C.PANTO_OK {
		return TokenCount{}, takeError(cerr)
	}
	defer C.panto_string_free(&s)
	var out TokenCount
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), &out); err != nil {
		return TokenCount{}, &Error{Kind: KindInternal, Message: "unreadable token count: " + err.Error()}
	}
	return out, nil
}

// TranscriptEntry is one entry of Agent.Transcript. Kind is "text", "reasoning",
// "tool_call", "tool_result" or "attachment"; Role "user", "assistant" or "tool". For a
// tool call Text holds the arguments JSON, for a result the output. An attachment says
// what it is — Attachment ("image" or "document"), MediaType, Size in bytes (nil for a
// URL), Name (its file name) and one line in Text — never its bytes.
type TranscriptEntry struct {
	Role       string  `json:"role"`
	Kind       string  `json:"kind"`
	Text       string  `json:"text"`
	Name       string  `json:"name,omitempty"`
	CallID     string  `json:"call_id,omitempty"`
	IsError    *bool   `json:"is_error,omitempty"` // set for tool results
	Attachment string  `json:"attachment,omitempty"`
	MediaType  string  `json:"media_type,omitempty"`
	Size       *uint64 `json:"size,omitempty"`
}

// Transcript returns a flat, provider-neutral view of the conversation, in order, for
// repainting a UI. Allowed during a turn (it shows the last complete step).
func (a *Agent) Transcript() ([]TranscriptEntry, error) {
	h, uerr := a.use()
	if uerr != nil {
		return nil, uerr
	}
	defer h.mu.RUnlock()
	var s C.PantoString
	var cerr *C.PantoError
	if C.panto_agent_transcript_json(a.h.p, &s, &cerr) != C.PANTO_OK {
		return nil, takeError(cerr)
	}
	defer C.panto_string_free(&s)
	var out []TranscriptEntry
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), &out); err != nil {
		return nil, &Error{Kind: KindInternal, Message: "unreadable transcript: " + err.Error()}
	}
	return out, nil
}
