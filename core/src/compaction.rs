//! Owns compaction's pure parts: where the history is cut, what the summarizer reads,
//! the summarization prompt, the history rebuilt around the summary, and the token
//! estimate. The request itself is made by the agent (`Agent::compact`, and the
//! automatic compaction of a turn), with the agent's own provider.

use serde::Serialize;

use crate::message::{self, Block, Message, Role};
use crate::transcript::{self, EntryKind};

/// The instructions the summarizer gets as its system prompt (replace them with
/// `CompactOptions::prompt` or `compaction.prompt`). The conversation to summarize
/// follows as one user message, as a plain-text transcript between `<conversation>`
/// tags.
pub const DEFAULT_PROMPT: &str = "You are compacting the history of a conversation between a user \
and an AI assistant that uses tools, so that the assistant can continue the work with a \
shorter context. Write a summary of the conversation below that keeps everything needed \
to continue: the user's goals and instructions, decisions made, facts learned (including \
tool results that still matter: names, numbers, paths, identifiers), work done so far, \
and what remains open. Be concise and factual; write it as notes for the assistant, not \
as a reply to the user. Output only the summary.";

/// The text of the user message that carries the summary in the compacted history.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n\n";

/// The assistant's reply to the summary, when the kept messages start with a user
/// message (so that roles keep alternating).
pub const SUMMARY_ACK: &str = "Understood. I will continue from this summary.";

/// Longest text of one transcript entry the summarizer reads; longer ones (big tool
/// outputs) are cut with a note, which keeps the summarization request bounded by the
/// number of messages rather than by their size.
pub const MAX_ENTRY_BYTES: usize = 8 * 1024;

pub use crate::options::CompactOptions;

/// What a compaction did. `changed` is false when there was nothing older than the kept
/// messages (no request is made then). Token counts: `tokens_before` is the provider's
/// count for the history (input and output tokens of the last response) when the history
/// has not changed since, otherwise the estimate of [`estimate_tokens`]; `tokens_after`
/// is the estimate of the new history in the same measure ([`scaled_estimate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Compaction {
    /// Whether the history changed (false: nothing was older than the kept messages).
    pub changed: bool,
    /// Messages before the compaction.
    pub messages_before: u64,
    /// Messages after it.
    pub messages_after: u64,
    /// Tokens of the history before (see the type's documentation).
    pub tokens_before: u64,
    /// Estimated tokens of the history after.
    pub tokens_after: u64,
}

impl Compaction {
    /// The report as JSON (`{changed, messages_before, messages_after, tokens_before,
    /// tokens_after}`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Estimated tokens of a history: the bytes of its saved JSON divided by 4, rounded up
/// (about right for English text and JSON; used where the provider reported nothing).
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    let bytes = message::history_to_json(messages).len() as u64;
    bytes.div_ceil(4)
}

/// Tokens of `after`, in the same measure as `tokens_before` (the count of `before`):
/// the estimate of `after` scaled by how the provider's count of `before` compares with
/// its estimate. With a provider count the two figures of a compaction are then
/// comparable (bytes / 4 alone over-counts JSON-heavy histories); when `tokens_before`
/// is itself the estimate, this is just the estimate of `after`.
pub fn scaled_estimate(before: &[Message], tokens_before: u64, after: &[Message]) -> u64 {
    let estimate_after = estimate_tokens(after);
    let estimate_before = estimate_tokens(before);
    if estimate_before == 0 || tokens_before == 0 {
        return estimate_after;
    }
    let scaled = (u128::from(estimate_after) * u128::from(tokens_before))
        .div_ceil(u128::from(estimate_before));
    u64::try_from(scaled).unwrap_or(u64::MAX).max(1)
}

