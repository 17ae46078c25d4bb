//! Owns what a host asks an MCP server outside a tool call: its resources
//! (`resources/list` over every page, `resources/templates/list`, `resources/read`) and
//! its prompts (`prompts/list`, `prompts/get` with arguments), what their answers
//! become (the types below, their JSON forms for the bindings, and the parts of a
//! turn's input a resource or a prompt message maps to), and the opt-in built-in tool
//! `<prefix>read_resource` that lets the model follow a `resource_link` it was given.
//! Starting the servers and the session belong to `server`; the tools the servers list,
//! to `tools`.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::rpc::RpcError;
use super::server::Server;
use super::{McpServer, McpServers, McpToolInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::media::Media;
use crate::message::{Block, Role};
use crate::request::ToolSpec;
use crate::secret::Secrets;
use crate::tool::{Tool, ToolFuture, ToolOutput};

/// Most pages of one listing read from a server.
const MAX_PAGES: usize = 100;
/// Most entries of one listing kept (resources, templates or prompts of one server).
const MAX_ITEMS: usize = 10_000;
/// Most bytes of a name, title, URI or MIME type kept from a listing.
const MAX_FIELD: usize = 2048;
/// Most bytes of a description kept from a listing.
const MAX_DESCRIPTION: usize = 16 * 1024;
/// Most arguments of one prompt kept.
const MAX_ARGUMENTS: usize = 100;
/// The server's own name of the built-in tool (`<prefix>read_resource` for the model).
pub const READ_RESOURCE_TOOL: &str = "read_resource";

/// A resource a server lists (`resources/list`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpResource {
    /// The server that lists it (its name in `mcp_servers`).
    pub server: String,
    /// The resource's URI, which [`McpServers::read_resource`] takes.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// A title for people, if the server gave one.
    pub title: Option<String>,
    /// What it is, if the server said.
    pub description: Option<String>,
    /// Its MIME type, if the server said.
    pub mime_type: Option<String>,
    /// Its size in bytes, if the server said.
    pub size: Option<u64>,
}

/// A resource template a server lists (`resources/templates/list`): a URI template
/// (RFC 6570) whose expansions the server reads.
#[derive(Debug, Clone, PartialEq)]
pub struct McpResourceTemplate {
    /// The server that lists it.
    pub server: String,
    /// The URI template.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// A title for people, if the server gave one.
    pub title: Option<String>,
    /// What it is, if the server said.
    pub description: Option<String>,
    /// The MIME type of every resource it names, if the server said.
    pub mime_type: Option<String>,
}

/// What one content of a read resource holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpResourceBody {
    /// Text.
    Text(String),
    /// Bytes (the server's base64 `blob`, decoded).
    Blob(Vec<u8>),
}

/// One content of a read resource (a resource may read as several, such as the files
/// of a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpResourceContents {
    /// The URI of this content.
    pub uri: String,
    /// Its MIME type, if the server said.
    pub mime_type: Option<String>,
    /// The text or bytes.
    pub body: McpResourceBody,
}

