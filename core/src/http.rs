//! Owns the transport: the process's HTTP clients (connection pools, TLS session
//! caches), sending a request and streaming its body through the SSE parser into a
//! provider decoder — with retries before the first event, connect / idle / request
//! timeouts, backpressure from the receiver and prompt cancellation. It does not know
//! what the events mean or how a provider is addressed — its headers, URL and error
//! bodies come from the provider seam (`provider`) — nor what a turn is (`agent`).
//!
//! Clients are shared by every agent of the process, as reqwest intends: one agent per
//! request must not cost one TCP and TLS handshake per request. Two things make a client
//! specific, and they are its key:
//! - the runtime. A connection is driven by a task on the tokio runtime that opened it,
//!   so a pooled connection is only usable while that runtime runs. Callers drive turns
//!   from different runtimes (a push caller's own, the pull adapter's workers), and some
//!   of those stop being driven between turns (a current-thread runtime outside
//!   `block_on`); a turn therefore only ever reuses connections its own runtime drives.
//! - the transport settings the HTTP stack takes per client (`ClientSettings`).
//!
//! Everything that belongs to one agent — the API key, custom headers, the endpoint —
//! goes with each request, never into a client, so a shared connection carries no
//! agent's credentials to another.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_ENCODING, CONTENT_TYPE};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, debug_span, Instrument};

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, Flow, Receiver};
use crate::limit::{LimitKey, LimitTable, RequestLimit};
use crate::provider::{AuthHeader, DecodeLimits, DecodedMessage, Decoder, Progress};
use crate::retry::{self, RetryHints};
use crate::secret::{is_secret_header, Secrets};
use crate::sse::SseParser;

/// Cap on an error body read into memory (bodies of failed requests are short).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// How many clients (runtime × settings) the process keeps; the least recently used
/// beyond that is dropped and its idle connections close. Room for the pull adapter's
/// workers (at most 64) under a few settings, plus push callers' runtimes.
const MAX_CLIENTS: usize = 256;

/// Idle connections one client keeps per server; more close as their responses end.
const MAX_IDLE_PER_HOST: usize = 32;

/// How long an idle pooled connection is kept before it is closed.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Longest a request waits for the previous response's body to end (see
/// `Transport::let_drain_finish`).
const DRAIN_GRACE: Duration = Duration::from_millis(50);

/// Most redirects followed within the endpoint's own origin.
const MAX_REDIRECTS: usize = 5;

/// Where the loop delivers the events of a turn: the caller's [`Receiver`], behind the
/// rules every event obeys — nothing is delivered after a cancel, secrets are removed
/// once here, and the receiver's backpressure reaches the network read.
pub(crate) struct TurnSink<'a> {
    receiver: &'a mut dyn Receiver,
    cancel: CancellationToken,
    secrets: &'a Secrets,
    /// The turn's spans, when a subscriber wants them: they see every event delivered.
    telemetry: Option<crate::telemetry::TurnTelemetry>,
    /// What the next `message_start` says the request waited for the endpoint's
    /// bound (`None`: the agent has none).
    queued_ms: Option<u64>,
    /// A block of the current response was shown (`block_start`, `content_delta`, …)
    /// since [`TurnSink::start_response`]: a failure then cannot go to another model.
    shown: bool,
}

