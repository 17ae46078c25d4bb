//! Owns the transport: one pooled reqwest client per agent, sending a request and
//! streaming its body through the SSE parser into a provider decoder — with retries
//! before the first event, connect / idle / request timeouts and prompt cancellation.
//! It does not know what the events mean (that is `provider`) or what a turn is (`agent`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;
use tracing::{debug, debug_span, Instrument};

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::event::Event;
use crate::provider::{
    anthropic, http_error, DecodedMessage, Decoder, Emit, Progress, ProviderKind,
};
use crate::retry::{self, RetryHints};
use crate::sse::SseParser;

/// Cap on an error body read into memory (bodies of failed requests are short).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The HTTP side of an agent: a connection pool and the request headers.
#[derive(Clone)]
pub struct Transport {
    client: reqwest::Client,
    headers: HeaderMap,
    endpoint: String,
    api_key: String,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub fn new(config: &Config) -> Result<Transport> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.timeouts.connect())
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("panto/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        let key_header = |v: String| {
            let mut v = HeaderValue::from_str(&v).map_err(|_| {
                Error::config("api_key: contains characters not allowed in a header")
            })?;
            // Sensitive values are redacted from reqwest's and http's Debug output.
            v.set_sensitive(true);
            Ok::<_, Error>(v)
        };
        match config.provider {
            ProviderKind::OpenAi => {
                if !config.api_key.is_empty() {
                    headers.insert(
                        "authorization",
                        key_header(format!("Bearer {}", config.api_key))?,
                    );
                }
            }
            ProviderKind::Anthropic => {
                if !config.api_key.is_empty() {
                    headers.insert("x-api-key", key_header(config.api_key.clone())?);
                }
                headers.insert(
                    "anthropic-version",
                    HeaderValue::from_static(anthropic::API_VERSION),
                );
            }
        }
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::config(format!("headers.{name}: not a valid header name")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| Error::config(format!("headers.{name}: not a valid header value")))?;
            headers.insert(name, value);
        }
        Ok(Transport {
            client,
            headers,
            endpoint: config.endpoint(),
            api_key: config.api_key.clone(),
        })
    }

    /// Streams one assistant message: sends `body`, retries failures that happen before
    /// any event was emitted, decodes the response into events through `emit`.
    pub async fn stream_message(
        &self,
        config: &Config,
        body: Bytes,
        message: u32,
        cancel: &CancellationToken,
        emit: Emit<'_>,
    ) -> Result<DecodedMessage> {
        let max = config.retry.max_retries;
        let mut retry_no = 0;
        loop {
            let span = debug_span!("provider_request", message, attempt = retry_no + 1);
            let mut decoder = Decoder::new(config.provider, message);
            let outcome = self
                .attempt(config, body.clone(), &mut decoder, cancel, emit)
                .instrument(span)
                .await;
            let (err, hints) = match outcome {
                Ok(()) => {
                    return decoder
                        .into_message()
                        .ok_or_else(|| Error::internal("the decoder finished without a message"))
                }
                Err((err, hints)) => (err.redact(&self.api_key), hints),
            };
            let retry_allowed = !decoder.emitted_content() && retry_no < max;
            if !retry_allowed || !retry::should_retry(&err, &hints) {
                return Err(err);
            }
            retry_no += 1;
            let wait = retry::delay(retry_no, &config.retry, &hints);
            debug!(kind = %err.kind, status = err.status, wait_ms = wait.as_millis() as u64, "retrying");
            emit(Event::ProviderRetry {
                message,
                attempt: retry_no,
                max_attempts: max,
                delay_ms: wait.as_millis() as u64,
                reason: err.to_string(),
                status: (err.status != 0).then_some(err.status),
            })?;
            tokio::select! {
                _ = cancel.cancelled() => return Err(Error::cancelled()),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn attempt(
        &self,
        config: &Config,
        body: Bytes,
        decoder: &mut Decoder,
        cancel: &CancellationToken,
        emit: Emit<'_>,
    ) -> std::result::Result<(), (Error, RetryHints)> {
        let no_hints = |e: Error| (e, RetryHints::default());
        let started = Instant::now();
        let request_deadline = tokio::time::Instant::from_std(started + config.timeouts.request());
        // The cancel and deadline futures are created once per attempt and polled by
        // reference: building them per chunk would register and deregister a timer (and
        // a cancel waiter) for every chunk of a long stream.
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let request_timer = sleep_until(request_deadline);
        tokio::pin!(request_timer);
        let request = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .body(body)
            .send();
        let response = tokio::select! {
            biased;
            _ = &mut cancelled => return Err(no_hints(Error::cancelled())),
            _ = &mut request_timer => return Err(no_hints(timeout_error("request", config.timeouts.request_ms))),
            r = request => r.map_err(|e| no_hints(transport_error(&e, "sending the request")))?,
        };
        let status = response.status().as_u16();
        debug!(
            status,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "response headers"
        );
        if !response.status().is_success() {
            let hints = RetryHints::from_headers(response.headers());
            let body = read_bounded(response, cancel, request_deadline).await;
            return Err((http_error(status, &body), hints));
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"));
        if is_json {
            // A 200 with a JSON body: some servers answer an error (or a non-streamed
            // completion) this way. Either way it is not the stream that was asked for.
            let body = read_bounded(response, cancel, request_deadline).await;
            let (message, code) = crate::provider::describe_error_body(&body);
            let err = match message {
                Some(m) => Error::new(ErrorKind::Provider, m).with_provider_code(code),
                None => Error::protocol("expected an event stream, got a JSON body"),
            };
            return Err(no_hints(err.with_status(status)));
        }
        let mut parser = SseParser::new(config.max_event_bytes);
        let idle = config.timeouts.idle();
        // Progress only records the time; the idle timer is re-armed lazily when it fires,
        // so a chunk costs a clock read, not a timer update.
        let mut last_progress = tokio::time::Instant::now();
        let idle_timer = sleep_until(last_progress + idle);
        tokio::pin!(idle_timer);
        let mut response = response;
        let mut finished = false;
        while !finished {
            // The chunk is polled first: while data keeps arriving, the cancel and timer
            // futures are not polled at all (each poll costs more than a chunk's parsing);
            // a cancel and the request deadline are then noticed by the cheap checks here.
            if cancel.is_cancelled() {
                return Err(no_hints(Error::cancelled()));
            }
            if last_progress >= request_deadline {
                return Err(no_hints(timeout_error(
                    "request",
                    config.timeouts.request_ms,
                )));
            }
            let chunk = tokio::select! {
                biased;
                c = response.chunk() => c,
                _ = &mut cancelled => return Err(no_hints(Error::cancelled())),
                _ = &mut request_timer => return Err(no_hints(timeout_error("request", config.timeouts.request_ms))),
                _ = &mut idle_timer => {
                    let due = last_progress + idle;
                    if due <= tokio::time::Instant::now() {
                        return Err(no_hints(timeout_error("idle", config.timeouts.idle_ms)));
                    }
                    idle_timer.as_mut().reset(due);
                    continue;
                }
            };
            let chunk = match chunk {
                Ok(Some(c)) => c,
                Ok(None) => {
                    if parser.has_pending() {
                        debug!("stream ended inside an event; the partial event is discarded");
                    }
                    decoder.on_eof(emit).map_err(no_hints)?;
                    return Ok(());
                }
                Err(e) => return Err(no_hints(transport_error(&e, "reading the stream"))),
            };
            let progressed = parser
                .feed(&chunk, |ev| {
                    if finished {
                        return Ok(());
                    }
                    if decoder.on_sse(&ev, emit)? == Progress::Finished {
                        finished = true;
                    }
                    Ok(())
                })
                .map_err(no_hints)?;
            if progressed {
                last_progress = tokio::time::Instant::now();
            }
        }
        // Read the rest (normally just the end of the chunked body) so the connection
        // goes back to the pool; give up quietly if the server dawdles.
        let drain_deadline = tokio::time::Instant::now() + idle.min(Duration::from_secs(2));
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                _ = sleep_until(drain_deadline) => break,
                c = response.chunk() => match c {
                    Ok(Some(_)) => continue,
                    _ => break,
                },
            }
        }
        Ok(())
    }
}

async fn read_bounded(
    mut response: reqwest::Response,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
) -> String {
    let mut body = Vec::new();
    loop {
        let chunk = tokio::select! {
            _ = cancel.cancelled() => break,
            _ = sleep_until(deadline) => break,
            c = response.chunk() => c,
        };
        match chunk {
            Ok(Some(c)) => {
                let room = MAX_ERROR_BODY.saturating_sub(body.len());
                body.extend_from_slice(&c[..c.len().min(room)]);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

fn timeout_error(which: &str, ms: u64) -> Error {
    let what = match which {
        "idle" => format!("no stream progress for {ms} ms (timeouts.idle_ms)"),
        _ => format!("the request took longer than {ms} ms (timeouts.request_ms)"),
    };
    Error::new(ErrorKind::Timeout, what).with_retryable(true)
}

fn transport_error(e: &reqwest::Error, doing: &str) -> Error {
    // reqwest's Display names the URL, never headers; the key cannot appear here, and
    // `stream_message` redacts it anyway.
    let mut source = String::new();
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = cur {
        source.push_str(": ");
        source.push_str(&s.to_string());
        cur = s.source();
    }
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Connection
    };
    Error::new(kind, format!("{doing}: {e}{source}")).with_retryable(true)
}
