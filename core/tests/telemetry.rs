//! The turn's OpenTelemetry spans and metrics, as a host that bridges `tracing` to
//! OpenTelemetry with `tracing-opentelemetry` sees them: the OpenTelemetry SDK's
//! in-memory span and metric exporters, a turn against `panto-testserver` under a
//! caller's span. What is checked: the span tree and the GenAI conventions' names and
//! attributes, a retry as a span event, a failure's `error.type` and status, a cancel,
//! content off by default, on when asked and cut at 16 KiB, no key anywhere, a resumed
//! turn, and the three metrics (with the server's address and port).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::Value as OtelValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Histogram, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use panto::{
    Agent, Answers, Collect, Config, ErrorKind, Event, Flow, FnTool, ProviderKind, Receiver,
    ToolOutput, TurnControl, TurnOptions,
};
use panto_testkit::{model, API_KEY};
use panto_testserver::script;
use panto_testserver::TestServer;
use serde_json::{json, Value};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const HANG_GUARD: Duration = Duration::from_secs(30);
const HEADER_SECRET: &str = "hdr-SECRET-telemetry-77";

/// The SDK pipeline a host sets up: spans and metrics in memory.
struct Pipeline {
    spans: InMemorySpanExporter,
    metrics: InMemoryMetricExporter,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Pipeline {
    fn new() -> Pipeline {
        let spans = InMemorySpanExporter::default();
        let tracer_provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let metrics = InMemoryMetricExporter::default();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer("test")))
            .with(tracing_opentelemetry::MetricsLayer::new(
                meter_provider.clone(),
            ));
        let guard = tracing::subscriber::set_default(subscriber);
        Pipeline {
            spans,
            metrics,
            tracer_provider,
            meter_provider,
            _guard: guard,
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        self.tracer_provider.force_flush().unwrap();
        self.spans.get_finished_spans().unwrap()
    }