impl<'a> TurnSink<'a> {
    pub(crate) fn new(
        receiver: &'a mut dyn Receiver,
        cancel: CancellationToken,
        secrets: &'a Secrets,
    ) -> TurnSink<'a> {
        TurnSink {
            receiver,
            cancel,
            secrets,
            telemetry: None,
            queued_ms: None,
            shown: false,
        }
    }

    /// A new request of the turn starts: nothing of its answer was shown yet.
    pub(crate) fn start_response(&mut self) {
        self.shown = false;
    }

    /// Whether a block of the response since [`TurnSink::start_response`] was shown.
    pub(crate) fn shown(&self) -> bool {
        self.shown
    }

    /// Records the turn's spans (see [`crate::telemetry`]).
    pub(crate) fn set_telemetry(&mut self, telemetry: Option<crate::telemetry::TurnTelemetry>) {
        self.telemetry = telemetry;
    }

    /// The turn's spans, when they are recorded.
    pub(crate) fn telemetry(&mut self) -> Option<&mut crate::telemetry::TurnTelemetry> {
        self.telemetry.as_mut()
    }

    pub(crate) fn emit(&mut self, mut event: Event) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::cancelled());
        }
        if !self.secrets.is_empty() {
            event.redact(self.secrets);
        }
        if let Event::MessageStart { queued_ms, .. } = &mut event {
            *queued_ms = self.queued_ms;
        }
        if matches!(
            event,
            Event::BlockStart { .. }
                | Event::ContentDelta { .. }
                | Event::ToolDetails { .. }
                | Event::BlockComplete { .. }
        ) {
            self.shown = true;
        }
        if let Some(t) = &mut self.telemetry {
            t.observe(&event);
        }
        match self.receiver.on_event(event) {
            Flow::Continue => Ok(()),
            Flow::Stop => {
                self.cancel.cancel();
                Err(Error::cancelled())
            }
        }
    }

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<()>> {
        if self.cancel.is_cancelled() {
            return Poll::Ready(Err(Error::cancelled()));
        }
        self.receiver.poll_ready(cx).map(|flow| match flow {
            Flow::Continue => Ok(()),
            Flow::Stop => {
                self.cancel.cancel();
                Err(Error::cancelled())
            }
        })
    }

    /// Waits until the receiver takes events again. Returns how long that took (zero
    /// when it was ready), so the caller can keep that time out of its timeouts.
    async fn ready(&mut self) -> Result<Duration> {
        // One poll first: the common case is ready, and costs no clock read.
        let first = poll_fn(|cx| Poll::Ready(self.poll_ready(cx))).await;
        match first {
            Poll::Ready(r) => r.map(|()| Duration::ZERO),
            Poll::Pending => {
                let paused = Instant::now();
                let cancel = self.cancel.clone();
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Err(Error::cancelled()),
                    r = poll_fn(|cx| self.poll_ready(cx)) => r.map(|()| paused.elapsed()),
                }
            }
        }
    }
}

/// The transport settings a reqwest client is built with. Agents whose settings are
/// equal share clients (per runtime); everything else of an agent goes per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClientSettings {
    connect_timeout: Duration,
}

/// One of the process's clients, shared by every agent with its settings on its runtime.
struct SharedClient {
    client: reqwest::Client,
    /// Bodies left over after the provider finished, read to their end in the background
    /// so their connections can be reused (finished ones are pruned as others arrive).
    draining: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The process's clients, most recently used first.
struct Registry {
    /// The process the table belongs to: a forked child starts a table of its own.
    pid: u32,
    clients: Mutex<Vec<(tokio::runtime::Id, ClientSettings, Arc<SharedClient>)>>,
    /// The process's bounds on model requests per endpoint (`max_concurrent_requests`).
    limits: Mutex<LimitTable>,
}

static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());

/// This process's table of clients. A child of `fork()` must not touch its parent's: a
/// parent thread may have held its lock when the process forked, and that thread does
/// not exist in the child, so the lock would never be released. The table is therefore
/// reached through an atomic pointer and belongs to one pid; a child installs a fresh
/// table and leaves the parent's alone (leaked: freeing it would drop connections of
/// runtimes that do not exist here).
fn registry() -> &'static Registry {
    let pid = std::process::id();
    loop {
        let current = REGISTRY.load(Ordering::Acquire);
        // SAFETY: a non-null REGISTRY points to a leaked, never-freed box (below).
        if let Some(registry) = unsafe { current.as_ref() } {
            if registry.pid == pid {
                return registry;
            }
        }
        let fresh = Box::into_raw(Box::new(Registry {
            pid,
            clients: Mutex::new(Vec::new()),
            limits: Mutex::new(LimitTable::default()),
        }));
        match REGISTRY.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just made from a box, published, and never freed.
            Ok(_) => return unsafe { &*fresh },
            // Another thread installed one first: use that one.
            // SAFETY: `fresh` was never published.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    }
}