/// One prompt a server lists (`prompts/list`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpPrompt {
    /// The server that lists it.
    pub server: String,
    /// Its name, which [`McpServers::get_prompt`] takes.
    pub name: String,
    /// A title for people, if the server gave one.
    pub title: Option<String>,
    /// What it is, if the server said.
    pub description: Option<String>,
    /// The arguments it takes.
    pub arguments: Vec<McpPromptArgument>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpPromptArgument {
    /// Its name.
    pub name: String,
    /// What it is, if the server said.
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A prompt, filled in with its arguments (`prompts/get`).
#[derive(Debug, Clone, PartialEq)]
pub struct McpPromptResult {
    /// What the prompt is, if the server said.
    pub description: Option<String>,
    /// Its messages, in order.
    pub messages: Vec<McpPromptMessage>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct McpPromptMessage {
    /// [`Role::User`] or [`Role::Assistant`].
    pub role: Role,
    /// Its content as parts of a turn's input: text, images (PNG, JPEG, GIF, WebP) and
    /// PDF documents; content of other kinds (audio, other images, a binary resource)
    /// is a text part naming its type and size, a resource link one naming its URI.
    pub parts: Vec<Block>,
}

fn opt_str(v: &Option<String>) -> Value {
    v.clone().map_or(Value::Null, Value::String)
}

/// A JSON object without its null members.
fn object(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(
        pairs
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<Map<String, Value>>(),
    )
}

impl McpResource {
    /// The JSON form: `{"server","uri","name","title"?,"description"?,"mime_type"?,"size"?}`.
    pub fn to_value(&self) -> Value {
        object(vec![
            ("server", self.server.clone().into()),
            ("uri", self.uri.clone().into()),
            ("name", self.name.clone().into()),
            ("title", opt_str(&self.title)),
            ("description", opt_str(&self.description)),
            ("mime_type", opt_str(&self.mime_type)),
            ("size", self.size.map_or(Value::Null, Value::from)),
        ])
    }
}

impl McpResourceTemplate {
    /// The JSON form: `{"server","uri_template","name","title"?,"description"?,"mime_type"?}`.
    pub fn to_value(&self) -> Value {
        object(vec![
            ("server", self.server.clone().into()),
            ("uri_template", self.uri_template.clone().into()),
            ("name", self.name.clone().into()),
            ("title", opt_str(&self.title)),
            ("description", opt_str(&self.description)),
            ("mime_type", opt_str(&self.mime_type)),
        ])
    }
}

impl McpResourceContents {
    /// The content as a part of a turn's input: text as a text part headed by
    /// `[resource: <uri>]`; bytes of an image type the providers take (PNG, JPEG, GIF,
    /// WebP) as an image part, a PDF as a document part; other bytes as a text part
    /// naming the URI, the type and the size.
    pub fn to_part(&self) -> Block {
        let kind = self
            .mime_type
            .as_deref()
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        match &self.body {
            McpResourceBody::Text(text) => Block::text(format!(
                "[resource: {}{}]\n{text}",
                self.uri,
                label(" type ", self.mime_type.as_deref())
            )),
            McpResourceBody::Blob(bytes) => {
                let media = || Media::bytes(bytes.clone(), Some(&kind)).ok();
                let part = match kind.as_str() {
                    "image/png" | "image/jpeg" | "image/gif" | "image/webp" => {
                        media().map(Block::Image)
                    }
                    "application/pdf" => media().map(Block::Document),
                    _ => None,
                };
                part.unwrap_or_else(|| self.note())
            }
        }
    }

    /// The text that stands for content the model cannot be shown.
    fn note(&self) -> Block {
        let size = match &self.body {
            McpResourceBody::Text(t) => t.len(),
            McpResourceBody::Blob(b) => b.len(),
        };
        Block::text(format!(
            "[resource: {}, {}, {size} bytes, not shown to the model]",
            self.uri,
            self.mime_type.as_deref().unwrap_or("unknown type")
        ))
    }

    /// The JSON form: `{"uri","mime_type"?,"text"}` or `{"uri","mime_type"?,"blob"}`
    /// (base64), and `"part"`: [`McpResourceContents::to_part`] in the input form
    /// turns take.
    pub fn to_value(&self) -> Value {
        let (key, body) = match &self.body {
            McpResourceBody::Text(t) => ("text", Value::String(t.clone())),
            McpResourceBody::Blob(b) => (
                "blob",
                base64::engine::general_purpose::STANDARD.encode(b).into(),
            ),
        };
        object(vec![
            ("uri", self.uri.clone().into()),
            ("mime_type", opt_str(&self.mime_type)),
            (key, body),
            ("part", part_value(&self.to_part())),
        ])
    }
}

/// A part in the JSON form of a turn's input (`panto::Input::from_value`).
fn part_value(part: &Block) -> Value {
    serde_json::to_value(part).unwrap_or(Value::Null)
}

/// The JSON form of a read resource: `{"contents": [...]}`.
pub fn resource_contents_to_value(contents: &[McpResourceContents]) -> Value {
    json!({"contents": contents.iter().map(McpResourceContents::to_value).collect::<Vec<_>>()})
}

impl McpPrompt {
    /// The JSON form: `{"server","name","title"?,"description"?,"arguments":[{"name",
    /// "description"?,"required"}]}`.
    pub fn to_value(&self) -> Value {
        let arguments: Vec<Value> = self
            .arguments
            .iter()
            .map(|a| {
                object(vec![
                    ("name", a.name.clone().into()),
                    ("description", opt_str(&a.description)),
                    ("required", a.required.into()),
                ])
            })
            .collect();
        object(vec![
            ("server", self.server.clone().into()),
            ("name", self.name.clone().into()),
            ("title", opt_str(&self.title)),
            ("description", opt_str(&self.description)),
            ("arguments", arguments.into()),
        ])
    }
}

impl McpPromptResult {
    /// The JSON form: `{"description"?,"messages":[{"role","content":[parts]}]}`, the
    /// parts in the input form turns take.
    pub fn to_value(&self) -> Value {
        let messages: Vec<Value> = self
            .messages
            .iter()
            .map(|m| {
                json!({
                    "role": match m.role {
                        Role::Assistant => "assistant",
                        _ => "user",
                    },
                    "content": m.parts.iter().map(part_value).collect::<Vec<_>>(),
                })
            })
            .collect();
        object(vec![
            ("description", opt_str(&self.description)),
            ("messages", messages.into()),
        ])
    }

    /// The messages' text, each headed by its role: what a terminal shows.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for m in &self.messages {
            let role = match m.role {
                Role::Assistant => "assistant",
                _ => "user",
            };
            let body: Vec<String> = m
                .parts
                .iter()
                .map(|p| match p {
                    Block::Text { text } => text.clone(),
                    Block::Image(media) | Block::Document(media) => {
                        format!("[{}]", media.describe())
                    }
                    _ => String::new(),
                })
                .collect();
            out.push_str(&format!("{role}: {}\n", body.join("\n")));
        }
        out
    }
}

