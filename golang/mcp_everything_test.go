package panto

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// everythingEntry is the MCP reference server's entry point (server-everything, pinned
// in tests/mcp/everything/, installed from npm once by tests/mcp/everything.sh), or the
// script's error; exit status 3 means node or npm is missing.
var everythingEntry = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("bash", filepath.Join("..", "tests", "mcp", "everything.sh")).Output()
	return strings.TrimSpace(string(out)), err
})

// everything returns the server's entry point, skipping the test without node and npm
// outside CI.
func everything(t *testing.T) string {
	t.Helper()
	entry, err := everythingEntry()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 && os.Getenv("CI") != "true" {
		t.Skip("node and npm are needed for the server-everything tests")
	}
	if err != nil {
		t.Fatalf("tests/mcp/everything.sh: %v", err)
	}
	return entry
}

// everythingHTTP starts the server over Streamable HTTP on a port of its own and returns
// its MCP endpoint; the server is killed when the test ends.
func everythingHTTP(t *testing.T, entry string) string {
	t.Helper()
	cmd := exec.Command("node", filepath.Join("..", "tests", "mcp", "everything_http.mjs"), entry)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT ")
	if err != nil || !ok {
		t.Fatalf("server-everything said %q: %v", line, err)
	}
	return "http://127.0.0.1:" + port + "/mcp"
}

// checkEverythingProgress runs a turn calling the server's long operation (two steps)
// and checks its progress events come before its result, the last one at 2 of 2.
func checkEverythingProgress(t *testing.T, server MCPServer) {
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"c1", "ev__trigger-long-running-operation", `{"duration":0.6,"steps":2}`},
			[3]string{"c2", "ev__get-sum", `{"a":20,"b":22}`},
		))),
		exchange(sseResponse(textSSE("done")), "c1"),
	))
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"ev": server}
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var progress []*ToolProgress
	results := map[string]*ToolResult{}
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *ToolProgress:
			if results["c1"] != nil {
				t.Errorf("progress after the result: %+v", e)
			}
			if e.CallID == "c1" {
				progress = append(progress, e)
			}
		case *ToolResult:
			results[e.CallID] = e
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if len(progress) == 0 {
		t.Fatal("no tool_progress event")
	}
	if last := progress[len(progress)-1]; last.Progress != 2 || last.Total != 2 || last.Name != "ev__trigger-long-running-operation" {
		t.Errorf("last progress: %+v", last)
	}
	if r := results["c1"]; r == nil || r.IsError || !strings.HasPrefix(r.Output, "Long running operation completed.") {
		t.Errorf("long operation: %+v", r)
	}
	if r := results["c2"]; r == nil || r.IsError || r.Output != "The sum of 20 and 22 is 42." {
		t.Errorf("get-sum: %+v", r)
	}
}

func TestMCPEverythingProgressOverStdio(t *testing.T) {
	entry := everything(t)
	defer verifyNoLeaks(t)
	checkEverythingProgress(t, MCPServer{Command: "node", Args: []string{entry, "stdio"}})
}

func TestMCPEverythingProgressOverStreamableHTTP(t *testing.T) {
	entry := everything(t)
	url := everythingHTTP(t, entry)
	defer verifyNoLeaks(t)
	checkEverythingProgress(t, MCPServer{URL: url})
}
