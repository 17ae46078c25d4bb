package panto

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// maxContentBytes bounds one content attribute (a prompt, an answer, a tool's arguments
// or result), as the Rust core does.
const maxContentBytes = 16 * 1024

// Instrumentation is where an instrumented agent's spans and metrics go: the host's own
// OpenTelemetry tracer and meter providers (nil: that signal is not recorded).
// CaptureContent records message content (at most 16 KiB a value); it is also on when
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true.
type Instrumentation struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	CaptureContent bool
}

type instruments struct {
	tracer   trace.Tracer
	duration metric.Float64Histogram
	tokens   metric.Int64Histogram
	ttfc     metric.Float64Histogram
	content  bool
	provider string
	model    string
	server   []attribute.KeyValue // server.address and server.port, when known
}

// The conventions' bucket advice for the time histograms (seconds) and for
// gen_ai.client.token.usage (tokens).
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// Instrument makes every turn this agent starts afterwards record OpenTelemetry spans
// and metrics named as the GenAI semantic conventions say (docs/observability.md): an
// invoke_agent span, a child of the span in the ctx given to Stream (or Resume), with
// one "chat {model}" span per model response and one "execute_tool {tool}" span per
// tool call, made from the turn's events as Next delivers them (their times are the
// delivery times). A nil *Instrumentation turns it off.
func (a *Agent) Instrument(in *Instrumentation) error {
	if a == nil || a.h == nil {
		return nilError("*Agent", "NewAgent")
	}
	if in == nil {
		a.instr.Store(nil)
		return nil
	}
	ins := &instruments{provider: a.providerName, model: a.model, server: a.server, content: in.CaptureContent || captureEnv()}
	if in.TracerProvider != nil {
		ins.tracer = in.TracerProvider.Tracer("panto")
	}
	if in.MeterProvider != nil {
		m := in.MeterProvider.Meter("panto")
		var err error
		if ins.duration, err = m.Float64Histogram("gen_ai.client.operation.duration",
			metric.WithUnit("s"), metric.WithDescription("GenAI operation duration"),
			metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
			return err
		}
		if ins.tokens, err = m.Int64Histogram("gen_ai.client.token.usage",
			metric.WithUnit("{token}"), metric.WithDescription("Number of input and output tokens used"),
			metric.WithExplicitBucketBoundaries(tokenBuckets...)); err != nil {
			return err
		}
		if ins.ttfc, err = m.Float64Histogram("gen_ai.client.operation.time_to_first_chunk",
			metric.WithUnit("s"), metric.WithDescription("Time to the first chunk of a streamed response"),
			metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
			return err
		}
	}
	a.instr.Store(ins)
	return nil
}

func captureEnv() bool {
	return strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")), "true")
}

// otelProviderName is gen_ai.provider.name for panto's provider names.
func otelProviderName(provider, baseURL string) string {
	switch provider {
	case "anthropic":
		return "anthropic"
	case "gemini":
		return "gcp.gemini"
	}
	if strings.Contains(baseURL, ".openai.azure.com") || strings.Contains(baseURL, ".services.ai.azure.com") {
		return "azure.ai.openai"
	}
	return "openai"
}

// otelServer is server.address and server.port of the agent's base URL, or of its
// provider's default API when none is set (the port the URL's scheme implies when it
// names none); nothing when the URL has no host.
func otelServer(provider, baseURL string) []attribute.KeyValue {
	if baseURL == "" {
		switch provider {
		case "anthropic":
			baseURL = "https://api.anthropic.com"
		case "gemini":
			baseURL = "https://generativelanguage.googleapis.com"
		default:
			baseURL = "https://api.openai.com/v1"
		}
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	kv := []attribute.KeyValue{attribute.String("server.address", u.Hostname())}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		switch strings.ToLower(u.Scheme) {
		case "https":
			port = 443
		case "http":
			port = 80
		default:
			return kv
		}
	}
	return append(kv, attribute.Int("server.port", port))
}