fn label(prefix: &str, s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => format!("{prefix}{s}"),
        _ => String::new(),
    }
}

/// A string member, cut to `max` bytes; `None` when absent, empty or not a string.
fn field(v: &Value, key: &str, max: usize) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| crate::text::truncate(s, max).to_owned())
}

fn resource(server: &str, v: &Value) -> Option<McpResource> {
    let uri = field(v, "uri", MAX_FIELD)?;
    Some(McpResource {
        server: server.to_owned(),
        name: field(v, "name", MAX_FIELD).unwrap_or_else(|| uri.clone()),
        uri,
        title: field(v, "title", MAX_FIELD),
        description: field(v, "description", MAX_DESCRIPTION),
        mime_type: field(v, "mimeType", MAX_FIELD),
        size: v.get("size").and_then(Value::as_u64),
    })
}

fn template(server: &str, v: &Value) -> Option<McpResourceTemplate> {
    let uri_template = field(v, "uriTemplate", MAX_FIELD)?;
    Some(McpResourceTemplate {
        server: server.to_owned(),
        name: field(v, "name", MAX_FIELD).unwrap_or_else(|| uri_template.clone()),
        uri_template,
        title: field(v, "title", MAX_FIELD),
        description: field(v, "description", MAX_DESCRIPTION),
        mime_type: field(v, "mimeType", MAX_FIELD),
    })
}

fn prompt(server: &str, v: &Value) -> Option<McpPrompt> {
    let arguments = v
        .get("arguments")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|arg| {
                    Some(McpPromptArgument {
                        name: field(arg, "name", MAX_FIELD)?,
                        description: field(arg, "description", MAX_DESCRIPTION),
                        required: arg.get("required").and_then(Value::as_bool) == Some(true),
                    })
                })
                .take(MAX_ARGUMENTS)
                .collect()
        })
        .unwrap_or_default();
    Some(McpPrompt {
        server: server.to_owned(),
        name: field(v, "name", MAX_FIELD)?,
        title: field(v, "title", MAX_FIELD),
        description: field(v, "description", MAX_DESCRIPTION),
        arguments,
    })
}

