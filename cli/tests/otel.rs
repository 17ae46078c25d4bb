//! The CLI's OpenTelemetry export: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, a turn's spans
//! and metrics reach an OTLP/HTTP receiver (the test server's, which decodes the protobuf
//! with `opentelemetry-proto`) before `panto` exits: the span tree of a tool turn under
//! the span `TRACEPARENT` names, the GenAI attributes, `error.type` on a failure, the
//! collector's headers sent and never shown, no API key anywhere; the conventions'
//! histograms with their attributes, units and buckets, the token counts the turn's own;
//! `OTEL_METRICS_EXPORTER=none` leaves the metrics out; without the variable nothing is
//! sent; an unreachable collector does not hold the turn up.

mod support;

use std::path::PathBuf;
use std::process::Output;

use panto_testserver::TestServer;
use serde_json::{json, Value};
use support::{describe, openai_text, openai_tool_call, panto_in, stderr_of, stdout_of, temp_dir};

const API_KEY: &str = "sk-otel-SECRET-4417";
const COLLECTOR_TOKEN: &str = "collector-SECRET-9931";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const WEATHER_TOOL: &str = r#"weather=cat >/dev/null; echo "{\"temp_c\":18}""#;

fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| temp_dir("otel")).clone()
}

/// `panto run` against `provider`, exporting to `collector` (`None`: no variable).
fn run(
    provider: &TestServer,
    collector: Option<&str>,
    extra_env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let base = format!("{}/v1", provider.url());
    let mut cmd = panto_in(&dir().join("home"), &[]);
    cmd.args([
        "run",
        "--json",
        "--base-url",
        &base,
        "--api-key",
        API_KEY,
        "-m",
        "m",
    ])
    .args(args);
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_METRIC_EXPORT_INTERVAL",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
        "TRACEPARENT",
    ] {
        cmd.env_remove(var);
    }
    if let Some(endpoint) = collector {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    support::run(&mut cmd)
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one span {name} in {spans:#?}");
    found[0]
}

/// The spans without the export requests' headers (where the collector's token belongs).
fn span_text(spans: &[Value]) -> String {
    spans
        .iter()
        .map(|s| {
            let mut s = s.clone();
            s.as_object_mut().unwrap().remove("headers");
            s.to_string()
        })
        .collect()
}

#[test]
fn a_tool_turn_exports_its_span_tree_under_traceparent() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"response": {"status": 200, "sse": openai_text("Sunny, 18 degrees.")}}
    ]}));
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let headers = format!("authorization=Bearer {COLLECTOR_TOKEN},x-tenant=t1");
    let out = run(
        &srv,
        Some(&srv.otlp_endpoint()),
        &[
            ("TRACEPARENT", &traceparent),
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
            ("OTEL_SERVICE_NAME", "panto-otel-test"),
        ],
        &["--tool", WEATHER_TOOL, "Weather in Paris?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // The spans arrived before the process exited: nothing to wait for.
    let spans = srv.otlp_spans();

    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["trace_id"], TRACE_ID, "the caller's trace");
    assert_eq!(
        agent["parent_span_id"], PARENT_ID,
        "a child of TRACEPARENT's span"
    );
    assert_eq!(agent["kind"], 1, "internal");
    let a = &agent["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "m");
    assert_eq!(a["gen_ai.response.model"], "gpt-test");
    assert_eq!(a["gen_ai.response.finish_reasons"], "end_turn");
    assert_eq!(a["server.address"], "127.0.0.1");
    assert_eq!(a["server.port"], json!(srv.addr().port()));
    assert_eq!(agent["status"]["code"], 0, "unset: no failure");
    assert_eq!(agent["resource"]["service.name"], "panto-otel-test");

    let chats = named(&spans, "chat m");
    assert_eq!(chats.len(), 2, "one chat span per model request");
    for chat in &chats {
        assert_eq!(chat["trace_id"], TRACE_ID);
        assert_eq!(chat["parent_span_id"], agent["span_id"]);
        assert_eq!(chat["kind"], 3, "client");
        assert_eq!(chat["attributes"]["gen_ai.operation.name"], "chat");
        assert_eq!(chat["attributes"]["gen_ai.response.id"], "chatcmpl-t");
    }
    let tool = one(&spans, "execute_tool weather");
    assert_eq!(tool["trace_id"], TRACE_ID);
    assert_eq!(tool["parent_span_id"], agent["span_id"]);
    let t = &tool["attributes"];
    assert_eq!(t["gen_ai.operation.name"], "execute_tool");
    assert_eq!(t["gen_ai.tool.name"], "weather");
    assert_eq!(t["gen_ai.tool.call.id"], "call_1");
    assert_eq!(t["gen_ai.tool.type"], "function");
    assert_eq!(
        t["panto.tool.runner"], "host",
        "the CLI's --tool is a host tool"
    );
    assert!(
        t.get("gen_ai.tool.call.arguments").is_none(),
        "content is off by default"
    );

    // The collector's headers were sent, and appear nowhere else.
    assert_eq!(
        agent["headers"]["authorization"],
        format!("Bearer {COLLECTOR_TOKEN}")
    );
    assert_eq!(agent["headers"]["x-tenant"], "t1");
    assert_eq!(agent["headers"]["content-type"], "application/x-protobuf");
    let text = span_text(&spans);
    for secret in [API_KEY, COLLECTOR_TOKEN] {
        assert!(!text.contains(secret), "{secret} in the spans: {text}");
        assert!(!stdout_of(&out).contains(secret) && !stderr_of(&out).contains(secret));
    }
    assert!(
        stderr_of(&out).is_empty(),
        "nothing lost, nothing said: {}",
        describe(&out)
    );
}

/// An OpenAI chunk that reports the request's usage.
fn openai_usage(input: u64, output: u64) -> Value {
    json!({"data": {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "gpt-test",
        "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}}})
}

/// `sse` with a usage chunk before its `[DONE]`.
fn with_usage(mut sse: Vec<Value>, input: u64, output: u64) -> Vec<Value> {
    let done = sse.pop().unwrap();
    sse.push(openai_usage(input, output));
    sse.push(done);
    sse
}

/// The data points of metric `name` whose attribute `key` is `value`.
fn points<'a>(metrics: &'a [Value], name: &str, key: &str, value: &str) -> Vec<&'a Value> {
    metrics
        .iter()
        .filter(|m| m["name"] == name && m["attributes"][key] == value)
        .collect()
}

/// The one data point of metric `name` whose attribute `key` is `value`.
fn point<'a>(metrics: &'a [Value], name: &str, key: &str, value: &str) -> &'a Value {
    let found = points(metrics, name, key, value);
    assert_eq!(
        found.len(),
        1,
        "one {name} point with {key}={value}: {metrics:#?}"
    );
    found[0]
}

