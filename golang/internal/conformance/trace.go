package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"

	"github.com/panto/panto/panto"
)

// eventTrace is the trace line of ev, built from the struct fields a Go user reads, not
// from the event's MarshalJSON: every field under the name of its json tag (an
// `omitempty` one left out when zero), and a block's content rebuilt from the
// convenience fields (ContentType, Text, Signature, CallID, Name, Arguments,
// ArgumentsRaw: those tagged `json:"-"`). What another view of the same event
// disagrees with is added under a key of its own, so the comparison with the golden
// trace fails and shows it: "content_raw" when the Content JSON differs from its
// parts, "json_marshal" when json.Marshal(ev) differs from the fields.
func eventTrace(ev panto.Event) map[string]any {
	v := reflect.ValueOf(ev).Elem()
	line := map[string]any{"type": ev.Type()}
	parts := map[string]reflect.Value{}
	var content json.RawMessage
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() {
			continue
		}
		if name == "-" {
			parts[f.Name] = v.Field(i)
			continue
		}
		if opts == "omitempty" && v.Field(i).IsZero() {
			continue
		}
		if raw, ok := v.Field(i).Interface().(json.RawMessage); ok && name == "content" {
			content = raw // the block whose parts the json:"-" fields are
		}
		line[name] = fieldValue(v.Field(i))
	}
	if js, err := json.Marshal(ev); err != nil {
		line["json_marshal"] = err.Error()
	} else {
		var m map[string]any
		_ = json.Unmarshal(js, &m)
		if !sameJSON(m, line) {
			line["json_marshal"] = m
		}
	}
	if len(parts) != 0 {
		rebuilt := blockFromParts(parts, content)
		if !sameJSON(rebuilt, line["content"]) {
			line["content_raw"] = line["content"]
		}
		line["content"] = rebuilt
	}
	return line
}

// fieldValue is a field as a JSON value: JSON text parsed, a struct (Usage) by its json
// tags, anything else as it is.
func fieldValue(f reflect.Value) any {
	if raw, ok := f.Interface().(json.RawMessage); ok {
		if len(raw) == 0 {
			return nil
		}
		var x any
		if err := json.Unmarshal(raw, &x); err != nil {
			return "invalid JSON: " + string(raw)
		}
		return x
	}
	if parts, ok := f.Interface().(panto.Parts); ok {
		return partsFromAccessors(parts)
	}
	if f.Kind() == reflect.Struct {
		m := map[string]any{}
		for i := 0; i < f.NumField(); i++ {
			name, opts, _ := strings.Cut(f.Type().Field(i).Tag.Get("json"), ",")
			if name == "-" || !f.Type().Field(i).IsExported() || (opts == "omitempty" && f.Field(i).IsZero()) {
				continue
			}
			m[name] = fieldValue(f.Field(i))
		}
		return m
	}
	return f.Interface()
}

// partsFromAccessors is a tool result's parts in the canonical form (DESIGN.md,
// "Events"), written from each Part's accessors rather than its MarshalJSON.
func partsFromAccessors(parts panto.Parts) any {
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		m := map[string]any{"type": p.Kind()}
		switch {
		case p.Kind() == "text":
			m["text"] = p.Text()
		case p.URL() != "":
			m["url"] = p.URL()
			if p.MediaType() != "" {
				m["media_type"] = p.MediaType()
			}
		default:
			m["media_type"], m["size"], m["data"] = p.MediaType(), len(p.Data()), p.Data()
		}
		if p.Name() != "" {
			m["name"] = p.Name()
		}
		out = append(out, m)
	}
	return out
}

// blockFromParts is the canonical content of a block (DESIGN.md, "Events") written from
// the convenience fields; for a content type they do not describe, the Content as it is.
func blockFromParts(p map[string]reflect.Value, content json.RawMessage) any {
	str := func(name string) string { return p[name].String() }
	b := map[string]any{"type": str("ContentType")}
	switch str("ContentType") {
	case "text":
		b["text"] = str("Text")
	case "reasoning":
		b["text"] = str("Text")
		if s := str("Signature"); s != "" {
			b["signature"] = s
		}
	case "redacted_reasoning":
		b["data"] = str("Text")
	case "tool_call":
		b["call_id"], b["name"] = str("CallID"), str("Name")
		if args := p["Arguments"].Bytes(); args != nil {
			b["arguments"] = fieldValue(reflect.ValueOf(json.RawMessage(args)))
		}
		if raw := str("ArgumentsRaw"); raw != "" {
			b["arguments_raw"] = raw
		}
	default:
		return fieldValue(reflect.ValueOf(content))
	}
	return b
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
