//! Owns the retry policy: which failures may be retried and how long to wait. Only
//! failures before any event of the response was emitted are retried (the caller checks
//! that); this module decides on the error and the server's hints.
//!
//! Hints honoured, in order: `x-should-retry: true|false` (forces or forbids),
//! `retry-after-ms` (milliseconds), `retry-after` (seconds or an HTTP date). The rule
//! for a server's wait:
//! - up to `retry.max_retry_after_ms` (default 60 s), it is the delay of the retry,
//!   replacing the backoff (also when longer than `retry.max_delay_ms`);
//! - longer, it is not waited for and not replaced by the backoff: the request fails at
//!   once with the response's error ([`wait_too_long`]; the caller says so in the
//!   message), so a caller learns of it now rather than after a wait it did not choose;
//! - either way the error carries the wait (`Error::retry_after_ms`).
//!
//! Header values come from the server and may be anything: a wait that is negative,
//! not a number, infinite or beyond what a `u64` of milliseconds holds is no hint at all
//! (the backoff applies). Nothing here can panic or make panto sleep longer than
//! `retry.max_retry_after_ms` or the configured backoff.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, RETRY_AFTER};

use crate::config::RetryConfig;
use crate::error::{Error, ErrorKind};

/// What the server said about retrying, extracted from a failed response's headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryHints {
    /// `x-should-retry`: `Some(true)` forces a retry, `Some(false)` forbids it.
    pub should_retry: Option<bool>,
    /// The wait the server asked for (`retry-after-ms`, or `retry-after` in seconds or as
    /// an HTTP date).
    pub after: Option<Duration>,
}

impl RetryHints {
    /// The hints of a response's headers (a header that does not parse is no hint).
    pub fn from_headers(headers: &HeaderMap) -> RetryHints {
        // Names as constants (see http.rs): a lookup by string parses it at run time.
        const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
        const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
        let get = |name: &HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        };
        let should_retry = match get(&X_SHOULD_RETRY) {
            Some("true") => Some(true),
            Some("false") => Some(false),
            _ => None,
        };
        let after = get(&RETRY_AFTER_MS)
            .and_then(|v| v.parse::<f64>().ok())
            .and_then(|ms| seconds(ms / 1000.0))
            .or_else(|| get(&RETRY_AFTER).and_then(parse_retry_after));
        RetryHints {
            should_retry,
            after,
        }
    }
}

impl RetryHints {
    /// The server's wait in whole milliseconds (rounded up), if it named one.
    pub fn after_ms(&self) -> Option<u64> {
        self.after.map(|d| {
            let ms = d.as_nanos().div_ceil(1_000_000);
            u64::try_from(ms).unwrap_or(u64::MAX)
        })
    }
}

/// A server's wait in seconds as a `Duration`: `None` unless finite, non-negative and
/// below 2^64 milliseconds (a wait longer than the age of the universe is nonsense, not
/// a hint).
fn seconds(secs: f64) -> Option<Duration> {
    if !secs.is_finite() || secs < 0.0 || secs * 1000.0 >= 18_446_744_073_709_551_616.0 {
        return None;
    }
    Duration::try_from_secs_f64(secs).ok()
}

