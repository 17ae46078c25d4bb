package panto

import "encoding/json"

// Package panto's event types, Usage, EventTypes and the decoding of C events are
// generated into events_gen.go from the core's vocabulary (scripts/gen.sh); this file
// holds what they share.

// Event is one event of a turn. It is sealed: the concrete types are those of
// events_gen.go, one per kind of DESIGN.md's event table, and a type switch over them
// is the way to read a stream. json.Marshal of any of them produces the event's
// canonical JSON, {"type":"<snake_case>",…fields}, the line `panto run --json` prints
// for it. A field that is optional in the canonical JSON is the zero value when absent
// (and left out by json.Marshal).
//
// Message is the 0-based index of the assistant message within the turn; Block the
// 0-based index of a content block within that message.
type Event interface {
	// Type is the canonical snake_case name of the event's kind, e.g. "content_delta".
	Type() string
	isEvent()
}

// typed puts the "type" key first, then the event's own fields (v marshals as an
// object). The generated MarshalJSON methods pass a defined copy of their type, which
// has no methods, so that marshalling it does not recurse.
func typed(typ string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(typ)+10)
	out = append(out, `{"type":"`...)
	out = append(out, typ...)
	if len(body) <= 2 { // {}: an event without fields
		return append(out, `"}`...), nil
	}
	out = append(out, `",`...)
	return append(out, body[1:]...), nil
}
