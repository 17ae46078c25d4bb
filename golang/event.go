package panto

import "encoding/json"

// Event is one event of a turn. It is sealed: the concrete types are the eleven below,
// one per kind of DESIGN.md's event table, and a type switch over them is the way to
// read a stream. json.Marshal of any of them produces the event's canonical JSON,
// {"type":"<snake_case>",…fields}, the line `panto run --json` prints for it.
//
// Message is the 0-based index of the assistant message within the turn; Block the
// 0-based index of a content block within that message.
type Event interface {
	// Type is the canonical snake_case name of the event's kind, e.g. "content_delta".
	Type() string
	isEvent()
}

// EventTypes lists every event type name, in the order of the C ABI's event codes.
var EventTypes = []string{
	"message_start", "block_start", "content_delta", "tool_details", "block_complete",
	"message_end", "tool_call_start", "tool_result", "provider_retry", "message_complete",
	"history_compacted",
}

// Usage holds token counts: of one response in MessageEnd, of the whole turn in
// MessageComplete.
type Usage struct {
	InputTokens      uint64 `json:"input_tokens"`
	OutputTokens     uint64 `json:"output_tokens"`
	CacheReadTokens  uint64 `json:"cache_read_tokens"`
	CacheWriteTokens uint64 `json:"cache_write_tokens"`
	ReasoningTokens  uint64 `json:"reasoning_tokens"`
}

// MessageStart reports that a provider response begins.
type MessageStart struct {
	Message    uint32 `json:"message"`
	Model      string `json:"model"`
	ResponseID string `json:"response_id,omitempty"` // empty if the provider sent none
}

// BlockStart reports that a content block opens. Kind is "text", "reasoning" (redacted
// reasoning included) or "tool_call".
type BlockStart struct {
	Message uint32 `json:"message"`
	Block   uint32 `json:"block"`
	Kind    string `json:"kind"`
}

// ContentDelta carries a fragment of a block. Kind is "text", "reasoning" or
// "tool_args".
type ContentDelta struct {
	Message uint32 `json:"message"`
	Block   uint32 `json:"block"`
	Kind    string `json:"kind"`
	Text    string `json:"text"`
}

// ToolDetails gives the id and name of a tool_call block, once both are known.
type ToolDetails struct {
	Message uint32 `json:"message"`
	Block   uint32 `json:"block"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
}

// BlockComplete reports a closed block. Content is the block's canonical JSON (what
// json.Marshal writes); the other fields are its parts, for convenience, empty where the
// content type has no such part.
type BlockComplete struct {
	Message uint32          `json:"message"`
	Block   uint32          `json:"block"`
	Content json.RawMessage `json:"content"`
	// ContentType is "text", "reasoning", "redacted_reasoning" or "tool_call".
	ContentType string `json:"-"`
	// Text is the text of a text or reasoning block, the data of a redacted one.
	Text string `json:"-"`
	// Signature is a reasoning block's signature, if any.
	Signature string `json:"-"`
	// CallID and Name identify a tool_call block.
	CallID string `json:"-"`
	Name   string `json:"-"`
	// Arguments are a tool call's parsed arguments (nil if they did not parse, then
	// ArgumentsRaw holds the raw text).
	Arguments    json.RawMessage `json:"-"`
	ArgumentsRaw string          `json:"-"`
}

// MessageEnd reports the end of one assistant message (not of the turn). StopReason is
// one of end_turn, tool_use, max_tokens, stop_sequence, refusal, content_filter,
// max_steps, or other:<raw>.
type MessageEnd struct {
	Message    uint32 `json:"message"`
	StopReason string `json:"stop_reason"`
	Usage      Usage  `json:"usage"`
}

// ToolCallStart reports that dispatch of one tool call begins. Host is set for tools
// implemented by the caller (every Tool of the Config): a Tool with a Func is run and
// answered automatically; for one without, answer with Stream.SubmitToolResult.
// Arguments is the arguments object as JSON, nil (JSON null) when the model's
// arguments were not an object; ArgumentsRaw then holds them as sent.
type ToolCallStart struct {
	Message      uint32          `json:"message"`
	CallID       string          `json:"call_id"`
	Name         string          `json:"name"`
	Arguments    json.RawMessage `json:"arguments"`
	ArgumentsRaw string          `json:"arguments_raw,omitempty"`
	Host         bool            `json:"host"`
}

// ToolResult reports that a tool call finished (in the order calls finish).
type ToolResult struct {
	Message uint32 `json:"message"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Output  string `json:"output"`
	IsError bool   `json:"is_error"`
}

// ProviderRetry reports that a request failed before any of its answer was shown and is
// tried again after DelayMS. Attempt is the attempt about to start (2 for the first
// retry); Status the HTTP status of the failure, 0 if none.
type ProviderRetry struct {
	Message     uint32 `json:"message"`
	Attempt     uint32 `json:"attempt"`
	MaxAttempts uint32 `json:"max_attempts"`
	DelayMS     uint64 `json:"delay_ms"`
	Reason      string `json:"reason"`
	Status      uint32 `json:"status,omitempty"`
}

