//! Owns the server's OTLP/HTTP receiver: `POST /_panto/otlp/v1/traces` takes an
//! `ExportTraceServiceRequest` and `POST /_panto/otlp/v1/metrics` an
//! `ExportMetricsServiceRequest`, in protobuf (decoded with `opentelemetry-proto`, the
//! OpenTelemetry project's own message types); `GET /_panto/otlp/spans` and
//! `GET /_panto/otlp/metrics` give back every span and every metric data point received
//! so far, one JSON object a line, for the CLI and C tests to check. A test points
//! `OTEL_EXPORTER_OTLP_ENDPOINT` at `{url}/_panto/otlp`.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, NumberDataPoint};
use prost::Message;
use serde_json::{json, Map, Value};

/// Most spans kept; later ones are refused (the exporter counts them as failed).
pub(crate) const MAX_SPANS: usize = 100_000;

/// Most metric data points kept; later exports are refused.
pub(crate) const MAX_POINTS: usize = 100_000;

/// The spans of one export request, as JSON objects with sorted keys: `trace_id`,
/// `span_id`, `parent_span_id` (lowercase hex, `""` for none), `name`, `kind` (OTLP's
/// number: 1 internal, 3 client), `status` (`code`: 0 unset, 1 ok, 2 error; `message`),
/// `attributes` and `resource` (objects), `scope` (the instrumentation scope's name),
/// `events` (`name`, `attributes`), and `headers` (the export request's header names and
/// values, lowercase names).
pub(crate) fn decode(
    body: &[u8],
    headers: &BTreeMap<String, String>,
) -> Result<Vec<Value>, String> {
    let request = ExportTraceServiceRequest::decode(body)
        .map_err(|e| format!("not an OTLP ExportTraceServiceRequest: {e}"))?;
    let headers = header_map(headers);
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

/// The data points of one metrics export request, as JSON objects with sorted keys, one
/// per data point: `name`, `unit`, `description`, `type` (`histogram`, `sum`, `gauge`,
/// `exponential_histogram`, `summary`), `temporality` (OTLP's number: 1 delta,
/// 2 cumulative; 0 for a gauge or summary), `attributes`, `resource`, `scope`, `headers`,
/// and by type: a histogram's `count`, `sum`, `min`, `max`, `bucket_counts`,
/// `explicit_bounds`; a sum's or gauge's `value`; the others' `count`.
pub(crate) fn decode_metrics(
    body: &[u8],
    headers: &BTreeMap<String, String>,
) -> Result<Vec<Value>, String> {
    let request = ExportMetricsServiceRequest::decode(body)
        .map_err(|e| format!("not an OTLP ExportMetricsServiceRequest: {e}"))?;
    let headers = header_map(headers);
    let mut points = Vec::new();
    for rm in request.resource_metrics {
        let resource = rm
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for sm in rm.scope_metrics {
            let scope = sm.scope.map(|s| s.name).unwrap_or_default();
            for m in sm.metrics {
                let common = |kind: &str, temporality: i32, attrs: &[KeyValue]| {
                    json!({
                        "name": m.name,
                        "unit": m.unit,
                        "description": m.description,
                        "type": kind,
                        "temporality": temporality,
                        "attributes": attributes(attrs),
                        "resource": resource,
                        "scope": scope,
                        "headers": headers,
                    })
                };
                let with = |mut point: Value, more: Value| {
                    if let (Some(p), Value::Object(more)) = (point.as_object_mut(), more) {
                        p.extend(more);
                    }
                    point
                };
                let number = |p: &NumberDataPoint| match p.value {
                    Some(number_data_point::Value::AsDouble(f)) => json!(f),
                    Some(number_data_point::Value::AsInt(n)) => json!(n),
                    None => Value::Null,
                };
                match &m.data {
                    Some(metric::Data::Histogram(h)) => {
                        for p in &h.data_points {
                            points.push(with(
                                common("histogram", h.aggregation_temporality, &p.attributes),
                                json!({
                                    "count": p.count,
                                    "sum": p.sum,
                                    "min": p.min,
                                    "max": p.max,
                                    "bucket_counts": p.bucket_counts,
                                    "explicit_bounds": p.explicit_bounds,
                                }),
                            ));
                        }
                    }
                    Some(metric::Data::Sum(s)) => {
                        for p in &s.data_points {
                            points.push(with(
                                common("sum", s.aggregation_temporality, &p.attributes),
                                json!({"value": number(p)}),
                            ));
                        }
                    }
                    Some(metric::Data::Gauge(g)) => {
                        for p in &g.data_points {
                            points.push(with(
                                common("gauge", 0, &p.attributes),
                                json!({"value": number(p)}),
                            ));
                        }
                    }
                    Some(metric::Data::ExponentialHistogram(h)) => {
                        for p in &h.data_points {
                            points.push(with(
                                common(
                                    "exponential_histogram",
                                    h.aggregation_temporality,
                                    &p.attributes,
                                ),
                                json!({"count": p.count}),
                            ));
                        }
                    }
                    Some(metric::Data::Summary(s)) => {
                        for p in &s.data_points {
                            points.push(with(
                                common("summary", 0, &p.attributes),
                                json!({"count": p.count}),
                            ));
                        }
                    }
                    None => {}
                }
            }
        }
    }
    Ok(points)
}

/// The export request's headers, lowercase names.
fn header_map(headers: &BTreeMap<String, String>) -> Map<String, Value> {
    headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), Value::String(v.clone())))
        .collect()
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

/// The answer to a trace export: an empty `ExportTraceServiceResponse` (full success).
pub(crate) fn success() -> Vec<u8> {
    opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::default()
        .encode_to_vec()
}

/// The answer to a metrics export: an empty `ExportMetricsServiceResponse` (full success).
pub(crate) fn metrics_success() -> Vec<u8> {
    ExportMetricsServiceResponse::default().encode_to_vec()
}
