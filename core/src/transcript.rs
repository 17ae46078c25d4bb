//! Owns the transcript: a flat, provider-neutral projection of the conversation for
//! repainting a UI. It reads the history and never changes it; nothing in it is sent to
//! a provider.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::media::{Media, MediaSource};
use crate::message::{Block, Message, Role};

/// What a transcript entry shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// Text the user or the model wrote.
    Text,
    /// The model's reasoning (thinking, or its summary).
    Reasoning,
    /// A tool call: `text` is its arguments.
    ToolCall,
    /// A tool's result: `text` is its output.
    ToolResult,
    /// An image or document of the user's input or of a tool's result: described, never
    /// its content.
    Attachment,
}

/// One entry: `{role, kind, text, name?, call_id?, is_error?, attachment?, media_type?,
/// size?}`. For a tool call, `text` is its arguments as compact JSON (or the raw text the
/// model sent when they did not parse); for a tool result, the output. An attachment
/// (`kind` `attachment`) says what it is — `attachment` (`image` or `document`),
/// `media_type` where known, `size` in bytes (absent for a URL), `name` (its file name),
/// and in `text` one line (`image/png, 1234 bytes`, or the URL) — never its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// Who said it.
    pub role: Role,
    /// What the entry shows.
    pub kind: EntryKind,
    /// The text shown (see the type's documentation for each kind).
    pub text: String,
    /// The tool's name (calls and results), or an attachment's file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tool call's id (calls and results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Whether a tool result is an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// An attachment's kind: `image` or `document`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<String>,
    /// An attachment's media type, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// An attachment's size in bytes (absent for a URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl TranscriptEntry {
    fn plain(role: Role, kind: EntryKind, text: String) -> TranscriptEntry {
        TranscriptEntry {
            role,
            kind,
            text,
            name: None,
            call_id: None,
            is_error: None,
            attachment: None,
            media_type: None,
            size: None,
        }
    }

    fn attachment(role: Role, kind: &str, media: &Media) -> TranscriptEntry {
        TranscriptEntry {
            name: media.name.clone(),
            attachment: Some(kind.to_owned()),
            media_type: media.media_type().map(str::to_owned),
            size: match &media.source {
                MediaSource::Bytes { data, .. } => Some(data.len() as u64),
                MediaSource::Url(_) => None,
            },
            ..TranscriptEntry::plain(role, EntryKind::Attachment, media.describe())
        }
    }
}

/// The transcript of `messages`, in order. Redacted reasoning (nothing readable) and
/// provider blocks that are not tool traffic (Anthropic `compaction`) are left out;
/// provider-side tool blocks (`server_tool_use`, `mcp_tool_result`…) appear as the tool
/// calls and results they are.
pub fn transcript(messages: &[Message]) -> Vec<TranscriptEntry> {
    let mut out = Vec::new();
    for m in messages {
        for b in &m.content {
            if let Some(entry) = entry(m.role, b) {
                out.push(entry);
            }
            // A tool result's images follow its entry.
            if let Block::ToolResult { parts, .. } = b {
                out.extend(parts.iter().filter_map(|p| match p {
                    Block::Text { .. } => None,
                    p => entry(m.role, p),
                }));
            }
        }
    }
    out
}

/// The transcript as a JSON array.
pub fn transcript_json(messages: &[Message]) -> String {
    serde_json::to_string(&transcript(messages)).unwrap_or_else(|_| "[]".to_owned())
}

fn entry(role: Role, b: &Block) -> Option<TranscriptEntry> {
    Some(match b {
        Block::Text { text } => TranscriptEntry::plain(role, EntryKind::Text, text.clone()),
        Block::Reasoning { text, .. } => {
            TranscriptEntry::plain(role, EntryKind::Reasoning, text.clone())
        }
        Block::RedactedReasoning { .. } => return None,
        Block::ToolCall {
            call_id,
            name,
            arguments,
            arguments_raw,
        } => TranscriptEntry {
            name: Some(name.clone()),
            call_id: Some(call_id.clone()),
            ..TranscriptEntry::plain(
                role,
                EntryKind::ToolCall,
                match (arguments, arguments_raw) {
                    (Some(v), _) => v.to_string(),
                    (None, Some(raw)) => raw.clone(),
                    (None, None) => String::new(),
                },
            )
        },
        Block::ToolResult {
            call_id,
            name,
            output,
            is_error,
            ..
        } => TranscriptEntry {
            name: Some(name.clone()),
            call_id: Some(call_id.clone()),
            is_error: Some(*is_error),
            ..TranscriptEntry::plain(role, EntryKind::ToolResult, output.clone())
        },
        Block::Image(media) => TranscriptEntry::attachment(role, "image", media),
        Block::Document(media) => TranscriptEntry::attachment(role, "document", media),
        Block::Opaque { block, .. } => return opaque_entry(role, block),
    })
}