/// Closes the process's idle pooled connections: every shared client is dropped, so its
/// idle connections close (on their runtime's next turn of the wheel; at once on the
/// pull adapter's workers, which always run). Requests in flight keep their client and
/// finish normally; later requests build new clients. Idle connections also close on
/// their own after 90 s, and at most 32 per server are kept per runtime — this is for
/// a host that wants them gone now (a leak check, a network change).
pub fn close_idle_connections() {
    let dropped = std::mem::take(
        &mut *registry()
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    drop(dropped);
}

/// How many requests of agents with `config`'s endpoint, API key and limits wait for
/// its `max_concurrent_requests` right now (0 when no agent holds such a bound): for
/// tests and diagnostics.
pub fn queued_requests(config: &Config) -> u32 {
    let Some(key) = LimitKey::of(config) else {
        return 0;
    };
    registry()
        .limits
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .find(&key)
        .map_or(0, |limit| limit.waiting())
}

/// The HTTP side of an agent: its client settings, the request headers, the secrets.
pub struct Transport {
    settings: ClientSettings,
    headers: HeaderMap,
    endpoint: String,
    secrets: Secrets,
    /// The endpoint's bound on requests in flight, shared with the process's other
    /// agents (`max_concurrent_requests`).
    limit: Option<Arc<RequestLimit>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// The transport of this configuration: its client settings, request headers
    /// (credentials marked sensitive) and endpoint; a `config` error for a header that is
    /// not a valid HTTP header.
    pub fn new(config: &Config) -> Result<Transport> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let secret_value = |v: &str, what: &str| {
            let mut v = HeaderValue::from_str(v)
                .map_err(|_| Error::config(format!("{what}: not a valid header value")))?;
            // Sensitive values are redacted from reqwest's and http's Debug output.
            v.set_sensitive(true);
            Ok::<_, Error>(v)
        };
        // The provider's credential header (and any header its API requires).
        for header in config.provider.wire().auth_headers(&config.api_key) {
            match header {
                AuthHeader::Credential(name, value) => {
                    headers.insert(name, secret_value(&value, "api_key")?);
                }
                AuthHeader::Fixed(name, value) => {
                    headers.insert(name, HeaderValue::from_static(value));
                }
            }
        }
        let mut secrets = vec![config.api_key.clone()];
        // The fallback models' keys: their events and errors reach the same receiver.
        secrets.extend(config.fallback.iter().map(|f| f.resolved_api_key()));
        // MCP servers' header values and credential-like environment values.
        secrets.extend(config.mcp_servers.values().flat_map(|s| s.secret_values()));
        for (name, value) in &config.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::config(format!("headers.{name}: not a valid header name")))?;
            let value = if is_secret_header(name) {
                // A credential of the user's own (Azure's `api-key`, a proxy token, a
                // bearer token sent instead of api_key): hidden like the API key.
                secrets.push(value.clone());
                if let Some(token) = value.strip_prefix("Bearer ") {
                    secrets.push(token.to_owned());
                }
                secret_value(value, &format!("headers.{name}"))?
            } else {
                HeaderValue::from_str(value).map_err(|_| {
                    Error::config(format!("headers.{name}: not a valid header value"))
                })?
            };
            // Replacing a header panto set (anthropic-version, accept) is what naming it
            // means; replacing a credential while api_key is set was refused by
            // `Config::validate`.
            headers.insert(header, value);
        }
        let transport = Transport {
            settings: ClientSettings {
                connect_timeout: config.timeouts.connect(),
            },
            headers,
            endpoint: config.endpoint(),
            secrets: Secrets::new(secrets),
            limit: LimitKey::of(config).map(|key| {
                registry()
                    .limits
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(key)
            }),
        };
        // A client is built once per process before any turn, so an HTTP stack that
        // cannot start (no TLS roots) is reported when an agent is created rather than
        // at its first turn. Nothing an agent configures can make the build fail.
        // (A flag, not a lock: nothing here may wait for a thread a `fork()` left behind.)
        static BUILDS: AtomicBool = AtomicBool::new(false);
        if !BUILDS.load(Ordering::Acquire) {
            build_client(transport.settings)?;
            BUILDS.store(true, Ordering::Release);
        }
        Ok(transport)
    }

    /// Also removes the secrets `live` learns (an MCP server's OAuth tokens).
    pub(crate) fn attach_live_secrets(&mut self, live: std::sync::Arc<crate::secret::LiveSecrets>) {
        self.secrets = std::mem::take(&mut self.secrets).with_live(live);
    }

    /// The agent's secrets (its API key and credential headers), for redaction.
    pub(crate) fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The process's client for the runtime this turn runs on and this agent's
    /// settings, built on first use.
    fn client(&self) -> Result<Arc<SharedClient>> {
        let id = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::internal("a turn must run inside a tokio runtime"))?
            .id();
        let mut clients = registry()
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = clients
            .iter()
            .position(|(rt, settings, _)| *rt == id && *settings == self.settings)
        {
            let entry = clients.remove(i);
            let client = entry.2.clone();
            clients.insert(0, entry);
            return Ok(client);
        }
        // Built under the lock: two turns that start together on a new runtime must not
        // each build (and keep) a client of their own.
        let client = Arc::new(SharedClient {
            client: build_client(self.settings)?,
            draining: Mutex::new(Vec::new()),
        });
        clients.insert(0, (id, self.settings, client.clone()));
        clients.truncate(MAX_CLIENTS);
        Ok(client)
    }

    /// Streams one assistant message: sends `body` (a request to `model`), retries
    /// failures that happen before any event was emitted, decodes the response into
    /// events through `sink`.
    pub(crate) async fn stream_message(
        &self,
        config: &Config,
        model: &str,
        body: Bytes,
        message: u32,
        cancel: &CancellationToken,
        sink: &mut TurnSink<'_>,
    ) -> Result<DecodedMessage> {
        let max = config.retry.max_retries;
        let first_attempt = Instant::now();
        let retry_budget = Duration::from_millis(config.retry.max_elapsed_ms);
        let client = self.client()?;
        // A provider's URL may name the model (Gemini's), which a turn or a compaction
        // may choose.
        let endpoint = config.endpoint_for(model);
        client.let_drain_finish().await;
        let mut retry_no = 0;
        // Time this message waited for the endpoint's max_concurrent_requests, over
        // all its attempts.
        let mut queued = Duration::ZERO;
        loop {
            let span = debug_span!("provider_request", message, attempt = retry_no + 1);
            let slot = match &self.limit {
                Some(limit) => {
                    let (slot, waited) = limit.acquire(cancel).await?;
                    queued += waited;
                    Some(slot)
                }
                None => None,
            };
            let mut decoder = Decoder::with_limits(config.provider, message, limits(config));
            if self.limit.is_some() {
                sink.queued_ms = Some(u64::try_from(queued.as_millis()).unwrap_or(u64::MAX));
            }
            // The id of the response this attempt got, also for an error that comes
            // inside a successful (200) stream: what the provider's support asks for.
            let mut response_id = None;
            let outcome = self
                .attempt(
                    &client,
                    &endpoint,
                    config,
                    body.clone(),
                    message,
                    &mut decoder,
                    sink,
                    &mut response_id,
                )
                .instrument(span)
                .await;
            drop(slot);
            let (err, hints) = match outcome {
                Ok(Some(decoded)) => return Ok(decoded),
                Ok(None) => {
                    return decoder
                        .into_message()
                        .ok_or_else(|| Error::internal("the decoder finished without a message"))
                }
                Err((mut err, hints)) => {
                    if err.request_id.is_none() && err.kind != ErrorKind::Cancelled {
                        err.request_id = response_id;
                    }
                    (
                        err.redact(&self.secrets)
                            .with_retry_after_ms(hints.after_ms()),
                        hints,
                    )
                }
            };
            if cancel.is_cancelled() {
                return Err(Error::cancelled());
            }
            let retry_allowed = !decoder.emitted_content() && retry_no < max;
            if !retry_allowed || !retry::should_retry(&err, &hints) {
                return Err(err);
            }
            if let Some(asked) = retry::wait_too_long(&config.retry, &hints) {
                // Neither waited for nor replaced by a shorter backoff (which the server
                // would refuse again): the caller decides, knowing the wait.
                let mut err = err;
                err.message = format!(
                    "{}; the server asks to wait {} ms before retrying, longer than \
                     retry.max_retry_after_ms ({} ms), so panto does not retry",
                    err.message,
                    hints.after_ms().unwrap_or(u64::MAX),
                    config.retry.max_retry_after_ms
                );
                debug!(
                    wait_ms = asked.as_millis() as u64,
                    "server's wait is past the cap"
                );
                return Err(err);
            }
            let wait = retry::delay(retry_no + 1, &config.retry, &hints);
            if first_attempt.elapsed().saturating_add(wait) > retry_budget {
                debug!(
                    budget_ms = config.retry.max_elapsed_ms,
                    "retry budget spent; reporting the last error"
                );
                return Err(err);
            }
            retry_no += 1;
            debug!(kind = %err.kind, status = err.status, wait_ms = wait.as_millis() as u64, "retrying");
            sink.emit(Event::ProviderRetry {
                message,
                attempt: retry_no + 1,
                max_attempts: max.saturating_add(1),
                delay_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                reason: err.to_string(),
                status: (err.status != 0).then_some(err.status),
            })?;
            tokio::select! {
                _ = cancel.cancelled() => return Err(Error::cancelled()),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Asks the provider's token-count endpoint (`url`, with `body`) and returns its
    /// count. Not a model request: it does not wait for `max_concurrent_requests` and
    /// is not retried. Errors are typed as the provider's other answers are.
    pub(crate) async fn count_tokens(
        &self,
        config: &Config,
        url: &str,
        body: &serde_json::Value,
        cancel: &CancellationToken,
    ) -> Result<u64> {
        // Polled through a vtable, so never inlined into its caller: its request's
        // connection stays in the shared pool after the call, and
        // capi/tests/c/valgrind.supp knows the pool's memory by this module's frames.
        let counted: std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64>> + Send + '_>> =
            Box::pin(self.count_request(config, url, body, cancel));
        counted.await
    }

    async fn count_request(
        &self,
        config: &Config,
        url: &str,
        body: &serde_json::Value,
        cancel: &CancellationToken,
    ) -> Result<u64> {
        let client = self.client()?;
        let body = serde_json::to_vec(body)
            .map_err(|e| Error::internal(format!("cannot serialize the request: {e}")))?;
        let mut headers = self.headers.clone();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let deadline = Instant::now() + config.timeouts.request();
        let request_ms = config.timeouts.request_ms;
        let sent = client.client.post(url).headers(headers).body(body).send();
        let response = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::cancelled()),
            _ = sleep_until(deadline) => return Err(request_timeout(request_ms)),
            r = sent => r.map_err(|e| transport_error(&e, "sending the request").redact(&self.secrets))?,
        };
        let status = response.status().as_u16();
        let ok = response.status().is_success();
        let text = read_bounded(response, MAX_ERROR_BODY, cancel, deadline).await;
        if cancel.is_cancelled() {
            return Err(Error::cancelled());
        }
        let text = self.secrets.redact(&text);
        let wire = config.provider.wire();
        if !ok {
            return Err(wire.http_error(status, &text));
        }
        serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| wire.token_count(&v))
            .ok_or_else(|| {
                Error::protocol(format!(
                    "the token-count endpoint answered without a count: {:?}",
                    crate::text::truncate(text.trim(), 200)
                ))
                .with_status(status)
            })
    }

    /// One HTTP attempt. `Ok(Some(_))` when the server answered with a complete message
    /// in one JSON body, `Ok(None)` when the decoder holds the streamed message.
    /// `response_id` gets the response's request id as soon as its headers arrive.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        client: &SharedClient,
        endpoint: &str,
        config: &Config,
        body: Bytes,
        message: u32,
        decoder: &mut Decoder,
        sink: &mut TurnSink<'_>,
        response_id: &mut Option<String>,
    ) -> std::result::Result<Option<DecodedMessage>, (Error, RetryHints)> {
        let cancel_token = sink.cancel.clone();
        let cancel = &cancel_token;
        let no_hints = |e: Error| (e, RetryHints::default());
        let request_ms = config.timeouts.request_ms;
        let idle_ms = config.timeouts.idle_ms;
        let idle = config.timeouts.idle();
        let mut request_deadline = Instant::now() + config.timeouts.request();
        // The cancel and deadline futures are created once per attempt and polled by
        // reference: building them per chunk would register and deregister a timer (and
        // a cancel waiter) for every chunk of a long stream.
        let cancelled = cancel.cancelled();
        tokio::pin!(cancelled);
        let request_timer = sleep_until(request_deadline);
        tokio::pin!(request_timer);
        let mut last_progress = Instant::now();
        let idle_timer = sleep_until(last_progress + idle);
        tokio::pin!(idle_timer);
        let mut stale_retried = false;
        let response = loop {
            let request = client
                .client
                .post(endpoint)
                .headers(self.headers.clone())
                .body(body.clone())
                .send();
            let sent = tokio::select! {
                biased;
                _ = &mut cancelled => return Err(no_hints(Error::cancelled())),
                _ = &mut request_timer => return Err(no_hints(request_timeout(request_ms))),
                _ = &mut idle_timer => return Err(no_hints(Error::new(
                    ErrorKind::Timeout,
                    format!("no response headers within {idle_ms} ms (timeouts.idle_ms)"),
                ).with_retryable(true))),
                r = request => r,
            };
            match sent {
                Ok(response) => break response,
                // A kept-alive connection the server closed just as this request went
                // out: the server answered nothing. Sent again once, at once, on a fresh
                // connection — this is the pool's failure, not the provider's, and must
                // not cost a retry (or fail a turn configured with none).
                Err(e) if !stale_retried && closed_before_answering(&e) => {
                    debug!(error = %e, "pooled connection was closed by the server; sending again");
                    stale_retried = true;
                }
                Err(e) => return Err(no_hints(transport_error(&e, "sending the request"))),
            }
        };
        let status = response.status().as_u16();
        debug!(status, "response headers");
        *response_id = request_id(response.headers());
        if response.status().is_redirection() {
            return Err(no_hints(redirect_error(&response)));
        }
        if !response.status().is_success() {
            let mut hints = RetryHints::from_headers(response.headers());
            let headers = error_headers(response.headers());
            let body = read_bounded(response, MAX_ERROR_BODY, cancel, request_deadline).await;
            // Redact before anything cuts the body short: a cut can split a key in two.
            let body = self.secrets.redact(&body);
            let wire = config.provider.wire();
            // A provider may name its wait in the body (Google's RetryInfo.retryDelay)
            // rather than in a header.
            if hints.after.is_none() {
                hints.after = wire.retry_delay(&body);
            }
            let err = wire
                .http_error(status, &body)
                .with_request_id(response_id.clone())
                .with_headers(headers);
            return Err((err, hints));
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(|v| v.trim().to_ascii_lowercase())
        };
        if let Some(encoding) = header(CONTENT_ENCODING).filter(|e| e != "identity") {
            return Err(no_hints(
                Error::protocol(format!(
                    "expected an event stream, got a body compressed with {encoding:?} \
                 (Content-Encoding), which panto does not decode; \
                 configure the server or proxy not to compress event streams"
                ))
                .with_status(status),
            ));
        }
        let content_type = header(CONTENT_TYPE).unwrap_or_default();
        if content_type.starts_with("application/json") {
            let body =
                read_bounded(response, config.max_message_bytes, cancel, request_deadline).await;
            return self
                .complete_body(config, message, &body, sink)
                .map_err(no_hints)
                .map(Some);
        }
        if is_not_a_stream(&content_type) {
            let body = read_bounded(response, 512, cancel, request_deadline).await;
            let body = self.secrets.redact(&body);
            return Err(no_hints(
                Error::protocol(format!(
                    "expected an event stream, got {content_type:?}: {:?}",
                    crate::text::truncate(body.trim(), 200)
                ))
                .with_status(status),
            ));
        }
        let mut parser = SseParser::new(config.max_event_bytes);
        let mut response = response;
        let mut finished = false;
        while !finished {
            // Backpressure: while the receiver cannot take events, the socket is not read.
            // That wait is the consumer's time, not the provider's: it re-arms the idle
            // timer and moves the request deadline back.
            let paused = sink.ready().await.map_err(no_hints)?;
            if !paused.is_zero() {
                last_progress = Instant::now();
                request_deadline += paused;
                request_timer.as_mut().reset(request_deadline);
            }
            // The chunk is polled first: while data keeps arriving, the cancel and timer
            // futures are not polled at all (each poll costs more than a chunk's parsing);
            // a cancel and the request deadline are then noticed by the cheap checks here.
            if cancel.is_cancelled() {
                return Err(no_hints(Error::cancelled()));
            }
            if last_progress >= request_deadline {
                return Err(no_hints(request_timeout(request_ms)));
            }
            let chunk = tokio::select! {
                biased;
                c = response.chunk() => c,
                _ = &mut cancelled => return Err(no_hints(Error::cancelled())),
                _ = &mut request_timer => return Err(no_hints(request_timeout(request_ms))),
                _ = &mut idle_timer => {
                    let due = last_progress + idle;
                    if due <= Instant::now() {
                        return Err(no_hints(Error::new(
                            ErrorKind::Timeout,
                            format!("nothing arrived from the provider for {idle_ms} ms (timeouts.idle_ms)"),
                        ).with_retryable(true)));
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
                    decoder.on_eof(&mut |ev| sink.emit(ev)).map_err(no_hints)?;
                    return Ok(None);
                }
                Err(e) => {
                    let err = transport_error(&e, "reading the stream");
                    // A reset after the provider said it finished is the same as a clean
                    // end at that point: the answer is complete.
                    return match decoder.on_eof(&mut |ev| sink.emit(ev)) {
                        Ok(()) => {
                            debug!(error = %err, "connection failed after the provider finished");
                            Ok(None)
                        }
                        Err(_) => Err(no_hints(err)),
                    };
                }
            };
            // Anything the server sends proves the connection alive, keep-alive comments
            // and empty events included.
            last_progress = Instant::now();
            parser
                .feed(&chunk, |ev| {
                    if finished {
                        return Ok(());
                    }
                    if decoder.on_sse(&ev, &mut |e| sink.emit(e))? == Progress::Finished {
                        finished = true;
                    }
                    Ok(())
                })
                .map_err(no_hints)?;
            // Lets the runtime's other tasks run between chunks of a fast stream (tokio's
            // cooperative budget): one busy stream never starves the others that share
            // its thread.
            tokio::task::coop::consume_budget().await;
        }
        client
            .finish_body(response, idle.min(Duration::from_secs(2)))
            .await;
        Ok(None)
    }

    /// A 200 whose body is one JSON document: a complete message from a server that
    /// ignores `stream: true` (decoded into the events a stream would have produced), or
    /// an error.
    fn complete_body(
        &self,
        config: &Config,
        message: u32,
        body: &str,
        sink: &mut TurnSink<'_>,
    ) -> Result<DecodedMessage> {
        let decoded = crate::provider::decode_complete_body(
            config.provider,
            message,
            body,
            limits(config),
            &mut |ev| sink.emit(ev),
        )?;
        if let Some(decoded) = decoded {
            return Ok(decoded);
        }
        let (message, code) = crate::provider::describe_error_body(body);
        let body = self.secrets.redact(body);
        Err(match message {
            Some(m) => Error::new(ErrorKind::Provider, m).with_provider_code(code),
            None => Error::protocol(format!(
                "expected an event stream, got a JSON body: {:?}",
                crate::text::truncate(body.trim(), 200)
            )),
        }
        .with_status(200))
    }
}

