//! Owns the one error type of panto and its kinds. Every failure anywhere in the
//! runtime (config, HTTP, stream decoding, tools, the pull adapter, the bindings) is an
//! [`Error`] with one [`ErrorKind`]; bindings map the kind, they never invent their own.

use std::fmt;

use serde::ser::SerializeMap;
use serde::Serialize;

/// The closed set of failure classes, identical in every language binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    Config,
    Authentication,
    Permission,
    NotFound,
    BadRequest,
    RateLimited,
    Server,
    Connection,
    Timeout,
    Protocol,
    Provider,
    Cancelled,
    Busy,
    Tool,
    Incomplete,
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order of DESIGN.md; bindings check theirs against this list.
    pub const ALL: [ErrorKind; 16] = [
        ErrorKind::Config,
        ErrorKind::Authentication,
        ErrorKind::Permission,
        ErrorKind::NotFound,
        ErrorKind::BadRequest,
        ErrorKind::RateLimited,
        ErrorKind::Server,
        ErrorKind::Connection,
        ErrorKind::Timeout,
        ErrorKind::Protocol,
        ErrorKind::Provider,
        ErrorKind::Cancelled,
        ErrorKind::Busy,
        ErrorKind::Tool,
        ErrorKind::Incomplete,
        ErrorKind::Internal,
    ];

    /// The canonical snake_case name used in JSON and by every binding.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Authentication => "authentication",
            ErrorKind::Permission => "permission",
            ErrorKind::NotFound => "not_found",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Server => "server",
            ErrorKind::Connection => "connection",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Provider => "provider",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Busy => "busy",
            ErrorKind::Tool => "tool",
            ErrorKind::Incomplete => "incomplete",
            ErrorKind::Internal => "internal",
        }
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
/// same request could succeed, and the provider's own error type/code when it sent one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub status: u16,
    pub retryable: bool,
    pub provider_code: Option<String>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            status: 0,
            retryable: false,
            provider_code: None,
        }
    }

    pub fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }
    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, message)
    }
    pub fn incomplete(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Incomplete, message)
    }
    pub fn cancelled() -> Error {
        Error::new(ErrorKind::Cancelled, "the turn was cancelled")
    }
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

    pub fn with_status(mut self, status: u16) -> Error {
        self.status = status;
        self
    }
    pub fn with_retryable(mut self, retryable: bool) -> Error {
        self.retryable = retryable;
        self
    }
    pub fn with_provider_code(mut self, code: Option<String>) -> Error {
        self.provider_code = code;
        self
    }

    /// The canonical JSON form: `{"type":"error","kind":…,"message":…,"status":…,
    /// "retryable":…,"provider_code":…}`.
    pub fn to_json(&self) -> String {
        // Serializing a struct of strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Removes every occurrence of `secret` from the message. Called on every error built
    /// from text a server or a transport library produced, so a key echoed back by a
    /// proxy (or embedded in a URL) never reaches a caller.
    pub(crate) fn redact(mut self, secret: &str) -> Error {
        if secret.len() >= 4 && self.message.contains(secret) {
            self.message = self.message.replace(secret, "[REDACTED]");
        }
        self
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("type", "error")?;
        m.serialize_entry("kind", self.kind.as_str())?;
        m.serialize_entry("message", &self.message)?;
        m.serialize_entry("status", &self.status)?;
        m.serialize_entry("retryable", &self.retryable)?;
        m.serialize_entry("provider_code", &self.provider_code)?;
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
    fn redact_removes_the_secret() {
        let e = Error::new(ErrorKind::Authentication, "bad key sk-abcdef123 given")
            .redact("sk-abcdef123");
        assert!(!e.message.contains("sk-abcdef123"));
        assert!(e.message.contains("[REDACTED]"));
    }
}
