//! Owns the turn's checkpoint file: `run --checkpoint FILE` keeps the turn's latest
//! checkpoint there, replaced atomically with mode 0600 at each step boundary; `resume
//! FILE` reads it back with the answers of `--approve`, `--reject` and `--result`, and
//! goes on keeping it. A paused turn (a call waiting for approval) leaves it for
//! `panto resume`.
//!
//! When it is written: the core's ordering rule is that once a `tool_result`, or the
//! first event after a response's `message_end`, has been pulled, the checkpoint
//! includes that result or that response. So the file is written after the turn's first
//! event (its input is in), after the first event following each `message_end`, after
//! each `tool_result` and `steering_delivered`, and after the last event. A process
//! killed at any moment leaves the latest of those, from which `resume` never asks the
//! model again for a response it holds (a tool call without a result runs again).
//!
//! A run with a conversation file (`--session`, `-c`, or the new conversation each run
//! gets) and no `--checkpoint` keeps its checkpoint next to the conversation
//! (`CONVERSATION.checkpoint`) while the turn runs, and removes it when the turn ends
//! other than paused. A file left there is the conversation's unfinished turn: a
//! process killed mid-turn, or a turn paused for an answer. `panto -c` (or `--session`)
//! without a prompt resumes it; with a prompt it is refused until the turn is finished
//! (or its file removed), so that no turn is lost.

use std::path::{Path, PathBuf};

use panto::{Answers, Checkpoint, Error, Event, ToolOutput};
use panto_pull::Stream;

/// The largest checkpoint file read (the core's own limit on a document).
const MAX_BYTES: u64 = panto::turn::MAX_CHECKPOINT_BYTES as u64;

/// Where the turn's checkpoint is kept, and what was last written there.
pub struct CheckpointFile {
    path: PathBuf,
    last: Option<String>,
    /// The next event is the first after a `message_end` (or the turn's first).
    boundary: bool,
    /// The conversation to remember as the last one (for `-c`) once the file exists:
    /// a process killed mid-turn has not saved its conversation yet.
    conversation: Option<PathBuf>,
}

impl CheckpointFile {
    pub fn new(path: &Path) -> CheckpointFile {
        CheckpointFile {
            path: path.to_owned(),
            last: None,
            boundary: true,
            conversation: None,
        }
    }

