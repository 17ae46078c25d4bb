//! Owns panto's own OpenTelemetry export: the spans of a turn (the core's `telemetry`
//! module makes them) sent over OTLP/HTTP with protobuf bodies to the collector that the
//! standard `OTEL_EXPORTER_OTLP_*` variables name. It is for the programs that have no
//! OpenTelemetry pipeline of their own for panto to join: the CLI and C hosts. A Rust
//! host bridges `tracing` to its own pipeline instead (docs/observability.md); Go and
//! Python hosts use their bindings' instrumentation.
//!
//! ```text
//!  turn's `tracing` spans (target panto::telemetry; everything else is filtered out)
//!    ──► parent::Attach (the `traceparent` option becomes the OpenTelemetry parent)
//!    ──► tracing-opentelemetry ──► SDK tracer provider (resource: OTEL_SERVICE_NAME …)
//!    ──► queue::Queue: a bounded queue; when full the span is dropped and counted
//!    ──► the export thread: batches ──► OTLP/HTTP exporter ──► client::Client (reqwest)
//! ```
//!
//! A turn never waits for exporting: a finished span is handed to the queue without
//! blocking. [`Export::flush`] waits, bounded, for what was queued before it.
//!
//! Modules:
//! - `parent`: the layers that make a turn's `traceparent` option its span's parent.
//! - `queue`: the span processor, its bounded queue and the export thread.
//! - `client`: the HTTP client the OTLP exporter sends with, bounded and quiet.

mod client;
mod parent;
mod queue;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use panto::Error;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

/// The variable naming the collector's base URL (`/v1/traces` is added to it).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The variable naming the traces URL itself; it wins over [`ENDPOINT_ENV`].
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// The variable naming the service (the resource's `service.name`).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// Most finished spans waiting for the export thread; past it a span is dropped and
/// counted ([`Export::dropped_spans`]). A turn makes a few spans per model request and
/// per tool call, so this is thousands of turns' worth.
pub const MAX_QUEUED_SPANS: usize = 4096;

/// How long [`Export::flush`] waits when the host gives no time (the CLI on exit).
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the environment asks for export: [`TRACES_ENDPOINT_ENV`] or
/// [`ENDPOINT_ENV`] is set and not empty.
pub fn configured() -> bool {
    [TRACES_ENDPOINT_ENV, ENDPOINT_ENV]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// The export of this process's turns, once installed.
static INSTALLED: OnceLock<Export> = OnceLock::new();
/// Held while one thread installs the export, so that a second caller waits and then
/// finds it installed.
static INSTALLING: Mutex<()> = Mutex::new(());

/// A running export: the tracer provider and its queue.
#[derive(Debug)]
pub struct Export {
    provider: SdkTracerProvider,
    queue: queue::Handle,
}

impl Export {
    /// Installs the export the environment configures as this process's `tracing`
    /// subscriber, once: `Ok(None)` when no endpoint variable is set; the same export
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
        let tracer = export.provider.tracer("panto");
        let subscriber = tracing_subscriber::registry()
            .with(Targets::new().with_target(panto::telemetry::TARGET, tracing::Level::INFO))
            .with(parent::Attach)
            .with(tracing_opentelemetry::layer().with_tracer(tracer))
            .with(parent::Detach);
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

    /// The provider and its export thread, from the environment.
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
        // variables, which the exporter reads itself.
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(client::Client::new()?)
            .build()
            // The builder's errors name a variable or a setting, never a header's value.
            .map_err(|e| Error::config(format!("OpenTelemetry export: {e}")))?;
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
        let (processor, queue) = queue::Queue::start(exporter, MAX_QUEUED_SPANS)?;
        let provider = SdkTracerProvider::builder()
            .with_resource(resource)
            .with_span_processor(processor)
            .build();
        Ok(Export { provider, queue })
    }

    /// Waits, at most `timeout`, until every span finished before this call has been
    /// sent (or its sending failed). `true` when they were all handled in time. Never
    /// called from a turn; safe from any thread.
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

    /// The SDK's provider (for a host that wants to make spans of its own with it).
    pub fn tracer_provider(&self) -> &SdkTracerProvider {
        &self.provider
    }
}
