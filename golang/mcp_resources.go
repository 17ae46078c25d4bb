package panto

/*
#include <stdlib.h>
#include "panto.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"unsafe"
)

// MCPResource is one resource an agent's MCP server lists (Agent.MCPResources).
type MCPResource struct {
	Server      string  `json:"server"`
	URI         string  `json:"uri"`
	Name        string  `json:"name"`
	Title       string  `json:"title,omitempty"`
	Description string  `json:"description,omitempty"`
	MIMEType    string  `json:"mime_type,omitempty"`
	Size        *uint64 `json:"size,omitempty"`
}

// MCPResourceContents is one content of a read resource (Agent.MCPReadResource): its
// Text, or its bytes (Blob, IsBlob true), and Part — the content as a part of a turn's
// input, ready for StreamParts: text headed by "[resource: URI]", an image (PNG, JPEG,
// GIF, WebP), a PDF document, or a text naming bytes no model takes.
type MCPResourceContents struct {
	URI      string
	MIMEType string
	Text     string
	Blob     []byte
	IsBlob   bool
	Part     Part
}

// UnmarshalJSON reads the library's JSON form of a content.
func (c *MCPResourceContents) UnmarshalJSON(b []byte) error {
	var in struct {
		URI      string        `json:"uri"`
		MIMEType string        `json:"mime_type"`
		Text     string        `json:"text"`
		Blob     *[]byte       `json:"blob"`
		Part     canonicalPart `json:"part"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*c = MCPResourceContents{URI: in.URI, MIMEType: in.MIMEType, Text: in.Text, Part: in.Part.part()}
	if in.Blob != nil {
		c.Blob, c.IsBlob = *in.Blob, true
	}
	return nil
}

func (c canonicalPart) part() Part {
	return Part{kind: c.Type, text: c.Text, data: c.Data, url: c.URL, mediaType: c.MediaType, name: c.Name}
}

// MCPPrompt is one prompt an agent's MCP server lists (Agent.MCPPrompts).
type MCPPrompt struct {
	Server      string              `json:"server"`
	Name        string              `json:"name"`
	Title       string              `json:"title,omitempty"`
	Description string              `json:"description,omitempty"`
	Arguments   []MCPPromptArgument `json:"arguments"`
}

// MCPPromptArgument is one argument of an MCP prompt.
type MCPPromptArgument struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required"`
}

// MCPPromptResult is a prompt filled in with its arguments (Agent.MCPGetPrompt).
type MCPPromptResult struct {
	Description string             `json:"description,omitempty"`
	Messages    []MCPPromptMessage `json:"messages"`
}

// MCPPromptMessage is one message of a prompt: Role "user" or "assistant", and its
// content as parts of a turn's input (text, images, documents; other content as a text
// naming it).
type MCPPromptMessage struct {
	Role    string `json:"role"`
	Content Parts  `json:"content"`
}

// mcpCall runs one of the library's blocking MCP calls (call, given the agent handle
// and a cancel token, NULL when ctx can never be done) and decodes its JSON into out.
// When ctx is done the request is withdrawn and an *Error of kind cancelled that also
// matches ctx's error is returned; a ctx already done sends nothing.
func (a *Agent) mcpCall(ctx context.Context, what string, out any,
	call func(agent *C.PantoAgent, token *C.PantoCancelToken, s *C.PantoString, cerr **C.PantoError) C.PantoStatus) error {
	if err := ctx.Err(); err != nil {
		return &Error{Kind: KindCancelled, Message: "the context was done before " + what + " started", cause: err}
	}
	h, uerr := a.use()
	if uerr != nil {
		return uerr
	}
	defer h.mu.RUnlock()
	token, release, terr := cancelToken(ctx)
	if terr != nil {
		return terr
	}
	defer release()
	var s C.PantoString
	var cerr *C.PantoError
	// A blocking call (the server's answer): not one of the bounded short calls.
	if call(h.p, token, &s, &cerr) != C.PANTO_OK {
		e := takeError(cerr)
		if e.Kind == KindCancelled {
			e.cause = ctx.Err()
		}
		return e
	}
	defer C.panto_string_free(&s)
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len)), out); err != nil {
		return &Error{Kind: KindInternal, Message: "unreadable " + what + " answer: " + err.Error()}
	}
	return nil
}

// cOptional is a C string for an optional argument: NULL for "" (freed by the caller
// with C.free when not nil).
func cOptional(s string) (*C.char, C.size_t) {
	if s == "" {
		return nil, 0
	}
	return C.CString(s), C.size_t(len(s))
}

// MCPResources returns the resources the agent's MCP server named server lists (every
// server's, in order, when server is ""), starting the servers if they are not running.
// It blocks for the servers' answers, bounded by each server's timeout_ms and by ctx.
// An agent without MCP servers, or an unknown server, is an *Error of kind config.
func (a *Agent) MCPResources(ctx context.Context, server string) ([]MCPResource, error) {
	sp, sn := cOptional(server)
	defer C.free(unsafe.Pointer(sp))
	var out []MCPResource
	err := a.mcpCall(ctx, "MCPResources", &out, func(p *C.PantoAgent, t *C.PantoCancelToken, s *C.PantoString, e **C.PantoError) C.PantoStatus {
		return C.panto_agent_mcp_resources(p, sp, sn, t, s, e)
	})
	return out, err
}

// MCPReadResource reads the resource uri from server ("": the only server, else the one
// that lists it). A resource the server does not have is an *Error of kind not_found.
func (a *Agent) MCPReadResource(ctx context.Context, server, uri string) ([]MCPResourceContents, error) {
	sp, sn := cOptional(server)
	defer C.free(unsafe.Pointer(sp))
	up := C.CString(uri)
	defer C.free(unsafe.Pointer(up))
	var out struct {
		Contents []MCPResourceContents `json:"contents"`
	}
	err := a.mcpCall(ctx, "MCPReadResource", &out, func(p *C.PantoAgent, t *C.PantoCancelToken, s *C.PantoString, e **C.PantoError) C.PantoStatus {
		return C.panto_agent_mcp_read_resource(p, sp, sn, up, C.size_t(len(uri)), t, s, e)
	})
	return out.Contents, err
}

// MCPPrompts returns the prompts the agent's MCP server named server lists (every
// server's when server is ""), with their arguments.
func (a *Agent) MCPPrompts(ctx context.Context, server string) ([]MCPPrompt, error) {
	sp, sn := cOptional(server)
	defer C.free(unsafe.Pointer(sp))
	var out []MCPPrompt
	err := a.mcpCall(ctx, "MCPPrompts", &out, func(p *C.PantoAgent, t *C.PantoCancelToken, s *C.PantoString, e **C.PantoError) C.PantoStatus {
		return C.panto_agent_mcp_prompts(p, sp, sn, t, s, e)
	})
	return out, err
}

// MCPGetPrompt returns the prompt name filled in with arguments, from server ("": the
// only server, else the one that lists it). Arguments the server refuses are an *Error
// of kind bad_request.
func (a *Agent) MCPGetPrompt(ctx context.Context, server, name string, arguments map[string]string) (MCPPromptResult, error) {
	sp, sn := cOptional(server)
	defer C.free(unsafe.Pointer(sp))
	np := C.CString(name)
	defer C.free(unsafe.Pointer(np))
	var ap *C.char
	var an C.size_t
	if arguments != nil {
		js, err := json.Marshal(arguments)
		if err != nil {
			return MCPPromptResult{}, &Error{Kind: KindConfig, Message: "cannot encode the arguments: " + err.Error()}
		}
		ap, an = C.CString(string(js)), C.size_t(len(js))
		defer C.free(unsafe.Pointer(ap))
	}
	var out MCPPromptResult
	err := a.mcpCall(ctx, "MCPGetPrompt", &out, func(p *C.PantoAgent, t *C.PantoCancelToken, s *C.PantoString, e **C.PantoError) C.PantoStatus {
		return C.panto_agent_mcp_get_prompt(p, sp, sn, np, C.size_t(len(name)), ap, an, t, s, e)
	})
	return out, err
}
