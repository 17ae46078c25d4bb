package panto

/*
#include <stdint.h>
#include "panto.h"
*/
import "C"

import (
	"encoding/json"
	"runtime/cgo"
	"unsafe"
)

// SamplingApproval is an MCP server's sampling request (sampling/createMessage) waiting
// for the host's approval (Config.MCPApproveSampling): what the agent's model would be
// asked. The McpSamplingRequest event then reports its outcome.
type SamplingApproval struct {
	// Server is the server's name (its key in Config.MCPServers).
	Server string `json:"server"`
	// Summary is the first line of the last message.
	Summary string `json:"summary"`
	// MaxTokens is the output limit: the server's, at most its SamplingMaxTokens.
	MaxTokens int `json:"max_tokens"`
	// SystemPrompt is the server's system prompt, "" when it gave none.
	SystemPrompt string `json:"system_prompt"`
	// Temperature is the server's temperature, nil when it gave no usable one.
	Temperature *float64 `json:"temperature"`
	// Messages is the conversation to answer (text only).
	Messages []SamplingMessage `json:"messages"`
}

// SamplingMessage is one message of a SamplingApproval.
type SamplingMessage struct {
	// Role is "user" or "assistant".
	Role string `json:"role"`
	Text string `json:"text"`
}

// ElicitationPrompt is an MCP server's elicitation (elicitation/create), for the host
// to answer (Config.MCPElicit). The McpElicitationRequest event then reports the
// answer's action.
type ElicitationPrompt struct {
	// Server is the server's name (its key in Config.MCPServers).
	Server string `json:"server"`
	// Message is what the server tells the person.
	Message string `json:"message"`
	// RequestedSchema is the JSON Schema of the answer's content: an object of flat
	// properties (strings, numbers, integers, booleans, enums).
	RequestedSchema json.RawMessage `json:"requested_schema"`
}

// ElicitationAction is what the person did with an elicitation.
type ElicitationAction string

// The actions of an ElicitationAnswer.
const (
	// ElicitationDecline: the person said no (also the zero ElicitationAnswer).
	ElicitationDecline ElicitationAction = "decline"
	// ElicitationAccept: the person answered; Content holds the answer.
	ElicitationAccept ElicitationAction = "accept"
	// ElicitationCancel: the person dismissed the question without choosing.
	ElicitationCancel ElicitationAction = "cancel"
)

// ElicitationAnswer is the host's answer to an ElicitationPrompt. The zero value
// declines. An accepted Content must match the requested schema: one that does not is
// refused to the server as an error (the event's outcome is "invalid"); an Action
// other than the three declines.
type ElicitationAnswer struct {
	Action ElicitationAction
	// Content is the answer of ElicitationAccept: property name to value.
	Content map[string]any
}

// clientHooks is what the library's callbacks reach through their cgo.Handle.
type clientHooks struct {
	approve func(SamplingApproval) bool
	elicit  func(ElicitationPrompt) ElicitationAnswer
}

// answerJSON is a's JSON as the library reads it.
func (a ElicitationAnswer) answerJSON() []byte {
	switch a.Action {
	case ElicitationAccept:
		content := a.Content
		if content == nil {
			content = map[string]any{}
		}
		b, err := json.Marshal(map[string]any{"action": "accept", "content": content})
		if err == nil {
			return b
		}
	case ElicitationCancel:
		return []byte(`{"action":"cancel"}`)
	}
	return []byte(`{"action":"decline"}`)
}

//export pantoGoApproveSampling
func pantoGoApproveSampling(userData unsafe.Pointer, request *C.char, requestLen C.size_t) (r C.int) {
	defer func() {
		if recover() != nil {
			r = 0
		}
	}()
	hooks := cgo.Handle(uintptr(userData)).Value().(*clientHooks)
	var req SamplingApproval
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(request), C.int(requestLen)), &req); err != nil {
		return 0
	}
	if hooks.approve(req) {
		return 1
	}
	return 0
}

//export pantoGoElicit
func pantoGoElicit(userData unsafe.Pointer, request *C.char, requestLen C.size_t, buf *C.char, capacity C.size_t) (n C.size_t) {
	answer := []byte(`{"action":"cancel"}`)
	defer func() {
		if recover() != nil {
			answer = []byte(`{"action":"cancel"}`)
		}
		if len(answer) <= int(capacity) {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity)), answer)
		}
		n = C.size_t(len(answer))
	}()
	hooks := cgo.Handle(uintptr(userData)).Value().(*clientHooks)
	var req ElicitationPrompt
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(request), C.int(requestLen)), &req); err != nil {
		return
	}
	answer = hooks.elicit(req).answerJSON()
	return
}

//export pantoGoFreeClientHooks
func pantoGoFreeClientHooks(userData unsafe.Pointer) {
	cgo.Handle(uintptr(userData)).Delete()
}

// setMCPClientHooks lends the agent's MCP servers cfg's sampling approval and
// elicitation answers, if any.
func setMCPClientHooks(p *C.PantoAgent, cfg *Config) error {
	if cfg.MCPApproveSampling == nil && cfg.MCPElicit == nil {
		return nil
	}
	h := cgo.NewHandle(&clientHooks{approve: cfg.MCPApproveSampling, elicit: cfg.MCPElicit})
	var cerr *C.PantoError
	var st C.PantoStatus
	short(func() {
		st = pantoSetMCPClientHooks(p, C.uintptr_t(h), cfg.MCPApproveSampling != nil, cfg.MCPElicit != nil, &cerr)
	})
	if st != C.PANTO_OK {
		h.Delete()
		return withGoField(takeError(cerr), "Config", "")
	}
	return nil
}
