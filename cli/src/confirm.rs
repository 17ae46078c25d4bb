//! Owns `--confirm`: the question asked on the terminal before a tool call runs. It
//! talks to `/dev/tty`, not stdin or stdout, so it works while stdin is piped and stdout
//! is redirected. Without a terminal nobody is asked: `setup` declares the tools as
//! needing approval instead, so the turn pauses with the calls (`panto resume`).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::sanitize::clean;

/// One question (or one dialog of questions) on the terminal at a time: tool calls run
/// concurrently, and a `--confirm` question, an MCP server's sampling question and its
/// elicitation must not interleave their lines.
static TERMINAL: Mutex<()> = Mutex::new(());

/// Holds the terminal for one dialog (a panic elsewhere does not keep it locked).
pub fn hold_terminal() -> MutexGuard<'static, ()> {
    TERMINAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether there is a terminal to ask on (`/dev/tty` opens).
pub fn terminal_available() -> bool {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .is_ok()
}

/// `Ok(())` to run the call; otherwise the error result the model reads.
pub fn ask(name: &str, arguments: &Value) -> Result<(), String> {
    let _terminal = hold_terminal();
    let tty = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|_| {
            format!("not run: --confirm needs a terminal to ask whether to run {name:?}")
        })?;
    let mut writer = &tty;
    let question = format!(
        "run {} {}? [y/N] ",
        clean(name),
        clean(&arguments.to_string())
    );
    writer
        .write_all(question.as_bytes())
        .and_then(|()| writer.flush())
        .map_err(|e| format!("not run: cannot ask on the terminal: {e}"))?;
    let mut answer = String::new();
    BufReader::new(&tty)
        .read_line(&mut answer)
        .map_err(|e| format!("not run: cannot read the answer: {e}"))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(format!("the user declined to run {name:?}")),
    }
}