impl SharedClient {
    /// Lets the background drains of earlier responses on this client finish (together
    /// at most `DRAIN_GRACE`), so their connections are back in the pool before this
    /// request picks one: the end of a chunked body usually trails the provider's last
    /// event by microseconds, and reusing the connection saves a TCP and TLS handshake —
    /// also when the response was another agent's (one agent per request). A server that
    /// holds a body open costs one next request this grace at most, once.
    async fn let_drain_finish(&self) {
        let pending =
            std::mem::take(&mut *self.draining.lock().unwrap_or_else(PoisonError::into_inner));
        if pending.is_empty() {
            return;
        }
        let deadline = Instant::now() + DRAIN_GRACE;
        for handle in pending {
            if !handle.is_finished() {
                let _ = tokio::time::timeout_at(deadline, handle).await;
            }
        }
        // The HTTP stack hands a finished connection back to the pool from a task of its
        // own; let it run before this request looks for one.
        for _ in 0..2 {
            tokio::task::yield_now().await;
        }
    }

    /// Reads what is left of a finished response, so its connection goes back to the
    /// pool: at once when it is there already, else in the background (the turn does not
    /// wait for a server that dawdles). The end of a chunked body usually trails the
    /// last event by microseconds, but the HTTP stack reads it only once asked to: this
    /// asks, lets the connection's task run once, and looks again. A task of its own
    /// costs more than that look: its memory is over-aligned, which the system
    /// allocator serves from its shared bins (at thousands of streams, the largest
    /// allocation cost per turn).
    async fn finish_body(&self, mut response: reqwest::Response, within: Duration) {
        for look in 0..2 {
            if body_ended_now(&mut response) {
                return;
            }
            if look == 0 {
                tokio::task::yield_now().await;
            }
        }
        self.drain_in_background(response, within);
    }