    /// The file of a conversation's unfinished turn ([`conversation_path`]): its first
    /// write makes `conversation` the one `-c` continues.
    pub fn of_conversation(conversation: &Path) -> CheckpointFile {
        CheckpointFile {
            conversation: Some(conversation.to_owned()),
            ..CheckpointFile::new(&conversation_path(conversation))
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this process wrote the file (the turn started and got this far).
    pub fn written(&self) -> bool {
        self.last.is_some()
    }

    /// Called with each event pulled from `stream`, after it was pulled: writes the
    /// checkpoint when `event` is at or after a step boundary.
    pub fn after(&mut self, stream: &Stream, event: &Event) -> Result<(), Error> {
        let write = self.boundary
            || event.is_terminal()
            || matches!(
                event,
                Event::ToolResult { .. } | Event::SteeringDelivered { .. }
            );
        self.boundary = matches!(event, Event::MessageEnd { .. });
        if write {
            self.write(stream)?;
        }
        Ok(())
    }

    /// Writes the stream's latest checkpoint, unless it is the one written last.
    pub fn write(&mut self, stream: &Stream) -> Result<(), Error> {
        let Some(checkpoint) = stream.checkpoint() else {
            return Ok(());
        };
        let json = checkpoint.to_json();
        if self.last.as_deref() == Some(json.as_str()) {
            return Ok(());
        }
        crate::session::replace_privately(&self.path, json.as_bytes()).map_err(|e| {
            Error::config(format!(
                "--checkpoint {}: cannot write: {e}",
                self.path.display()
            ))
        })?;
        self.last = Some(json);
        if let Some(conversation) = self.conversation.take() {
            crate::setup::remember_last(&conversation);
        }
        Ok(())
    }
}

/// Where a conversation keeps the checkpoint of its unfinished turn:
/// `CONVERSATION.checkpoint`, next to it.
pub fn conversation_path(conversation: &Path) -> PathBuf {
    let mut name = conversation.as_os_str().to_owned();
    name.push(".checkpoint");
    PathBuf::from(name)
}

/// The conversation's unfinished turn, if it has one: its checkpoint file holds a turn
/// that did not end (a process killed mid-turn, or a turn paused for an answer). A
/// file that holds an ended turn is left over and removed. An unreadable one is a
/// `config` error naming it.
pub fn unfinished(conversation: &Path) -> Result<Option<(PathBuf, Checkpoint)>, Error> {
    let path = conversation_path(conversation);
    if !path.exists() {
        return Ok(None);
    }
    let checkpoint = read(&path).map_err(|e| {
        Error::config(format!(
            "the conversation's unfinished turn: {}; remove the file to drop the turn",
            e.message
        ))
    })?;
    if checkpoint.is_finished() {
        let _ = std::fs::remove_file(&path);
        return Ok(None);
    }
    Ok(Some((path, checkpoint)))
}

/// Where a paused turn run without `--checkpoint` leaves its checkpoint: next to its
/// conversation file (`CONVERSATION.checkpoint`), else in the state directory.
pub fn paused_path(setup: &crate::setup::Setup) -> PathBuf {
    if let Some(session) = &setup.session {
        return conversation_path(session.path());
    }
    let dir = crate::paths::state_dir();
    let _ = crate::paths::create_private_dir(&dir);
    dir.join(format!("paused-{}.checkpoint", std::process::id()))
}

/// What to tell the user about a paused turn: each call, and the command that goes on
/// (with `--session CONVERSATION` for a conversation's turn, which is saved there).
pub fn paused_note(
    calls: &[panto::DeferredCall],
    file: &Path,
    conversation: Option<&Path>,
) -> String {
    use crate::sanitize::clean;
    let mut note = String::from("the turn paused; these calls wait for an answer:\n");
    for c in calls {
        note.push_str(&format!(
            "  {} {} {} ({})\n",
            clean(&c.call_id),
            clean(&c.name),
            clean(&c.arguments.to_string()),
            match c.reason {
                panto::DeferReason::Approval => "needs approval",
                panto::DeferReason::External => "external",
                panto::DeferReason::Deferred => "deferred",
            }
        ));
    }
    let first = calls.first().map_or("CALL_ID", |c| c.call_id.as_str());
    let session = conversation.map_or_else(String::new, |c| format!(" --session {}", c.display()));
    note.push_str(&format!(
        "continue with: panto resume {} --approve {}{session} (or --reject {}=REASON), with the same tool flags",
        file.display(),
        clean(first),
        clean(first)
    ));
    note
}

/// Reads the checkpoint of `resume FILE`: `config` errors name the file and the problem.
/// Only a regular file is read (opened without waiting, so that a FIFO cannot hold the
/// process, nor a device feed it without end), and at most [`MAX_BYTES`] of it.
pub fn read(path: &Path) -> Result<Checkpoint, Error> {
    use std::io::Read;
    let shown = path.display();
    let fail = |e: std::io::Error| Error::config(format!("{shown}: {e}"));
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.is_file() {
        return Err(Error::config(format!(
            "{shown}: not a regular file (a checkpoint is a file panto wrote)"
        )));
    }
    let size = meta.len();
    if size > MAX_BYTES {
        return Err(Error::config(format!(
            "{shown}: {size} bytes, more than a checkpoint may have ({MAX_BYTES})"
        )));
    }
    let mut text = String::new();
    file.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(fail)?;
    Checkpoint::from_json(&text).map_err(|e| Error::config(format!("{shown}: {}", e.message)))
}

/// The answers of `--approve ID`, `--reject ID=REASON` and `--result ID=TEXT`.
pub fn answers(
    approve: &[String],
    reject: &[(String, String)],
    result: &[(String, String)],
) -> Answers {
    let mut answers = Answers::new();
    for id in approve {
        answers = answers.approve(id);
    }
    for (id, reason) in reject {
        answers = answers.reject(id, reason);
    }
    for (id, text) in result {
        answers = answers.result(id, ToolOutput::ok(text.clone()));
    }
    answers
}
