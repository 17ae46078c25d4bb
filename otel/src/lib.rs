//! Owns panto's own OpenTelemetry export: the spans and metrics of a turn (the core's
//! `telemetry` module makes them) sent over OTLP/HTTP with protobuf bodies to the
//! collector that the standard `OTEL_EXPORTER_OTLP_*` variables name. It is for the
//! programs that have no OpenTelemetry pipeline of their own for panto to join: the CLI
//! and C hosts. A Rust host bridges `tracing` to its own pipeline instead
//! (docs/observability.md); Go and Python hosts use their bindings' instrumentation.
//!
//! ```text
//!  turn's `tracing` spans and metric events (target panto::telemetry; the rest is filtered out)
//!    spans ──► parent::Attach (the `traceparent` option becomes the OpenTelemetry parent)
//!          ──► tracing-opentelemetry ──► SDK tracer provider (resource: OTEL_SERVICE_NAME …)
//!          ──► queue::Queue: a bounded queue; when full the span is dropped and counted
//!    metric events ──► metrics::Record ──► the SDK's histograms (in memory)
//!  the export thread: span batches, and the metrics every interval and at each flush
//!          ──► OTLP/HTTP exporters (/v1/traces, /v1/metrics) ──► client::Client (reqwest)
//! ```
//!
//! A turn never waits for exporting: a finished span is handed to the queue without
//! blocking, a metric is an in-memory aggregation. [`Export::flush`] waits, bounded, for
//! what was queued and recorded before it.
//!
//! Modules:
//! - `parent`: the layers that make a turn's `traceparent` option its span's parent.
//! - `queue`: the span processor, its bounded queue and the export thread.
//! - `metrics`: the histograms, the layer that records into them, and their export.
//! - `client`: the HTTP client the OTLP exporters send with, bounded and quiet.

mod client;
pub mod metrics;
mod parent;
mod queue;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use panto::Error;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// The variable naming the collector's base URL (`/v1/traces` and `/v1/metrics` are added to it).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The variable naming the traces URL itself; it wins over [`ENDPOINT_ENV`].
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The variable naming the metrics URL itself; it wins over [`ENDPOINT_ENV`].
pub const METRICS_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
/// The variable that turns the spans off with `none`.
pub const TRACES_EXPORTER_ENV: &str = "OTEL_TRACES_EXPORTER";
/// The variable that turns the metrics off with `none`.
pub const METRICS_EXPORTER_ENV: &str = "OTEL_METRICS_EXPORTER";
/// The variable giving the time between two exports of the metrics, in milliseconds.
pub const METRIC_EXPORT_INTERVAL_ENV: &str = "OTEL_METRIC_EXPORT_INTERVAL";
/// The variable naming the service (the resource's `service.name`).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// The time between two exports of the metrics when [`METRIC_EXPORT_INTERVAL_ENV`]
/// does not say (the specification's default); a flush sends them too.
pub const DEFAULT_METRIC_EXPORT_INTERVAL: Duration = Duration::from_secs(60);

/// Most finished spans waiting for the export thread; past it a span is dropped and
/// counted ([`Export::dropped_spans`]). A turn makes a few spans per model request and
/// per tool call, so this is thousands of turns' worth.
pub const MAX_QUEUED_SPANS: usize = 4096;

/// How long [`Export::flush`] waits when the host gives no time (the CLI on exit).
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the environment asks for export: [`traces_configured`] or
/// [`metrics_configured`].
pub fn configured() -> bool {
    traces_configured() || metrics_configured()
}

/// Whether the spans are exported: [`TRACES_ENDPOINT_ENV`] or [`ENDPOINT_ENV`] is set
/// and not empty, and [`TRACES_EXPORTER_ENV`] is not `none`.
pub fn traces_configured() -> bool {
    signal_configured(TRACES_ENDPOINT_ENV, TRACES_EXPORTER_ENV)
}

/// Whether the metrics are exported: [`METRICS_ENDPOINT_ENV`] or [`ENDPOINT_ENV`] is
/// set and not empty, and [`METRICS_EXPORTER_ENV`] is not `none`.
pub fn metrics_configured() -> bool {
    signal_configured(METRICS_ENDPOINT_ENV, METRICS_EXPORTER_ENV)
}

fn signal_configured(endpoint: &str, exporter: &str) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let off = std::env::var(exporter).is_ok_and(|v| v.trim().eq_ignore_ascii_case("none"));
    (set(endpoint) || set(ENDPOINT_ENV)) && !off
}