    fn metrics(&self) -> Vec<ResourceMetrics> {
        self.meter_provider.force_flush().unwrap();
        self.metrics.get_finished_metrics().unwrap()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.meter_provider.shutdown();
        let _ = self.tracer_provider.shutdown();
    }
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(
        found.len(),
        1,
        "one span {name}: {:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

fn attr(span: &SpanData, key: &str) -> Option<OtelValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn attr_str(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

/// Asserts that `span`'s attribute `key` is the string `want`.
#[track_caller]
fn assert_attr(span: &SpanData, key: &str, want: &str) {
    assert_eq!(
        attr_str(span, key).as_deref(),
        Some(want),
        "{key} of {}",
        span.name
    );
}

fn attr_i64(span: &SpanData, key: &str) -> Option<i64> {
    match attr(span, key)? {
        OtelValue::I64(n) => Some(n),
        other => panic!("{key} is {other:?}"),
    }
}

/// Every string the spans carry: names, attributes, events and their attributes, status.
fn everything(spans: &[SpanData]) -> String {
    let mut all = String::new();
    for s in spans {
        all.push_str(&format!("{} {:?} ", s.name, s.status));
        for kv in &s.attributes {
            all.push_str(&format!("{}={} ", kv.key, kv.value.as_str()));
        }
        for e in s.events.iter() {
            all.push_str(&format!("{} ", e.name));
            for kv in &e.attributes {
                all.push_str(&format!("{}={} ", kv.key, kv.value.as_str()));
            }
        }
    }
    all
}

fn config(server: &TestServer) -> Config {
    panto_testkit::config(ProviderKind::OpenAi, server).with_header("x-custom-token", HEADER_SECRET)
}

fn weather(calls: Arc<AtomicUsize>, needs_approval: bool) -> impl panto::Tool {
    FnTool::new(
        "weather",
        "Weather for a city",
        json!({"type":"object","properties":{"city":{"type":"string"}}}),
        move |args: Value, _| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                ToolOutput::ok(format!(
                    "sunny in {} (key {API_KEY})",
                    args["city"].as_str().unwrap_or("?")
                ))
            }
        },
    )
    .needs_approval(needs_approval)
}

fn tool_turn_server() -> TestServer {
    model(vec![
        script::openai_tool_calls(&[("call_1", "weather", r#"{"city":"Paris"}"#)]),
        script::openai_text(&["It is ", "sunny."]),
    ])
}

/// Runs a turn under the caller's span `caller`.
async fn run_under(
    agent: &Agent,
    input: &str,
    control: &TurnControl,
    options: TurnOptions,
    receiver: &mut dyn Receiver,
) -> panto::Result<panto::TurnSummary> {
    let caller = tracing::info_span!("caller");
    tokio::time::timeout(
        HANG_GUARD,
        agent
            .run(input, receiver, control, options)
            .instrument(caller),
    )
    .await
    .expect("the turn hung")
}

/// Runs a turn under the caller's span, with no control or options and its events
/// collected.
async fn run(agent: &Agent, input: &str) -> panto::Result<panto::TurnSummary> {
    run_under(
        agent,
        input,
        &TurnControl::default(),
        TurnOptions::default(),
        &mut Collect::default(),
    )
    .await
}

async fn tool_turn(config: Config) -> (Pipeline, Vec<SpanData>) {
    let pipeline = Pipeline::new();
    let agent = Agent::new(config).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    agent.add_tool(weather(calls.clone(), false)).unwrap();
    run(&agent, &format!("Weather in Paris? my key is {API_KEY}"))
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let spans = pipeline.spans();
    (pipeline, spans)
}

#[tokio::test]
async fn a_tool_turn_makes_the_conventions_span_tree_under_the_callers_span() {
    let server = tool_turn_server();
    let (_p, spans) = tool_turn(config(&server)).await;
    let caller = one(&spans, "caller");
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent.parent_span_id, caller.span_context.span_id());
    assert_eq!(
        agent.span_context.trace_id(),
        caller.span_context.trace_id()
    );
    assert_attr(agent, "gen_ai.operation.name", "invoke_agent");
    assert_attr(agent, "gen_ai.provider.name", "openai");
    assert_attr(agent, "gen_ai.request.model", "scripted-model");
    assert_attr(agent, "gen_ai.response.finish_reasons", "end_turn");
    assert!(attr_i64(agent, "gen_ai.usage.input_tokens").is_some());
    assert_eq!(agent.status, Status::Unset);

    let chats = named(&spans, "chat scripted-model");
    assert_eq!(chats.len(), 2, "one chat span per request");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, agent.span_context.span_id());
        assert_eq!(chat.span_kind, SpanKind::Client);
        assert_attr(chat, "gen_ai.operation.name", "chat");
        assert_attr(chat, "gen_ai.provider.name", "openai");
        assert_attr(chat, "gen_ai.response.model", "scripted-model");
        assert!(attr_str(chat, "gen_ai.response.id").is_some());
        assert_attr(chat, "server.address", "127.0.0.1");
        assert_eq!(
            attr_i64(chat, "server.port"),
            Some(i64::from(reqwest_port(&server)))
        );
        assert!(attr_i64(chat, "gen_ai.usage.output_tokens").is_some());
        match attr(chat, "gen_ai.response.time_to_first_chunk") {
            Some(OtelValue::F64(s)) => assert!((0.0..30.0).contains(&s), "{s}"),
            other => panic!("time to first chunk: {other:?}"),
        }
    }
    let reasons: Vec<_> = chats
        .iter()
        .map(|c| attr_str(c, "gen_ai.response.finish_reasons").unwrap())
        .collect();
    assert!(reasons.contains(&"tool_use".to_owned()), "{reasons:?}");

    let tool = one(&spans, "execute_tool weather");
    assert_eq!(tool.parent_span_id, agent.span_context.span_id());
    assert_attr(tool, "gen_ai.operation.name", "execute_tool");
    assert_attr(tool, "gen_ai.tool.name", "weather");
    assert_attr(tool, "gen_ai.tool.call.id", "call_1");
    assert_attr(tool, "gen_ai.tool.type", "function");
    assert_attr(tool, "panto.tool.runner", "rust");
    // The tool ran between the two requests.
    let first = chats.iter().map(|c| c.end_time).min().unwrap();
    let last = chats.iter().map(|c| c.start_time).max().unwrap();
    assert!(tool.start_time >= first && tool.end_time <= last);

    // Content is off by default.
    for s in [agent, tool] {
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(attr(s, key).is_none(), "{key} recorded without opting in");
        }
    }
    let all = everything(&spans);
    assert!(!all.contains("Paris"), "no content by default: {all}");
    assert!(!all.contains(API_KEY) && !all.contains(HEADER_SECRET));
}