func bounded(s string) string {
	if len(s) <= maxContentBytes {
		return s
	}
	end := maxContentBytes
	for end > 0 && !utf8RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// observer is one instrumented turn: its spans, fed by the events Next delivers.
type observer struct {
	mu      sync.Mutex
	ins     *instruments
	ctx     context.Context
	agent   trace.Span
	started time.Time
	chat    trace.Span
	chatMsg uint32
	chatAt  time.Time
	first   bool
	model   string
	tools   map[string]toolSpan
	done    bool
}

type toolSpan struct {
	span trace.Span
	at   time.Time
}

func (ins *instruments) start(parent context.Context, input string, resumed bool) *observer {
	o := &observer{ins: ins, ctx: parent, started: time.Now(), tools: map[string]toolSpan{}}
	if ins.tracer == nil {
		return o
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.provider.name", ins.provider),
		attribute.String("gen_ai.request.model", ins.model),
		attribute.Bool("panto.turn.resumed", resumed),
	}
	attrs = append(attrs, ins.server...)
	if ins.content && !resumed {
		attrs = append(attrs, attribute.String("gen_ai.input.messages", messageJSON("user", bounded(input))))
	}
	o.ctx, o.agent = ins.tracer.Start(parent, "invoke_agent",
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return o
}

func messageJSON(role, text string) string {
	b, _ := json.Marshal([]map[string]any{{"role": role, "parts": []map[string]string{{"type": "text", "content": text}}}})
	return string(b)
}

func (o *observer) metricAttrs(op string, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := append([]attribute.KeyValue{
		attribute.String("gen_ai.operation.name", op),
		attribute.String("gen_ai.provider.name", o.ins.provider),
		attribute.String("gen_ai.request.model", o.ins.model),
	}, extra...)
	if op == "chat" {
		// A model request's: the server's address and port (a tool call has none).
		kv = append(kv, o.ins.server...)
	}
	return metric.WithAttributes(kv...)
}

// chatSpan opens the chat span of message m at its first event.
func (o *observer) chatSpan(m uint32) {
	if o.chat != nil && o.chatMsg == m {
		return
	}
	o.endChat(nil)
	o.chatMsg, o.chatAt, o.first = m, time.Now(), false
	if o.ins.tracer != nil {
		_, o.chat = o.ins.tracer.Start(o.ctx, "chat "+o.ins.model, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("gen_ai.operation.name", "chat"),
				attribute.String("gen_ai.provider.name", o.ins.provider),
				attribute.String("gen_ai.request.model", o.ins.model),
				attribute.Int64("panto.message", int64(m)),
			), trace.WithAttributes(o.ins.server...))
	} else {
		o.chat = trace.SpanFromContext(context.Background()) // a no-op span
	}
}

func (o *observer) endChat(err *Error) {
	if o.chat == nil {
		return
	}
	if err != nil {
		fail(o.chat, err)
	}
	o.chat.End()
	o.chat = nil
	if o.ins.duration != nil {
		extra := []attribute.KeyValue{attribute.String("gen_ai.response.model", o.model)}
		if err != nil {
			extra = append(extra, attribute.String("error.type", string(err.Kind)))
		}
		o.ins.duration.Record(o.ctx, time.Since(o.chatAt).Seconds(), o.metricAttrs("chat", extra...))
	}
}

func fail(s trace.Span, err *Error) {
	s.SetAttributes(attribute.String("error.type", string(err.Kind)))
	s.SetStatus(codes.Error, err.Message)
}

func usageAttrs(u Usage) []attribute.KeyValue {
	if !u.Reported {
		return nil
	}
	kv := []attribute.KeyValue{
		attribute.Int64("gen_ai.usage.input_tokens", int64(u.InputTokens)),
		attribute.Int64("gen_ai.usage.output_tokens", int64(u.OutputTokens)),
	}
	if u.CacheReadTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.cache_read.input_tokens", int64(u.CacheReadTokens)))
	}
	if u.CacheWriteTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.cache_creation.input_tokens", int64(u.CacheWriteTokens)))
	}
	if u.ReasoningTokens > 0 {
		kv = append(kv, attribute.Int64("gen_ai.usage.reasoning.output_tokens", int64(u.ReasoningTokens)))
	}
	return kv
}

