package panto

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type otelPipeline struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newOtelPipeline(t *testing.T) *otelPipeline {
	sr := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	p := &otelPipeline{
		spans: sr, tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		reader: reader, mp: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	}
	t.Cleanup(func() {
		_ = p.tp.Shutdown(context.Background())
		_ = p.mp.Shutdown(context.Background())
	})
	return p
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func spansNamed(p *otelPipeline, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func oneSpan(t *testing.T, p *otelPipeline, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	found := spansNamed(p, name)
	if len(found) != 1 {
		var names []string
		for _, s := range p.spans.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans %q among %v", len(found), name, names)
	}
	return found[0]
}

func allSpanText(p *otelPipeline) string {
	var b strings.Builder
	for _, s := range p.spans.Ended() {
		b.WriteString(s.Name() + " " + s.Status().Description + " ")
		for _, kv := range s.Attributes() {
			b.WriteString(string(kv.Key) + "=" + kv.Value.Emit() + " ")
		}
		for _, e := range s.Events() {
			b.WriteString(e.Name + " ")
			for _, kv := range e.Attributes {
				b.WriteString(string(kv.Key) + "=" + kv.Value.Emit() + " ")
			}
		}
	}
	return b.String()
}

// instrumentedTurn runs a weather tool turn under a caller's span.
// It returns the server's port as well.
func instrumentedTurn(t *testing.T, p *otelPipeline, content bool) (trace.SpanContext, int, error) {
	srv := startServer(t, weatherScenario())
	cfg := testConfig(srv)
	cfg.Tools = []Tool{{
		Name: "weather", Description: "current weather", Parameters: weatherParams,
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			return "18°C, sunny", nil
		},
	}}
	agent := newTestAgent(t, cfg)
	if err := agent.Instrument(&Instrumentation{TracerProvider: p.tp, MeterProvider: p.mp, CaptureContent: content}); err != nil {
		t.Fatal(err)
	}
	ctx, caller := p.tp.Tracer("host").Start(context.Background(), "caller")
	s, err := agent.Stream(ctx, "weather in Paris?")
	if err != nil {
		t.Fatal(err)
	}
	for range s.Iter() {
	}
	caller.End()
	u, err := url.Parse(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("the test server's URL %q has no port", srv.url)
	}
	return caller.SpanContext(), port, s.Err()
}

func TestInstrumentToolTurnSpanTree(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	caller, port, err := instrumentedTurn(t, p, false)
	if err != nil {
		t.Fatal(err)
	}
	agent := oneSpan(t, p, "invoke_agent")
	if agent.Parent().SpanID() != caller.SpanID() || agent.SpanContext().TraceID() != caller.TraceID() {
		t.Fatalf("invoke_agent is not the caller's child")
	}
	for key, want := range map[string]string{
		"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-test",
	} {
		if v, _ := spanAttr(agent, key); v.AsString() != want {
			t.Errorf("invoke_agent %s = %q, want %q", key, v.AsString(), want)
		}
	}
	chats := spansNamed(p, "chat gpt-test")
	if len(chats) != 2 {
		t.Fatalf("%d chat spans", len(chats))
	}
	for _, c := range chats {
		if c.Parent().SpanID() != agent.SpanContext().SpanID() || c.SpanKind() != trace.SpanKindClient {
			t.Errorf("chat span parent/kind")
		}
		if v, _ := spanAttr(c, "gen_ai.response.model"); v.AsString() != "gpt-test" {
			t.Errorf("response model %q", v.AsString())
		}
		if v, ok := spanAttr(c, "gen_ai.usage.input_tokens"); !ok || v.AsInt64() <= 0 {
			t.Errorf("input tokens %v", v)
		}
		if _, ok := spanAttr(c, "gen_ai.response.time_to_first_chunk"); !ok {
			t.Errorf("no time to first chunk")
		}
		checkServerAttrs(t, "chat span", attribute.NewSet(c.Attributes()...), port)
	}
	checkServerAttrs(t, "invoke_agent span", attribute.NewSet(agent.Attributes()...), port)
	tool := oneSpan(t, p, "execute_tool weather")
	if tool.Parent().SpanID() != agent.SpanContext().SpanID() {
		t.Errorf("execute_tool is not the turn's child")
	}
	if v, _ := spanAttr(tool, "gen_ai.tool.call.id"); v.AsString() != "call_1" {
		t.Errorf("call id %q", v.AsString())
	}
	text := allSpanText(p)
	if strings.Contains(text, "Paris") || strings.Contains(text, "sunny") {
		t.Errorf("content recorded without opting in: %s", text)
	}
	if strings.Contains(text, "sk-test-secret-key") {
		t.Errorf("the key leaked: %s", text)
	}

	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names[m.Name] = true
		}
	}
	for _, want := range []string{"gen_ai.client.operation.duration", "gen_ai.client.token.usage", "gen_ai.client.operation.time_to_first_chunk"} {
		if !names[want] {
			t.Errorf("no metric %s in %v", want, names)
		}
	}
	checkMetricPoints(t, rm, port)
}

