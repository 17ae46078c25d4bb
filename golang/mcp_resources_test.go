package panto

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mcpAgent is an agent whose one MCP server "fx" is the fixture server, started with extra.
func mcpAgent(t *testing.T, extra ...string) *Agent {
	t.Helper()
	agent, err := NewAgent(Config{Model: "m", APIKey: "sk-go", MCPServers: map[string]MCPServer{"fx": mcpFixture(t, extra...)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	return agent
}

func TestMCPResourcesAndPrompts(t *testing.T) {
	agent := mcpAgent(t)
	ctx := context.Background()
	resources, err := agent.MCPResources(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range resources {
		uris = append(uris, r.URI)
	}
	if got := strings.Join(uris, " "); got != "fixture://notes fixture://pixel.png file:///tmp/report.txt fixture://data.bin" {
		t.Fatalf("resources: %s", got)
	}
	if r := resources[0]; r.Server != "fx" || r.Title != "The notes" || r.MIMEType != "text/plain" || r.Size != nil {
		t.Fatalf("%+v", r)
	}
	if s := resources[1].Size; s == nil || *s != 70 {
		t.Fatalf("size: %v", s)
	}

	notes, err := agent.MCPReadResource(ctx, "", "fixture://notes")
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || notes[0].Text != "the notes" || notes[0].IsBlob || notes[0].Part.Kind() != "text" {
		t.Fatalf("%+v", notes)
	}
	data, err := agent.MCPReadResource(ctx, "fx", "fixture://data.bin")
	if err != nil || !data[0].IsBlob || string(data[0].Blob) != "\x00\x01\x02" {
		t.Fatalf("%+v %v", data, err)
	}
	pixel, err := agent.MCPReadResource(ctx, "", "fixture://pixel.png")
	if err != nil || pixel[0].Part.Kind() != "image" || pixel[0].Part.MediaType() != "image/png" ||
		!strings.HasPrefix(string(pixel[0].Part.Data()), "\x89PNG") {
		t.Fatalf("%+v %v", pixel, err)
	}
	_, err = agent.MCPReadResource(ctx, "", "fixture://nothing")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no resource fixture://nothing") {
		t.Fatalf("a missing resource: %v", err)
	}

	prompts, err := agent.MCPPrompts(ctx, "fx")
	if err != nil || len(prompts) != 2 || prompts[0].Name != "greet" || !prompts[0].Arguments[0].Required ||
		prompts[0].Arguments[1].Name != "style" {
		t.Fatalf("%+v %v", prompts, err)
	}
	got, err := agent.MCPGetPrompt(ctx, "", "greet", map[string]string{"name": "Go"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Description != "A greeting." || len(got.Messages) != 2 || got.Messages[0].Role != "user" ||
		got.Messages[0].Content[0].Text() != "Say hello to Go" || got.Messages[1].Content[0].Text() != "Hello, Go!" {
		t.Fatalf("%+v", got)
	}
	if _, err := agent.MCPGetPrompt(ctx, "", "greet", nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a missing argument: %v", err)
	}
	if _, err := agent.MCPPrompts(ctx, "nope"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "(the servers: fx)") {
		t.Fatalf("an unknown server: %v", err)
	}
	plain, err := NewAgent(Config{Model: "m", APIKey: "sk-go"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.MCPResources(ctx, ""); !errors.Is(err, ErrConfig) {
		t.Fatalf("no MCP servers: %v", err)
	}
}

func TestMCPReadResourceIsCancelledByItsContext(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "cancel-"+strconv.Itoa(os.Getpid()))
	agent := mcpAgent(t, "--cancel-marker", marker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := agent.MCPReadResource(ctx, "", "fixture://hang")
		done <- err
	}()
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	deadline := time.Now().Add(60 * time.Second)
	for !exists(marker + ".started") {
		if time.Now().After(deadline) {
			t.Fatal("the server never got the read")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the read ended before its context was cancelled: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cancelled read hung")
	}
	// The request was withdrawn: the server saw notifications/cancelled.
	for !exists(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the server was not told")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A context already done sends nothing.
	if _, err := agent.MCPPrompts(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
}