/// The time between two exports of the metrics: [`METRIC_EXPORT_INTERVAL_ENV`] (in
/// milliseconds, more than 0) or [`DEFAULT_METRIC_EXPORT_INTERVAL`].
fn metric_export_interval() -> Duration {
    std::env::var(METRIC_EXPORT_INTERVAL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(DEFAULT_METRIC_EXPORT_INTERVAL, Duration::from_millis)
}

/// The export of this process's turns, once installed.
static INSTALLED: OnceLock<Export> = OnceLock::new();
/// Held while one thread installs the export, so that a second caller waits and then
/// finds it installed.
static INSTALLING: Mutex<()> = Mutex::new(());

/// A running export: the tracer and meter providers (those of the signals exported) and
/// the export thread's handle.
#[derive(Debug)]
pub struct Export {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    instruments: Option<metrics::Instruments>,
    queue: queue::Handle,
}

impl Export {
    /// Installs the export the environment configures as this process's `tracing`
    /// subscriber, once: `Ok(None)` when no signal is configured ([`configured`]); the same export
    /// when it is already installed. `service_name` is the resource's `service.name`
    /// unless [`SERVICE_NAME_ENV`] (or `OTEL_RESOURCE_ATTRIBUTES`) names one. A `config`
    /// error when the variables are unusable or another subscriber is installed already;
    /// no error message holds a header's value.
    pub fn install(service_name: &str) -> Result<Option<&'static Export>, Error> {
        if let Some(export) = INSTALLED.get() {
            return Ok(Some(export));
        }
        let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(export) = INSTALLED.get() {
            return Ok(Some(export));
        }
        if !configured() {
            return Ok(None);
        }
        let export = Export::start(service_name)?;
        let spans = export.tracer_provider.as_ref().map(|p| p.tracer("panto"));
        let subscriber = tracing_subscriber::registry()
            .with(Targets::new().with_target(panto::telemetry::TARGET, tracing::Level::INFO))
            .with(spans.is_some().then_some(parent::Attach))
            .with(spans.map(|t| tracing_opentelemetry::layer().with_tracer(t)))
            .with(export.tracer_provider.is_some().then_some(parent::Detach))
            .with(export.instruments.clone().map(metrics::Record));
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            // The unused export's thread ends with its provider.
            return Err(Error::config(
                "OpenTelemetry export: this process has a tracing subscriber already; \
                 install panto's spans in it with tracing-opentelemetry instead",
            ));
        }
        Ok(Some(INSTALLED.get_or_init(|| export)))
    }

    /// The export installed in this process, if any.
    pub fn installed() -> Option<&'static Export> {
        INSTALLED.get()
    }

    /// The providers and the export thread, from the environment.
    fn start(service_name: &str) -> Result<Export, Error> {
        let service_set = std::env::var_os(SERVICE_NAME_ENV).is_some_and(|v| !v.is_empty())
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
                v.split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        let mut resource = Resource::builder();
        if !service_set {
            resource = resource.with_service_name(service_name.to_owned());
        }
        let resource = resource.build();
        // Endpoint, headers, timeout and compression come from the OTEL_EXPORTER_OTLP_*
        // variables (the signal's own, else the generic ones), which the exporters read
        // themselves. Their builders' errors name a variable or a setting, never a
        // header's value.
        let span_exporter = if traces_configured() {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_http_client(client::Client::new()?)
                .build()
                .map_err(|e| Error::config(format!("OpenTelemetry export: {e}")))?;
            opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
            Some(exporter)
        } else {
            None
        };
        let mut meter_provider = None;
        let mut instruments = None;
        let mut pipe = None;
        if metrics_configured() {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_http_client(client::Client::new()?)
                .build()
                .map_err(|e| Error::config(format!("OpenTelemetry export: {e}")))?;
            let temporality =
                opentelemetry_sdk::metrics::exporter::PushMetricExporter::temporality(&exporter);
            let reader = metrics::SharedReader(Arc::new(
                ManualReader::builder()
                    .with_temporality(temporality)
                    .build(),
            ));
            let provider = SdkMeterProvider::builder()
                .with_resource(resource.clone())
                .with_reader(reader.clone())
                .build();
            let recorded = Arc::new(AtomicBool::new(false));
            instruments = Some(metrics::Instruments::new(
                &provider.meter("panto"),
                recorded.clone(),
            ));
            pipe = Some(metrics::Pipe {
                reader,
                exporter,
                interval: metric_export_interval(),
                recorded,
            });
            meter_provider = Some(provider);
        }
        let (processor, queue) = queue::Queue::start(span_exporter, MAX_QUEUED_SPANS, pipe)?;
        let tracer_provider = processor.map(|processor| {
            SdkTracerProvider::builder()
                .with_resource(resource)
                .with_span_processor(processor)
                .build()
        });
        Ok(Export {
            tracer_provider,
            meter_provider,
            instruments,
            queue,
        })
    }

    /// Waits, at most `timeout`, until every span finished before this call has been
    /// sent (or its sending failed), and the metrics recorded before it too. `true` when
    /// they were all handled in time. Never called from a turn; safe from any thread.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.queue.flush(timeout)
    }

    /// Spans dropped because the queue was full, since the export started.
    pub fn dropped_spans(&self) -> u64 {
        self.queue.dropped()
    }

    /// Spans that were sent and refused, or could not be sent, since the export started.
    pub fn failed_spans(&self) -> u64 {
        self.queue.failed()
    }

    /// Spans the collector accepted, since the export started.
    pub fn exported_spans(&self) -> u64 {
        self.queue.exported()
    }

    /// Exports of the metrics that were refused or could not be sent, since the export
    /// started (each export carries every histogram).
    pub fn failed_metric_exports(&self) -> u64 {
        self.queue.metric_exports_failed()
    }

    /// The SDK's tracer provider, when spans are exported (for a host that wants to make
    /// spans of its own with it).
    pub fn tracer_provider(&self) -> Option<&SdkTracerProvider> {
        self.tracer_provider.as_ref()
    }

    /// The SDK's meter provider, when metrics are exported.
    pub fn meter_provider(&self) -> Option<&SdkMeterProvider> {
        self.meter_provider.as_ref()
    }
}
