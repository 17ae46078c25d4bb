package panto

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Part is one part of a turn's input: text, an image or a document (PDF). Make one with
// Text, ImageFile, ImageBytes, ImageURL, DocumentFile, DocumentBytes or DocumentURL and
// pass them to Agent.StreamParts (or TurnOptions.Input). An attachment's media type is
// sniffed from its bytes when not given (PNG, JPEG, GIF, WebP, PDF).
type Part struct {
	kind      string
	text      string
	data      []byte
	url       string
	path      string
	mediaType string
	name      string
}

// Text is a text part.
func Text(text string) Part { return Part{kind: "text", text: text} }

// ImageFile is the image in the file at path, read when the turn starts; a file that
// cannot be read fails the turn's start with a KindConfig error naming the path.
func ImageFile(path string) Part { return Part{kind: "image", path: path} }

// ImageBytes is an image of data; mediaType "" sniffs it from the bytes.
func ImageBytes(data []byte, mediaType string) Part {
	return Part{kind: "image", data: data, mediaType: mediaType}
}

// ImageURL is an image the provider fetches from url.
func ImageURL(url string) Part { return Part{kind: "image", url: url} }

// DocumentFile is the PDF in the file at path (see ImageFile).
func DocumentFile(path string) Part { return Part{kind: "document", path: path} }

// DocumentBytes is a PDF of data.
func DocumentBytes(data []byte) Part {
	return Part{kind: "document", data: data, mediaType: "application/pdf"}
}

// DocumentURL is a PDF the provider fetches from url (Anthropic; OpenAI chat takes a
// PDF only as bytes).
func DocumentURL(url string) Part { return Part{kind: "document", url: url} }

// Named returns the part with a file name (OpenAI sends it with a PDF; the transcript
// shows it).
func (p Part) Named(name string) Part {
	p.name = name
	return p
}

// MarshalJSON writes the part in the C ABI's input form (panto.h,
// panto_agent_stream_with): a string for text, else {"type", "url"|"data"|"path",
// "media_type"?, "name"?} with the bytes base64-encoded.
func (p Part) MarshalJSON() ([]byte, error) {
	if p.kind == "text" {
		return json.Marshal(p.text)
	}
	m := map[string]any{"type": p.kind}
	switch {
	case p.url != "":
		m["url"] = p.url
	case p.path != "":
		m["path"] = p.path
	default:
		m["data"] = p.data // encoding/json writes []byte as base64
	}
	if p.mediaType != "" {
		m["media_type"] = p.mediaType
	}
	if p.name != "" {
		m["name"] = p.name
	}
	return json.Marshal(m)
}

// validUTF8 returns parts with invalid UTF-8 in their text replaced by U+FFFD, as
// strings.ToValidUTF8 writes it (the library takes only UTF-8): a copy when a part
// changes, never parts rewritten in place, which belong to the caller (a slice given
// to Steer, or returned by a PartsFunc to concurrent calls, may be in use elsewhere).
func validUTF8(parts []Part) []Part {
	out, copied := parts, false
	for i := range parts {
		if parts[i].kind != "text" || utf8.ValidString(parts[i].text) {
			continue
		}
		if !copied {
			out, copied = append([]Part(nil), parts...), true
		}
		out[i].text = strings.ToValidUTF8(parts[i].text, "\uFFFD")
	}
	return out
}

// Kind is the part's kind: "text", "image" or "document".
func (p Part) Kind() string { return p.kind }

// Text is the text of a text part ("" for an attachment).
func (p Part) Text() string { return p.text }

// Data is an attachment's bytes (nil for a URL, a file or text). The slice is the
// part's own: do not change it.
func (p Part) Data() []byte { return p.data }

// URL is the URL of an attachment the provider fetches ("" otherwise).
func (p Part) URL() string { return p.url }

// MediaType is an attachment's media type ("" when it was left to be sniffed).
func (p Part) MediaType() string { return p.mediaType }

// Name is an attachment's file name, if any.
func (p Part) Name() string { return p.name }

// Parts is a tool result's text and image parts in order, as ToolResult.Parts carries
// them (nil unless the tool returned an image). Its JSON is the event's canonical form:
// {"type":"text","text":…} and {"type":"image","media_type":…,"size":N,"data":"<base64>"}
// (size is len(Data()), so a reader of the JSON needs not decode), or
// {"type":"image","url":…} for an image by URL.
type Parts []Part

type canonicalPart struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Size      *int   `json:"size,omitempty"`
	Data      []byte `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	Name      string `json:"name,omitempty"`
}

// MarshalJSON writes the parts in the canonical form of the tool_result event.
func (ps Parts) MarshalJSON() ([]byte, error) {
	out := make([]json.RawMessage, 0, len(ps))
	for _, p := range ps {
		var b []byte
		var err error
		if p.kind == "text" {
			b, err = json.Marshal(struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}{"text", p.text})
		} else {
			c := canonicalPart{Type: p.kind, MediaType: p.mediaType, URL: p.url, Name: p.name}
			if p.url == "" {
				n := len(p.data)
				c.Size, c.Data = &n, p.data
				if c.Data == nil {
					c.Data = []byte{}
				}
			}
			b, err = json.Marshal(c)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the canonical form back (size is implied by the data).
func (ps *Parts) UnmarshalJSON(b []byte) error {
	var in []canonicalPart
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	out := make(Parts, 0, len(in))
	for _, c := range in {
		out = append(out, Part{kind: c.Type, text: c.Text, data: c.Data, url: c.URL,
			mediaType: c.MediaType, name: c.Name})
	}
	*ps = out
	return nil
}