/// The contents of a `resources/read` answer. A content with neither text nor a blob,
/// or a blob that is not base64, is a `protocol` error.
pub(crate) fn read_contents(server: &str, result: &Value) -> Result<Vec<McpResourceContents>> {
    let items = result
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            Error::protocol(format!(
                "MCP server {server:?} answered resources/read without contents"
            ))
        })?;
    items.iter().map(|c| one_content(server, c)).collect()
}

fn one_content(server: &str, c: &Value) -> Result<McpResourceContents> {
    let uri = c
        .get("uri")
        .and_then(Value::as_str)
        .map(|s| crate::text::truncate(s, MAX_FIELD).to_owned())
        .unwrap_or_default();
    let body = if let Some(text) = c.get("text").and_then(Value::as_str) {
        McpResourceBody::Text(text.to_owned())
    } else if let Some(blob) = c.get("blob").and_then(Value::as_str) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(blob.trim())
            .map_err(|_| {
                Error::protocol(format!(
                    "MCP server {server:?}: the blob of resource {uri:?} is not base64"
                ))
            })?;
        McpResourceBody::Blob(bytes)
    } else {
        return Err(Error::protocol(format!(
            "MCP server {server:?}: a content of resource {uri:?} has neither text nor blob"
        )));
    };
    Ok(McpResourceContents {
        uri,
        mime_type: field(c, "mimeType", MAX_FIELD),
        body,
    })
}

/// One content block of a prompt message as parts.
fn content_parts(server: &str, item: &Value) -> Result<Vec<Block>> {
    let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
    Ok(match s("type") {
        "text" => vec![Block::text(s("text"))],
        kind @ ("image" | "audio") => {
            let blob = McpResourceContents {
                uri: String::new(),
                mime_type: field(item, "mimeType", MAX_FIELD),
                body: McpResourceBody::Blob(
                    base64::engine::general_purpose::STANDARD
                        .decode(s("data").trim())
                        .map_err(|_| {
                            Error::protocol(format!(
                                "MCP server {server:?}: the data of a prompt's {kind} is not base64"
                            ))
                        })?,
                ),
            };
            match blob.to_part() {
                image @ Block::Image(_) if kind == "image" => vec![image],
                _ => vec![Block::text(format!(
                    "[{kind}: {}, {} bytes, not shown to the model]",
                    blob.mime_type.as_deref().unwrap_or("unknown type"),
                    match &blob.body {
                        McpResourceBody::Blob(b) => b.len(),
                        McpResourceBody::Text(t) => t.len(),
                    }
                ))],
            }
        }
        "resource" => {
            let r = item.get("resource").cloned().unwrap_or(Value::Null);
            vec![one_content(server, &r)?.to_part()]
        }
        "resource_link" => vec![Block::text(format!(
            "[resource link: {}{}{}]",
            s("uri"),
            label(" name ", Some(s("name"))),
            label(" type ", Some(s("mimeType")))
        ))],
        other => vec![Block::text(format!(
            "[{} content]",
            if other.is_empty() { "untyped" } else { other }
        ))],
    })
}

/// The messages of a `prompts/get` answer. A role other than `user` and `assistant`
/// is a `protocol` error.
pub(crate) fn prompt_result(server: &str, result: &Value) -> Result<McpPromptResult> {
    let messages = result
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            Error::protocol(format!(
                "MCP server {server:?} answered prompts/get without messages"
            ))
        })?;
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            other => {
                return Err(Error::protocol(format!(
                    "MCP server {server:?}: a prompt message's role is {:?}, not user or assistant",
                    other.map(|r| crate::text::truncate(r, 40))
                )))
            }
        };
        let mut parts = Vec::new();
        // One content block (the protocol's form), or a list of them (tolerated).
        match m.get("content") {
            Some(Value::Array(items)) => {
                for item in items {
                    parts.extend(content_parts(server, item)?);
                }
            }
            Some(item) => parts.extend(content_parts(server, item)?),
            None => {}
        }
        out.push(McpPromptMessage { role, parts });
    }
    Ok(McpPromptResult {
        description: field(result, "description", MAX_DESCRIPTION),
        messages: out,
    })
}

