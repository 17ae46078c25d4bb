package panto

import (
	"context"
	"encoding/json"
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
func instrumentedTurn(t *testing.T, p *otelPipeline, content bool) (trace.SpanContext, error) {
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
	return caller.SpanContext(), s.Err()
}

func TestInstrumentToolTurnSpanTree(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	caller, err := instrumentedTurn(t, p, false)
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
	}
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
}

func TestInstrumentContentWhenAsked(t *testing.T) {
	defer verifyNoLeaks(t)
	p := newOtelPipeline(t)
	if _, err := instrumentedTurn(t, p, true); err != nil {
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
