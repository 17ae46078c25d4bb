package panto

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The generated config types write the JSON the core reads, by the rules of
// scripts/gen/golang.py, and read it back.
func TestConfigJSONFollowsTheGenerationRules(t *testing.T) {
	cfg := Config{
		Provider: "anthropic", Model: "m", BaseURL: "http://h/v1", APIKey: "k", System: "s",
		MaxTokens: 100, Temperature: Float(0.5), MaxSteps: 3, ToolConcurrency: 2,
		ToolTimeout: 1500 * time.Millisecond,
		Tools: []Tool{
			{Name: "a", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)},
			{Name: "b", Func: func(context.Context, json.RawMessage) (string, error) { return "", nil }},
		},
		Retry:    Retry{MaxRetries: Int(0), InitialDelay: time.Second},
		Timeouts: Timeouts{Idle: 2 * time.Second},
		Headers:  map[string]string{"x-a": "1"}, QueueCapacity: 8,
		MaxEventBytes: 2048, MaxMessageBytes: 4096, MaxToolOutputBytes: 512,
		Reasoning: &Reasoning{Effort: "high"}, PromptCaching: Bool(false),
		Compaction: &Compaction{ThresholdTokens: 10}, Compat: "vllm",
	}
	want := `{"provider":"anthropic","model":"m","base_url":"http://h/v1","api_key":"k","system":"s",` +
		`"max_tokens":100,"temperature":0.5,"tools":[{"name":"a","description":"d","parameters":{"type":"object"}},` +
		`{"name":"b"}],"max_steps":3,"tool_concurrency":2,"tool_timeout_ms":1500,` +
		`"retry":{"max_retries":0,"initial_delay_ms":1000},"timeouts":{"idle_ms":2000},"queue_capacity":8,` +
		`"headers":{"x-a":"1"},"max_event_bytes":2048,"max_message_bytes":4096,"max_tool_output_bytes":512,` +
		`"reasoning":{"effort":"high"},"prompt_caching":false,"compaction":{"threshold_tokens":10},"compat":"vllm"}`
	got, err := cfg.configJSON()
	if err != nil || string(got) != want {
		t.Fatalf("config JSON:\n got %s %v\nwant %s", got, err, want)
	}
	if js, _ := json.Marshal(cfg); string(js) != want {
		t.Errorf("json.Marshal(cfg) = %s", js)
	}
	// Zero values are left out (model is required: always written).
	if js, _ := json.Marshal(Config{Retry: Retry{}}); string(js) != `{"model":""}` {
		t.Errorf("zero config: %s", js)
	}
	// And read back: every field (a JSON 0 of max_retries as Int(0)), Func aside.
	var back Config
	if err := json.Unmarshal([]byte(want), &back); err != nil {
		t.Fatal(err)
	}
	cfg.Tools[1].Func = nil
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("read back:\n%#v\nwant\n%#v", back, cfg)
	}
	err = json.Unmarshal([]byte(`{"model":"m","retry":{"max_retrys":1}}`), &back)
	if err == nil || !strings.Contains(err.Error(), "retry: max_retrys: unknown key") {
		t.Errorf("unknown nested key: %v", err)
	}
	// The core accepts what is written, and names a key it refuses.
	if _, err := NewAgent(Config{Model: "m", Retry: Retry{MaxRetries: Int(101)}}); err == nil ||
		!strings.Contains(err.Error(), "retry.max_retries") {
		t.Errorf("max_retries 101: %v", err)
	}
}

// conformanceTurn plays tests/conformance/scenarios/NAME with its client's configuration
// (read by Config.UnmarshalJSON) and every tool answered at once by a Func; it returns
// the events and the library's canonical JSON of each.
func conformanceTurn(t *testing.T, name string) ([]Event, []string) {
	t.Helper()
	return conformanceTurnSteered(t, name, "")
}