fn reqwest_port(server: &TestServer) -> u16 {
    server
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("the server's port")
}

#[tokio::test]
async fn content_is_recorded_when_asked_without_any_secret() {
    let server = tool_turn_server();
    let (_p, spans) = tool_turn(config(&server).with_capture_message_content(true)).await;
    let agent = one(&spans, "invoke_agent");
    let input = attr_str(agent, "gen_ai.input.messages").expect("the input");
    let input: Value = serde_json::from_str(&input).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert!(input[0]["parts"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("Weather in Paris?"));
    let output = attr_str(agent, "gen_ai.output.messages").expect("the answer");
    assert!(output.contains("It is sunny."), "{output}");
    let tool = one(&spans, "execute_tool weather");
    assert_attr(tool, "gen_ai.tool.call.arguments", r#"{"city":"Paris"}"#);
    assert!(attr_str(tool, "gen_ai.tool.call.result")
        .unwrap()
        .starts_with("sunny in Paris"));
    let all = everything(&spans);
    assert!(!all.contains(API_KEY), "the key leaked: {all}");
    assert!(
        !all.contains(HEADER_SECRET),
        "a header secret leaked: {all}"
    );
}

#[tokio::test]
async fn content_is_cut_at_16_kib() {
    let server = model(vec![script::openai_text(&["ok"])]);
    let pipeline = Pipeline::new();
    let agent = Agent::new(config(&server).with_capture_message_content(true)).unwrap();
    let long = "é".repeat(20_000);
    run(&agent, &long).await.unwrap();
    let spans = pipeline.spans();
    let input = attr_str(one(&spans, "invoke_agent"), "gen_ai.input.messages").unwrap();
    assert!(input.len() < 16 * 1024 + 200, "{}", input.len());
    assert!(input.len() > 16 * 1024 - 200, "{}", input.len());
    assert_eq!(panto::telemetry::MAX_CONTENT_BYTES, 16 * 1024);
}

#[tokio::test]
async fn a_retry_is_an_event_of_the_chat_span() {
    let server = model(vec![
        script::http_error(503, "overloaded", json!({})),
        script::openai_text(&["fine"]),
    ]);
    let pipeline = Pipeline::new();
    let agent = Agent::new(config(&server).with_retry(panto_testkit::quick_retries(2))).unwrap();
    run(&agent, "hi").await.unwrap();
    let spans = pipeline.spans();
    let chat = one(&spans, "chat scripted-model");
    assert_eq!(chat.status, Status::Unset);
    assert_eq!(attr_i64(chat, "panto.attempts"), Some(2));
    let retries: Vec<_> = chat.events.iter().filter(|e| e.name == "retry").collect();
    assert_eq!(retries.len(), 1, "{:?}", chat.events);
    let get = |key: &str| {
        retries[0]
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone())
    };
    assert_eq!(get("panto.retry.attempt"), Some(OtelValue::I64(2)));
    assert!(matches!(
        get("panto.retry.delay_ms"),
        Some(OtelValue::I64(_))
    ));
    assert_eq!(get("http.response.status_code"), Some(OtelValue::I64(503)));
    assert!(get("panto.retry.reason").is_some());
}

#[tokio::test]
async fn a_401_fails_the_spans_with_its_error_type() {
    let server = model(vec![script::http_error(401, "invalid_api_key", json!({}))]);
    let pipeline = Pipeline::new();
    let agent = Agent::new(config(&server)).unwrap();
    let err = run(&agent, "hi").await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Authentication);
    let spans = pipeline.spans();
    for name in ["invoke_agent", "chat scripted-model"] {
        let s = one(&spans, name);
        assert_attr(s, "error.type", "authentication");
        assert!(
            matches!(s.status, Status::Error { .. }),
            "{name}: {:?}",
            s.status
        );
    }
    let all = everything(&spans);
    assert!(
        !all.contains(API_KEY) && !all.contains(HEADER_SECRET),
        "{all}"
    );
    let metrics = pipeline.metrics();
    let duration = histogram_points(&metrics, "gen_ai.client.operation.duration");
    assert!(
        duration
            .iter()
            .any(|attrs| attrs.contains(&("error.type".to_owned(), "authentication".to_owned()))),
        "{duration:?}"
    );
}

