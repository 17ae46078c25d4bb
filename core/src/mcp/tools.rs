//! Owns what an MCP server's tools become for the model: their names
//! (`<server>__<tool>`, or the server's `tool_prefix`, made to fit what both providers
//! accept), the `enabled_tools` / `disabled_tools` filters, the schema, and the
//! mapping of a `tools/call` result (or its failure) to the text the model reads.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::rpc::RpcError;
use super::server::Server;
use super::McpServer;
use crate::error::{Error, Result};
use crate::media::Media;
use crate::message::Block;
use crate::request::ToolSpec;
use crate::tool::{CallProgress, Tool, ToolFuture, ToolOutput};

/// One tool of a server, as `panto mcp list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolInfo {
    /// The name the model calls it by.
    pub name: String,
    /// The server's own name for it.
    pub remote_name: String,
    /// The tool's description, as the server gave it.
    pub description: String,
}

/// The name the model sees: `prefix + tool`, every character outside
/// `[A-Za-z0-9_-]` replaced by `_`, cut to 64 characters.
pub(crate) fn model_name(prefix: &str, tool: &str) -> String {
    let mut name: String = prefix
        .chars()
        .chain(tool.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        name.push('_');
    }
    name
}

/// A tool of an MCP server.
pub(crate) struct McpTool {
    server: Arc<Server>,
    spec: ToolSpec,
    remote: String,
}

impl McpTool {
    pub fn info(&self) -> McpToolInfo {
        McpToolInfo {
            name: self.spec.name.clone(),
            remote_name: self.remote.clone(),
            description: self.spec.description.clone(),
        }
    }
}

/// The tools of a `tools/list` answer, filtered and named. Two that end with the same
/// name are a `config` error.
pub(crate) fn adapt(
    server: &Arc<Server>,
    config: &McpServer,
    listed: Vec<Value>,
) -> Result<Vec<Arc<McpTool>>> {
    Ok(specs(&server.name, config, listed)?
        .into_iter()
        .map(|(spec, remote)| {
            Arc::new(McpTool {
                server: server.clone(),
                spec,
                remote,
            })
        })
        .collect())
}

/// What [`adapt`] makes of the listed tools of the server `server`: each offered tool's
/// spec and its name on the server, sorted by the model's name for it.
pub(crate) fn specs(
    server: &str,
    config: &McpServer,
    listed: Vec<Value>,
) -> Result<Vec<(ToolSpec, String)>> {
    let prefix = config
        .tool_prefix
        .clone()
        .unwrap_or_else(|| format!("{server}__"));
    let mut out: Vec<(ToolSpec, String)> = Vec::new();
    for t in listed {
        let Some(remote) = t.get("name").and_then(Value::as_str) else {
            continue;
        };
        if let Some(enabled) = &config.enabled_tools {
            if !enabled.iter().any(|e| e == remote) {
                continue;
            }
        }
        if config.disabled_tools.iter().any(|d| d == remote) {
            continue;
        }
        if needs_a_task(&t) {
            // panto does not run calls as tasks, and the server refuses any other
            // call of this tool: offering it would only fail every call.
            tracing::debug!(server = %server, tool = remote,
                "an MCP tool that runs only as a task (execution.taskSupport: required) is not offered");
            continue;
        }
        let name = model_name(&prefix, remote);
        if let Some((_, other)) = out.iter().find(|(spec, _)| spec.name == name) {
            return Err(Error::config(format!(
                "mcp_servers.{server}: the tools {other:?} and {remote:?} would both be called \
                 {name:?}; filter one out (disabled_tools)"
            )));
        }
        let description = t
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| t.get("title").and_then(Value::as_str))
            .unwrap_or("");
        out.push((
            ToolSpec {
                name,
                description: crate::text::truncate(description, 16 * 1024).to_owned(),
                parameters: schema(t.get("inputSchema")),
                needs_approval: false,
                external: false,
            },
            remote.to_owned(),
        ));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// Whether a listed tool runs only as a task (`execution.taskSupport: "required"`,
/// revision 2025-11-25), which panto does not ask for.
fn needs_a_task(tool: &Value) -> bool {
    tool.pointer("/execution/taskSupport")
        .and_then(Value::as_str)
        == Some("required")
}

/// The tool's `inputSchema`, as an object schema the providers accept: of type
/// `object`, with an object of `properties` (one that is not an object is dropped, as
/// is a `required` that is not a list of names: a provider refuses the whole request
/// for either, so one broken tool would fail every turn).
fn schema(input: Option<&Value>) -> Value {
    let mut o = match input {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    };
    if o.get("type").and_then(Value::as_str) != Some("object") {
        o.insert("type".into(), "object".into());
    }
    if !o.get("properties").is_some_and(Value::is_object) {
        o.insert("properties".into(), Value::Object(Map::new()));
    }
    let names = |r: &Value| r.as_array().is_some_and(|a| a.iter().all(Value::is_string));
    if o.get("required").is_some_and(|r| !names(r)) {
        o.remove("required");
    }
    Value::Object(o)
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, arguments: Value, cancel: CancellationToken) -> ToolFuture {
        self.call_with_progress(arguments, cancel, CallProgress::none())
    }

    fn call_with_progress(
        &self,
        arguments: Value,
        _cancel: CancellationToken,
        progress: CallProgress,
    ) -> ToolFuture {
        // Cancelling drops this future: the request is withdrawn with
        // notifications/cancelled (see rpc::Peer::request).
        let server = self.server.clone();
        let remote = self.remote.clone();
        Box::pin(async move {
            match server.call(&remote, arguments, progress).await {
                Ok(result) => map_result(&result),
                Err(e) => ToolOutput::error(call_error(&server.name, &remote, e)),
            }
        })
    }
}

