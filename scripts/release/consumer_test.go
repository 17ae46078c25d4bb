// The test of the released Go module (dist/go), run by scripts/release.sh from a module
// made afresh outside the repository, which requires github.com/panto/panto/panto with
// a replace to dist/go and builds with no CGO_LDFLAGS: the library comes from the
// module's own prebuilt/ directory. It streams the demo turn from panto-testserver
// ($PANTO_TESTSERVER, playing $PANTO_SCENARIO): the model calls `weather`, a Go
// function answers it, and the answer streams.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/panto/panto/panto"
)

func TestDemoTurn(t *testing.T) {
	server := exec.Command(os.Getenv("PANTO_TESTSERVER"), "--scenario", os.Getenv("PANTO_SCENARIO"))
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatalf("starting panto-testserver ($PANTO_TESTSERVER): %v", err)
	}
	defer func() { _ = server.Process.Kill(); _ = server.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("panto-testserver printed no address: %v", err)
	}
	baseURL := strings.TrimPrefix(strings.TrimSpace(line), "listening on ") + "/v1"

	weather := panto.Tool{
		Name:        "weather",
		Description: "Current weather of a city",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			return `{"city":"Paris","temp_c":18,"sky":"sunny"}`, nil
		},
	}
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o-mini", BaseURL: baseURL,
		APIKey: "test", Tools: []panto.Tool{weather}})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	// A hang-catcher only: the scripted turn takes milliseconds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := agent.Stream(ctx, "What's the weather in Paris?")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var calls, results []string
	var text strings.Builder
	var last panto.Event
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ToolCallStart:
			calls = append(calls, e.Name)
		case *panto.ToolResult:
			if e.IsError {
				t.Errorf("tool result is an error: %s", e.Output)
			}
			results = append(results, e.Output)
		case *panto.ContentDelta:
			if e.Kind == "text" {
				text.WriteString(e.Text)
			}
		}
		last = ev
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream failed: %v", err)
	}
	if len(calls) != 1 || calls[0] != "weather" || len(results) != 1 {
		t.Errorf("tool calls %v, results %v; want one weather call answered", calls, results)
	}
	if got, want := text.String(), "It is 18°C and sunny in Paris."; got != want {
		t.Errorf("streamed text %q, want %q", got, want)
	}
	if mc, ok := last.(*panto.MessageComplete); !ok || mc.Text != text.String() {
		t.Errorf("last event %#v, want message_complete with the streamed text", last)
	}
}
