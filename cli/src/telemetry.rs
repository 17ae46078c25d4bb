//! Owns the CLI's OpenTelemetry export: when `OTEL_EXPORTER_OTLP_ENDPOINT` (or a
//! signal's own endpoint variable) is set, every turn's spans and metrics go over
//! OTLP/HTTP to that collector (`panto-otel`), the spans under the span `TRACEPARENT`
//! names, and the export is flushed, bounded, before the process exits. The spans and
//! metrics themselves are the core's.

use std::time::Duration;

use panto_otel::Export;

/// The variable that names the caller's span (W3C Trace Context's form, as the
/// conventions for environment-variable carriers spell it).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// Most time spent sending the last spans before exiting.
const EXIT_FLUSH: Duration = Duration::from_secs(5);

/// Starts the export the environment asks for; a problem is one warning on stderr and
/// the run goes on without export.
pub fn start() {
    if let Err(e) = Export::install("panto") {
        eprintln!("panto: OpenTelemetry export is off: {}", e.message);
    }
}

/// The caller's span for a turn's options: `TRACEPARENT`, when spans are exported. One
/// that is not a W3C traceparent is left out with a warning (the turn's spans start a
/// trace of their own) rather than failing the turn.
pub fn traceparent() -> Option<String> {
    Export::installed()?.tracer_provider()?;
    let value = std::env::var(TRACEPARENT_ENV).ok()?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    match panto::telemetry::check_traceparent(value, TRACEPARENT_ENV) {
        Ok(()) => Some(value.to_owned()),
        Err(e) => {
            eprintln!(
                "panto: {}; the turn's spans start a trace of their own",
                e.message
            );
            None
        }
    }
}

/// Sends what is queued and recorded (at most [`EXIT_FLUSH`]) and says on stderr when
/// spans or metrics were lost. Never names the collector's headers.
pub fn finish() {
    let Some(export) = Export::installed() else {
        return;
    };
    let flushed = export.flush(EXIT_FLUSH);
    let (dropped, failed) = (export.dropped_spans(), export.failed_spans());
    let gave_up = if flushed {
        ""
    } else {
        "; gave up waiting for the collector"
    };
    if dropped > 0 || failed > 0 || (!flushed && export.tracer_provider().is_some()) {
        eprintln!(
            "panto: OpenTelemetry export: {} span(s) not delivered ({dropped} dropped with the queue full, {failed} refused or unsent){gave_up}",
            dropped + failed,
        );
    }
    let failed_metrics = export.failed_metric_exports();
    if failed_metrics > 0 || (!flushed && export.meter_provider().is_some()) {
        eprintln!(
            "panto: OpenTelemetry export: the metrics were not delivered ({failed_metrics} export(s) refused or unsent){gave_up}"
        );
    }
}
