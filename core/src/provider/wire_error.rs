//! Owns the classification of what a failed request or a failing stream says: an HTTP
//! status and its error body, or an error payload inside a 200 stream, become a typed
//! [`Error`] with its kind, retryability and the provider's own code. How long to wait
//! before a retry (`retry-after` and friends) is `crate::retry`'s.

use serde_json::Value;

use super::tolerant::parse_value_lossy;
use crate::error::{Error, ErrorKind};

/// What an error body says: (message, provider code). Understands
/// `{"error":{"type":…,"code":…,"message":…}}` (Anthropic adds `"type":"error"` around
/// it), `{"error":"…"}` (Ollama, vLLM) and `{"message":"…"}`.
pub(crate) fn describe_error_body(body: &str) -> (Option<String>, Option<String>) {
    let Some(Value::Object(mut parsed)) = parse_value_lossy(body) else {
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

pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

pub(crate) fn protocol_json_error(what: &str, e: serde_json::Error) -> Error {
    Error::protocol(format!("malformed {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_at_char_boundaries() {
        let s = "aé😀z";
        for max in 0..=s.len() + 1 {
            let t = truncate(s, max);
            assert!(t.len() <= max && s.starts_with(t), "{max}: {t:?}");
        }
        assert_eq!(truncate(s, 2), "a");
        assert_eq!(truncate(s, 7), "aé😀");
    }
}