/// Stops the turn at its first text fragment.
struct StopAtText;

impl Receiver for StopAtText {
    fn on_event(&mut self, event: Event) -> Flow {
        match event {
            Event::ContentDelta { .. } => Flow::Stop,
            _ => Flow::Continue,
        }
    }
}

#[tokio::test]
async fn a_cancel_is_the_spans_status() {
    let server = model(vec![script::openai_text(&["one", "two", "three"])]);
    let pipeline = Pipeline::new();
    let agent = Agent::new(config(&server)).unwrap();
    let err = run_under(
        &agent,
        "hi",
        &TurnControl::default(),
        TurnOptions::default(),
        &mut StopAtText,
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Cancelled);
    let spans = pipeline.spans();
    for name in ["invoke_agent", "chat scripted-model"] {
        let s = one(&spans, name);
        assert_attr(s, "error.type", "cancelled");
        assert!(matches!(s.status, Status::Error { .. }), "{name}");
    }
}

#[tokio::test]
async fn a_dropped_turn_closes_its_spans_as_cancelled() {
    let server = model(vec![json!({
        "sse": script::openai_text_events(&["one"]),
        "fault": {"kind": "hold", "after_bytes": 5}
    })]);
    let pipeline = Pipeline::new();
    let agent = Agent::new(config(&server)).unwrap();
    let mut events = Collect::default();
    let control = TurnControl::default();
    let caller = tracing::info_span!("caller");
    let turn = agent
        .run("hi", &mut events, &control, TurnOptions::default())
        .instrument(caller);
    // The request is held: the turn is still running when the wait ends.
    let r = tokio::time::timeout(Duration::from_millis(300), turn).await;
    assert!(r.is_err(), "the held turn finished: {r:?}");
    let spans = pipeline.spans();
    let s = one(&spans, "invoke_agent");
    assert_attr(s, "error.type", "cancelled");
}

#[tokio::test]
async fn a_resumed_turn_has_its_own_invoke_agent_span() {
    let server = tool_turn_server();
    let pipeline = Pipeline::new();
    let config = config(&server);
    let agent = Agent::new(config.clone()).unwrap();
    agent
        .add_tool(weather(Arc::new(AtomicUsize::new(0)), true))
        .unwrap();
    let control = TurnControl::default();
    let summary = run_under(
        &agent,
        "Weather?",
        &control,
        TurnOptions::default(),
        &mut Collect::default(),
    )
    .await
    .unwrap();
    assert_eq!(summary.deferred.len(), 1);
    let checkpoint = control.checkpoint().unwrap();
    let resumed = tokio::time::timeout(
        HANG_GUARD,
        agent.resume(
            checkpoint,
            Answers::new().approve("call_1"),
            &mut Collect::default(),
            &TurnControl::default(),
        ),
    )
    .await
    .expect("the resumed turn hung")
    .unwrap();
    assert_eq!(resumed.text, "It is sunny.");
    let spans = pipeline.spans();
    let agents = named(&spans, "invoke_agent");
    assert_eq!(agents.len(), 2);
    let first = agents
        .iter()
        .find(|s| attr(s, "panto.turn.resumed") == Some(OtelValue::Bool(false)))
        .unwrap();
    let second = agents
        .iter()
        .find(|s| attr(s, "panto.turn.resumed") == Some(OtelValue::Bool(true)))
        .unwrap();
    assert_eq!(attr_i64(first, "panto.tool.deferred"), Some(1));
    assert_attr(first, "gen_ai.response.finish_reasons", "deferred");
    let tools = named(&spans, "execute_tool weather");
    let runners: Vec<_> = tools
        .iter()
        .map(|t| attr_str(t, "panto.tool.runner").unwrap())
        .collect();
    assert!(
        runners.contains(&"deferred:approval".to_owned()),
        "{runners:?}"
    );
    assert!(runners.contains(&"rust".to_owned()), "{runners:?}");
    let ran = tools
        .iter()
        .find(|t| attr_str(t, "panto.tool.runner").as_deref() == Some("rust"))
        .unwrap();
    assert_eq!(ran.parent_span_id, second.span_context.span_id());
    assert_eq!(named(&spans, "chat scripted-model").len(), 2);
}

