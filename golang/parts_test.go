package panto

import (
	"context"
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