const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

#[test]
fn a_tool_turn_exports_the_conventions_metrics() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": with_usage(openai_tool_call("call_1"), 30, 7)}},
        {"response": {"status": 200, "sse": with_usage(openai_text("Sunny, 18 degrees."), 50, 4)}}
    ]}));
    let headers = format!("authorization=Bearer {COLLECTOR_TOKEN}");
    let out = run(
        &srv,
        Some(&srv.otlp_endpoint()),
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
            ("OTEL_SERVICE_NAME", "panto-otel-test"),
        ],
        &["--tool", WEATHER_TOOL, "Weather in Paris?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(stderr_of(&out).is_empty(), "{}", describe(&out));
    // The turn's own usage, as the CLI reports it.
    let done: Value = stdout_of(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["type"] == "message_complete")
        .unwrap_or_else(|| panic!("no message_complete line: {}", describe(&out)));
    let (input, output) = (
        done["usage"]["input_tokens"].as_u64().unwrap(),
        done["usage"]["output_tokens"].as_u64().unwrap(),
    );
    assert_eq!((input, output), (80, 11), "{done}");

    // Sent at exit, once: one cumulative point per attribute set.
    let metrics = srv.otlp_metrics();
    let chat_attrs = json!({
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "gpt-test",
        "server.address": "127.0.0.1",
        "server.port": srv.addr().port(),
    });
    for (kind, tokens) in [("input", input), ("output", output)] {
        let p = point(
            &metrics,
            "gen_ai.client.token.usage",
            "gen_ai.token.type",
            kind,
        );
        assert_eq!(p["type"], "histogram");
        assert_eq!(p["unit"], "{token}");
        assert_eq!(p["temporality"], 2, "cumulative");
        assert_eq!(p["count"], 2, "one record per request: {p}");
        assert_eq!(
            p["sum"],
            json!(tokens as f64),
            "the turn's {kind} tokens: {p}"
        );
        assert_eq!(p["explicit_bounds"], json!(TOKEN_BUCKETS));
        let mut want = chat_attrs.clone();
        want["gen_ai.token.type"] = json!(kind);
        assert_eq!(p["attributes"], want);
        assert_eq!(p["resource"]["service.name"], "panto-otel-test");
        assert_eq!(p["scope"], "panto");
    }
    let chat = point(
        &metrics,
        "gen_ai.client.operation.duration",
        "gen_ai.operation.name",
        "chat",
    );
    assert_eq!(chat["unit"], "s");
    assert_eq!(chat["count"], 2, "one per model request");
    assert_eq!(chat["attributes"], chat_attrs);
    assert_eq!(chat["explicit_bounds"], json!(DURATION_BUCKETS));
    assert!(chat["sum"].as_f64().unwrap() > 0.0);
    let tool = point(
        &metrics,
        "gen_ai.client.operation.duration",
        "gen_ai.operation.name",
        "execute_tool",
    );
    assert_eq!(tool["count"], 1, "one per tool call");
    assert_eq!(
        tool["attributes"],
        json!({
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "m",
        })
    );
    let ttfc = point(
        &metrics,
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.operation.name",
        "chat",
    );
    assert_eq!(ttfc["unit"], "s");
    assert_eq!(ttfc["count"], 2, "one per streamed request");
    assert_eq!(ttfc["explicit_bounds"], json!(DURATION_BUCKETS));
    assert_eq!(ttfc["attributes"]["server.address"], "127.0.0.1");
    assert_eq!(ttfc["attributes"]["server.port"], json!(srv.addr().port()));
    assert!(ttfc["sum"].as_f64().unwrap() <= chat["sum"].as_f64().unwrap());
    let mut names: Vec<&str> = metrics.iter().filter_map(|m| m["name"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names,
        [
            "gen_ai.client.operation.duration",
            "gen_ai.client.operation.time_to_first_chunk",
            "gen_ai.client.token.usage"
        ]
    );

    // The collector's header went with them; no key or token in any attribute.
    assert_eq!(
        chat["headers"]["authorization"],
        format!("Bearer {COLLECTOR_TOKEN}")
    );
    let text = span_text(&metrics);
    for secret in [API_KEY, COLLECTOR_TOKEN] {
        assert!(!text.contains(secret), "{secret} in the metrics: {text}");
    }
}

#[test]
fn otel_metrics_exporter_none_leaves_the_metrics_out() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": with_usage(openai_text("Hello."), 3, 2)}}
    ]}));
    let out = run(
        &srv,
        Some(&srv.otlp_endpoint()),
        &[("OTEL_METRICS_EXPORTER", "none")],
        &["hi"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(srv.otlp_metrics().is_empty(), "{:#?}", srv.otlp_metrics());
    one(&srv.otlp_spans(), "invoke_agent");
    assert!(stderr_of(&out).is_empty(), "{}", describe(&out));

    // The metrics' own endpoint alone: metrics, no spans.
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": with_usage(openai_text("Hello."), 3, 2)}}
    ]}));
    let metrics_url = format!("{}/v1/metrics", srv.otlp_endpoint());
    let out = run(
        &srv,
        None,
        &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &metrics_url)],
        &["hi"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let metrics = srv.otlp_metrics();
    let tokens = point(
        &metrics,
        "gen_ai.client.token.usage",
        "gen_ai.token.type",
        "output",
    );
    assert_eq!(tokens["sum"], json!(2.0));
    assert!(srv.otlp_spans().is_empty(), "{:#?}", srv.otlp_spans());
}

