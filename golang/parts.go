package panto

import "encoding/json"

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