/// The words the model reads when a call got no result.
fn call_error(server: &str, tool: &str, e: RpcError) -> String {
    match e {
        RpcError::Remote { code, message } => {
            format!("MCP server {server:?} refused the call of {tool:?} (JSON-RPC error {code}): {message}")
        }
        RpcError::Timeout(t) => format!(
            "MCP server {server:?} did not answer the call of {tool:?} within {} ms",
            t.as_millis()
        ),
        RpcError::SessionExpired => {
            format!("MCP server {server:?}: the session ended during the call of {tool:?}")
        }
        RpcError::Failed(e) => format!("the call of {tool:?} failed: {}", e.message),
    }
}

/// The image types the providers take in a tool result.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An MCP image content as an image part, if it is one a provider takes.
fn image_part(data: &str, mime: &str) -> Option<Block> {
    use base64::Engine;
    let mime = mime.to_ascii_lowercase();
    if !IMAGE_TYPES.contains(&mime.as_str()) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    Media::bytes(bytes, Some(&mime)).ok().map(Block::Image)
}

/// A `tools/call` result as what the model reads: text parts in order (joined by
/// newlines in the result's text), images of the types the providers take as image
/// parts, other content named in words, `structuredContent` as JSON text (unless a
/// text part already is that JSON), `isError` an error result.
pub(crate) fn map_result(result: &Value) -> ToolOutput {
    let mut blocks: Vec<Block> = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    // Text gathered so far goes into a text part before each image.
    let flush = |parts: &mut Vec<String>, blocks: &mut Vec<Block>| {
        for p in parts.drain(..) {
            blocks.push(Block::text(p));
        }
    };
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for item in content {
        let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        let kind = s("type");
        match kind {
            "text" => parts.push(s("text").to_owned()),
            "image" if image_part(s("data"), s("mimeType")).is_some() => {
                flush(&mut parts, &mut blocks);
                blocks.extend(image_part(s("data"), s("mimeType")));
            }
            // What no provider takes in a tool result: a note says what the server sent.
            "image" | "audio" => parts.push(format!(
                "[{kind}: {}, {} bytes base64, not shown to the model]",
                non_empty(s("mimeType"), "unknown type"),
                s("data").len()
            )),
            "resource_link" => parts.push(format!(
                "[resource link: {}{}{}]",
                s("uri"),
                opt(" name ", s("name")),
                opt(" type ", s("mimeType"))
            )),
            "resource" => {
                let r = item.get("resource").cloned().unwrap_or(Value::Null);
                let rs = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
                match r.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(format!(
                        "[resource: {}{}]\n{text}",
                        rs("uri"),
                        opt(" type ", rs("mimeType"))
                    )),
                    None => parts.push(format!(
                        "[resource: {}{}, {} bytes base64, not shown to the model]",
                        rs("uri"),
                        opt(" type ", rs("mimeType")),
                        rs("blob").len()
                    )),
                }
            }
            other => parts.push(format!("[{} content]", non_empty(other, "untyped"))),
        }
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        let texts: Vec<&str> = content
            .iter()
            .filter(|item| item.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|item| item.get("text").and_then(Value::as_str))
            .collect();
        if !mirrors(&texts, structured) {
            parts.push(structured.to_string());
        }
    }
    flush(&mut parts, &mut blocks);
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    ToolOutput::with_parts(blocks, is_error)
}

/// Whether the text parts already say what `structuredContent` says, so that it is
/// not sent twice: one text part is its JSON (`{"t":20}` for `{"t": 20}`), or it is the
/// `{"result": value}` wrapper servers put around a plain value and the text parts are
/// that value — one part that is its JSON or, for a string, the string itself (`42`,
/// `hello`), or, for an array, one such part per item in order (the SDKs' text for a
/// list). Whitespace and key order do not matter: the JSON is compared parsed.
fn mirrors(texts: &[&str], structured: &Value) -> bool {
    fn is(text: &str, value: &Value) -> bool {
        value.as_str() == Some(text)
            || serde_json::from_str::<Value>(text).is_ok_and(|parsed| &parsed == value)
    }
    if texts
        .iter()
        .any(|t| serde_json::from_str::<Value>(t).is_ok_and(|parsed| &parsed == structured))
    {
        return true;
    }
    let wrapped = match structured {
        Value::Object(o) if o.len() == 1 => o.get("result"),
        _ => None,
    };
    let Some(value) = wrapped else {
        return false;
    };
    match (texts, value) {
        ([one], value) if is(one, value) => true,
        (texts, Value::Array(items)) => {
            texts.len() == items.len() && texts.iter().zip(items).all(|(t, v)| is(t, v))
        }
        _ => false,
    }
}