#[test]
fn a_failed_turn_exports_its_error_type_in_a_trace_of_its_own() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 401, "json": {"error": {"message": "bad key", "type": "invalid_request_error"}}}}
    ]}));
    // No TRACEPARENT: the turn's span is a root; a malformed one is the same, with a warning.
    let out = run(
        &srv,
        Some(&srv.otlp_endpoint()),
        &[("TRACEPARENT", "00-not-a-traceparent")],
        &["hi"],
    );
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("TRACEPARENT: must be a W3C traceparent"),
        "{}",
        describe(&out)
    );
    let spans = srv.otlp_spans();
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent["parent_span_id"], "", "a root span");
    assert_ne!(agent["trace_id"], TRACE_ID);
    let chat = one(&spans, "chat m");
    for span in [agent, chat] {
        assert_eq!(
            span["attributes"]["error.type"], "authentication",
            "{span:#}"
        );
        assert_eq!(span["status"]["code"], 2, "error status");
    }
    assert_eq!(
        agent["resource"]["service.name"], "panto",
        "the default service name"
    );
    assert!(!span_text(&spans).contains(API_KEY));
}

#[test]
fn without_an_endpoint_nothing_is_exported() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_text("Hello.")}}
    ]}));
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let out = run(&srv, None, &[("TRACEPARENT", &traceparent)], &["hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(srv.otlp_spans().is_empty());
    assert!(stderr_of(&out).is_empty(), "{}", describe(&out));
}

#[test]
fn an_unreachable_collector_does_not_hold_the_turn_up() {
    let srv = support::server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_text("Hello.")}}
    ]}));
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let headers = format!("authorization=Bearer {COLLECTOR_TOKEN}");
    let out = run(
        &srv,
        Some(&endpoint),
        &[("OTEL_EXPORTER_OTLP_HEADERS", &headers)],
        &["hi"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(stdout_of(&out).contains("Hello."), "{}", describe(&out));
    let err = stderr_of(&out);
    assert!(err.contains("span(s) not delivered"), "{err}");
    assert!(!err.contains(COLLECTOR_TOKEN), "{err}");
}
