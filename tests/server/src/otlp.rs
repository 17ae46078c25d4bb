//! Owns the server's OTLP/HTTP trace receiver: `POST /_panto/otlp/v1/traces` takes an
//! `ExportTraceServiceRequest` in protobuf (decoded with `opentelemetry-proto`, the
//! OpenTelemetry project's own message types), and `GET /_panto/otlp/spans` gives back
//! every span received so far, one JSON object a line, for the CLI and C tests to check.
//! A test points `OTEL_EXPORTER_OTLP_ENDPOINT` at `{url}/_panto/otlp`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use serde_json::{json, Map, Value};

/// Most spans kept; later ones are refused (the exporter counts them as failed).
pub(crate) const MAX_SPANS: usize = 100_000;

/// The spans of one export request, as JSON objects with sorted keys: `trace_id`,
/// `span_id`, `parent_span_id` (lowercase hex, `""` for none), `name`, `kind` (OTLP's
/// number: 1 internal, 3 client), `status` (`code`: 0 unset, 1 ok, 2 error; `message`),
/// `attributes` and `resource` (objects), `scope` (the instrumentation scope's name),
/// `events` (`name`, `attributes`), and `headers` (the export request's header names and
/// values, lowercase names).
pub(crate) fn decode(body: &[u8], headers: &[(String, String)]) -> Result<Vec<Value>, String> {
    let request = ExportTraceServiceRequest::decode(body)
        .map_err(|e| format!("not an OTLP ExportTraceServiceRequest: {e}"))?;
    let headers: Map<String, Value> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), Value::String(v.clone())))
        .collect();
    let mut spans = Vec::new();
    for rs in request.resource_spans {
        let resource = rs
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            let scope = ss.scope.map(|s| s.name).unwrap_or_default();
            for span in ss.spans {
                let status = span.status.unwrap_or_default();
                let events: Vec<Value> = span
                    .events
                    .iter()
                    .map(|e| json!({"name": e.name, "attributes": attributes(&e.attributes)}))
                    .collect();
                spans.push(json!({
                    "trace_id": hex(&span.trace_id),
                    "span_id": hex(&span.span_id),
                    "parent_span_id": hex(&span.parent_span_id),
                    "name": span.name,
                    "kind": span.kind,
                    "status": {"code": status.code, "message": status.message},
                    "attributes": attributes(&span.attributes),
                    "events": events,
                    "resource": resource,
                    "scope": scope,
                    "headers": headers,
                }));
            }
        }
    }
    Ok(spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> Value {
    Value::Object(
        kvs.iter()
            .map(|kv| (kv.key.clone(), value(kv.value.as_ref())))
            .collect(),
    )
}

fn value(v: Option<&AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(n)) => json!(n),
        Some(any_value::Value::DoubleValue(f)) => json!(f),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| value(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(l)) => attributes(&l.values),
        Some(any_value::Value::BytesValue(b)) => json!(hex(b)),
        Some(any_value::Value::StringValueStrindex(i)) => json!(i),
    }
}

/// The answer to an export: an empty `ExportTraceServiceResponse` (full success).
pub(crate) fn success() -> Vec<u8> {
    opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::default()
        .encode_to_vec()
}
