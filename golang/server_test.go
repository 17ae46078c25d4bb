package panto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testServer is one panto-testserver subprocess (the Rust binary from tests/server),
// listening on a port of its own choosing.
type testServer struct {
	url string
	cmd *exec.Cmd
}

// serverBinary finds panto-testserver: $PANTO_TESTSERVER, else the release or debug
// build of the shared cargo target directory.
func serverBinary(tb testing.TB) string {
	if p := os.Getenv("PANTO_TESTSERVER"); p != "" {
		return p
	}
	p := defaultServerBinary()
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("panto-testserver not found: build it (cargo build --release -p panto-testserver) or set PANTO_TESTSERVER")
	}
	return p
}

func defaultServerBinary() string {
	dir := os.Getenv("CARGO_TARGET_DIR")
	if dir == "" {
		dir = filepath.Join("..", "target")
	}
	for _, mode := range []string{"release", "debug"} {
		p := filepath.Join(dir, mode, "panto-testserver")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join(dir, "release", "panto-testserver")
}

// startServer runs panto-testserver with the given scenario; it stops when the test ends.
func startServer(tb testing.TB, scenario any) *testServer {
	tb.Helper()
	srv, stop, err := launchServer(serverBinary(tb), tb.TempDir(), scenario)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return srv
}

// launchServer starts panto-testserver (port 0) and returns its URL and how to stop it.
func launchServer(binary, dir string, scenario any) (*testServer, func(), error) {
	js, err := json.Marshal(scenario)
	if err != nil {
		return nil, nil, err
	}
	file := filepath.Join(dir, "scenario.json")
	if err := os.WriteFile(file, js, 0o644); err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(binary, "--scenario", file, "--port", "0", "--exit-on-stdin-eof")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		stop()
		return nil, nil, fmt.Errorf("panto-testserver did not start: %q %v", line, err)
	}
	return &testServer{url: url, cmd: cmd}, stop, nil
}

// controlClient keeps no idle connections (and so no goroutines for goleak to find).
var controlClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// control POSTs to one of the server's /_panto endpoints.
func (s *testServer) control(tb testing.TB, path string) {
	tb.Helper()
	resp, err := controlClient.Post(s.url+path, "application/json", bytes.NewReader(nil))
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("%s: HTTP %d", path, resp.StatusCode)
	}
}

// stats returns the server's /_panto/stats.
func (s *testServer) stats(tb testing.TB) map[string]int {
	tb.Helper()
	resp, err := controlClient.Get(s.url + "/_panto/stats")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// ---- scenario builders (OpenAI Chat Completions SSE) ----------------------------------

type obj = map[string]any

func chunk(delta obj, finish any) obj {
	return obj{"data": obj{
		"id": "chatcmpl-go", "object": "chat.completion.chunk", "created": 1730000000,
		"model": "gpt-test", "choices": []any{obj{"index": 0, "delta": delta, "finish_reason": finish}},
	}}
}

func usageChunk(in, out int) obj {
	return obj{"data": obj{
		"id": "chatcmpl-go", "object": "chat.completion.chunk", "created": 1730000000,
		"model": "gpt-test", "choices": []any{}, "usage": obj{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	}}
}

var doneItem = obj{"data": "[DONE]"}

// textSSE is a streamed text answer made of parts.
func textSSE(parts ...string) []any {
	items := []any{chunk(obj{"role": "assistant", "content": ""}, nil)}
	for _, p := range parts {
		items = append(items, chunk(obj{"content": p}, nil))
	}
	return append(items, chunk(obj{}, "stop"), usageChunk(10, len(parts)), doneItem)
}

// toolCallSSE is a message calling tool name with args (one call per id).
func toolCallSSE(calls ...[3]string) []any {
	items := []any{}
	for i, c := range calls {
		items = append(items, chunk(obj{"role": "assistant", "tool_calls": []any{obj{
			"index": i, "id": c[0], "type": "function", "function": obj{"name": c[1], "arguments": c[2]},
		}}}, nil))
	}
	return append(items, chunk(obj{}, "tool_calls"), usageChunk(20, 5), doneItem)
}

func exchange(response obj, match ...string) obj {
	m := obj{"method": "POST", "path": "/v1/chat/completions"}
	if len(match) > 0 {
		m["body_contains"] = match
	}
	return obj{"match": m, "response": response}
}

func scenario(exchanges ...obj) obj { return obj{"exchanges": exchanges} }

func sseResponse(items []any) obj { return obj{"status": 200, "sse": items} }

// testConfig points an agent at the server, with no retries unless the test says so.
func testConfig(s *testServer) Config {
	return Config{
		Provider: "openai", Model: "gpt-test", BaseURL: s.url + "/v1", APIKey: "sk-test-secret-key",
		Retry: Retry{MaxRetries: Int(0)},
	}
}

func newTestAgent(tb testing.TB, cfg Config) *Agent {
	tb.Helper()
	a, err := NewAgent(cfg)
	if err != nil {
		tb.Fatalf("NewAgent: %v", err)
	}
	tb.Cleanup(func() { _ = a.Close() })
	return a
}

// eventually polls cond (a state the code under test reaches by itself) until it holds.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func types(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, e.Type())
	}
	return b.String()
}