/// A provider block as a tool call (`*_tool_use`) or result (`*_tool_result`).
fn opaque_entry(role: Role, block: &Value) -> Option<TranscriptEntry> {
    let kind = block.get("type")?.as_str()?;
    let string = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
    if kind.ends_with("_tool_use") {
        return Some(TranscriptEntry {
            name: string("name"),
            call_id: string("id"),
            ..TranscriptEntry::plain(
                role,
                EntryKind::ToolCall,
                block.get("input").map(Value::to_string).unwrap_or_default(),
            )
        });
    }
    if kind.ends_with("_tool_result") {
        let content = block.get("content");
        let is_error = block
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            || content
                .and_then(|c| c.get("type"))
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("_error"));
        return Some(TranscriptEntry {
            name: Some(kind.trim_end_matches("_tool_result").to_owned()),
            call_id: string("tool_use_id"),
            is_error: Some(is_error),
            ..TranscriptEntry::plain(
                role,
                EntryKind::ToolResult,
                content.map(readable).unwrap_or_default(),
            )
        });
    }
    None
}

/// The readable text of a result's content: a string as is; the `text` parts of an
/// array joined; search results as `title <url>` lines; anything else as compact JSON.
fn readable(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let lines: Vec<String> = parts
                .iter()
                .map(|p| match (p.get("text"), p.get("title"), p.get("url")) {
                    (Some(Value::String(t)), _, _) => t.clone(),
                    (_, Some(Value::String(title)), Some(Value::String(url))) => {
                        format!("{title} <{url}>")
                    }
                    _ => p.to_string(),
                })
                .collect();
            lines.join("\n")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_block_kind_maps_to_a_flat_entry() {
        let history = vec![
            Message::user("weather?"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Reasoning {
                        text: "think".into(),
                        signature: Some("sig".into()),
                    },
                    Block::RedactedReasoning { data: "xx".into() },
                    Block::ToolCall {
                        call_id: "c1".into(),
                        name: "w".into(),
                        arguments: Some(json!({"city": "Paris"})),
                        arguments_raw: None,
                    },
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![Block::ToolResult {
                    call_id: "c1".into(),
                    name: "w".into(),
                    output: "sunny".into(),
                    is_error: false,
                    parts: Vec::new(),
                }],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Opaque {
                        provider: "anthropic".into(),
                        block: json!({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"query": "q"}}),
                    },
                    Block::Opaque {
                        provider: "anthropic".into(),
                        block: json!({"type": "web_search_tool_result", "tool_use_id": "s1",
                            "content": [{"type": "web_search_result", "title": "T", "url": "https://x"}]}),
                    },
                    Block::Opaque {
                        provider: "anthropic".into(),
                        block: json!({"type": "compaction", "content": "summary"}),
                    },
                    Block::text("It is sunny."),
                ],
            },
        ];
        let json = transcript_json(&history);
        assert_eq!(
            json,
            r#"[{"role":"user","kind":"text","text":"weather?"},"#.to_owned()
                + r#"{"role":"assistant","kind":"reasoning","text":"think"},"#
                + r#"{"role":"assistant","kind":"tool_call","text":"{\"city\":\"Paris\"}","name":"w","call_id":"c1"},"#
                + r#"{"role":"tool","kind":"tool_result","text":"sunny","name":"w","call_id":"c1","is_error":false},"#
                + r#"{"role":"assistant","kind":"tool_call","text":"{\"query\":\"q\"}","name":"web_search","call_id":"s1"},"#
                + r#"{"role":"assistant","kind":"tool_result","text":"T <https://x>","name":"web_search","call_id":"s1","is_error":false},"#
                + r#"{"role":"assistant","kind":"text","text":"It is sunny."}]"#
        );
    }
}