/// The attribute sets of the data points of the histogram `name`.
fn histogram_points(metrics: &[ResourceMetrics], name: &str) -> Vec<Vec<(String, String)>> {
    let mut points = Vec::new();
    for rm in metrics {
        for sm in rm.scope_metrics() {
            for m in sm.metrics() {
                if m.name() != name {
                    continue;
                }
                match m.data() {
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => points.extend(attr_sets(h)),
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => points.extend(attr_sets(h)),
                    AggregatedMetrics::I64(MetricData::Histogram(h)) => points.extend(attr_sets(h)),
                    other => panic!("{name} is not a histogram: {other:?}"),
                }
            }
        }
    }
    points
}

/// The attributes of each data point of `h`, sorted.
fn attr_sets<T>(h: &Histogram<T>) -> Vec<Vec<(String, String)>> {
    h.data_points()
        .map(|p| {
            let mut v: Vec<_> = p
                .attributes()
                .map(|kv| (kv.key.to_string(), kv.value.as_str().into_owned()))
                .collect();
            v.sort();
            v
        })
        .collect()
}

#[tokio::test]
async fn the_turn_records_the_conventions_metrics() {
    let server = tool_turn_server();
    let (pipeline, _) = tool_turn(config(&server)).await;
    let metrics = pipeline.metrics();
    let has = |points: &[Vec<(String, String)>], k: &str, v: &str| {
        points
            .iter()
            .any(|a| a.contains(&(k.to_owned(), v.to_owned())))
    };
    let tokens = histogram_points(&metrics, "gen_ai.client.token.usage");
    assert!(has(&tokens, "gen_ai.token.type", "input"), "{tokens:?}");
    assert!(has(&tokens, "gen_ai.token.type", "output"), "{tokens:?}");
    assert!(has(&tokens, "gen_ai.provider.name", "openai"));
    let duration = histogram_points(&metrics, "gen_ai.client.operation.duration");
    assert!(
        has(&duration, "gen_ai.operation.name", "chat"),
        "{duration:?}"
    );
    assert!(
        has(&duration, "gen_ai.operation.name", "execute_tool"),
        "{duration:?}"
    );
    let ttfc = histogram_points(&metrics, "gen_ai.client.operation.time_to_first_chunk");
    assert!(
        has(&ttfc, "gen_ai.request.model", "scripted-model"),
        "{ttfc:?}"
    );
    // The conventions' server attributes on every model request's data points (a tool
    // call's have none): the address, and the port it requires along with it.
    let port = reqwest_port(&server).to_string();
    let chat_points = tokens.iter().chain(&ttfc).chain(
        duration
            .iter()
            .filter(|a| a.contains(&("gen_ai.operation.name".to_owned(), "chat".to_owned()))),
    );
    let mut n = 0;
    for a in chat_points {
        n += 1;
        assert!(
            a.contains(&("server.address".to_owned(), "127.0.0.1".to_owned())),
            "{a:?}"
        );
        assert!(
            a.contains(&("server.port".to_owned(), port.clone())),
            "{a:?}"
        );
    }
    assert!(n >= 4, "the tokens, ttfc and chat duration points");
    let tool_points = duration.iter().filter(|a| {
        a.contains(&(
            "gen_ai.operation.name".to_owned(),
            "execute_tool".to_owned(),
        ))
    });
    for a in tool_points {
        assert!(!a.iter().any(|(k, _)| k.starts_with("server.")), "{a:?}");
    }
}

#[tokio::test]
async fn without_a_subscriber_a_turn_records_nothing() {
    // No pipeline: the turn runs as before, and a pipeline installed afterwards saw
    // nothing of it.
    let server = model(vec![script::openai_text(&["ok"])]);
    let agent = Agent::new(config(&server)).unwrap();
    run(&agent, "hi").await.unwrap();
    let pipeline = Pipeline::new();
    assert!(pipeline.spans().is_empty());
}
