package panto

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var tinyPNG = []byte("\x89PNG\r\n\x1a\ntiny")

// A turn's input as text and attachments (attachments-openai.json: the server answers
// only a request carrying the three parts in order — text, the image's bytes as a data:
// URL, an image URL).
func TestStreamPartsSendsTextAndImagesInOrder(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "attachments-openai.json"))
	agent := newTestAgent(t, testConfig(srv))
	cat := filepath.Join(t.TempDir(), "cat.png")
	if err := os.WriteFile(cat, tinyPNG, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := agent.StreamParts(context.Background(),
		Text("What is in this picture?"), ImageFile(cat), ImageURL("https://example.com/cat.png"))
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	done, ok := evs[len(evs)-1].(*MessageComplete)
	if !ok || done.Text != "A cat." {
		t.Fatalf("last event %#v", evs[len(evs)-1])
	}
	transcript, err := agent.Transcript()
	if err != nil {
		t.Fatal(err)
	}
	if got := transcript[1]; got.Kind != "attachment" || got.Name != "cat.png" || got.Attachment != "image" ||
		got.MediaType != "image/png" || got.Size == nil || *got.Size != uint64(len(tinyPNG)) {
		t.Fatalf("transcript entry %+v", got)
	}
}

// The same input by bytes, through TurnOptions.Input.
func TestTurnOptionsInputTakesBytes(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "attachments-openai.json"))
	agent := newTestAgent(t, testConfig(srv))
	s, err := agent.StreamWith(context.Background(), "", TurnOptions{Input: []Part{
		Text("What is in this picture?"), ImageBytes(tinyPNG, ""), ImageURL("https://example.com/cat.png"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	if done, ok := evs[len(evs)-1].(*MessageComplete); !ok || done.Text != "A cat." {
		t.Fatalf("last event %#v", evs[len(evs)-1])
	}
}

// Mistakes are KindConfig errors before anything is sent.
func TestPartsThatCannotBeSentAreConfigErrors(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "attachments-openai.json"))
	agent := newTestAgent(t, testConfig(srv))
	missing := filepath.Join(t.TempDir(), "no-such.png")
	for _, tc := range []struct {
		parts []Part
		want  string
	}{
		{[]Part{Text("x"), ImageFile(missing)}, "no-such.png"},
		{[]Part{ImageBytes([]byte("not an image"), "")}, "cannot tell the type"},
		{[]Part{Text("x"), DocumentURL("https://example.com/a.pdf")}, "take a PDF as bytes, not by URL"},
	} {
		_, err := agent.StreamParts(context.Background(), tc.parts...)
		var pe *Error
		if !errors.As(err, &pe) || pe.Kind != KindConfig || !strings.Contains(pe.Message, tc.want) {
			t.Fatalf("%v: want a config error saying %q, got %v", tc.parts, tc.want, err)
		}
	}
	if n := srv.stats(t)["connections_total"]; n != 1 {
		t.Fatalf("%d connections: something was sent", n)
	}
}

// An attachment larger than max_message_bytes is a KindConfig error before anything is
// sent.
func TestAPartPastMaxMessageBytesIsAConfigError(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "attachments-openai.json"))
	cfg := testConfig(srv)
	cfg.MaxMessageBytes = 1024
	agent := newTestAgent(t, cfg)
	big := append(append([]byte(nil), tinyPNG...), make([]byte, 2000)...)
	_, err := agent.StreamParts(context.Background(), Text("x"), ImageBytes(big, ""))
	var pe *Error
	if !errors.As(err, &pe) || pe.Kind != KindConfig || !strings.Contains(pe.Message, "max_message_bytes") {
		t.Fatalf("want a config error naming max_message_bytes, got %v", err)
	}
	if n := srv.stats(t)["connections_total"]; n != 1 {
		t.Fatalf("%d connections: something was sent", n)
	}
}

var cameraTool = Tool{Name: "camera", Description: "Takes a picture."}