/// Where the kept part of `messages` starts, keeping the last `keep_last` messages: moved
/// back over tool messages so a call and its results are never separated. 0 means there
/// is nothing to summarize.
pub fn split_point(messages: &[Message], keep_last: usize) -> usize {
    let mut at = messages.len().saturating_sub(keep_last.max(1));
    while at > 0 && messages.get(at).is_some_and(|m| m.role == Role::Tool) {
        at -= 1;
    }
    at
}

/// The older part as the plain text the summarizer reads.
pub fn render(messages: &[Message]) -> String {
    let mut out = String::from("<conversation>\n");
    for e in transcript::transcript(messages) {
        let who = match e.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
        };
        let name = e.name.as_deref().unwrap_or("");
        let head = match e.kind {
            EntryKind::Text => format!("{who}: "),
            EntryKind::Reasoning => format!("{who} (thinking): "),
            EntryKind::ToolCall => format!("{who} called tool {name} with: "),
            EntryKind::ToolResult if e.is_error == Some(true) => {
                format!("Result of tool {name} (error): ")
            }
            EntryKind::ToolResult => format!("Result of tool {name}: "),
            // Attachments never go to the summarizer: a note of what was there does.
            EntryKind::Attachment => format!(
                "{who} attached {} (not shown here): ",
                e.attachment.as_deref().unwrap_or("a file")
            ),
        };
        out.push_str(&head);
        out.push_str(crate::text::truncate(&e.text, MAX_ENTRY_BYTES));
        if e.text.len() > MAX_ENTRY_BYTES {
            out.push_str(" […cut]");
        }
        out.push_str("\n\n");
    }
    out.push_str("</conversation>");
    out
}

/// The compacted history: the summary as one synthetic exchange, then `kept` verbatim.
pub fn rebuild(summary: &str, kept: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(kept.len() + 2);
    out.push(Message::user(format!("{SUMMARY_PREFIX}{summary}")));
    if kept.first().is_none_or(|m| m.role == Role::User) {
        out.push(Message {
            role: Role::Assistant,
            content: vec![Block::text(SUMMARY_ACK)],
        });
    }
    out.extend_from_slice(kept);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(id: &str) -> [Message; 2] {
        [
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolCall {
                    call_id: id.into(),
                    name: "t".into(),
                    arguments: Some(json!({})),
                    arguments_raw: None,
                }],
            },
            Message {
                role: Role::Tool,
                content: vec![Block::ToolResult {
                    call_id: id.into(),
                    name: "t".into(),
                    output: "ok".into(),
                    is_error: false,
                    parts: Vec::new(),
                }],
            },
        ]
    }

    #[test]
    fn the_cut_never_separates_a_call_from_its_results() {
        let mut h = vec![Message::user("a")];
        h.extend(step("1"));
        h.extend(step("2"));
        h.push(Message {
            role: Role::Assistant,
            content: vec![Block::text("done")],
        });
        // [user, call 1, results 1, call 2, results 2, answer]
        for keep in 1..=h.len() + 1 {
            let at = split_point(&h, keep);
            assert_ne!(h.get(at).map(|m| m.role), Some(Role::Tool), "keep {keep}");
            if at > 0 {
                let rebuilt = rebuild("s", &h[at..]);
                message::validate_history(&rebuilt).unwrap();
            }
        }
        assert_eq!(split_point(&h, 3), 3);
        // keep 4 would start at the results of call 1: moved back to the call.
        assert_eq!(split_point(&h, 4), 1);
        assert_eq!(split_point(&h, 100), 0);
    }

    #[test]
    fn rendering_cuts_long_entries() {
        let long = "x".repeat(MAX_ENTRY_BYTES + 10);
        let text = render(&[Message::user(long)]);
        assert!(text.contains("[…cut]"));
        assert!(text.len() < MAX_ENTRY_BYTES + 100);
    }

    #[test]
    fn estimate_is_bytes_over_four() {
        let h = vec![Message::user("hello")];
        let bytes = message::history_to_json(&h).len() as u64;
        assert_eq!(estimate_tokens(&h), bytes.div_ceil(4));
    }
}
