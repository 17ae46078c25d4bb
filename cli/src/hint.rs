//! Owns what an error tells the user to do next: the one-line hint printed under an
//! error (never in `--json`'s error line, which stays the core's error), naming the URL
//! that was tried — never the key — and the flag or setting that fixes it. (A local
//! server that refuses connections is reported at once: the core does not retry a
//! refusal from a loopback address.)

use panto::{Error, ErrorKind, ProviderKind};

use crate::setup::{KeySource, Target};

/// The error's message with the URL tried, when the message does not name it already.
pub fn with_url(error: &Error, target: &Target) -> String {
    let endpoint = target.endpoint();
    let names_url = error.message.contains(&endpoint) || error.message.contains("http");
    let about_the_request = matches!(
        error.kind,
        ErrorKind::Authentication
            | ErrorKind::Permission
            | ErrorKind::NotFound
            | ErrorKind::BadRequest
            | ErrorKind::RateLimited
            | ErrorKind::Server
            | ErrorKind::Provider
            | ErrorKind::Protocol
            | ErrorKind::Timeout
            | ErrorKind::Connection
            | ErrorKind::Incomplete
    );
    if names_url || !about_the_request {
        error.message.clone()
    } else {
        format!("{} (POST {endpoint})", error.message)
    }
}

/// What to do about `error`, if panto knows.
pub fn hint(error: &Error, target: &Target) -> Option<String> {
    let message = error.message.to_ascii_lowercase();
    match error.kind {
        ErrorKind::Connection if message.contains("refused") => Some(if target.is_loopback() {
            format!(
                "is the server running? Nothing accepts connections at {}",
                target.base_url
            )
        } else {
            format!("nothing accepts connections at {}; check --base-url", target.base_url)
        }),
        ErrorKind::Connection if message.contains("dns") || message.contains("resolve") => Some(
            format!("the host of {} cannot be found; check --base-url", target.base_url),
        ),
        ErrorKind::NotFound => Some(not_found_hint(error, target)),
        ErrorKind::Authentication | ErrorKind::Permission => Some(key_hint(target)),
        ErrorKind::Protocol if message.contains("html") || message.contains("xml") => Some(format!(
            "{} answered with a web page, not an API: check --base-url ({})",
            target.base_url,
            base_url_rule(target.provider)
        )),
        ErrorKind::Protocol if message.contains("json body") => Some(format!(
            "{} answered with JSON but no event stream: is it a {} API? ({})",
            target.base_url,
            provider_name(target.provider),
            base_url_rule(target.provider)
        )),
        ErrorKind::Timeout if message.contains("idle") => Some(
            "the server went quiet; allow longer waits with --idle-timeout-ms MS".to_owned(),
        ),
        ErrorKind::Timeout if message.contains("request_ms") || message.contains("longer than") => {
            Some("allow longer requests with --timeout-ms MS".to_owned())
        }
        ErrorKind::Timeout => Some(
            "allow longer waits with --idle-timeout-ms MS (progress) or --timeout-ms MS (whole request)"
                .to_owned(),
        ),
        ErrorKind::RateLimited => Some("wait a moment, or raise --retries".to_owned()),
        _ => None,
    }
}

fn provider_name(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => "Anthropic Messages",
        ProviderKind::Gemini => "Google Gemini",
        ProviderKind::OpenAiResponses => "OpenAI Responses",
        _ => "OpenAI-compatible",
    }
}

fn base_url_rule(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => {
            "an Anthropic base URL has no /v1: panto appends /v1/messages, e.g. https://api.anthropic.com"
        }
        ProviderKind::Gemini => {
            "a Gemini base URL has no version: panto appends /v1beta/models/MODEL:streamGenerateContent, e.g. https://generativelanguage.googleapis.com"
        }
        ProviderKind::OpenAiResponses => {
            "an OpenAI Responses base URL ends with the version: panto appends /responses, e.g. https://api.openai.com/v1"
        }
        _ => {
            "an OpenAI-compatible base URL ends with the version: panto appends /chat/completions, e.g. http://localhost:11434/v1"
        }
    }
}

