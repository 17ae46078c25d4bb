//! Owns the classification of what a failed request or a failing stream says: an HTTP
//! status and its error body, or an error payload inside a 200 stream, become a typed
//! [`Error`] with its kind, retryability and the provider's own code. How long to wait
//! before a retry (`retry-after` and friends) is `crate::retry`'s.

use serde_json::Value;

use super::tolerant::parse_value_lossy;
use crate::error::{Error, ErrorKind};
use crate::sse::SseParser;
use crate::text::truncate;

/// What an error body says: (message, provider code). Understands
/// `{"error":{"type":…,"code":…,"message":…}}` (Anthropic adds `"type":"error"` around
/// it), `{"error":"…"}` (Ollama, vLLM) and `{"message":"…"}`, as the whole body or as
/// the first JSON object of an event-stream body ([`error_payload`]).
pub(crate) fn describe_error_body(body: &str) -> (Option<String>, Option<String>) {
    let Some(Value::Object(mut parsed)) = error_payload(body) else {
        return (None, None);
    };
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    };
    match parsed.remove("error") {
        Some(Value::Object(mut detail)) => {
            let code = match detail.remove("code") {
                Some(Value::String(s)) if !s.is_empty() => Some(s),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            }
            .or_else(|| text(detail.remove("type")));
            (text(detail.remove("message")), code)
        }
        Some(Value::String(message)) if !message.is_empty() => (Some(message), None),
        _ => (text(parsed.remove("message")), None),
    }
}

/// The JSON of an error body: the body itself, or — when a server that streams answers
/// its error in the stream's framing, as LiteLLM's proxy does with a 500 whose body is
/// `data: {"error": …}\n\ndata: [DONE]` — the data of its first event that is a JSON
/// object. `None` when neither holds JSON.
pub(crate) fn error_payload(body: &str) -> Option<Value> {
    if let Some(v) = parse_value_lossy(body) {
        return Some(v);
    }
    if !body.trim_start().starts_with("data:") && !body.trim_start().starts_with("event:") {
        return None;
    }
    let mut parser = SseParser::new(body.len().saturating_add(1));
    let mut found = None;
    // A final event without its blank line is dispatched by the blank line added here.
    for chunk in [body.as_bytes(), b"\n\n"] {
        let fed = parser.feed(chunk, |event| {
            if found.is_none() {
                if let Some(v @ Value::Object(_)) = parse_value_lossy(event.data) {
                    found = Some(v);
                }
            }
            Ok(())
        });
        if fed.is_err() {
            break;
        }
    }
    found
}

/// An error payload that arrived inside a 200 stream.
pub(crate) fn stream_error(data: &str) -> Error {
    let (message, code) = describe_error_body(data);
    let retryable = matches!(
        code.as_deref(),
        Some("overloaded_error" | "api_error" | "server_error" | "internal_server_error")
    );
    Error::new(
        ErrorKind::Provider,
        format!(
            "the provider reported an error mid-stream: {}",
            message.unwrap_or_else(|| truncate(data, 300).into())
        ),
    )
    .with_retryable(retryable)
    .with_provider_code(code)
}

/// An HTTP error answer (non-2xx) → typed error.
pub fn http_error(status: u16, body: &str) -> Error {
    let (message, code) = describe_error_body(body);
    let kind = ErrorKind::from_status(status);
    let quota = matches!(
        code.as_deref(),
        Some("insufficient_quota" | "enforced_spend_limit_reached" | "billing_hard_limit_reached")
    ) || body.contains("enforced_spend_limit_reached");
    let retryable = matches!(status, 408 | 409 | 429 | 500..=599) && !quota;
    let detail = message.unwrap_or_else(|| {
        if body.trim().is_empty() {
            "no error body".into()
        } else {
            truncate(body.trim(), 300).into()
        }
    });
    Error::new(kind, format!("HTTP {status}: {detail}"))
        .with_status(status)
        .with_retryable(retryable)
        .with_provider_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LiteLLM's proxy answers a failed streaming request with a 500 whose body is in
    /// the stream's framing; its message is read as from a JSON body.
    #[test]
    fn an_event_stream_error_body_is_read_like_a_json_one() {
        let body = "data: {\"error\": {\"message\": \"litellm.APIConnectionError: Ollama is down\", \
                    \"type\": \"None\", \"param\": \"None\", \"code\": \"500\"}}\n\ndata: [DONE]\n\n";
        let e = http_error(500, body);
        assert_eq!(e.kind, ErrorKind::Server);
        assert_eq!(
            e.message,
            "HTTP 500: litellm.APIConnectionError: Ollama is down"
        );
        assert_eq!(e.provider_code.as_deref(), Some("500"));
        // Without the final blank line, with an event name, with CRLF line ends.
        for body in [
            "data: {\"error\": \"boom\"}",
            "event: error\r\ndata: {\"error\": \"boom\"}\r\n\r\n",
            "data: [DONE]\n\ndata: {\"message\": \"boom\"}\n\n",
        ] {
            assert_eq!(
                describe_error_body(body).0.as_deref(),
                Some("boom"),
                "{body:?}"
            );
        }
        // A stream body without JSON keeps the old fallback: the body itself.
        assert_eq!(
            http_error(502, "data: oops\n\n").message,
            "HTTP 502: data: oops"
        );
    }
}