    /// Reads what is left of a finished response (normally just the end of the chunked
    /// body) in the background, so the connection goes back to the pool without the
    /// turn waiting for it; gives up quietly if the server dawdles.
    fn drain_in_background(&self, mut response: reqwest::Response, within: Duration) {
        BACKGROUND_DRAINS.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + within;
        let handle = tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => break,
                    c = response.chunk() => match c {
                        Ok(Some(_)) => continue,
                        _ => break,
                    },
                }
            }
        });
        let mut draining = self.draining.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded by the drains in progress, each at most `within` long.
        draining.retain(|h| !h.is_finished());
        draining.push(handle);
    }
}

/// Reads what a finished response's body holds already, without waiting: true when the
/// body ended (or failed: nothing more to read either way), false when more is to come.
/// Reads at most a few chunks, as a finished response holds at most its end.
fn body_ended_now(response: &mut reqwest::Response) -> bool {
    use futures_util::FutureExt;
    for _ in 0..16 {
        match response.chunk().now_or_never() {
            Some(Ok(Some(_))) => continue,
            Some(_) => return true,
            None => return false,
        }
    }
    false
}

/// Finished responses whose end was read by a task of its own, in this process.
static BACKGROUND_DRAINS: AtomicU64 = AtomicU64::new(0);