fn not_found_hint(error: &Error, target: &Target) -> String {
    let code = error
        .provider_code
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    let message = error.message.to_ascii_lowercase();
    if code.contains("model") || message.contains("model") {
        return "the server does not know this model: pick another with -m MODEL".to_owned();
    }
    let base = target.base_url.trim_end_matches('/');
    let suggestion = match target.provider {
        ProviderKind::Anthropic if base.ends_with("/v1") => {
            format!(" — try --base-url {}", base.trim_end_matches("/v1"))
        }
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses if !ends_with_version(base) => {
            format!(" — try --base-url {base}/v1")
        }
        _ => String::new(),
    };
    format!(
        "nothing at {}: {}{suggestion}",
        target.endpoint(),
        base_url_rule(target.provider)
    )
}

/// Whether the last path segment looks like an API version (`v1`, `v1beta`, `v4`).
fn ends_with_version(base: &str) -> bool {
    let last = base.rsplit('/').next().unwrap_or("");
    last.len() >= 2 && last.starts_with('v') && last[1..].starts_with(|c: char| c.is_ascii_digit())
}

fn key_hint(target: &Target) -> String {
    match &target.key {
        KeySource::Withheld(var) => format!(
            "no API key was sent to {}: ${var} goes only to the provider's own API (or to ${}). \
             To send it here: --api-key-env {var}, or api_key_env in a profile",
            target.base_url,
            match target.provider {
                ProviderKind::Anthropic => "ANTHROPIC_BASE_URL",
                ProviderKind::Gemini => "GEMINI_BASE_URL",
                _ => "OPENAI_BASE_URL",
            }
        ),
        KeySource::WithheldProfile(name) => format!(
            "no API key was sent to {}: the key of profile {name} goes only to the profile's \
             base URL (or the provider's own API). To send one here: --api-key-env VAR",
            target.base_url
        ),
        KeySource::None => format!(
            "no API key was sent to {}: give one with --api-key-env VAR (or api_key_env in a profile)",
            target.base_url
        ),
        KeySource::Flag => "the server refused the key given with --api-key".to_owned(),
        KeySource::FlagEnv(var) => format!("the server refused the key in ${var}"),
        KeySource::Profile => format!(
            "the server refused the key of profile {}",
            target.profile.as_deref().unwrap_or("?")
        ),
        KeySource::ProviderEnv(var) => format!("the server refused the key in ${var}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(provider: ProviderKind, base_url: &str, key: KeySource) -> Target {
        Target {
            provider,
            base_url: base_url.to_owned(),
            key,
            profile: None,
        }
    }

    #[test]
    fn not_found_suggests_the_providers_base_url_rule() {
        let e = Error::new(ErrorKind::NotFound, "HTTP 404: Not Found").with_status(404);
        let t = target(
            ProviderKind::OpenAi,
            "http://localhost:8000",
            KeySource::None,
        );
        let h = hint(&e, &t).unwrap();
        assert!(h.contains("http://localhost:8000/chat/completions"), "{h}");
        assert!(h.contains("try --base-url http://localhost:8000/v1"), "{h}");
        let t = target(
            ProviderKind::Anthropic,
            "https://proxy.test/v1",
            KeySource::None,
        );
        let h = hint(&e, &t).unwrap();
        assert!(h.contains("try --base-url https://proxy.test"), "{h}");
        assert!(h.contains("no /v1"), "{h}");
    }

    #[test]
    fn a_withheld_key_says_how_to_send_it() {
        let e = Error::new(ErrorKind::Authentication, "HTTP 401").with_status(401);
        let t = target(
            ProviderKind::OpenAi,
            "http://127.0.0.1:1/v1",
            KeySource::Withheld("OPENAI_API_KEY"),
        );
        let h = hint(&e, &t).unwrap();
        assert!(h.contains("--api-key-env OPENAI_API_KEY"), "{h}");
    }

    #[test]
    fn versions_are_recognised() {
        assert!(ends_with_version("http://h/v1"));
        assert!(ends_with_version("http://h/api/v1beta"));
        assert!(!ends_with_version("http://h"));
        assert!(!ends_with_version("http://h/openai"));
    }
}
