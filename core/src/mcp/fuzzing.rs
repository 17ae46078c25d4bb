//! The I/O-free parts of the MCP client on plain bytes, for the `mcp` fuzz target and
//! the stable replay of its saved crashes (`panto_testkit::fuzz::mcp`): the stdio
//! framing, the routing of what a server sends, the Streamable HTTP answers (JSON and
//! SSE), the listing of tools and the mapping of a call's result. Each runs the very
//! functions the transports run. Not part of panto's API: hidden from its documentation
//! and free to change.

use serde_json::Value;

use super::rpc::{Peer, RpcError};
use super::McpServer;
use crate::error::Error;
use crate::request::ToolSpec;
use crate::tool::ToolOutput;

/// What the stdio framing made of a server's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioRun {
    /// The lines given out, trimmed, empty ones left out (as the reader skips them).
    pub lines: Vec<Vec<u8>>,
    /// Why the connection ended early (a line over the cap), if it did.
    pub error: Option<String>,
    /// The most bytes the framing held at any moment.
    pub peak_buffered: usize,
}

/// Reads `chunks` (a server's stdout as it arrived) as the stdio transport's reader
/// does, with `max` bytes the most a message may have.
#[cfg(unix)]
pub fn stdio_lines<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, max: usize) -> StdioRun {
    let mut framing = super::stdio::Lines::new(max);
    let mut run = StdioRun {
        lines: Vec::new(),
        error: None,
        peak_buffered: 0,
    };
    for chunk in chunks {
        let mut rest = chunk;
        while !rest.is_empty() {
            let (took, line) = match framing.take(rest) {
                Ok(t) => t,
                Err(why) => {
                    run.error = Some(why);
                    return run;
                }
            };
            if let Some(line) = line.filter(|l| !l.is_empty()) {
                run.lines.push(line.to_vec());
            }
            run.peak_buffered = run.peak_buffered.max(framing.buffered());
            rest = &rest[took..];
        }
    }
    run
}

/// One message as a server sent it, as the transports parse it (`None`: not JSON).
pub fn parse_message(bytes: &[u8]) -> Option<Value> {
    super::rpc::parse_message(bytes)
}

/// The outcome of one request: its result, or the server's error (code, message).
pub type Outcome = Result<Value, (i64, String)>;

/// What routing a server's messages did.
#[derive(Debug)]
pub struct Routed {
    /// The answers to the server's own requests, in order.
    pub replies: Vec<Value>,
    /// Each request's answer (`None`: none came), for the requests 1 to `requests`.
    pub answers: Vec<Option<Outcome>>,
    /// The requests still waiting, after the routing.
    pub waiting: Vec<u64>,
    /// Whether the server said its tools changed.
    pub list_changed: bool,
}

/// Routes `messages` to a connection with `requests` requests waiting (ids 1, 2, …),
/// as both transports route what arrives.
pub fn route(messages: impl IntoIterator<Item = Value>, requests: usize) -> Routed {
    let peer = Peer::new("fuzz");
    let mut pending = Vec::new();
    for _ in 0..requests {
        match peer.register(None) {
            Ok((id, rx, _progress)) => pending.push((id, rx)),
            Err(_) => break,
        }
    }
    let replies = messages
        .into_iter()
        .flat_map(|m| peer.route(m))
        .collect::<Vec<_>>();
    let waiting = pending
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| peer.waiting(*id))
        .collect();
    let answers = pending
        .into_iter()
        .map(|(_, mut rx)| match rx.try_recv() {
            Ok(Ok(v)) => Some(Ok(v)),
            Ok(Err(RpcError::Remote { code, message })) => Some(Err((code, message))),
            Ok(Err(other)) => Some(Err((i64::MIN, format!("{other:?}")))),
            Err(_) => None,
        })
        .collect();
    Routed {
        replies,
        answers,
        waiting,
        list_changed: peer.list_changed.load(std::sync::atomic::Ordering::SeqCst),
    }
}

/// What the Streamable HTTP transport made of an SSE answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SseAnswer {
    /// Its messages, in order.
    pub messages: Vec<Value>,
    /// The last event id it gave (where a resumption would start).
    pub last_id: Option<String>,
    /// The server's `retry` delay, in milliseconds.
    pub retry_ms: Option<u64>,
    /// The error that ended it early (`protocol`: an event over the cap, or broken
    /// framing), as words.
    pub error: Option<(crate::ErrorKind, String)>,
}

/// Reads `chunks` as the body of an SSE answer with `max` bytes the most an event may
/// have, as the HTTP transport does: messages up to the first error count.
pub fn sse_answer<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, max: usize) -> SseAnswer {
    let mut parser = crate::sse::SseParser::new(max);
    let mut resume = super::http::Resume::default();
    let mut out = SseAnswer {
        messages: Vec::new(),
        last_id: None,
        retry_ms: None,
        error: None,
    };
    for chunk in chunks {
        let (messages, fed) = super::http::sse_chunk(&mut parser, &mut resume, chunk);
        out.messages.extend(messages);
        if let Err(e) = fed {
            out.error = Some((e.kind, e.message));
            break;
        }
    }
    assert_eq!(resume.messages, out.messages.len(), "messages miscounted");
    out.last_id = resume.last_id;
    out.retry_ms = resume.retry_ms;
    out
}

/// Reads `chunks` as the body of a JSON answer with `max` bytes the most it may have,
/// as the HTTP transport does: the message, or why it was refused.
pub fn json_answer<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
    max: usize,
) -> Result<Value, String> {
    let mut body = Vec::new();
    for chunk in chunks {
        super::http::append_capped(&mut body, chunk, max).map_err(|e| e.message)?;
        assert!(body.len() <= max, "held more than the cap");
    }
    super::http::json_answer(&body)
}

/// The tools listed over `pages` (the results of successive `tools/list` requests, the
/// first asked without a cursor), filtered and named for `config`, as the server would
/// offer them: each one's spec and its name on the server.
pub fn tool_list(
    server: &str,
    config: &McpServer,
    pages: &[Value],
) -> Result<Vec<(ToolSpec, String)>, Error> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for page in pages {
        match super::server::take_page(server, &mut tools, page, cursor.as_deref())? {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    super::tools::specs(server, config, tools)
}

/// A `tools/call` result as the model reads it.
pub fn tool_result(result: &Value) -> ToolOutput {
    super::tools::map_result(result)
}

/// The name the model calls a server's tool by, for a prefix.
pub fn model_name(prefix: &str, tool: &str) -> String {
    super::tools::model_name(prefix, tool)
}