// wantToolImage checks the turn of tool-image-openai.json (whose server answers the
// second request only if the tool's text and image reached it) and its tool_result.
func wantToolImage(t *testing.T, evs []Event) {
	t.Helper()
	if done, ok := evs[len(evs)-1].(*MessageComplete); !ok || done.Text != "A cat." {
		t.Fatalf("last event %#v", evs[len(evs)-1])
	}
	var result *ToolResult
	for _, ev := range evs {
		if r, ok := ev.(*ToolResult); ok {
			result = r
		}
	}
	if result == nil || result.Output != "one picture" || result.IsError || len(result.Parts) != 2 {
		t.Fatalf("tool_result %#v", result)
	}
	text, img := result.Parts[0], result.Parts[1]
	if text.Kind() != "text" || text.Text() != "one picture" || img.Kind() != "image" ||
		img.MediaType() != "image/png" || string(img.Data()) != string(tinyPNG) {
		t.Fatalf("parts %+v", result.Parts)
	}
	js, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	want := `"output":"one picture","is_error":false,"parts":[{"type":"text","text":"one picture"},` +
		`{"type":"image","media_type":"image/png","size":12,"data":"iVBORw0KGgp0aW55"}]}`
	if !strings.HasSuffix(string(js), want) {
		t.Fatalf("JSON %s", js)
	}
	var back ToolResult
	if err := json.Unmarshal(js, &back); err != nil || len(back.Parts) != 2 ||
		string(back.Parts[1].Data()) != string(tinyPNG) {
		t.Fatalf("read back %+v: %v", back, err)
	}
}

// A Go tool returns text and an image (Tool.PartsFunc): the model gets both, and
// tool_result carries them.
func TestPartsFuncReturnsAnImage(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "tool-image-openai.json"))
	cfg := testConfig(srv)
	camera := cameraTool
	camera.PartsFunc = func(ctx context.Context, args json.RawMessage) ([]Part, error) {
		return []Part{Text("one picture"), ImageBytes(tinyPNG, "")}, nil
	}
	cfg.Tools = []Tool{camera}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "What do you see?")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantToolImage(t, drainTurn(t, s))
}

// A host tool answered with Stream.SubmitToolParts, after two refused answers (a
// document, an unreadable file: kind tool, the call still waiting).
func TestSubmitToolPartsAnswersAHostTool(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "tool-image-openai.json"))
	cfg := testConfig(srv)
	cfg.Tools = []Tool{cameraTool}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "What do you see?")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	missing := filepath.Join(t.TempDir(), "no-such.png")
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
		start, ok := ev.(*ToolCallStart)
		if !ok {
			continue
		}
		for _, bad := range []struct {
			parts []Part
			want  string
		}{
			{[]Part{Text("x"), DocumentBytes([]byte("%PDF-1.4"))}, "text and images only"},
			{[]Part{ImageFile(missing)}, "no-such.png"},
		} {
			err := s.SubmitToolParts(start.CallID, bad.parts, false)
			var pe *Error
			if !errors.As(err, &pe) || pe.Kind != KindTool || !strings.Contains(pe.Message, bad.want) {
				t.Fatalf("want a tool error saying %q, got %v", bad.want, err)
			}
		}
		if err := s.SubmitToolParts(start.CallID, []Part{Text("one picture"), ImageBytes(tinyPNG, "image/png")}, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	wantToolImage(t, evs)
}

func TestValidUTF8CopiesTheCallersPartsInsteadOfRewritingThem(t *testing.T) {
	parts := []Part{Text("ok"), Text("a\xff\xfeb"), ImageURL("https://example.com/cat.png")}
	out := validUTF8(parts)
	if parts[1].text != "a\xff\xfeb" {
		t.Fatalf("the caller's part was rewritten: %q", parts[1].text)
	}
	if out[0].text != "ok" || out[1].text != "a\uFFFDb" || out[2].url != parts[2].url {
		t.Fatalf("validUTF8: %+v", out)
	}
	// Valid parts are passed on as they are, not copied.
	valid := []Part{Text("fine")}
	if got := validUTF8(valid); &got[0] != &valid[0] {
		t.Fatal("valid parts were copied")
	}
}
