package panto

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestMCPSamplingAndElicitationThroughConfigAndEvents runs a turn against the MCP
// reference server with sampling and elicitation enabled in its configuration: the
// server's sampling request is answered by the agent's model (capped at
// SamplingMaxTokens) and its elicitation declined (a Go host lends no answerer), each
// reported by its event before the calls' results are in. Both calls are the same
// server's, and nothing on stdio says which call a server's request was made for: an
// event comes before the result of a call still running when its request was settled,
// so before the second result, not necessarily before its own call's.
func TestMCPSamplingAndElicitationThroughConfigAndEvents(t *testing.T) {
	entry := everything(t)
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE(
			[3]string{"c1", "ev__trigger-sampling-request", `{"prompt":"name a colour","maxTokens":500}`},
			[3]string{"c2", "ev__trigger-elicitation-request", `{}`},
		)), "ev__trigger-elicitation-request"),
		exchange(sseResponse(textSSE("teal")), "You are a helpful test server."),
		exchange(sseResponse(textSSE("done")), "User declined"),
	))
	cfg := samplingConfig(srv, entry)
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var sampled []*McpSamplingRequest
	var elicited []*McpElicitationRequest
	results := map[string]*ToolResult{}
	var complete *MessageComplete
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *McpSamplingRequest:
			if len(results) == 2 {
				t.Errorf("the sampling event after both results: %+v", e)
			}
			sampled = append(sampled, e)
		case *McpElicitationRequest:
			if len(results) == 2 {
				t.Errorf("the elicitation event after both results: %+v", e)
			}
			elicited = append(elicited, e)
		case *ToolResult:
			results[e.CallID] = e
		case *MessageComplete:
			complete = e
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	want := McpSamplingRequest{Server: "ev", Summary: "Resource trigger-sampling-request context: name a colour", MaxTokens: 64, Outcome: "answered"}
	if len(sampled) != 1 || *sampled[0] != want {
		t.Errorf("sampling events: %+v", sampled)
	}
	if len(elicited) != 1 || elicited[0].Server != "ev" || elicited[0].Outcome != "decline" {
		t.Errorf("elicitation events: %+v", elicited)
	}
	if r := results["c1"]; r == nil || r.IsError || !strings.Contains(r.Output, `"text": "teal"`) {
		t.Errorf("sampling result: %+v", r)
	}
	if r := results["c2"]; r == nil || r.IsError || !strings.Contains(r.Output, "User declined") {
		t.Errorf("elicitation result: %+v", r)
	}
	if complete == nil || complete.Text != "done" {
		t.Errorf("message_complete: %+v", complete)
	}
	if reqs := srv.requests(t); len(reqs) != 3 {
		t.Errorf("%d model requests, want 3", len(reqs))
	}
}

// hooksTurn runs a turn against the MCP reference server with sampling and elicitation
// enabled and cfg's hooks set by with; it returns the turn's events by kind.
type hooksTurn struct {
	sampled  []*McpSamplingRequest
	elicited []*McpElicitationRequest
	results  map[string]*ToolResult
	complete *MessageComplete
	requests int
}

// samplingConfig is testConfig(srv) with one MCP server "ev", server-everything at
// entry over stdio, whose sampling (at most 64 tokens) and elicitation are on.
func samplingConfig(srv *testServer, entry string) Config {
	on := true
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"ev": {
		Command:           "node",
		Args:              []string{entry, "stdio"},
		Sampling:          &on,
		SamplingMaxTokens: 64,
		Elicitation:       &on,
	}}
	return cfg
}

func runHooksTurn(t *testing.T, approved bool, with func(*Config)) hooksTurn {
	t.Helper()
	entry := everything(t)
	exchanges := []obj{exchange(sseResponse(toolCallSSE(
		[3]string{"c1", "ev__trigger-sampling-request", `{"prompt":"name a colour","maxTokens":500}`},
		[3]string{"c2", "ev__trigger-elicitation-request", `{}`},
	)), "ev__trigger-elicitation-request")}
	if approved {
		exchanges = append(exchanges,
			exchange(sseResponse(textSSE("teal")), "You are a helpful test server."),
			exchange(sseResponse(textSSE("done")), "Ada Lovelace"))
	} else {
		exchanges = append(exchanges, exchange(sseResponse(textSSE("done")), "User declined"))
	}
	srv := startServer(t, scenario(exchanges...))
	cfg := samplingConfig(srv, entry)
	with(&cfg)
	agent := newTestAgent(t, cfg)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := hooksTurn{results: map[string]*ToolResult{}}
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *McpSamplingRequest:
			out.sampled = append(out.sampled, e)
		case *McpElicitationRequest:
			out.elicited = append(out.elicited, e)
		case *ToolResult:
			out.results[e.CallID] = e
		case *MessageComplete:
			out.complete = e
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if out.complete == nil || out.complete.Text != "done" {
		t.Errorf("message_complete: %+v", out.complete)
	}
	out.requests = len(srv.requests(t))
	return out
}

