//! Owns secret redaction: the API key and credential-like custom headers of an agent,
//! and removing them from every string panto reports (errors, events, logs). It does not
//! decide what is secret beyond the header-name rule in [`is_secret_header`].

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};

const MARK: &str = "[REDACTED]";

/// A secret shorter than this is not searched for: it would match ordinary text.
const MIN_SECRET: usize = 6;

/// The shortest piece of a secret removed where text was cut (the end of a truncated
/// body, the start of a continued one). Long enough that ordinary text never matches it
/// by chance, short enough that what is left cannot be used.
const MIN_PIECE: usize = 6;

/// The most secrets learnt while running that are kept (the oldest go first).
const MAX_LIVE: usize = 256;

/// The secrets of one agent: those of its configuration, and those learnt while it runs
/// (its MCP servers' OAuth tokens, shared with the place that learns them).
#[derive(Clone, Default)]
pub struct Secrets(Vec<String>, Option<Arc<LiveSecrets>>);

impl PartialEq for Secrets {
    fn eq(&self, other: &Secrets) -> bool {
        self.0 == other.0
            && match (&self.1, &other.1) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for Secrets {}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

/// Secrets learnt while running (OAuth tokens as they are issued), at most
/// [`MAX_LIVE`] of them; every [`Secrets`] they are attached to removes them too.
#[derive(Default)]
pub(crate) struct LiveSecrets(Mutex<Vec<String>>);

impl LiveSecrets {
    /// Learns one more secret (values shorter than 6 bytes are not kept).
    pub(crate) fn add(&self, secret: &str) {
        if secret.len() < MIN_SECRET {
            return;
        }
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if all.iter().any(|s| s == secret) {
            return;
        }
        if all.len() >= MAX_LIVE {
            all.remove(0);
        }
        all.push(secret.to_owned());
    }

    fn all(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Removes every secret learnt so far from `text`.
    pub(crate) fn redact_in_place(&self, text: &mut String) {
        Secrets::new(self.all()).redact_in_place(text);
    }
}

impl Secrets {
    /// The secrets to remove (values shorter than 6 bytes are not kept: removing them
    /// would mangle ordinary text).
    pub fn new<I, S>(secrets: I) -> Secrets
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut v: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| s.len() >= MIN_SECRET)
            .collect();
        // Longest first, so a secret that contains another is removed whole.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Secrets(v, None)
    }

    /// The same secrets, and those `live` learns from now on.
    pub(crate) fn with_live(mut self, live: Arc<LiveSecrets>) -> Secrets {
        self.1 = Some(live);
        self
    }

    /// Whether there is no secret to remove.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty() && self.1.as_ref().is_none_or(|l| l.all().is_empty())
    }

    /// `text` without any secret: every whole occurrence, plus a piece of one at either
    /// end of the text (what a truncation leaves of a secret it cut).
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let learnt = self.1.as_ref().map(|l| l.all()).unwrap_or_default();
        let merged;
        let secrets = if learnt.is_empty() {
            &self.0
        } else {
            merged = Secrets::new(self.0.iter().cloned().chain(learnt)).0;
            &merged
        };
        let mut out = Cow::Borrowed(text);
        for secret in secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MARK));
            }
            if let Some(cut) = trailing_piece(&out, secret) {
                let mut s = out.into_owned();
                s.truncate(cut);
                s.push_str(MARK);
                out = Cow::Owned(s);
            }
            if let Some(len) = leading_piece(&out, secret) {
                out = Cow::Owned(format!("{MARK}{}", &out[len..]));
            }
        }
        out
    }

    /// Removes every secret from `text`, as [`Secrets::redact`] does.
    pub fn redact_in_place(&self, text: &mut String) {
        if self.is_empty() {
            return;
        }
        if let Cow::Owned(s) = self.redact(text) {
            *text = s;
        }
    }
}

/// Where a proper prefix of `secret` (at least `MIN_PIECE` bytes) ends `text`.
fn trailing_piece(text: &str, secret: &str) -> Option<usize> {
    let (t, k) = (text.as_bytes(), secret.as_bytes());
    let longest = k.len().saturating_sub(1).min(t.len());
    if longest < MIN_PIECE {
        return None;
    }
    // Only positions holding the secret's first byte can start a piece: a byte test per
    // position, a comparison only where it matches.
    (t.len() - longest..=t.len() - MIN_PIECE)
        .filter(|&start| t[start] == k[0])
        .find(|&start| t[start..] == k[..t.len() - start] && text.is_char_boundary(start))
}

/// The length of a proper suffix of `secret` (at least `MIN_PIECE` bytes) that starts `text`.
fn leading_piece(text: &str, secret: &str) -> Option<usize> {
    let (t, k) = (text.as_bytes(), secret.as_bytes());
    let longest = k.len().saturating_sub(1).min(t.len());
    if longest < MIN_PIECE {
        return None;
    }
    (k.len() - longest..=k.len() - MIN_PIECE)
        .filter(|&from| k[from] == t[0])
        .map(|from| k.len() - from)
        .find(|&n| t[..n] == k[k.len() - n..] && text.is_char_boundary(n))
}

/// Whether a custom header's value is a credential, judged by its name: anything naming
/// a key, token, secret, password, signature, cookie or authorization. Such values are
/// marked sensitive (hidden from Debug output and logs) and redacted like the API key.
pub fn is_secret_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "auth",
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "signature",
        "cookie",
        "credential",
        "session",
    ]
    .iter()
    .any(|w| name.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-0123456789abcdefghijklmnopqrstuvwxyzABCD";

    #[test]
    fn whole_secrets_are_replaced() {
        let s = Secrets::new([KEY]);
        assert_eq!(
            s.redact(&format!("a {KEY} b {KEY}")),
            "a [REDACTED] b [REDACTED]"
        );
        assert_eq!(s.redact("nothing here"), "nothing here");
    }

    #[test]
    fn a_secret_cut_by_truncation_is_removed() {
        let s = Secrets::new([KEY]);
        for cut in MIN_PIECE..KEY.len() {
            let text = format!("Incorrect API key provided: {}", &KEY[..cut]);
            let out = s.redact(&text);
            assert!(!out.contains(&KEY[..MIN_PIECE]), "cut {cut}: {out}");
            assert!(out.ends_with(MARK));
            let text = format!("{} was given", &KEY[KEY.len() - cut..]);
            let out = s.redact(&text);
            assert!(out.starts_with(MARK), "cut {cut}: {out}");
        }
    }

    #[test]
    fn short_or_empty_secrets_are_ignored() {
        let s = Secrets::new(["", "abc"]);
        assert!(s.is_empty());
        assert_eq!(s.redact("abc"), "abc");
    }

    #[test]
    fn credential_header_names() {
        for n in [
            "api-key",
            "X-Api-Key",
            "Authorization",
            "x-auth-token",
            "Cookie",
            "proxy-authorization",
            "x-goog-api-key",
        ] {
            assert!(is_secret_header(n), "{n}");
        }
        for n in [
            "x-request-id",
            "user-agent",
            "openai-organization",
            "anthropic-beta",
        ] {
            assert!(!is_secret_header(n), "{n}");
        }
    }
}
