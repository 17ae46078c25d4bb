//! Owns the parenting of a turn's `invoke_agent` span under the caller's span given as a
//! W3C `traceparent` (the turn option; the CLI's `TRACEPARENT`). The core records it in
//! the span's [`panto::telemetry::TRACEPARENT_FIELD`]; a `tracing` span cannot name an
//! OpenTelemetry parent, but `tracing-opentelemetry` takes a new span's parent from the
//! current OpenTelemetry context. So [`Attach`], placed before that layer, makes the
//! caller's span current while the new span is made, and [`Detach`], after it, restores
//! the context. Nothing else of the spans is touched.

use std::cell::RefCell;
use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::ContextGuard;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};

thread_local! {
    /// What [`Attach`] made current for each span with the field being made on this
    /// thread (`None`: nothing, the field held no valid traceparent), for [`Detach`] to
    /// restore. Spans are not made inside each other's creation, but a stack costs
    /// nothing.
    static ATTACHED: RefCell<Vec<Option<ContextGuard>>> = const { RefCell::new(Vec::new()) };
}

/// Makes the caller's span current while a span with a `traceparent` is made.
pub(crate) struct Attach;

/// Restores the context [`Attach`] changed, once the span is made.
pub(crate) struct Detach;

/// The context whose remote span `traceparent` names, if it is a valid one.
pub(crate) fn remote_parent(traceparent: &str) -> Option<opentelemetry::Context> {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Finds the `traceparent` field among a span's fields.
#[derive(Default)]
struct TraceparentField(Option<String>);

impl Visit for TraceparentField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == panto::telemetry::TRACEPARENT_FIELD {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber> Layer<S> for Attach {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        if attrs
            .metadata()
            .fields()
            .field(panto::telemetry::TRACEPARENT_FIELD)
            .is_none()
        {
            return;
        }
        let mut found = TraceparentField::default();
        attrs.record(&mut found);
        let guard = found
            .0
            .as_deref()
            .and_then(remote_parent)
            .map(opentelemetry::Context::attach);
        ATTACHED.with(|a| a.borrow_mut().push(guard));
    }
}

impl<S: Subscriber> Layer<S> for Detach {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        if attrs
            .metadata()
            .fields()
            .field(panto::telemetry::TRACEPARENT_FIELD)
            .is_some()
        {
            // Dropping the guard restores the context that was current before.
            let _ = ATTACHED.with(|a| a.borrow_mut().pop());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn a_traceparent_names_a_remote_parent() {
        let cx = remote_parent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("valid");
        let span = cx.span();
        let sc = span.span_context();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote());
        assert!(sc.is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(remote_parent(bad).is_none(), "{bad}");
        }
    }
}