/// Words and a kind for a host request the server did not answer with a result.
fn host_error(server: &str, method: &str, e: RpcError) -> Error {
    match e {
        RpcError::Remote { code, message } => {
            let kind = match code {
                // Resource not found; method not found (no such capability).
                -32002 | -32601 => ErrorKind::NotFound,
                // Invalid params: an unknown prompt, a missing argument.
                -32602 => ErrorKind::BadRequest,
                -32603 => ErrorKind::Server,
                _ => ErrorKind::Protocol,
            };
            Error::new(
                kind,
                format!("MCP server {server:?} answered {method} with error {code}: {message}"),
            )
        }
        RpcError::Timeout(t) => Error::new(
            ErrorKind::Timeout,
            format!(
                "MCP server {server:?} did not answer {method} within {} ms",
                t.as_millis()
            ),
        ),
        RpcError::SessionExpired => Error::new(
            ErrorKind::Connection,
            format!("MCP server {server:?}: the session ended (HTTP 404) during {method}"),
        ),
        RpcError::Failed(e) => e,
    }
}

/// One request, given up on (and withdrawn) when `cancel` fires.
async fn ask(
    server: &Server,
    method: &str,
    params: Value,
    cancel: &CancellationToken,
) -> Result<Value> {
    ask_rpc(server, method, params, cancel)
        .await?
        .map_err(|e| host_error(&server.name, method, e))
}

/// [`ask`], the server's own failure kept apart (the outer error is the cancel).
async fn ask_rpc(
    server: &Server,
    method: &str,
    params: Value,
    cancel: &CancellationToken,
) -> Result<std::result::Result<Value, RpcError>> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Error::cancelled()),
        r = server.host_request(method, params) => Ok(r),
    }
}

/// Every entry of a paginated listing (`items_key` of each page), page by page; a
/// cursor seen before ends it. A server without the capability (JSON-RPC "method not
/// found" for the first page) lists nothing. More than [`MAX_PAGES`] pages or
/// [`MAX_ITEMS`] entries are a `protocol` error.
async fn list_all(
    server: &Server,
    method: &str,
    items_key: &str,
    cancel: &CancellationToken,
) -> Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = match ask_rpc(server, method, params, cancel).await? {
            Err(RpcError::Remote { code: -32601, .. }) if cursor.is_none() => return Ok(Vec::new()),
            r => r.map_err(|e| host_error(&server.name, method, e))?,
        };
        if let Some(list) = page.get(items_key).and_then(Value::as_array) {
            if items.len() + list.len() > MAX_ITEMS {
                return Err(Error::protocol(format!(
                    "MCP server {:?} lists more than {MAX_ITEMS} entries in {method}",
                    server.name
                )));
            }
            items.extend(list.iter().cloned());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() && !seen.iter().any(|s| s == next) => {
                seen.push(next.to_owned());
                cursor = Some(next.to_owned());
            }
            _ => return Ok(items),
        }
    }
    Err(Error::protocol(format!(
        "MCP server {:?} lists {method} over more than {MAX_PAGES} pages",
        server.name
    )))
}