fn non_empty<'a>(s: &'a str, otherwise: &'a str) -> &'a str {
    if s.is_empty() {
        otherwise
    } else {
        s
    }
}

fn opt(label: &str, s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!("{label}{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_fit_the_providers() {
        assert_eq!(
            model_name("time__", "get_current_time"),
            "time__get_current_time"
        );
        assert_eq!(model_name("a b__", "x.y/z"), "a_b__x_y_z");
        let long = model_name("s__", &"x".repeat(100));
        assert_eq!(long.len(), 64);
        assert_eq!(model_name("", ""), "_");
        assert_eq!(model_name("", "é"), "_");
    }

    #[test]
    fn results_map_to_text() {
        let r = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "file:///b", "text": "B"}},
            {"type": "resource", "resource": {"uri": "file:///c", "blob": "AA", "mimeType": "x/y"}},
            {"type": "text", "text": "{\"k\":1}"}
        ], "structuredContent": {"k": 1}});
        let out = map_result(&r);
        assert!(!out.is_error);
        // "AAAA" is three bytes of a PNG by its label: an image part.
        assert_eq!(
            out.output,
            "one\n[resource link: file:///a name a]\n[resource: file:///b]\nB\n\
             [resource: file:///c type x/y, 2 bytes base64, not shown to the model]\n{\"k\":1}"
        );
        assert!(matches!(out.parts[1], Block::Image(_)), "{:?}", out.parts);
        // An image no provider takes is named instead.
        let svg = map_result(&json!({"content": [
            {"type": "image", "data": "PHN2Zz4=", "mimeType": "image/svg+xml"}]}));
        assert_eq!(
            svg.output,
            "[image: image/svg+xml, 8 bytes base64, not shown to the model]"
        );
        assert!(svg.parts.is_empty());
        let structured = map_result(&json!({"content": [], "structuredContent": {"t": 20}}));
        assert_eq!(structured.output, "{\"t\":20}");
        let err =
            map_result(&json!({"content": [{"type": "text", "text": "no"}], "isError": true}));
        assert_eq!(err, ToolOutput::error("no"));
    }

    #[test]
    fn structured_content_that_mirrors_the_text_is_not_repeated() {
        let out = |r: Value| map_result(&r).output;
        // The shapes the SDKs send for a tool returning a plain value.
        let text = |t: &str| json!({"type": "text", "text": t});
        assert_eq!(
            out(json!({"content": [text("42")], "structuredContent": {"result": 42}})),
            "42"
        );
        assert_eq!(
            out(json!({"content": [text("hello")], "structuredContent": {"result": "hello"}})),
            "hello"
        );
        assert_eq!(
            out(json!({"content": [text("1"), text("two")],
                       "structuredContent": {"result": [1, "two"]}})),
            "1\ntwo"
        );
        assert_eq!(
            out(json!({"content": [text("{ \"b\": 2, \"a\": 1 }")],
                       "structuredContent": {"a": 1, "b": 2}})),
            "{ \"b\": 2, \"a\": 1 }"
        );
        // Text that says something else keeps the structured content.
        assert_eq!(
            out(json!({"content": [text("the answer")], "structuredContent": {"result": 42}})),
            "the answer\n{\"result\":42}"
        );
        assert_eq!(
            out(json!({"content": [text("42")], "structuredContent": {"result": 42, "unit": "m"}})),
            "42\n{\"result\":42,\"unit\":\"m\"}"
        );
    }

    #[test]
    fn task_required_tools_are_recognized() {
        assert!(needs_a_task(
            &json!({"name": "t", "execution": {"taskSupport": "required"}})
        ));
        assert!(!needs_a_task(
            &json!({"name": "t", "execution": {"taskSupport": "optional"}})
        ));
        assert!(!needs_a_task(
            &json!({"name": "t", "execution": "required"})
        ));
        assert!(!needs_a_task(&json!({"name": "t"})));
    }

    #[test]
    fn schemas_become_object_schemas() {
        assert_eq!(schema(None), json!({"type": "object", "properties": {}}));
        assert_eq!(
            schema(Some(&json!({"properties": {"a": {"type": "string"}}}))),
            json!({"type": "object", "properties": {"a": {"type": "string"}}})
        );
        // Found by the mcp fuzz target's property (core/tests/fuzz_regressions/mcp/):
        // `properties` that is no object, or a `required` that is no list of names, made
        // every request carrying the tool one the providers refuse.
        assert_eq!(
            schema(Some(
                &json!({"type": "object", "properties": 5, "required": "a"})
            )),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            schema(Some(
                &json!({"properties": {"a": {}}, "required": ["a", 1]})
            )),
            json!({"type": "object", "properties": {"a": {}}})
        );
        assert_eq!(
            schema(Some(&json!({"properties": {"a": {}}, "required": ["a"]}))),
            json!({"type": "object", "properties": {"a": {}}, "required": ["a"]})
        );
    }
}