func (o *observer) observe(ev Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return
	}
	switch e := ev.(type) {
	case *ProviderRetry:
		o.chatSpan(e.Message)
		attrs := []attribute.KeyValue{
			attribute.Int64("panto.retry.attempt", int64(e.Attempt)),
			attribute.Int64("panto.retry.delay_ms", int64(e.DelayMS)),
			attribute.String("panto.retry.reason", e.Reason),
		}
		if e.Status != 0 {
			attrs = append(attrs, attribute.Int64("http.response.status_code", int64(e.Status)))
		}
		o.chat.AddEvent("retry", trace.WithAttributes(attrs...))
	case *MessageStart:
		o.chatSpan(e.Message)
		o.model = e.Model
		o.chat.SetAttributes(attribute.String("gen_ai.response.model", e.Model))
		if e.ResponseID != "" {
			o.chat.SetAttributes(attribute.String("gen_ai.response.id", e.ResponseID))
		}
	case *BlockStart:
		o.firstChunk(e.Message)
	case *ContentDelta:
		o.firstChunk(e.Message)
	case *MessageEnd:
		if o.chat != nil && o.chatMsg == e.Message {
			o.chat.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{e.StopReason}))
			o.chat.SetAttributes(usageAttrs(e.Usage)...)
			if o.ins.tokens != nil && e.Usage.Reported {
				rm := attribute.String("gen_ai.response.model", o.model)
				o.ins.tokens.Record(o.ctx, int64(e.Usage.InputTokens), o.metricAttrs("chat", rm, attribute.String("gen_ai.token.type", "input")))
				o.ins.tokens.Record(o.ctx, int64(e.Usage.OutputTokens), o.metricAttrs("chat", rm, attribute.String("gen_ai.token.type", "output")))
			}
			o.endChat(nil)
		}
	case *ToolCallStart:
		runner := "go"
		if !e.Host {
			runner = "rust"
		}
		ts := toolSpan{at: time.Now()}
		if o.ins.tracer != nil {
			attrs := []attribute.KeyValue{
				attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("gen_ai.provider.name", o.ins.provider),
				attribute.String("gen_ai.tool.name", e.Name),
				attribute.String("gen_ai.tool.call.id", e.CallID),
				attribute.String("gen_ai.tool.type", "function"),
				attribute.String("panto.tool.runner", runner),
			}
			if o.ins.content {
				args := string(e.Arguments)
				if e.Arguments == nil || args == "null" {
					args = e.ArgumentsRaw
				}
				attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", bounded(args)))
			}
			_, ts.span = o.ins.tracer.Start(o.ctx, "execute_tool "+e.Name,
				trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
		}
		o.tools[e.CallID] = ts
	case *ToolResult:
		ts, ok := o.tools[e.CallID]
		delete(o.tools, e.CallID)
		if !ok {
			ts.at = time.Now()
			if o.ins.tracer != nil {
				_, ts.span = o.ins.tracer.Start(o.ctx, "execute_tool "+e.Name, trace.WithAttributes(
					attribute.String("gen_ai.operation.name", "execute_tool"),
					attribute.String("gen_ai.tool.name", e.Name),
					attribute.String("gen_ai.tool.call.id", e.CallID),
					attribute.String("gen_ai.tool.type", "function"),
					attribute.String("panto.tool.runner", "answered"),
				))
			}
		}
		if ts.span != nil {
			if o.ins.content {
				ts.span.SetAttributes(attribute.String("gen_ai.tool.call.result", bounded(e.Output)))
			}
			if e.IsError {
				ts.span.SetAttributes(attribute.String("error.type", "tool_error"))
				ts.span.SetStatus(codes.Error, "the tool reported a failure")
			}
			ts.span.End()
		}
		if o.ins.duration != nil {
			var extra []attribute.KeyValue
			if e.IsError {
				extra = append(extra, attribute.String("error.type", "tool_error"))
			}
			o.ins.duration.Record(o.ctx, time.Since(ts.at).Seconds(), o.metricAttrs("execute_tool", extra...))
		}
	case *MessageComplete:
		o.endChat(nil)
		if o.agent != nil {
			o.agent.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{e.StopReason}),
				attribute.Int64("panto.turn.messages", int64(e.Messages)))
			if o.model != "" {
				o.agent.SetAttributes(attribute.String("gen_ai.response.model", o.model))
			}
			o.agent.SetAttributes(usageAttrs(e.Usage)...)
			if o.ins.content {
				o.agent.SetAttributes(attribute.String("gen_ai.output.messages", messageJSON("assistant", bounded(e.Text))))
			}
		}
		o.finish(nil)
	}
}

func (o *observer) firstChunk(m uint32) {
	if o.chat == nil || o.chatMsg != m || o.first {
		return
	}
	o.first = true
	d := time.Since(o.chatAt).Seconds()
	o.chat.SetAttributes(attribute.Float64("gen_ai.response.time_to_first_chunk", d))
	if o.ins.ttfc != nil {
		o.ins.ttfc.Record(o.ctx, d, o.metricAttrs("chat"))
	}
}

// end closes the turn's spans when the stream ends without MessageComplete: a failure,
// a cancel, or a Close before the end (a cancel).
func (o *observer) end(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return
	}
	var pe *Error
	if err != nil && !errors.Is(err, ErrDone) {
		if !errors.As(err, &pe) {
			pe = &Error{Kind: KindInternal, Message: err.Error()}
		}
	} else {
		pe = &Error{Kind: KindCancelled, Message: "the stream was closed before the turn ended"}
	}
	o.endChat(pe)
	for id, ts := range o.tools {
		if ts.span != nil {
			fail(ts.span, pe)
			ts.span.End()
		}
		delete(o.tools, id)
	}
	if o.agent != nil {
		fail(o.agent, pe)
	}
	o.finish(pe)
}

func (o *observer) finish(err *Error) {
	o.done = true
	if o.agent != nil {
		o.agent.End()
	}
	_ = err
}
