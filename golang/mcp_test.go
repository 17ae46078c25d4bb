package panto

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// mcpVenv is the venv with the MCP servers of the tests (pinned mcp and mcp-server-time
// from PyPI), made once by tests/mcp/venv.sh.
var mcpVenv = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("bash", filepath.Join("..", "tests", "mcp", "venv.sh")).Output()
	return strings.TrimSpace(string(out)), err
})

func mcpFixture(t *testing.T, extra ...string) MCPServer {
	t.Helper()
	venv, err := mcpVenv()
	if err != nil {
		t.Fatalf("tests/mcp/venv.sh: %v", err)
	}
	fixture, err := filepath.Abs(filepath.Join("..", "tests", "mcp", "fixture_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	return MCPServer{Command: filepath.Join(venv, "bin", "python"), Args: append([]string{fixture}, extra...)}
}

// groupMembers counts the live processes of process group pgid (Linux /proc).
func groupMembers(pgid int) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(pgid) {
			n++
		}
	}
	return n
}

// pidsWith lists the processes whose command line contains marker.
func pidsWith(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(cmd), "\x00", " "), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestMCPServersAsTools(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"c1", "fx__echo", `{"text":"from go"}`},
			[3]string{"c2", "fx__fail", `{}`},
			[3]string{"c3", "time__get_current_time", `{"timezone":"UTC"}`},
		))),
		exchange(sseResponse(textSSE("done")), "c1"),
	))
	venv, err := mcpVenv()
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("panto-go-%d-%d", os.Getpid(), time.Now().UnixNano())
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{
		"fx":   mcpFixture(t, "--cancel-marker", marker),
		"time": {Command: filepath.Join(venv, "bin", "mcp-server-time"), Args: []string{"--local-timezone", "UTC"}},
	}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]*ToolResult{}
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *ToolCallStart:
			if e.Host {
				t.Errorf("%s announced as a host tool", e.Name)
			}
		case *ToolResult:
			results[e.CallID] = e
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if r := results["c1"]; r == nil || r.Name != "fx__echo" || r.Output != "echo: from go" || r.IsError {
		t.Errorf("echo: %+v", r)
	}
	if r := results["c2"]; r == nil || r.Output != "the fixture failed on purpose" || !r.IsError {
		t.Errorf("fail: %+v", r)
	}
	if r := results["c3"]; r == nil || r.IsError || !strings.Contains(r.Output, `"timezone": "UTC"`) && !strings.Contains(r.Output, `"timezone":"UTC"`) {
		t.Errorf("time: %+v", r)
	}
	// The agent's servers stop with it: the fixture's process group empties.
	pids := pidsWith(marker)
	if len(pids) != 1 {
		t.Fatalf("fixture processes: %v", pids)
	}
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the server's processes end", func() bool { return groupMembers(pids[0]) == 0 })
}

func TestMCPServerThatCannotStart(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("never")))))
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"bad": mcpFixture(t, "--fail-start")}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	for range s.Iter() {
	}
	var pe *Error
	err = s.Err()
	if !errors.As(err, &pe) || pe.Kind != KindConnection ||
		!strings.Contains(pe.Message, `MCP server "bad"`) || !strings.Contains(pe.Message, "refusing to start") {
		t.Fatalf("err: %v", err)
	}
	// A bad key is named with its Go field.
	cfg.MCPServers = map[string]MCPServer{"x": {URL: "ftp://nowhere"}}
	if _, err := NewAgent(cfg); err == nil || !strings.Contains(err.Error(), "mcp_servers.x.url") {
		t.Fatalf("NewAgent: %v", err)
	}
}

// CallMCPTool: the fixture server's tools called outside a turn, the result given back as
// an answer's JSON, the tool's failure as a result, an unknown tool as KindConfig, the
// conversation untouched and nothing sent to the model, and a call blocked in the server
// cancelled by its ctx (the server is told).
func TestCallMCPToolOutsideATurn(t *testing.T) {
	defer verifyNoLeaks(t)
	srv := startServer(t, obj{"exchanges": []obj{}})
	marker := filepath.Join(t.TempDir(), "hang")
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"fx": mcpFixture(t, "--cancel-marker", marker)}
	agent := newTestAgent(t, cfg)
	ctx := context.Background()
	r, err := agent.CallMCPTool(ctx, "fx__echo", map[string]string{"text": "from go"})
	if err != nil || r.Output != "echo: from go" || r.IsError || r.Parts != nil {
		t.Fatalf("echo: %+v %v", r, err)
	}
	img, err := agent.CallMCPTool(ctx, "fx__image", nil)
	if err != nil || img.IsError || !strings.Contains(string(img.Parts), `"type":"image"`) {
		t.Fatalf("image: %+v %v", img, err)
	}
	if r, err := agent.CallMCPTool(ctx, "fx__fail", nil); err != nil || !r.IsError || r.Output != "the fixture failed on purpose" {
		t.Fatalf("fail: %+v %v", r, err)
	}
	var pe *Error
	if _, err := agent.CallMCPTool(ctx, "fx__nope", nil); !errors.As(err, &pe) || pe.Kind != KindConfig {
		t.Fatalf("unknown tool: %v", err)
	}
	if _, err := agent.CallMCPTool(ctx, "fx__echo", []int{1}); !errors.As(err, &pe) || pe.Kind != KindConfig {
		t.Fatalf("arguments that are not an object: %v", err)
	}
	// The JSON of an answer: a paused turn would read it back as the same result.
	if a := (Answers{}).CallResult("c", img); a.Len() != 1 {
		t.Fatal("CallResult added no answer")
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := agent.CallMCPTool(cctx, "fx__hang", nil)
		done <- err
	}()
	eventually(t, "the server has the call", func() bool {
		_, err := os.Stat(marker + ".started")
		return err == nil
	})
	select {
	case err := <-done:
		t.Fatalf("the call returned before it was cancelled: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-done:
		if !errors.As(err, &pe) || pe.Kind != KindCancelled || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the cancelled call hung")
	}
	eventually(t, "the server saw the cancellation", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	if h, err := agent.SaveHistory(); err != nil || strings.Contains(string(h), "echo") {
		t.Fatalf("history: %s %v", h, err)
	}
	if n := len(srv.requests(t)); n != 0 {
		t.Fatalf("the model got %d requests", n)
	}
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
}