/// How many finished responses this process left to a task of their own to read their
/// end (the server had not sent it yet when the turn's last event came): a diagnostic
/// for panto's tests.
pub fn background_drains() -> u64 {
    BACKGROUND_DRAINS.load(Ordering::Relaxed)
}

fn build_client(settings: ClientSettings) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .tcp_nodelay(true)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
        .redirect(same_origin_redirects())
        .user_agent(concat!("panto/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Error::internal(format!("cannot build the HTTP client: {e}")))
}

fn limits(config: &Config) -> DecodeLimits {
    DecodeLimits {
        max_message_bytes: config.max_message_bytes,
        ..DecodeLimits::default()
    }
}

/// Follows a redirect only within the endpoint's own origin (scheme, host and port):
/// the request carries the API key and the whole conversation, and neither may reach a
/// server the user did not point panto at. Anything else stops at the 3xx answer, which
/// [`redirect_error`] turns into a clear error.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt.previous().first().is_some_and(|first| {
            first.scheme() == attempt.url().scheme()
                && first.host_str() == attempt.url().host_str()
                && first.port_or_known_default() == attempt.url().port_or_known_default()
        });
        if same && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

fn redirect_error(response: &reqwest::Response) -> Error {
    let status = response.status().as_u16();
    let target = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|l| crate::text::truncate(l, 300).to_owned());
    let what = match target {
        Some(t) => format!("the server redirected the request to {t:?}"),
        None => "the server answered with a redirect without a target".to_owned(),
    };
    Error::config(format!(
        "HTTP {status}: {what}; panto follows no redirect to another origin (the request \
         carries the API key and the conversation); set base_url to the address you mean"
    ))
    .with_status(status)
}