// MessageComplete is the terminal event: the turn is over. Usage is the turn's total,
// Messages the number of assistant messages, Text the final assistant message's text.
type MessageComplete struct {
	StopReason string `json:"stop_reason"`
	Usage      Usage  `json:"usage"`
	Messages   uint32 `json:"messages"`
	Text       string `json:"text"`
}

// HistoryCompacted reports that automatic compaction (Config.Compaction) summarized the
// older history before the next request. Counts are of the history's messages and
// tokens; TokensBefore comes from the provider's usage when known, TokensAfter (and
// TokensBefore otherwise) is estimated as bytes / 4.
type HistoryCompacted struct {
	MessagesBefore uint64 `json:"messages_before"`
	MessagesAfter  uint64 `json:"messages_after"`
	TokensBefore   uint64 `json:"tokens_before"`
	TokensAfter    uint64 `json:"tokens_after"`
}

func (*HistoryCompacted) isEvent() {}

// Type returns "history_compacted".
func (*HistoryCompacted) Type() string { return "history_compacted" }

type plainHistoryCompacted HistoryCompacted

// MarshalJSON writes the canonical JSON of the event.
func (e *HistoryCompacted) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainHistoryCompacted)(e))
}

func (*MessageStart) isEvent()    {}
func (*BlockStart) isEvent()      {}
func (*ContentDelta) isEvent()    {}
func (*ToolDetails) isEvent()     {}
func (*BlockComplete) isEvent()   {}
func (*MessageEnd) isEvent()      {}
func (*ToolCallStart) isEvent()   {}
func (*ToolResult) isEvent()      {}
func (*ProviderRetry) isEvent()   {}
func (*MessageComplete) isEvent() {}

// Type returns "message_start".
func (*MessageStart) Type() string { return "message_start" }

// Type returns "block_start".
func (*BlockStart) Type() string { return "block_start" }

// Type returns "content_delta".
func (*ContentDelta) Type() string { return "content_delta" }

// Type returns "tool_details".
func (*ToolDetails) Type() string { return "tool_details" }

// Type returns "block_complete".
func (*BlockComplete) Type() string { return "block_complete" }

// Type returns "message_end".
func (*MessageEnd) Type() string { return "message_end" }

// Type returns "tool_call_start".
func (*ToolCallStart) Type() string { return "tool_call_start" }

// Type returns "tool_result".
func (*ToolResult) Type() string { return "tool_result" }

// Type returns "provider_retry".
func (*ProviderRetry) Type() string { return "provider_retry" }

// Type returns "message_complete".
func (*MessageComplete) Type() string { return "message_complete" }

// typed puts the "type" key first, then the event's own fields (v marshals as a
// non-empty object).
func typed(typ string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(typ)+10)
	out = append(out, `{"type":"`...)
	out = append(out, typ...)
	out = append(out, `",`...)
	return append(out, body[1:]...), nil
}

// The MarshalJSON methods marshal through a defined copy of each type (which has no
// methods) so that the embedding in typed does not recurse.
type (
	plainMessageStart    MessageStart
	plainBlockStart      BlockStart
	plainContentDelta    ContentDelta
	plainToolDetails     ToolDetails
	plainBlockComplete   BlockComplete
	plainMessageEnd      MessageEnd
	plainToolCallStart   ToolCallStart
	plainToolResult      ToolResult
	plainProviderRetry   ProviderRetry
	plainMessageComplete MessageComplete
)

// MarshalJSON writes the canonical JSON of the event.
func (e *MessageStart) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainMessageStart)(e))
}

// MarshalJSON writes the canonical JSON of the event.
func (e *BlockStart) MarshalJSON() ([]byte, error) { return typed(e.Type(), (*plainBlockStart)(e)) }

// MarshalJSON writes the canonical JSON of the event.
func (e *ContentDelta) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainContentDelta)(e))
}

// MarshalJSON writes the canonical JSON of the event.
func (e *ToolDetails) MarshalJSON() ([]byte, error) { return typed(e.Type(), (*plainToolDetails)(e)) }

// MarshalJSON writes the canonical JSON of the event.
func (e *BlockComplete) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainBlockComplete)(e))
}

// MarshalJSON writes the canonical JSON of the event.
func (e *MessageEnd) MarshalJSON() ([]byte, error) { return typed(e.Type(), (*plainMessageEnd)(e)) }

// MarshalJSON writes the canonical JSON of the event.
func (e *ToolCallStart) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainToolCallStart)(e))
}

// MarshalJSON writes the canonical JSON of the event.
func (e *ToolResult) MarshalJSON() ([]byte, error) { return typed(e.Type(), (*plainToolResult)(e)) }

// MarshalJSON writes the canonical JSON of the event.
func (e *ProviderRetry) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainProviderRetry)(e))
}

// MarshalJSON writes the canonical JSON of the event.
func (e *MessageComplete) MarshalJSON() ([]byte, error) {
	return typed(e.Type(), (*plainMessageComplete)(e))
}
