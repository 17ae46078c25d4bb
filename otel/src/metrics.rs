//! Owns the turns' metrics: the layer [`Record`] takes the core's metric events (`tracing`
//! events of target `panto::telemetry` with a `histogram.*` field) into the three
//! histograms of the GenAI semantic conventions, made once with the conventions' units,
//! descriptions and bucket advice; and [`Pipe`], which the export thread uses to collect
//! them (an SDK manual reader) and send them over OTLP/HTTP to `/v1/metrics`.
//!
//! Recording is the SDK's in-memory aggregation (bounded: the SDK folds attribute sets
//! past its cardinality limit into one overflow series); nothing waits for the network.
//! The pipe sends only when something was recorded since the last export: cumulative
//! histograms, as OTLP's default temporality says (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`
//! may choose delta).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_otlp::MetricExporter;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// `gen_ai.client.operation.duration`: seconds per model request and per tool call.
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// `gen_ai.client.token.usage`: tokens per request, by `gen_ai.token.type`.
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// `gen_ai.client.operation.time_to_first_chunk`: seconds to a request's first chunk.
pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";

/// The conventions' bucket advice for the two time histograms (seconds).
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The conventions' bucket advice for `gen_ai.client.token.usage` (tokens).
pub const TOKEN_BUCKETS: [f64; 14] = [
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

/// The prefix of the field that carries a metric event's value (the convention of
/// `tracing-opentelemetry`'s `MetricsLayer`, which a Rust host uses instead).
const HISTOGRAM_PREFIX: &str = "histogram.";

/// The three histograms, and whether anything was recorded since the last export.
#[derive(Debug, Clone)]
pub(crate) struct Instruments {
    duration: Histogram<f64>,
    tokens: Histogram<u64>,
    ttfc: Histogram<f64>,
    recorded: Arc<AtomicBool>,
}

impl Instruments {
    pub(crate) fn new(meter: &Meter, recorded: Arc<AtomicBool>) -> Instruments {
        Instruments {
            duration: meter
                .f64_histogram(OPERATION_DURATION)
                .with_unit("s")
                .with_description("GenAI operation duration.")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            tokens: meter
                .u64_histogram(TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            ttfc: meter
                .f64_histogram(TIME_TO_FIRST_CHUNK)
                .with_unit("s")
                .with_description(
                    "Time to receive the first chunk, measured from when the client issues \
                     the generation request to when the first chunk is received in the \
                     response stream.",
                )
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            recorded,
        }
    }
}

/// The layer that records the core's metric events into [`Instruments`].
pub(crate) struct Record(pub(crate) Instruments);

/// A metric event's value and attributes.
#[derive(Default)]
struct Measurement {
    name: Option<&'static str>,
    float: Option<f64>,
    int: Option<u64>,
    attributes: Vec<KeyValue>,
}

impl Measurement {
    fn value(&mut self, field: &Field) -> bool {
        match field.name().strip_prefix(HISTOGRAM_PREFIX) {
            Some(name) => {
                self.name = Some(name);
                true
            }
            None => false,
        }
    }
}

impl Visit for Measurement {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.value(field) {
            self.float = Some(value);
        } else {
            self.attributes
                .push(KeyValue::new(Key::from_static_str(field.name()), value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.value(field) {
            self.int = Some(value);
        } else {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            self.attributes
                .push(KeyValue::new(Key::from_static_str(field.name()), value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.value(field) {
            self.int = u64::try_from(value).ok();
        } else {
            self.attributes
                .push(KeyValue::new(Key::from_static_str(field.name()), value));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if !self.value(field) {
            self.attributes
                .push(KeyValue::new(Key::from_static_str(field.name()), value));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // An attribute the turn does not know (no server address) is left out, not "".
        if !self.value(field) && !value.is_empty() {
            self.attributes.push(KeyValue::new(
                Key::from_static_str(field.name()),
                Value::from(value.to_owned()),
            ));
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber> Layer<S> for Record {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        if metadata.target() != panto::telemetry::TARGET
            || !metadata
                .fields()
                .iter()
                .any(|f| f.name().starts_with(HISTOGRAM_PREFIX))
        {
            return;
        }
        let mut m = Measurement {
            attributes: Vec::with_capacity(8),
            ..Measurement::default()
        };
        event.record(&mut m);
        let i = &self.0;
        let value = m.float.or(m.int.map(|n| n as f64));
        match (m.name, value) {
            (Some(OPERATION_DURATION), Some(seconds)) => i.duration.record(seconds, &m.attributes),
            (Some(TIME_TO_FIRST_CHUNK), Some(seconds)) => i.ttfc.record(seconds, &m.attributes),
            (Some(TOKEN_USAGE), _) => match m.int {
                Some(tokens) => i.tokens.record(tokens, &m.attributes),
                None => return,
            },
            _ => return,
        }
        i.recorded.store(true, Ordering::Relaxed);
    }
}

/// The SDK's manual reader, shared between the meter provider (which registers with it)
/// and the export thread (which collects from it).
#[derive(Debug, Clone)]
pub(crate) struct SharedReader(pub(crate) Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// What the export thread needs to send the metrics: the reader, the OTLP exporter, how
/// often, and whether there is anything new.
pub(crate) struct Pipe {
    pub(crate) reader: SharedReader,
    pub(crate) exporter: MetricExporter,
    pub(crate) interval: Duration,
    pub(crate) recorded: Arc<AtomicBool>,
}

impl Pipe {
    /// Collects and sends, on `runtime`, when something was recorded since the last time:
    /// `None` when there was nothing to send, else whether the collector took it.
    pub(crate) fn export(&self, runtime: &tokio::runtime::Runtime) -> Option<bool> {
        if !self.recorded.swap(false, Ordering::Relaxed) {
            return None;
        }
        let mut rm = ResourceMetrics::default();
        if self.reader.collect(&mut rm).is_err() {
            return Some(false);
        }
        // The error is not logged: it may quote the collector's answer.
        Some(runtime.block_on(self.exporter.export(&rm)).is_ok())
    }
}