/// What [`McpServers::server_listing`] looks for.
#[derive(Clone, Copy)]
enum Listed<'a> {
    Resource(&'a str),
    Prompt(&'a str),
}

impl McpServers {
    /// The secrets of the servers' declarations, removed from every error the host
    /// calls below report.
    fn secrets(&self) -> Secrets {
        Secrets::new(
            self.inner
                .configs
                .values()
                .flat_map(McpServer::secret_values),
        )
    }

    /// The names of the servers, in order.
    pub fn names(&self) -> Vec<String> {
        self.inner.configs.keys().cloned().collect()
    }

    /// The server called `name`, started first if it was not (as a turn starts it).
    async fn running(&self, name: &str, cancel: &CancellationToken) -> Result<Arc<Server>> {
        let mut slots = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::cancelled()),
            s = self.inner.state.lock() => s,
        };
        self.check_open(&mut slots)?;
        let limits = self.inner.limits;
        let names = self.names();
        let slot = slots.iter_mut().find(|s| s.name() == name).ok_or_else(|| {
            Error::config(format!(
                "mcp_servers: no MCP server is called {:?} (the servers: {})",
                crate::text::truncate(name, 100),
                names.join(", ")
            ))
        })?;
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::cancelled()),
            r = slot.refresh(limits) => r?,
        }
        slot.server().ok_or_else(|| {
            Error::config(format!("mcp_servers.{name}: the MCP server is not running"))
        })
    }

    /// Runs `f` on the running server `name`, its error free of secrets.
    async fn with_server<T, F, Fut>(
        &self,
        name: &str,
        cancel: &CancellationToken,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(Arc<Server>) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let result = match self.running(name, cancel).await {
            Ok(server) => f(server).await,
            Err(e) => Err(e),
        };
        result.map_err(|e| e.redact(&self.secrets()))
    }

    /// The resources the server `server` lists, over every page (started first if it
    /// was not). A server that offers no resources lists none. `cancel` gives up on the
    /// request (withdrawn from the server) with a `cancelled` error.
    pub async fn resources(
        &self,
        server: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpResource>> {
        self.with_server(server, cancel, |s| async move {
            let listed = list_all(&s, "resources/list", "resources", cancel).await?;
            Ok(listed.iter().filter_map(|v| resource(&s.name, v)).collect())
        })
        .await
    }

    /// The resource templates the server `server` lists (none when it offers no
    /// resources).
    pub async fn resource_templates(
        &self,
        server: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpResourceTemplate>> {
        self.with_server(server, cancel, |s| async move {
            let listed =
                list_all(&s, "resources/templates/list", "resourceTemplates", cancel).await?;
            Ok(listed.iter().filter_map(|v| template(&s.name, v)).collect())
        })
        .await
    }

    /// Reads the resource `uri` of the server `server` (`resources/read`). An unknown
    /// resource is a `not_found` error (the server's JSON-RPC error -32002); content
    /// that is neither text nor base64 bytes, a `protocol` one.
    pub async fn read_resource(
        &self,
        server: &str,
        uri: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpResourceContents>> {
        self.with_server(server, cancel, |s| async move {
            let result = ask(&s, "resources/read", json!({"uri": uri}), cancel).await?;
            read_contents(&s.name, &result)
        })
        .await
    }

    /// The prompts the server `server` lists, over every page. A server that offers no
    /// prompts lists none.
    pub async fn prompts(
        &self,
        server: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<McpPrompt>> {
        self.with_server(server, cancel, |s| async move {
            let listed = list_all(&s, "prompts/list", "prompts", cancel).await?;
            Ok(listed.iter().filter_map(|v| prompt(&s.name, v)).collect())
        })
        .await
    }

    /// The prompt `name` of the server `server`, filled in with `arguments`
    /// (`prompts/get`). An unknown prompt or a missing argument is the server's error:
    /// `bad_request` for its -32602.
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: &BTreeMap<String, String>,
        cancel: &CancellationToken,
    ) -> Result<McpPromptResult> {
        self.with_server(server, cancel, |s| async move {
            let params = json!({"name": name, "arguments": arguments});
            let result = ask(&s, "prompts/get", params, cancel).await?;
            prompt_result(&s.name, &result)
        })
        .await
    }

    /// The server to read `uri` from: `server` when given, else the only server, else
    /// the one server whose listing has the URI (a `config` error when none or several
    /// do: name the server).
    pub async fn server_of_resource(
        &self,
        server: Option<&str>,
        uri: &str,
        cancel: &CancellationToken,
    ) -> Result<String> {
        self.server_listing(server, Listed::Resource(uri), cancel)
            .await
    }

    /// The server to get the prompt `name` from, as [`McpServers::server_of_resource`]
    /// finds a resource's.
    pub async fn server_of_prompt(
        &self,
        server: Option<&str>,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<String> {
        self.server_listing(server, Listed::Prompt(name), cancel)
            .await
    }

    /// Whether the server `name` lists `what`.
    async fn lists(
        &self,
        name: &str,
        what: Listed<'_>,
        cancel: &CancellationToken,
    ) -> Result<bool> {
        Ok(match what {
            Listed::Resource(uri) => self
                .resources(name, cancel)
                .await?
                .iter()
                .any(|r| r.uri == uri),
            Listed::Prompt(prompt) => self
                .prompts(name, cancel)
                .await?
                .iter()
                .any(|p| p.name == prompt),
        })
    }

    async fn server_listing(
        &self,
        server: Option<&str>,
        what: Listed<'_>,
        cancel: &CancellationToken,
    ) -> Result<String> {
        if let Some(name) = server {
            return Ok(name.to_owned());
        }
        let names = self.names();
        if let [only] = names.as_slice() {
            return Ok(only.clone());
        }
        let mut found = Vec::new();
        for name in &names {
            if cancel.is_cancelled() {
                return Err(Error::cancelled());
            }
            if self.lists(name, what, cancel).await? {
                found.push(name.clone());
            }
        }
        let what = match what {
            Listed::Resource(s) | Listed::Prompt(s) => crate::text::truncate(s, 200),
        };
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(Error::config(format!(
                "no MCP server lists {what:?}; name the server (the servers: {})",
                names.join(", ")
            ))),
            many => Err(Error::config(format!(
                "the MCP servers {} all list {what:?}; name one",
                many.join(", ")
            ))),
        }
    }

    /// The resources of every server, in the servers' order; the first server that
    /// cannot list them is the error.
    pub async fn all_resources(&self, cancel: &CancellationToken) -> Result<Vec<McpResource>> {
        let mut out = Vec::new();
        for name in self.names() {
            out.extend(self.resources(&name, cancel).await?);
        }
        Ok(out)
    }

    /// The prompts of every server, in the servers' order; the first server that
    /// cannot list them is the error.
    pub async fn all_prompts(&self, cancel: &CancellationToken) -> Result<Vec<McpPrompt>> {
        let mut out = Vec::new();
        for name in self.names() {
            out.extend(self.prompts(&name, cancel).await?);
        }
        Ok(out)
    }
}

/// The built-in `<prefix>read_resource` tool of a server whose `read_resource` is on.
pub(crate) struct ReadResourceTool {
    server: Arc<Server>,
    spec: ToolSpec,
}

impl ReadResourceTool {
    /// The tool for `server`, named with the server's tool prefix.
    pub fn new(server: &Arc<Server>, config: &McpServer) -> ReadResourceTool {
        let prefix = config
            .tool_prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", server.name));
        ReadResourceTool {
            server: server.clone(),
            spec: ToolSpec {
                name: super::tools::model_name(&prefix, READ_RESOURCE_TOOL),
                description: format!(
                    "Reads a resource of the MCP server {:?} by its URI (such as the URI of a \
                     resource link one of its tools returned) and returns its contents.",
                    server.name
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
                    "required": ["uri"],
                }),
                needs_approval: false,
                external: false,
            },
        }
    }

    pub fn info(&self) -> McpToolInfo {
        McpToolInfo {
            name: self.spec.name.clone(),
            remote_name: READ_RESOURCE_TOOL.to_owned(),
            description: self.spec.description.clone(),
        }
    }
}

impl Tool for ReadResourceTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call(&self, arguments: Value, _cancel: CancellationToken) -> ToolFuture {
        // Cancelling drops this future: the request is withdrawn from the server.
        let server = self.server.clone();
        Box::pin(async move {
            let Some(uri) = arguments.get("uri").and_then(Value::as_str) else {
                return ToolOutput::error("read_resource needs a \"uri\" (a string)");
            };
            let result = server
                .host_request("resources/read", json!({"uri": uri}))
                .await
                .map_err(|e| host_error(&server.name, "resources/read", e))
                .and_then(|r| read_contents(&server.name, &r));
            match result {
                Ok(contents) => {
                    let parts = contents
                        .iter()
                        .map(|c| match c.to_part() {
                            // A tool result holds text and images only.
                            Block::Document(_) => c.note(),
                            p => p,
                        })
                        .collect();
                    ToolOutput::with_parts(parts, false)
                }
                Err(e) => ToolOutput::error(e.message),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

    #[test]
    fn contents_map_to_parts() {
        let r = json!({"contents": [
            {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "hello"},
            {"uri": "file:///p.png", "mimeType": "image/png", "blob": PNG},
            {"uri": "file:///d.bin", "blob": "AAEC"},
        ]});
        let c = read_contents("s", &r).unwrap();
        assert_eq!(c[0].body, McpResourceBody::Text("hello".into()));
        assert_eq!(
            c[0].to_part(),
            Block::text("[resource: file:///a.txt type text/plain]\nhello")
        );
        assert!(matches!(c[1].to_part(), Block::Image(_)));
        assert_eq!(c[2].body, McpResourceBody::Blob(vec![0, 1, 2]));
        assert_eq!(
            c[2].to_part(),
            Block::text("[resource: file:///d.bin, unknown type, 3 bytes, not shown to the model]")
        );
        // The JSON form's parts are what a turn's input takes.
        let v = resource_contents_to_value(&c);
        let parts: Vec<Value> = v["contents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["part"].clone())
            .collect();
        let input = crate::Input::from_value(&Value::Array(parts)).unwrap();
        assert_eq!(input.parts().len(), 3);
        assert_eq!(v["contents"][2]["blob"], "AAEC");
        // Broken contents are protocol errors, not panics.
        for bad in [
            json!({}),
            json!({"contents": [{"uri": "x"}]}),
            json!({"contents": [{"uri": "x", "blob": "not base64!"}]}),
        ] {
            assert_eq!(
                read_contents("s", &bad).unwrap_err().kind,
                ErrorKind::Protocol
            );
        }
    }

    #[test]
    fn prompts_map_to_messages() {
        let r = json!({"description": "d", "messages": [
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {"role": "assistant", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "u", "text": "t"}}},
            {"role": "user", "content": {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}},
            {"role": "user", "content": {"type": "resource_link", "uri": "file:///x", "name": "x"}},
        ]});
        let p = prompt_result("s", &r).unwrap();
        assert_eq!(p.description.as_deref(), Some("d"));
        assert_eq!(p.messages[0].parts, [Block::text("hi")]);
        assert_eq!(p.messages[1].role, Role::Assistant);
        assert!(matches!(p.messages[1].parts[0], Block::Image(_)));
        assert_eq!(p.messages[2].parts, [Block::text("[resource: u]\nt")]);
        assert_eq!(
            p.messages[3].parts,
            [Block::text(
                "[audio: audio/wav, 3 bytes, not shown to the model]"
            )]
        );
        assert_eq!(
            p.messages[4].parts,
            [Block::text("[resource link: file:///x name x]")]
        );
        let v = p.to_value();
        assert_eq!(
            v["messages"][0],
            json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})
        );
        let bad =
            json!({"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}]});
        assert_eq!(
            prompt_result("s", &bad).unwrap_err().kind,
            ErrorKind::Protocol
        );
    }

    #[test]
    fn listings_keep_what_they_can() {
        assert_eq!(resource("s", &json!({"name": "no uri"})), None);
        let r = resource("s", &json!({"uri": "u", "size": 3, "title": ""})).unwrap();
        assert_eq!(r.name, "u");
        assert_eq!(r.title, None);
        assert_eq!(
            r.to_value(),
            json!({"server": "s", "uri": "u", "name": "u", "size": 3})
        );
        let p = prompt(
            "s",
            &json!({"name": "p", "arguments": [{"name": "a", "required": true}, {"x": 1}, {"name": "b"}]}),
        )
        .unwrap();
        assert_eq!(
            p.to_value(),
            json!({"server": "s", "name": "p", "arguments": [
                {"name": "a", "required": true}, {"name": "b", "required": false}]})
        );
        assert!(template("s", &json!({"name": "t"})).is_none());
    }
}