/// Content types that are certainly not an event stream (an HTML error page from a
/// proxy, a captive portal, a misconfigured base URL).
fn is_not_a_stream(content_type: &str) -> bool {
    [
        "text/html",
        "application/xhtml",
        "text/xml",
        "application/xml",
        "image/",
    ]
    .iter()
    .any(|t| content_type.starts_with(t))
}

async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
    cancel: &CancellationToken,
    deadline: Instant,
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
                let room = limit.saturating_sub(body.len());
                body.extend_from_slice(&c[..c.len().min(room)]);
                if body.len() >= limit {
                    break;
                }
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// Whether a send failed because the connection closed before any answer arrived (what
/// a server's keep-alive timeout does to a pooled connection).
fn closed_before_answering(e: &reqwest::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = cur {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message() || h.is_canceled();
        }
        cur = s.source();
    }
    false
}

/// The provider's id of a request, from its response's headers: `x-request-id` (OpenAI
/// and most compatible servers) or `request-id` (Anthropic); at most 256 bytes of it.
fn request_id(headers: &reqwest::header::HeaderMap) -> Option<String> {
    const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
    let value = headers
        .get(&X_REQUEST_ID)
        .or_else(|| headers.get(&REQUEST_ID))?;
    let id = value.to_str().ok()?.trim();
    (!id.is_empty()).then(|| crate::text::truncate(id, 256).to_owned())
}

