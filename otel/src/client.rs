//! Owns the HTTP client the OTLP exporter sends with: panto's `reqwest`, driven by the
//! export thread's runtime, with a timeout and a bounded response. It never logs, so the
//! headers (`OTEL_EXPORTER_OTLP_HEADERS` may hold a collector's token) are never written
//! anywhere but to the collector.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};
use panto::Error;

/// Most bytes of a collector's answer that are read (an OTLP answer is a few bytes; a
/// partial-success message a few hundred).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Longest one export request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter's client.
#[derive(Debug, Clone)]
pub(crate) struct Client(reqwest::Client);

impl Client {
    pub(crate) fn new() -> Result<Client, Error> {
        reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(REQUEST_TIMEOUT)
            .build()
            .map(Client)
            .map_err(|e| Error::config(format!("OpenTelemetry export: HTTP client: {e}")))
    }

    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let mut response = self.0.execute(request).await?;
        let mut answer = Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            *headers = response.headers().clone();
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            let room = MAX_RESPONSE_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_RESPONSE_BYTES {
                break;
            }
        }
        Ok(answer.body(Bytes::from(body))?)
    }
}

impl HttpClient for Client {
    // `HttpClient` is an `async_trait`; this is the signature it expands to.
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.send(request))
    }
}
