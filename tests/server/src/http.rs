//! Hand-written HTTP/1.1 wire handling on a raw `TcpStream`.
//!
//! This module owns the bytes: reading one request at a time from a keep-alive connection
//! (request line, headers, `Content-Length` or chunked body, `Expect: 100-continue`), and
//! writing response heads and body framing. No HTTP library is used on purpose: fault
//! injection needs to decide exactly which bytes reach the socket and when.
//!
//! Everything a client can get wrong comes back as [`ReadError::Bad`] (answered 400 by the
//! caller) and everything the OS can do (EOF, reset) as [`ReadError::Gone`]; nothing here
//! panics on input.

use std::collections::BTreeMap;
use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::scenario::is_token_byte;

/// Largest request head (request line + headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted (LLM requests with long contexts are a few MB at most).
const MAX_BODY: usize = 256 * 1024 * 1024;
/// Longest chunk-size / trailer line in a chunked request body.
const MAX_LINE: usize = 8 * 1024;
const MAX_HEADERS: usize = 200;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// Path without the query string.
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    /// `true` for HTTP/1.0 (no chunked responses, close by default).
    pub(crate) http10: bool,
    /// Lowercased names; repeated headers joined with ", ".
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) body: Vec<u8>,
}

impl Request {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Whether the client asked for the connection to end after this exchange.
    pub(crate) fn wants_close(&self) -> bool {
        let has_token = |token: &str| {
            self.header("connection")
                .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        };
        if self.http10 {
            !has_token("keep-alive")
        } else {
            has_token("close")
        }
    }
}

#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer went away (EOF mid-request, reset, ...): nothing to answer.
    Gone,
    /// The request is malformed: answer 400 with this message, then close.
    Bad(String),
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> ReadError {
        ReadError::Gone
    }
}

fn bad<T>(msg: impl Into<String>) -> Result<T, ReadError> {
    Err(ReadError::Bad(msg.into()))
}

/// A connection plus the bytes read from it but not consumed yet (the start of a pipelined
/// next request may arrive together with the current one).
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Reads more bytes into the buffer; EOF is an error here because the caller needs them.
    async fn fill(&mut self, hint: usize) -> Result<(), ReadError> {
        self.buf.reserve(hint.clamp(16 * 1024, 1024 * 1024));
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(ReadError::Gone);
        }
        Ok(())
    }

    /// Reads the next request. `Ok(None)` is a clean end: the peer closed between requests.
    pub(crate) async fn read_request(&mut self) -> Result<Option<Request>, ReadError> {
        // RFC 9112 2.2: ignore empty lines before a request line.
        let head_end = loop {
            let skip = self
                .buf
                .iter()
                .take_while(|b| **b == b'\r' || **b == b'\n')
                .count();
            self.buf.drain(..skip);
            if let Some(end) = find_head_end(&self.buf) {
                break end;
            }
            if self.buf.len() > MAX_HEAD {
                return bad("request head larger than 64 KiB");
            }
            self.buf.reserve(16 * 1024);
            let n = self.stream.read_buf(&mut self.buf).await?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ReadError::Gone)
                };
            }
        };
        let mut req = parse_head(&self.buf[..head_end])?;
        self.buf.drain(..head_end);

        let chunked = match req.header("transfer-encoding") {
            None => false,
            Some(te) => {
                // Chunked must be the final coding; any other coding leaves the length
                // unknowable (RFC 9112 6.3), and we do not undo gzip & co.
                if !te.trim().eq_ignore_ascii_case("chunked") {
                    return bad(format!("unsupported transfer-encoding {te:?}"));
                }
                true
            }
        };
        let length = if chunked {
            None
        } else {
            match req.header("content-length") {
                None => Some(0),
                Some(v) => Some(parse_content_length(v)?),
            }
        };
        if length.is_some_and(|n| n > MAX_BODY) {
            return bad("request body larger than 256 MiB");
        }
        let expects_body = chunked || length.is_some_and(|n| n > 0);
        if expects_body
            && !req.http10
            && req
                .header("expect")
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
            && self.buf.is_empty()
        {
            // curl waits (up to 1 s) for this before sending bodies over 1 KiB.
            self.stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await?;
        }
        req.body = match length {
            Some(n) => {
                while self.buf.len() < n {
                    let missing = n - self.buf.len();
                    self.fill(missing).await?;
                }
                self.buf.drain(..n).collect()
            }
            None => self.read_chunked_body().await?,
        };
        Ok(Some(req))
    }

    /// Decodes a chunked request body (extensions and trailers are read and dropped).
    async fn read_chunked_body(&mut self) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line().await?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = match usize::from_str_radix(size_text, 16) {
                Ok(s) if !size_text.is_empty() && !size_text.starts_with('+') => s,
                _ => return bad(format!("invalid chunk size line {line:?}")),
            };
            if size == 0 {
                // Trailer section: header lines until an empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(body);
            }
            if body.len().saturating_add(size) > MAX_BODY {
                return bad("request body larger than 256 MiB");
            }
            while self.buf.len() < size + 2 {
                let missing = size + 2 - self.buf.len();
                self.fill(missing).await?;
            }
            if &self.buf[size..size + 2] != b"\r\n" {
                return bad("chunk data not followed by CRLF");
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
        }
    }

    /// One CRLF- (or LF-) terminated line, without the terminator.
    async fn read_line(&mut self) -> Result<String, ReadError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return String::from_utf8(line)
                    .or_else(|_| bad("chunked framing line is not UTF-8"));
            }
            if self.buf.len() > MAX_LINE {
                return bad("chunked framing line too long");
            }
            self.fill(0).await?;
        }
    }

    /// Whether bytes of a next request were already read (pipelined).
    pub(crate) fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Reads whatever arrives next into the buffer; `Ok(0)` at EOF. Cancel-safe.
    pub(crate) async fn read_some(&mut self) -> io::Result<usize> {
        self.buf.reserve(16 * 1024);
        self.stream.read_buf(&mut self.buf).await
    }

    /// Reads and throws away whatever the peer sends until it closes (EOF or error).
    /// Used by the `stall` fault and by lingering closes.
    pub(crate) async fn drain_until_closed(&mut self) {
        let mut sink = [0u8; 4096];
        loop {
            match self.stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// Index just past the blank line ending the head (`\r\n\r\n`, or bare `\n\n`).
fn find_head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|b| *b == b'\n') {
        let nl = i + off;
        let rest = &buf[nl + 1..];
        if rest.first() == Some(&b'\n') {
            return Some(nl + 2);
        }
        if rest.starts_with(b"\r\n") {
            return Some(nl + 3);
        }
        i = nl + 1;
    }
    None
}

