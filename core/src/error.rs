//! Owns the one error type of panto and its kinds. Every failure anywhere in the
//! runtime (config, HTTP, stream decoding, tools, the pull adapter, the bindings) is an
//! [`Error`] with one [`ErrorKind`]; bindings map the kind, they never invent their own.

use std::fmt;

use serde::ser::SerializeMap;
use serde::Serialize;

use crate::secret::Secrets;

/// Declares the error kinds: the enum, their stable codes and names, and
/// [`ERROR_KINDS`], their entry in the vocabulary.
macro_rules! error_kinds {
    ($( #[doc = $doc:literal] $code:literal $variant:ident $name:literal, )+) => {
        /// The set of failure classes, identical in every language binding. Non-exhaustive: a
        /// later version may add a kind, so callers keep a fallback arm (bindings map an unknown
        /// code to a generic error, never to a crash).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $( #[doc = $doc] $variant, )+
        }

        /// Every error kind of the vocabulary, in code order.
        pub const ERROR_KINDS: &[crate::vocab::KindSpec] = &[
            $( crate::vocab::KindSpec { name: $name, variant: stringify!($variant), code: $code, doc: $doc }, )+
        ];

        impl ErrorKind {
            /// Every kind, in code order; bindings check theirs against this list.
            pub const ALL: [ErrorKind; [$($code),+].len()] = [$(ErrorKind::$variant),+];

            /// The canonical snake_case name used in JSON and by every binding.
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorKind::$variant => $name, )+ }
            }

            /// The stable numeric code of this kind, as the C ABI reports it (`PANTO_ERR_*`):
            /// 1-based, in the order of [`ErrorKind::ALL`], never reused or renumbered.
            pub fn code(self) -> u32 {
                match self { $( ErrorKind::$variant => $code, )+ }
            }
        }
    };
}

error_kinds! {
    /// The configuration or a call's arguments are invalid.
    1 Config "config",
    /// The provider refused the credentials (HTTP 401).
    2 Authentication "authentication",
    /// The credentials may not do this (HTTP 402/403).
    3 Permission "permission",
    /// The endpoint or model does not exist (HTTP 404).
    4 NotFound "not_found",
    /// The provider refused the request (HTTP 400/413/422).
    5 BadRequest "bad_request",
    /// Too many requests (HTTP 429).
    6 RateLimited "rate_limited",
    /// The provider failed or is overloaded (HTTP 5xx).
    7 Server "server",
    /// The connection could not be made or broke.
    8 Connection "connection",
    /// A time limit passed (connect, idle, request, tool).
    9 Timeout "timeout",
    /// Malformed stream data: bad JSON, an oversized event, an impossible sequence.
    10 Protocol "protocol",
    /// An error payload inside a 200 stream.
    11 Provider "provider",
    /// The turn was cancelled.
    12 Cancelled "cancelled",
    /// The agent already has an active stream.
    13 Busy "busy",
    /// Host-tool misuse, such as an unknown call id.
    14 Tool "tool",
    /// The response or the worker ended before the provider said it finished.
    15 Incomplete "incomplete",
    /// A bug in panto (a panic, reported, never an abort).
    16 Internal "internal",
    /// The final answer did not match the output schema (or was not JSON) after every repair; the raw text is on the error.
    17 OutputInvalid "output_invalid",
    /// The model refused to give the structured answer; the message carries the refusal.
    18 OutputRefused "output_refused",
    /// The structured answer stopped at the output limit (max_tokens) and was not parsed.
    19 OutputTruncated "output_truncated",
}