/// The headers of an HTTP error response, for the error (`Error::headers`): names in
/// lower case, in the order received, values that are not text left out, at most
/// [`crate::error::MAX_ERROR_HEADERS`] of them and [`crate::error::MAX_ERROR_HEADER_VALUE`]
/// bytes of each value. A proxy can echo anything back: they are redacted with the rest.
fn error_headers(headers: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let value = value.to_str().ok()?;
            let value = crate::text::truncate(value.trim(), crate::error::MAX_ERROR_HEADER_VALUE);
            Some((name.as_str().to_owned(), value.to_owned()))
        })
        .take(crate::error::MAX_ERROR_HEADERS)
        .collect()
}

fn request_timeout(ms: u64) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("the request took longer than {ms} ms (timeouts.request_ms)"),
    )
    .with_retryable(true)
}

fn transport_error(e: &reqwest::Error, doing: &str) -> Error {
    // reqwest's Display names the URL, never headers; `stream_message` redacts anyway.
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
    // A server on this machine that refuses the connection is not running: no backoff
    // brings it up, so waiting and retrying would only delay the answer. Anywhere else a
    // refusal can be a restart or a load balancer's hiccup, which a retry outlives.
    let retryable = !(refused(e) && e.url().is_some_and(is_loopback));
    Error::new(kind, format!("{doing}: {e}{source}")).with_retryable(retryable)
}

/// The connection was refused (nothing listens at the address).
fn refused(e: &reqwest::Error) -> bool {
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// `localhost`, or a loopback IP address.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => {
            let host = host.to_ascii_lowercase();
            host == "localhost" || host.ends_with(".localhost")
        }
    }
}