fn parse_content_length(value: &str) -> Result<usize, ReadError> {
    // Repeated Content-Length headers were joined with ", "; they must all agree.
    let mut result: Option<usize> = None;
    for part in value.split(',') {
        let part = part.trim();
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return bad(format!("invalid content-length {value:?}"));
        }
        let n: usize = match part.parse() {
            Ok(n) => n,
            Err(_) => return bad(format!("content-length too large: {value:?}")),
        };
        if result.is_some_and(|prev| prev != n) {
            return bad(format!("conflicting content-length values {value:?}"));
        }
        result = Some(n);
    }
    result.map_or_else(|| bad("empty content-length"), Ok)
}

fn parse_head(head: &[u8]) -> Result<Request, ReadError> {
    // Header values may carry obs-text bytes; keep them readable rather than refusing.
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad(format!("malformed request line {request_line:?}"));
    };
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        return bad(format!("invalid method {method:?}"));
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return bad(format!("unsupported HTTP version {version:?}")),
    };
    let (path, query) = split_target(target)?;

    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    let mut count = 0;
    for line in lines {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            return bad("obsolete header line folding is not accepted");
        }
        let Some((name, value)) = line.split_once(':') else {
            return bad(format!("header line without ':' {line:?}"));
        };
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return bad(format!("invalid header name {name:?}"));
        }
        count += 1;
        if count > MAX_HEADERS {
            return bad("too many headers");
        }
        let name = name.to_ascii_lowercase();
        let value = value.trim_matches([' ', '\t']);
        headers
            .entry(name)
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(value);
            })
            .or_insert_with(|| value.to_string());
    }
    Ok(Request {
        method: method.to_string(),
        path,
        query,
        http10,
        headers,
        body: Vec::new(),
    })
}

/// Origin-form `/p?q`, absolute-form `http://host/p?q` (what proxies receive) or `*`.
fn split_target(target: &str) -> Result<(String, Option<String>), ReadError> {
    let origin = if target.starts_with('/') || target == "*" {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        rest.find('/').map_or("/", |i| &rest[i..])
    } else {
        return bad(format!("invalid request target {target:?}"));
    };
    let origin = origin.split('#').next().unwrap_or(origin);
    Ok(match origin.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (origin.to_string(), None),
    })
}

/// Standard reason phrases for the statuses scenarios use; clients ignore the text anyway.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Builds a response head. `headers` are sent as given; `framing` headers are added after.
pub(crate) fn response_head<'a>(
    status: u16,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    framing: &[(&str, String)],
) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    for (name, value) in framing {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_end_variants() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\nrest"), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn parse_head_basics() {
        let r =
            parse_head(b"POST http://h:1/v1/x?a=b HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\n\r\n")
                .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/x");
        assert_eq!(r.query.as_deref(), Some("a=b"));
        assert_eq!(r.header("x-a"), Some("1, 2"));
        assert!(!r.wants_close());
        assert!(matches!(
            parse_head(b"GET /\r\n\r\n"),
            Err(ReadError::Bad(_))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"),
            Err(ReadError::Bad(_))
        ));
    }

    #[test]
    fn content_length_rules() {
        assert_eq!(parse_content_length("12").unwrap(), 12);
        assert_eq!(parse_content_length("12, 12").unwrap(), 12);
        assert!(parse_content_length("12, 13").is_err());
        assert!(parse_content_length("-1").is_err());
        assert!(parse_content_length("99999999999999999999999").is_err());
    }
}