// The GenAI conventions' bucket advice, written out here rather than taken from the
// package so that a wrong constant fails.
var (
	wantDurationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	wantTokenBounds    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

func checkServerAttrs(t *testing.T, what string, attrs attribute.Set, port int) {
	t.Helper()
	if v, _ := attrs.Value("server.address"); v.AsString() != "127.0.0.1" {
		t.Errorf("%s server.address = %q", what, v.Emit())
	}
	if v, ok := attrs.Value("server.port"); !ok || v.AsInt64() != int64(port) {
		t.Errorf("%s server.port = %s, want %d", what, v.Emit(), port)
	}
}

// checkMetricPoints: a model request's data points carry server.address and
// server.port, a tool call's neither; every histogram's bounds are the advice.
func checkMetricPoints(t *testing.T, rm metricdata.ResourceMetrics, port int) {
	t.Helper()
	points := 0
	check := func(name string, attrs attribute.Set, bounds, want []float64) {
		points++
		if !slices.Equal(bounds, want) {
			t.Errorf("%s bounds %v, want %v", name, bounds, want)
		}
		if op, _ := attrs.Value("gen_ai.operation.name"); op.AsString() == "execute_tool" {
			if attrs.HasValue("server.address") || attrs.HasValue("server.port") {
				t.Errorf("%s: a tool call's point has server attributes: %v", name, attrs.ToSlice())
			}
			return
		}
		checkServerAttrs(t, name, attrs, port)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					check(m.Name, dp.Attributes, dp.Bounds, wantDurationBounds)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					check(m.Name, dp.Attributes, dp.Bounds, wantTokenBounds)
				}
			default:
				t.Errorf("%s is a %T", m.Name, m.Data)
			}
		}
	}
	// chat and execute_tool durations, input and output tokens, time to first chunk.
	if points != 5 {
		t.Errorf("%d data points, want 5", points)
	}
}

func TestInstrumentServerAttributes(t *testing.T) {
	for _, c := range []struct {
		provider, baseURL, host string
		port                    int
	}{
		{"openai", "", "api.openai.com", 443},
		{"", "", "api.openai.com", 443},
		{"openai-responses", "", "api.openai.com", 443},
		{"anthropic", "", "api.anthropic.com", 443},
		{"gemini", "", "generativelanguage.googleapis.com", 443},
		{"openai", "http://127.0.0.1:8080/v1", "127.0.0.1", 8080},
		{"openai", "http://localhost/v1", "localhost", 80},
		{"openai", "https://x.openai.azure.com/openai", "x.openai.azure.com", 443},
		{"openai", "http://[::1]:9000/v1", "::1", 9000},
	} {
		attrs := attribute.NewSet(otelServer(c.provider, c.baseURL)...)
		if v, _ := attrs.Value("server.address"); v.AsString() != c.host {
			t.Errorf("%q %q: server.address %q, want %q", c.provider, c.baseURL, v.Emit(), c.host)
		}
		if v, _ := attrs.Value("server.port"); v.AsInt64() != int64(c.port) {
			t.Errorf("%q %q: server.port %s, want %d", c.provider, c.baseURL, v.Emit(), c.port)
		}
	}
	if kv := otelServer("openai", "not a url"); len(kv) != 0 {
		t.Errorf("a URL without a host gives %v", kv)
	}
}

func TestInstrumentContentWhenAsked(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	if _, _, err := instrumentedTurn(t, p, true); err != nil {
		t.Fatal(err)
	}
	agent := oneSpan(t, p, "invoke_agent")
	if v, _ := spanAttr(agent, "gen_ai.input.messages"); !strings.Contains(v.AsString(), "weather in Paris?") {
		t.Errorf("input %q", v.AsString())
	}
	if v, _ := spanAttr(agent, "gen_ai.output.messages"); !strings.Contains(v.AsString(), "in Paris.") {
		t.Errorf("output %q", v.AsString())
	}
	tool := oneSpan(t, p, "execute_tool weather")
	if v, _ := spanAttr(tool, "gen_ai.tool.call.result"); v.AsString() != "18°C, sunny" {
		t.Errorf("result %q", v.AsString())
	}
	if strings.Contains(allSpanText(p), "sk-test-secret-key") {
		t.Errorf("the key leaked")
	}
}

func TestInstrumentFailureAndRetry(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	busy := exchange(obj{"status": 503, "json": obj{"error": obj{"type": "overloaded", "message": "busy"}}})
	denied := exchange(obj{"status": 401, "json": obj{"error": obj{"type": "invalid_api_key", "message": "no"}}})
	srv := startServer(t, scenario(busy, denied))
	cfg := testConfig(srv)
	cfg.Retry = Retry{MaxRetries: Int(1), InitialDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}
	agent := newTestAgent(t, cfg)
	if err := agent.Instrument(&Instrumentation{TracerProvider: p.tp}); err != nil {
		t.Fatal(err)
	}
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	for range s.Iter() {
	}
	if s.Err() == nil {
		t.Fatal("the turn did not fail")
	}
	for _, name := range []string{"invoke_agent", "chat gpt-test"} {
		sp := oneSpan(t, p, name)
		if v, _ := spanAttr(sp, "error.type"); v.AsString() != "authentication" {
			t.Errorf("%s error.type %q", name, v.AsString())
		}
		if sp.Status().Code != codes.Error {
			t.Errorf("%s status %v", name, sp.Status())
		}
	}
	chat := oneSpan(t, p, "chat gpt-test")
	if len(chat.Events()) != 1 || chat.Events()[0].Name != "retry" {
		t.Fatalf("events %v", chat.Events())
	}
}

func TestInstrumentCloseIsACancel(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	srv := startServer(t, weatherScenario())
	agent := newTestAgent(t, testConfig(srv))
	if err := agent.Instrument(&Instrumentation{TracerProvider: p.tp}); err != nil {
		t.Fatal(err)
	}
	s, err := agent.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sp := oneSpan(t, p, "invoke_agent")
	if v, _ := spanAttr(sp, "error.type"); v.AsString() != "cancelled" {
		t.Errorf("error.type %q", v.AsString())
	}
}