// TestMCPSamplingApprovedAndElicitationAccepted: Config.MCPApproveSampling sees the
// server's sampling request and lets the agent's model answer it; Config.MCPElicit
// answers the server's elicitation with content the tool's result shows.
func TestMCPSamplingApprovedAndElicitationAccepted(t *testing.T) {
	var mu sync.Mutex
	var approvals []SamplingApproval
	var prompts []ElicitationPrompt
	turn := runHooksTurn(t, true, func(cfg *Config) {
		cfg.MCPApproveSampling = func(r SamplingApproval) bool {
			mu.Lock()
			defer mu.Unlock()
			approvals = append(approvals, r)
			return true
		}
		cfg.MCPElicit = func(p ElicitationPrompt) ElicitationAnswer {
			mu.Lock()
			defer mu.Unlock()
			prompts = append(prompts, p)
			return ElicitationAnswer{Action: ElicitationAccept, Content: map[string]any{"name": "Ada Lovelace", "check": true}}
		}
	})
	mu.Lock()
	defer mu.Unlock()
	want := SamplingApproval{
		Server:       "ev",
		Summary:      "Resource trigger-sampling-request context: name a colour",
		MaxTokens:    64,
		SystemPrompt: "You are a helpful test server.",
		Messages:     []SamplingMessage{{Role: "user", Text: "Resource trigger-sampling-request context: name a colour"}},
	}
	if len(approvals) != 1 {
		t.Fatalf("approvals: %+v", approvals)
	}
	got := approvals[0]
	if got.Temperature == nil || *got.Temperature < 0 || *got.Temperature > 2 {
		t.Errorf("temperature: %v", got.Temperature)
	}
	got.Temperature = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("approval: %+v", got)
	}
	if len(prompts) != 1 || prompts[0].Server != "ev" || !strings.Contains(string(prompts[0].RequestedSchema), `"required":["name"]`) {
		t.Errorf("prompts: %+v", prompts)
	}
	if len(turn.sampled) != 1 || turn.sampled[0].Outcome != "answered" {
		t.Errorf("sampling events: %+v", turn.sampled)
	}
	if len(turn.elicited) != 1 || turn.elicited[0].Outcome != "accept" {
		t.Errorf("elicitation events: %+v", turn.elicited)
	}
	if r := turn.results["c1"]; r == nil || r.IsError || !strings.Contains(r.Output, `"text": "teal"`) {
		t.Errorf("sampling result: %+v", r)
	}
	if r := turn.results["c2"]; r == nil || r.IsError || !strings.Contains(r.Output, "- Name: Ada Lovelace") || !strings.Contains(r.Output, "- Agreed to terms: true") {
		t.Errorf("elicitation result: %+v", r)
	}
	if turn.requests != 3 {
		t.Errorf("%d model requests, want 3", turn.requests)
	}
}

// TestMCPSamplingRefusedAndElicitationDeclined: a sampling request the host refuses is
// an error for the server and no model request; the zero ElicitationAnswer declines.
func TestMCPSamplingRefusedAndElicitationDeclined(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	turn := runHooksTurn(t, false, func(cfg *Config) {
		cfg.MCPApproveSampling = func(SamplingApproval) bool {
			mu.Lock()
			defer mu.Unlock()
			asked++
			return false
		}
		cfg.MCPElicit = func(ElicitationPrompt) ElicitationAnswer {
			mu.Lock()
			defer mu.Unlock()
			asked++
			return ElicitationAnswer{}
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if asked != 2 {
		t.Errorf("the hooks were called %d times, want 2", asked)
	}
	if len(turn.sampled) != 1 || turn.sampled[0].Outcome != "denied" {
		t.Errorf("sampling events: %+v", turn.sampled)
	}
	if len(turn.elicited) != 1 || turn.elicited[0].Outcome != "decline" {
		t.Errorf("elicitation events: %+v", turn.elicited)
	}
	if r := turn.results["c1"]; r == nil || !r.IsError || !strings.Contains(r.Output, "declined") {
		t.Errorf("sampling result: %+v", r)
	}
	if r := turn.results["c2"]; r == nil || r.IsError || !strings.Contains(r.Output, "User declined") {
		t.Errorf("elicitation result: %+v", r)
	}
	if turn.requests != 2 {
		t.Errorf("%d model requests, want 2 (none for the refused sampling request)", turn.requests)
	}
}

// TestMCPSamplingHooksNeedMCPServers: hooks on an agent without MCP servers are a
// config error naming Config.
func TestMCPSamplingHooksNeedMCPServers(t *testing.T) {
	srv := startServer(t, scenario(exchange(sseResponse(textSSE("done")))))
	cfg := testConfig(srv)
	cfg.MCPElicit = func(ElicitationPrompt) ElicitationAnswer { return ElicitationAnswer{} }
	_, err := NewAgent(cfg)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindConfig {
		t.Fatalf("NewAgent: %v", err)
	}
}