fn parse_retry_after(v: &str) -> Option<Duration> {
    if let Ok(secs) = v.parse::<f64>() {
        return seconds(secs);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Whether `err` may be retried, given the server's hints.
pub fn should_retry(err: &Error, hints: &RetryHints) -> bool {
    if matches!(err.kind, ErrorKind::Cancelled | ErrorKind::Config) {
        return false;
    }
    // Quota exhaustion looks like a 429 but waiting does not help; never retry it, even
    // if a proxy says otherwise.
    if matches!(
        err.provider_code.as_deref(),
        Some("insufficient_quota" | "enforced_spend_limit_reached" | "billing_hard_limit_reached")
    ) {
        return false;
    }
    match hints.should_retry {
        Some(forced) => forced,
        None => err.retryable,
    }
}

/// Whether a request that failed with `err`, after its own retries, may go to the next
/// model of the agent's `fallback` list: the provider is limiting, failing, unreachable,
/// too slow or overloaded (`rate_limited`, `server`, `connection`, `timeout`, or a
/// `provider` error whose code says overloaded) — what another provider may not be. A
/// request the provider refused (`authentication`, `bad_request`, …) would be refused
/// for the same reason elsewhere, or is the caller's to fix.
pub fn falls_back(err: &Error) -> bool {
    match err.kind {
        ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Connection | ErrorKind::Timeout => {
            true
        }
        ErrorKind::Provider => matches!(
            err.provider_code.as_deref(),
            Some("overloaded_error" | "server_is_overloaded" | "overloaded")
        ),
        _ => false,
    }
}

/// The server's wait, when it is longer than `retry.max_retry_after_ms`: the request
/// must then fail at once instead of being retried.
pub fn wait_too_long(cfg: &RetryConfig, hints: &RetryHints) -> Option<Duration> {
    hints
        .after
        .filter(|d| *d > Duration::from_millis(cfg.max_retry_after_ms))
}

/// How long to wait before retry number `retry` (1-based): the server's wait when it
/// named one within `retry.max_retry_after_ms`, else exponential backoff with jitter.
pub fn delay(retry: u32, cfg: &RetryConfig, hints: &RetryHints) -> Duration {
    if let Some(after) = hints
        .after
        .filter(|d| *d <= Duration::from_millis(cfg.max_retry_after_ms))
    {
        return after;
    }
    let exp = retry.saturating_sub(1).min(30);
    let base = cfg
        .initial_delay_ms
        .saturating_mul(1u64 << exp)
        .min(cfg.max_delay_ms);
    // Jitter in (0.75, 1]: spreads synchronized clients without ever waiting longer
    // than the configured backoff.
    let jitter = 1.0 - 0.25 * random_unit();
    Duration::from_millis((base as f64 * jitter) as u64)
}

/// A cheap pseudo-random number in [0, 1) — jitter needs spread, not quality.
fn random_unit() -> f64 {
    use std::cell::Cell;
    use std::hash::{BuildHasher, RandomState};
    thread_local! {
        static STATE: Cell<u64> = Cell::new(RandomState::new().hash_one(0u8) | 1);
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn hints(pairs: &[(&'static str, &str)]) -> RetryHints {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        RetryHints::from_headers(&h)
    }

    #[test]
    fn header_hints() {
        assert_eq!(
            hints(&[("retry-after-ms", "250")]).after,
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            hints(&[("retry-after", "2")]).after,
            Some(Duration::from_secs(2))
        );
        let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(5));
        assert_eq!(hints(&[("retry-after", &past)]).after, Some(Duration::ZERO));
        assert_eq!(hints(&[("retry-after", "soon")]).after, None);
        assert_eq!(
            hints(&[("x-should-retry", "false")]).should_retry,
            Some(false)
        );
    }

    #[test]
    fn policy() {
        let rate = Error::new(ErrorKind::RateLimited, "x").with_retryable(true);
        assert!(should_retry(&rate, &RetryHints::default()));
        assert!(!should_retry(&rate, &hints(&[("x-should-retry", "false")])));
        let quota = rate
            .clone()
            .with_provider_code(Some("insufficient_quota".into()));
        assert!(!should_retry(&quota, &hints(&[("x-should-retry", "true")])));
        let auth = Error::new(ErrorKind::Authentication, "x");
        assert!(!should_retry(&auth, &RetryHints::default()));
        assert!(should_retry(&auth, &hints(&[("x-should-retry", "true")])));
    }

    #[test]
    fn backoff_grows_caps_and_jitters_down() {
        let cfg = RetryConfig {
            max_retries: 5,
            initial_delay_ms: 100,
            max_delay_ms: 350,
            ..RetryConfig::default()
        };
        for _ in 0..100 {
            let d1 = delay(1, &cfg, &RetryHints::default()).as_millis();
            let d2 = delay(2, &cfg, &RetryHints::default()).as_millis();
            let d5 = delay(5, &cfg, &RetryHints::default()).as_millis();
            assert!((75..=100).contains(&d1), "{d1}");
            assert!((150..=200).contains(&d2), "{d2}");
            assert!((262..=350).contains(&d5), "{d5}");
        }
    }

    #[test]
    fn a_server_wait_up_to_the_cap_replaces_the_backoff_and_a_longer_one_is_refused() {
        let cfg = RetryConfig {
            max_delay_ms: 350,
            max_retry_after_ms: 60_000,
            ..RetryConfig::default()
        };
        // At the cap: waited for, though longer than any backoff.
        let at_cap = hints(&[("retry-after", "60")]);
        assert_eq!(delay(1, &cfg, &at_cap), Duration::from_secs(60));
        assert_eq!(wait_too_long(&cfg, &at_cap), None);
        assert_eq!(at_cap.after_ms(), Some(60_000));
        // Past it: not waited for at all (the caller fails at once).
        let past = hints(&[("retry-after-ms", "60001")]);
        assert_eq!(
            wait_too_long(&cfg, &past),
            Some(Duration::from_millis(60_001))
        );
        assert_eq!(past.after_ms(), Some(60_001));
        let hour = hints(&[("retry-after", "3600")]);
        assert_eq!(wait_too_long(&cfg, &hour), Some(Duration::from_secs(3600)));
        // The cap is the configuration's.
        let longer = RetryConfig {
            max_retry_after_ms: 3_600_000,
            ..cfg
        };
        assert_eq!(wait_too_long(&longer, &hour), None);
        assert_eq!(delay(1, &longer, &hour), Duration::from_secs(3600));
        // A fraction of a millisecond counts as a whole one.
        assert_eq!(hints(&[("retry-after", "0.0001")]).after_ms(), Some(1));
    }
}
