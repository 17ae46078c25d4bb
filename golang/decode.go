package panto

/*
#include "panto.h"
*/
import "C"

import (
	"encoding/json"
	"unsafe"
)

// The helpers of the generated convert (events_gen.go), which copies a C event into the
// Go structs. Strings are copied at once: the C event is valid only until the next call
// on its stream.

// codeName is the name of code in table (a generated list of the header's constants).
// For a code the table does not have it returns "" and, if ok is not nil, sets *ok to
// false: the caller then takes the value from the event's JSON.
func codeName(table []string, code uint32, ok *bool) string {
	if int64(code) < int64(len(table)) && table[code] != "" {
		return table[code]
	}
	if ok != nil {
		*ok = false
	}
	return ""
}

// goRawWithin is part as JSON, sharing the memory of whole (already copied from
// wholeC) when the library placed part inside wholeC: JSON text such as a tool call's
// arguments is then copied once, not twice. Otherwise part is copied on its own.
func goRawWithin(whole json.RawMessage, wholeC, part C.PantoStr) json.RawMessage {
	if part.ptr == nil {
		return nil
	}
	start, end := uintptr(unsafe.Pointer(wholeC.ptr)), uintptr(unsafe.Pointer(wholeC.ptr))+uintptr(wholeC.len)
	p := uintptr(unsafe.Pointer(part.ptr))
	if wholeC.ptr != nil && p >= start && p+uintptr(part.len) <= end && len(whole) == int(wholeC.len) {
		off := int(p - start)
		return whole[off : off+int(part.len) : off+int(part.len)]
	}
	return goRaw(part)
}

// fromJSON decodes the library's canonical JSON of ev into v (a generated event
// struct): the way to what the C record does not carry, a field the core added after
// the header was written or a code the header does not list.
func fromJSON(ev *C.PantoEvent, v any) {
	var js C.PantoStr
	if C.panto_event_to_json(ev, &js) != C.PANTO_OK || js.ptr == nil {
		return
	}
	// Read in place: Unmarshal copies every string and RawMessage it stores.
	_ = json.Unmarshal(unsafe.Slice((*byte)(unsafe.Pointer(js.ptr)), int(js.len)), v)
}

// blockType is the "type" of a block's canonical JSON.
func blockType(content json.RawMessage) string {
	var b struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(content, &b)
	return b.Type
}

// goParts reads a tool result's parts from their canonical JSON (nil when absent).
func goParts(s C.PantoStr) Parts {
	if s.ptr == nil {
		return nil
	}
	var ps Parts
	if json.Unmarshal(unsafe.Slice((*byte)(unsafe.Pointer(s.ptr)), int(s.len)), &ps) != nil {
		return nil
	}
	return ps
}