impl ErrorKind {
    /// The kind with numeric code `code`, if any.
    pub fn from_code(code: u32) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Parses a canonical name back (used by the test server harnesses and bindings).
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The kind an HTTP error status maps to.
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            400 | 413 | 422 => ErrorKind::BadRequest,
            401 => ErrorKind::Authentication,
            402 | 403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::Timeout,
            429 => ErrorKind::RateLimited,
            500..=599 => ErrorKind::Server,
            _ => ErrorKind::Provider,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A typed failure: kind, human message, HTTP status (0 if none), whether retrying the
/// same request could succeed, the provider's own error type/code when it sent one, and
/// the wait the server asked for before a retry when it named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Which kind of failure this is; the same in every language.
    pub kind: ErrorKind,
    /// What happened, for a person (never the API key).
    pub message: String,
    /// The HTTP status of the failed response, 0 when there was none.
    pub status: u16,
    /// Whether repeating the same request could succeed.
    pub retryable: bool,
    /// The provider's own error type or code, when it sent one.
    pub provider_code: Option<String>,
    /// The wait before a retry that the failed response asked for (`retry-after-ms` or
    /// `retry-after`), in milliseconds; `None` when it named none (or nothing usable).
    /// Set on every error from such a response — in particular when the wait was longer
    /// than `retry.max_retry_after_ms` and the turn therefore failed at once. Not part of
    /// the canonical JSON.
    pub retry_after_ms: Option<u64>,
    /// The provider's id of the failed request, from an HTTP error response's
    /// `x-request-id` (OpenAI and most compatible servers) or `request-id` (Anthropic)
    /// header: what the provider's support asks for. Not part of the canonical JSON.
    pub request_id: Option<String>,
    /// The headers of the HTTP error response this error comes from, as
    /// `(lower-case name, value)` pairs in the order received (a repeated header appears
    /// once per value); empty for an error that was not an HTTP error status. Bounded
    /// ([`MAX_ERROR_HEADERS`], [`MAX_ERROR_HEADER_VALUE`] bytes a value) and redacted
    /// like the message. Not part of the canonical JSON.
    pub headers: Vec<(String, String)>,
    /// The model's raw final text, for the structured-output kinds (`output_invalid`,
    /// `output_refused`, `output_truncated`); `None` otherwise. Bounded by
    /// `max_message_bytes` and redacted like the message. In the canonical JSON as
    /// `"output"` when present.
    pub output: Option<Box<String>>,
}

/// At most this many headers of a failed response are kept on its [`Error`].
pub const MAX_ERROR_HEADERS: usize = 64;
/// At most this many bytes of each kept header value.
pub const MAX_ERROR_HEADER_VALUE: usize = 1024;

