package panto

import (
	"context"
	"strings"
	"testing"
)

// TestMCPSamplingAndElicitationThroughConfigAndEvents runs a turn against the MCP
// reference server with sampling and elicitation enabled in its configuration: the
// server's sampling request is answered by the agent's model (capped at
// SamplingMaxTokens) and its elicitation declined (a Go host lends no answerer), each
// reported by its event before the call's result.
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
	on := true
	cfg := testConfig(srv)
	cfg.MCPServers = map[string]MCPServer{"ev": {
		Command:           "node",
		Args:              []string{entry, "stdio"},
		Sampling:          &on,
		SamplingMaxTokens: 64,
		Elicitation:       &on,
	}}
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
			if results["c1"] != nil {
				t.Errorf("the sampling event after the result: %+v", e)
			}
			sampled = append(sampled, e)
		case *McpElicitationRequest:
			if results["c2"] != nil {
				t.Errorf("the elicitation event after the result: %+v", e)
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
