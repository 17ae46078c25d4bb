package panto

/*
#include "panto.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"unsafe"
)

// CallResult is a tool call's result, as Agent.CallMCPTool returns it and as
// Answers.CallResult gives it back to a paused turn: the text the model reads, whether it
// is an error result, and its text and image parts in order (JSON, only when it holds an
// image).
type CallResult struct {
	Output  string          `json:"output"`
	IsError bool            `json:"is_error"`
	Parts   json.RawMessage `json:"parts,omitempty"`
}

// CallResult gives callID's result as a CallResult (text, or text and images): for a call
// the turn deferred (DeferTools) that the host ran itself, e.g. with Agent.CallMCPTool.
func (a Answers) CallResult(callID string, r CallResult) Answers {
	return a.with(callID, r)
}

// CallMCPTool calls one tool of the agent's MCP servers outside a turn: name as the model
// sees it (with the server's prefix, e.g. "fx__echo"), arguments a value that encodes as
// a JSON object (nil: {}). For an engine that runs each tool call as its own step (a turn
// paused with TurnOptions.DeferTools): give the result back with Answers.CallResult. The
// servers are started if they were not; the conversation is untouched, and calls may run
// while a turn runs. The tool's own failure (its error result, a timeout, a crashed
// server) is a result with IsError. KindConfig when no MCP server of the agent has the
// tool. Blocks until the server answers; when ctx is done first the call is cancelled
// (the server is told) and the error is KindCancelled.
func (a *Agent) CallMCPTool(ctx context.Context, name string, arguments any) (CallResult, error) {
	if err := ctx.Err(); err != nil {
		return CallResult{}, &Error{Kind: KindCancelled, Message: "the context was done before the call started", cause: err}
	}
	args := []byte("{}")
	if arguments != nil {
		js, err := json.Marshal(arguments)
		if err != nil {
			return CallResult{}, &Error{Kind: KindConfig, Message: "cannot encode the arguments: " + err.Error()}
		}
		args = js
	}
	h, uerr := a.use()
	if uerr != nil {
		return CallResult{}, uerr
	}
	defer h.mu.RUnlock()
	token, release, terr := cancelToken(ctx)
	if terr != nil {
		return CallResult{}, terr
	}
	defer release()
	n, nn := cString(name)
	js := string(args)
	j, jn := cString(js)
	var s C.PantoString
	var cerr *C.PantoError
	// A long wait inside the library, like Compact's: not one of the short calls' tokens,
	// which would keep other streams' polls waiting for the server.
	if C.panto_agent_call_mcp_tool(h.p, n, nn, j, jn, token, &s, &cerr) != C.PANTO_OK {
		e := takeError(cerr)
		if e.Kind == KindCancelled {
			e.cause = ctx.Err()
		}
		return CallResult{}, e
	}
	defer C.panto_string_free(&s)
	var r CallResult
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), &r); err != nil {
		return CallResult{}, &Error{Kind: KindInternal, Message: "unreadable tool result: " + err.Error()}
	}
	return r, nil
}