impl Error {
    /// An error of this kind and message (no status, not retryable).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            status: 0,
            retryable: false,
            provider_code: None,
            retry_after_ms: None,
            request_id: None,
            headers: Vec::new(),
            output: None,
        }
    }

    /// A `config` error: the configuration or a call's arguments are invalid.
    pub fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }
    /// A `protocol` error: the stream's data is malformed.
    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, message)
    }
    /// An `incomplete` error: the response ended before the provider said it finished.
    pub fn incomplete(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Incomplete, message)
    }
    /// A `cancelled` error: the turn was cancelled.
    pub fn cancelled() -> Error {
        Error::new(ErrorKind::Cancelled, "the turn was cancelled")
    }
    /// An `internal` error: a bug in panto.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Error {
        self.status = status;
        self
    }
    /// Sets whether retrying could succeed.
    pub fn with_retryable(mut self, retryable: bool) -> Error {
        self.retryable = retryable;
        self
    }
    /// Sets the provider's error type or code.
    pub fn with_provider_code(mut self, code: Option<String>) -> Error {
        self.provider_code = code;
        self
    }
    /// Sets the wait the server asked for before a retry, in milliseconds.
    pub fn with_retry_after_ms(mut self, ms: Option<u64>) -> Error {
        self.retry_after_ms = ms;
        self
    }
    /// Sets the provider's request id.
    pub fn with_request_id(mut self, id: Option<String>) -> Error {
        self.request_id = id;
        self
    }
    /// Sets the failed response's headers (already redacted and capped).
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> Error {
        self.headers = headers;
        self
    }
    /// Sets the model's raw final text of a structured-output failure.
    pub fn with_output(mut self, output: Option<String>) -> Error {
        self.output = output.map(Box::new);
        self
    }
    /// The model's raw final text of a structured-output failure, if any.
    pub fn output(&self) -> Option<&str> {
        self.output.as_deref().map(String::as_str)
    }
    /// The value of a header of the failed response (`name` in any case), the first if
    /// it was repeated.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The canonical JSON form: `{"type":"error","kind":…,"message":…,"status":…,
    /// "retryable":…,"provider_code":…}`, plus `"output":…` when the error carries the
    /// model's raw output.
    pub fn to_json(&self) -> String {
        // Serializing a struct of strings and integers cannot fail.
        crate::event::escape_line_separators(serde_json::to_string(self).unwrap_or_default())
    }

    /// Removes every secret from every string field (message and provider code). Called
    /// once on every error a turn reports, so a key echoed back by a proxy, embedded in
    /// a URL, or cut in half by a truncation never reaches a caller.
    pub(crate) fn redact(mut self, secrets: &Secrets) -> Error {
        secrets.redact_in_place(&mut self.message);
        if let Some(code) = &mut self.provider_code {
            secrets.redact_in_place(code);
        }
        if let Some(id) = &mut self.request_id {
            secrets.redact_in_place(id);
        }
        for (_, value) in &mut self.headers {
            secrets.redact_in_place(value);
        }
        if let Some(output) = &mut self.output {
            secrets.redact_in_place(output);
        }
        self
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(6 + usize::from(self.output.is_some())))?;
        m.serialize_entry("type", "error")?;
        m.serialize_entry("kind", self.kind.as_str())?;
        m.serialize_entry("message", &self.message)?;
        m.serialize_entry("status", &self.status)?;
        m.serialize_entry("retryable", &self.retryable)?;
        m.serialize_entry("provider_code", &self.provider_code)?;
        if let Some(output) = &self.output {
            m.serialize_entry("output", output)?;
        }
        m.end()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if self.status != 0 {
            write!(f, " (HTTP {})", self.status)?;
        }
        if let Some(code) = &self.provider_code {
            write!(f, " [{code}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// A result whose error is panto's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(ErrorKind::from_name("nope"), None);
    }

    #[test]
    fn canonical_json_has_every_field() {
        let e = Error::new(ErrorKind::RateLimited, "slow down")
            .with_status(429)
            .with_retryable(true)
            .with_provider_code(Some("rate_limit_error".into()));
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"error","kind":"rate_limited","message":"slow down",
                "status":429,"retryable":true,"provider_code":"rate_limit_error"})
        );
    }

    #[test]
    fn canonical_json_carries_the_raw_output_when_present() {
        let e = Error::new(ErrorKind::OutputInvalid, "did not match")
            .with_output(Some("{\"a\":".into()));
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["kind"], "output_invalid");
        assert_eq!(v["output"], "{\"a\":");
        let plain: serde_json::Value = serde_json::from_str(&Error::config("x").to_json()).unwrap();
        assert!(plain.get("output").is_none());
    }

    #[test]
    fn redact_removes_the_secret_from_every_field() {
        let secrets = Secrets::new(["sk-abcdef123"]);
        let e = Error::new(ErrorKind::Authentication, "bad key sk-abcdef123 given")
            .with_provider_code(Some("key_sk-abcdef123".into()))
            .redact(&secrets);
        assert!(!e.message.contains("sk-abcdef123"));
        assert!(e.message.contains("[REDACTED]"));
        assert_eq!(e.provider_code.as_deref(), Some("key_[REDACTED]"));
    }

    #[test]
    fn codes_are_stable_and_distinct() {
        let codes: Vec<u32> = ErrorKind::ALL.iter().map(|k| k.code()).collect();
        assert_eq!(codes, (1..=19).collect::<Vec<_>>());
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_code(k.code()), Some(k));
        }
        assert_eq!(ErrorKind::from_code(0), None);
    }
}