// conformanceTurnSteered is conformanceTurn whose tools, when steer is not empty, each
// steer the turn with it before they answer (so a steering_delivered follows the step's
// results).
func conformanceTurnSteered(t *testing.T, name, steer string) ([]Event, []string) {
	t.Helper()
	running := make(chan *Stream, 1)
	dir := filepath.Join("..", "tests", "conformance", "scenarios", name)
	server, err := os.ReadFile(filepath.Join(dir, "server.json"))
	if err != nil {
		t.Fatal(err)
	}
	clientJS, err := os.ReadFile(filepath.Join(dir, "client.json"))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		Prompt string          `json:"prompt"`
		Config json.RawMessage `json:"config"`
		Tools  []struct {
			Tool
			Answer *struct {
				Output  string `json:"output"`
				IsError bool   `json:"is_error"`
				// Text and images: strings and {"type":"image","data":…}.
				Parts []json.RawMessage `json:"parts"`
			} `json:"answer"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(clientJS, &client); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, json.RawMessage(server))
	var cfg Config
	if err := json.Unmarshal(client.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.BaseURL, cfg.APIKey = srv.url, "sk-test"
	if cfg.Provider != "anthropic" {
		cfg.BaseURL += "/v1"
	}
	// Fallback models answer on the same server, on their provider's path.
	for i := range cfg.Fallback {
		f := &cfg.Fallback[i]
		if f.BaseURL == "" {
			f.BaseURL = srv.url
			if f.Provider != "anthropic" && f.Provider != "gemini" {
				f.BaseURL += "/v1"
			}
		}
		if f.APIKey == "" {
			f.APIKey = "sk-fallback"
		}
	}
	for _, tool := range client.Tools {
		tl := tool.Tool
		if a := tool.Answer; a != nil && a.Parts != nil {
			var parts []Part
			for _, raw := range a.Parts {
				var text string
				var img struct {
					Data      []byte `json:"data"`
					MediaType string `json:"media_type"`
				}
				if json.Unmarshal(raw, &text) == nil {
					parts = append(parts, Text(text))
				} else if err := json.Unmarshal(raw, &img); err == nil {
					parts = append(parts, ImageBytes(img.Data, img.MediaType))
				} else {
					t.Fatal(err)
				}
			}
			tl.PartsFunc = func(context.Context, json.RawMessage) ([]Part, error) { return parts, nil }
		} else if a != nil {
			tl.Func = func(context.Context, json.RawMessage) (string, error) {
				if steer != "" {
					s := <-running
					running <- s
					if err := s.Steer(steer); err != nil {
						return "", err
					}
				}
				if a.IsError {
					return "", errors.New(a.Output)
				}
				return a.Output, nil
			}
		}
		cfg.Tools = append(cfg.Tools, tl)
	}
	agent := newTestAgent(t, cfg)
	var canon []string
	canonicalHook.Store(&canonicalRecorder{fn: func(js string) { canon = append(canon, js) }})
	defer canonicalHook.Store(nil)
	s, err := agent.Stream(context.Background(), client.Prompt)
	if err != nil {
		t.Fatal(err)
	}
	running <- s
	return drainTurn(t, s), canon
}

// The generated convert reads the C record; for what the header does not carry it
// decodes the canonical JSON instead. Both paths must give the same struct, the
// convenience fields of BlockComplete included (setBlockParts is their JSON path), and
// a tool result's Parts (anthropic-tool-image).
func TestEventsFromTheCRecordEqualThoseFromTheirJSON(t *testing.T) {
	seen := map[string]bool{}
	steered := map[string]string{"openai-tool-single": "Also in Celsius, please."}
	for _, name := range []string{"anthropic-reasoning", "openai-max-tokens-mid-tool", "anthropic-retry-429",
		"openai-compaction-auto", "openai-tool-parallel", "openai-tool-error", "anthropic-tool-image", "openai-output-repair",
		"openai-tool-single", "anthropic-fallback-503"} {
		evs, canon := conformanceTurnSteered(t, name, steered[name])
		compareRecordAndJSON(t, name, evs, canon, seen)
	}
	// tool_progress and server_log come from an MCP server (no conformance scenario has
	// one): the fixture's report tool, its warnings let through by LogLevel.
	evs, canon := mcpProgressTurn(t)
	compareRecordAndJSON(t, "mcp progress", evs, canon, seen)
	// An MCP server's sampling and elicitation requests need the reference server
	// (server-everything, from npm): TestMCPSamplingAndElicitationThroughConfigAndEvents
	// reads them from the C record, and capi's payloads_carry_every_field checks each
	// field of their payloads.
	seen["mcp_sampling_request"], seen["mcp_elicitation_request"] = true, true
	for _, typ := range EventTypes() {
		if !seen[typ] {
			t.Errorf("no scenario produced %s", typ)
		}
	}
}

// compareRecordAndJSON checks that each event read from the C record equals the one
// decoded from the library's canonical JSON, and that json.Marshal writes that JSON; it
// notes each event type in seen.
func compareRecordAndJSON(t *testing.T, name string, evs []Event, canon []string, seen map[string]bool) {
	t.Helper()
	if len(evs) != len(canon) {
		t.Fatalf("%s: %d events, %d canonical lines", name, len(evs), len(canon))
	}
	for i, ev := range evs {
		seen[ev.Type()] = true
		fromJS := reflect.New(reflect.TypeOf(ev).Elem())
		if err := json.Unmarshal([]byte(canon[i]), fromJS.Interface()); err != nil {
			t.Fatalf("%s: %s: %v", name, canon[i], err)
		}
		if bc, ok := fromJS.Interface().(*BlockComplete); ok {
			bc.setBlockParts(bc.Content)
		}
		if diff := fieldDiff(reflect.ValueOf(ev).Elem(), fromJS.Elem()); diff != "" {
			t.Errorf("%s: event %d (%s): the C record and the JSON differ in %s", name, i, canon[i], diff)
		}
		if js := mustJSON(t, ev); !sameJSON(js, canon[i]) {
			t.Errorf("%s: json.Marshal %s, library %s", name, js, canon[i])
		}
	}
}

// mcpProgressTurn runs a turn whose model calls the fixture MCP server's report tool
// (two steps, each a progress notification and a warning log line) with the server's
// LogLevel "warning"; it returns the events, the library's canonical JSON of each, and
// checks the last progress and log events' values.
func mcpProgressTurn(t *testing.T) ([]Event, []string) {
	t.Helper()
	srv := startServer(t, scenario(
		exchange(sseResponse(toolCallSSE([3]string{"c1", "fx__report", `{"steps":2,"interval_ms":150}`}))),
		exchange(sseResponse(textSSE("done")), "c1"),
	))
	cfg := testConfig(srv)
	fx := mcpFixture(t, "--progress-tools")
	fx.LogLevel = "warning"
	cfg.MCPServers = map[string]MCPServer{"fx": fx}
	agent := newTestAgent(t, cfg)
	var canon []string
	canonicalHook.Store(&canonicalRecorder{fn: func(js string) { canon = append(canon, js) }})
	defer canonicalHook.Store(nil)
	s, err := agent.Stream(context.Background(), "go")
	if err != nil {
		t.Fatal(err)
	}
	evs := drainTurn(t, s)
	var progress *ToolProgress
	var log *ServerLog
	resultAt, lastAt := -1, -1
	for i, ev := range evs {
		switch e := ev.(type) {
		case *ToolProgress:
			progress, lastAt = e, i
		case *ServerLog:
			log, lastAt = e, i
		case *ToolResult:
			resultAt = i
		}
	}
	want := ToolProgress{Message: 0, CallID: "c1", Name: "fx__report", Progress: 2, Total: 2, Text: "step 2"}
	if progress == nil || *progress != want {
		t.Errorf("last tool_progress: %+v, want %+v", progress, want)
	}
	wantLog := ServerLog{Server: "fx", Level: "warning", Logger: "fixture", Data: "warn 2"}
	if log == nil || *log != wantLog {
		t.Errorf("last server_log: %+v, want %+v", log, wantLog)
	}
	if resultAt < lastAt {
		t.Errorf("a progress or log event after the tool_result (%d > %d)", lastAt, resultAt)
	}
	return evs, canon
}

// fieldDiff names the first field that differs; JSON fields compare as JSON values
// (absent, nil, is null).
func fieldDiff(a, b reflect.Value) string {
	for i := 0; i < a.NumField(); i++ {
		fa, fb := a.Field(i), b.Field(i)
		if raw, ok := fa.Interface().(json.RawMessage); ok {
			if !sameJSON(orNull(raw), orNull(fb.Interface().(json.RawMessage))) {
				return a.Type().Field(i).Name
			}
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			return a.Type().Field(i).Name
		}
	}
	return ""
}

func orNull(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	return string(raw)
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// The import path ends in the package's name (it ended in /golang, so every import
// needed a name and goimports guessed wrong).
func TestImportPathEndsInThePackageName(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(mod), "\n")
	path, ok := strings.CutPrefix(first, "module ")
	if !ok {
		t.Fatalf("go.mod starts %q", first)
	}
	if base := path[strings.LastIndexByte(path, '/')+1:]; base != "panto" {
		t.Fatalf("module path %s ends in %q, the package is panto", path, base)
	}
}
