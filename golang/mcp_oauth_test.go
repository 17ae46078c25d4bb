package panto

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// oauthFixture starts tests/mcp/oauth_server.py (the mcp package's resource and
// authorization servers on loopback): its base URL.
func oauthFixture(t *testing.T) string {
	t.Helper()
	venv, err := mcpVenv()
	if err != nil {
		t.Fatalf("tests/mcp/venv.sh: %v", err)
	}
	script, err := filepath.Abs(filepath.Join("..", "tests", "mcp", "oauth_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PORT ") {
		t.Fatalf("the OAuth fixture said %q (%v)", line, err)
	}
	return "http://127.0.0.1:" + strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
}

// memoryStore is a host's token store.
type memoryStore struct {
	mu    sync.Mutex
	saved map[string]string
	loads int
}

func (m *memoryStore) Load(url string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	s, ok := m.saved[url]
	return s, ok
}

func (m *memoryStore) Save(url, tokens string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saved[url] = tokens
}

// browse follows an authorization URL (the authorization server approves at once and
// redirects to panto's loopback listener), as a host's opener may, blocking.
func browse(url string) error {
	// No connection kept: goleak checks for the transport's goroutines.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(page), "panto is signed in") {
		return errors.New("not signed in: " + string(page))
	}
	return nil
}

func whoami(t *testing.T, agent *Agent, id string) string {
	t.Helper()
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := ""
	for ev := range s.Iter() {
		if r, ok := ev.(*ToolResult); ok && r.CallID == id {
			if r.IsError {
				t.Fatalf("whoami: %s", r.Output)
			}
			out = r.Output
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	return out
}

func TestMCPOAuthCodeFlowThroughTheHostsHooks(t *testing.T) {
	defer verifyNoLeaks(t)
	base := oauthFixture(t)
	url := base + "/mcp"
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"w", "sec__whoami", `{}`}))),
		exchange(sseResponse(textSSE("signed in")), "resource http"),
		exchange(sseResponse(toolCallSSE([3]string{"w2", "sec__whoami", `{}`}))),
		exchange(sseResponse(textSSE("from the store")), "resource http"),
	))
	store := &memoryStore{saved: map[string]string{}}
	var mu sync.Mutex
	var opened []string
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"sec": {URL: url, OAuth: &OAuth{}}}
	cfg.MCPTokenStore = store
	cfg.MCPOpenURL = func(u string) error {
		mu.Lock()
		opened = append(opened, u)
		mu.Unlock()
		return browse(u)
	}
	agent := newTestAgent(t, cfg)
	who := whoami(t, agent, "w")
	if !strings.HasPrefix(who, "client ") || !strings.HasSuffix(who, " resource "+url) || strings.Contains(who, "panto-cc") {
		t.Fatalf("whoami: %q", who)
	}
	mu.Lock()
	n := len(opened)
	first := ""
	if n > 0 {
		first = opened[0]
	}
	mu.Unlock()
	if n != 1 || !strings.Contains(first, "code_challenge_method=S256") {
		t.Fatalf("opened: %d %q", n, first)
	}
	store.mu.Lock()
	saved := store.saved[url]
	store.mu.Unlock()
	if saved == "" {
		t.Fatal("nothing saved for the server's URL")
	}
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}

	// A new agent with the same store: the saved token, no one signs in again.
	agent = newTestAgent(t, cfg)
	if again := whoami(t, agent, "w2"); again != who {
		t.Fatalf("again: %q, first %q", again, who)
	}
	mu.Lock()
	n = len(opened)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("opened %d times", n)
	}
}

func TestMCPOAuthRefusals(t *testing.T) {
	defer verifyNoLeaks(t)
	base := oauthFixture(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("never")))))
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"sec": {URL: base + "/mcp", OAuth: &OAuth{}}}
	cfg.MCPOpenURL = func(string) error { return errors.New("no browser here") }
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	for range s.Iter() {
	}
	var pe *Error
	if err := s.Err(); !errors.As(err, &pe) || pe.Kind != KindAuthentication {
		t.Fatalf("Err: %v", err)
	}
	s.Close()

	// Hooks without MCP servers: a config error.
	plain := testConfig(srv)
	plain.MCPOpenURL = func(string) error { return nil }
	if _, err := NewAgent(plain); !errors.As(err, &pe) || pe.Kind != KindConfig {
		t.Fatalf("NewAgent: %v", err)
	}
}
