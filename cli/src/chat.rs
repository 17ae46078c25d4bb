//! Owns `panto chat`: a conversation, one turn per message. On a terminal the prompt is
//! a line editor (rustyline): arrows, history kept across runs (`paths`), Ctrl-R search,
//! a bracketed paste or a `"""` block as one message; Ctrl-C clears the line or cancels
//! the running turn and never quits; Ctrl-D, `exit`, `quit`, `/exit` quit. Without a
//! terminal each line of stdin is a message and the first failure ends the program
//! with its exit code, as a script expects; so does a turn that pauses (exit code 8).

use std::fs::OpenOptions;
use std::io::{self, BufRead, IsTerminal, Write};
use std::path::Path;

use panto::{Error, ErrorKind};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Behavior, Config, Editor, Helper};

use crate::args::AgentArgs;
use crate::exit::{OK, PAUSED};
use crate::interrupt::Interrupt;
use crate::paths;
use crate::setup::Setup;
use crate::turn;
use crate::Reporter;

/// Opens and closes a multi-line message.
const BLOCK_FENCE: &str = "\"\"\"";
const HISTORY_ENTRIES: usize = 1000;

const CHAT_HELP: &str = "\
commands:
  /model NAME  use the model NAME for the next turns (the conversation is kept)
  /clear       forget the conversation (and empty its file)
  /save FILE   write the conversation to FILE (the format of --session)
  /compact [N] summarize the older conversation, keeping the last N messages (6)
  /help        this list
  /exit        leave (also: exit, quit, Ctrl-D)
keys:
  \"\"\"          on a line of its own starts a multi-line message; another ends it
  Ctrl-R       search the history of what you typed
  Ctrl-C       clear the line, or cancel the running turn (it never quits)";

/// One line of input, understood.
enum Input {
    Nothing,
    Exit,
    Help,
    Clear,
    Model(String),
    Save(String),
    Compact(usize),
    Unknown(String),
    Message(String),
}

fn understand(line: &str) -> Input {
    let trimmed = line.trim();
    if let Some(block) = trimmed.strip_prefix(BLOCK_FENCE) {
        let body = block.strip_suffix(BLOCK_FENCE).unwrap_or(block);
        let body = body.trim_matches('\n').to_owned();
        return if body.trim().is_empty() {
            Input::Nothing
        } else {
            Input::Message(body)
        };
    }
    // A command is one line; a pasted text that starts with a slash is a message.
    let command = !trimmed.contains('\n') && trimmed.starts_with('/');
    let (word, rest) = trimmed
        .split_once(char::is_whitespace)
        .unwrap_or((trimmed, ""));
    let rest = rest.trim();
    match (command, word) {
        _ if trimmed.is_empty() => Input::Nothing,
        (false, "exit" | "quit") if rest.is_empty() => Input::Exit,
        (false, _) => Input::Message(line.trim_end_matches(['\n', '\r']).to_owned()),
        (true, "/exit" | "/quit") => Input::Exit,
        (true, "/help" | "/?") => Input::Help,
        (true, "/clear") => Input::Clear,
        (true, "/model") if !rest.is_empty() => Input::Model(rest.to_owned()),
        (true, "/save") if !rest.is_empty() => Input::Save(rest.to_owned()),
        (true, "/model" | "/save") => Input::Unknown(format!("{word} needs an argument")),
        (true, "/compact") if rest.is_empty() => Input::Compact(panto::config::DEFAULT_KEEP_LAST),
        (true, "/compact") => match rest.parse::<usize>() {
            Ok(n) if n > 0 => Input::Compact(n),
            _ => Input::Unknown(format!(
                "/compact takes a number of messages to keep (got {rest:?})"
            )),
        },
        (true, _) => Input::Unknown(format!("unknown command {word} (/help lists them)")),
    }
}

pub fn chat(mut args: AgentArgs, interrupt: &Interrupt) -> u8 {
    args.interactive_chat = true;
    let mut report = Reporter::new(&args);
    let mut setup = match Setup::build(&args) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    report.set_up(&setup);
    // A conversation whose last turn is unfinished is finished first (`panto -c`): a
    // chat turn saved past it would be replaced by the resume of that turn.
    if let Some(session) = &setup.session {
        match crate::checkpoint::unfinished(session.path()) {
            Ok(None) => {}
            Ok(Some((path, _))) => return report.fail(crate::unfinished_turn_error(&path)),
            Err(e) => return report.fail(e),
        }
    }
    if io::stdin().is_terminal() {
        interactive(&mut setup, &mut report, interrupt)
    } else {
        scripted(&mut setup, &mut report, interrupt)
    }
}

/// What a turn or a command did, for the loop.
enum Outcome {
    Continue,
    Exit,
    Failed(Error),
    /// The turn paused for answers (`--confirm` with nobody to ask): what to tell the
    /// user. The chat ends there (exit code 8), as `run` does: a turn typed past it
    /// would be replaced by the resume of the paused one.
    Paused(String),
}

/// Runs one line's command or turn. With `lines` (the interactive chat), lines typed
/// while the turn runs steer it.
fn handle(
    input: Input,
    setup: &mut Setup,
    report: &mut Reporter,
    interrupt: &Interrupt,
    lines: Option<&mut turn::TypedLines>,
) -> Outcome {
    let result = match input {
        Input::Nothing => Ok(()),
        Input::Exit => return Outcome::Exit,
        Input::Help => {
            eprintln!("{CHAT_HELP}");
            Ok(())
        }
        Input::Clear => setup
            .agent
            .clear_history()
            .and_then(|()| setup.save())
            .map(|()| eprintln!("panto: the conversation is cleared")),
        Input::Model(model) => setup
            .switch_model(&model)
            .map(|()| eprintln!("panto: model {model} from the next turn on")),
        Input::Save(file) => {
            save_copy(setup, Path::new(&file)).map(|()| eprintln!("panto: saved to {file}"))
        }
        Input::Compact(keep_last) => compact(setup, keep_last, interrupt),
        Input::Unknown(why) => {
            eprintln!("panto: {why}");
            Ok(())
        }
        Input::Message(text) => {
            let turn = match lines {
                Some(lines) => {
                    turn::run_steered(setup, &text, report.out.as_mut(), interrupt, lines)
                }
                None => turn::run(
                    setup,
                    &text,
                    panto::TurnOptions::default(),
                    report.out.as_mut(),
                    interrupt,
                    None,
                ),
            };
            match (turn, setup.save()) {
                (Ok(turn::Ended::Paused { calls, file }), Ok(())) => {
                    let conversation = setup.session.as_ref().map(|s| s.path());
                    return Outcome::Paused(crate::checkpoint::paused_note(
                        &calls,
                        &file,
                        conversation,
                    ));
                }
                (Ok(_), saved) => saved,
                (Err(e), Ok(())) => Err(e),
                (Err(e), Err(save_error)) => {
                    report.warn(save_error);
                    Err(e)
                }
            }
        }
    };
    match result {
        Ok(()) => Outcome::Continue,
        Err(e) => Outcome::Failed(e),
    }
}

/// `/compact N`: summarizes what is older than the last `keep_last` messages with the
/// conversation's own model; Ctrl-C cancels it and leaves the conversation as it was.
fn compact(setup: &mut Setup, keep_last: usize, interrupt: &Interrupt) -> Result<(), Error> {
    eprintln!("panto: compacting the conversation…");
    let cancel = panto::CancellationToken::new();
    interrupt.begin_compact(cancel.clone());
    let options = panto::CompactOptions {
        keep_last,
        ..Default::default()
    };
    let result = panto_pull::compact_cancellable(&setup.agent, &options, &cancel);
    interrupt.idle();
    let done = result?;
    if !done.changed {
        eprintln!(
            "panto: nothing to compact ({} messages, the last {keep_last} are kept)",
            done.messages_before
        );
        return Ok(());
    }
    setup.save()?;
    eprintln!("panto: {}", crate::render::compacted_note(&done));
    Ok(())
}

/// `/save FILE`: a private copy of the conversation, in the `--session` format.
fn save_copy(setup: &Setup, path: &Path) -> Result<(), Error> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut file| file.write_all(setup.agent.history_json().as_bytes()))
        .map_err(|e| Error::config(format!("/save {}: {e}", path.display())))
}

fn scripted(setup: &mut Setup, report: &mut Reporter, interrupt: &Interrupt) -> u8 {
    let mut stdin = io::stdin().lock();
    loop {
        interrupt.idle();
        let mut line = Vec::new();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => return OK,
            Ok(_) => {}
            Err(e) => return report.fail(Error::config(format!("cannot read stdin: {e}"))),
        }
        let line = String::from_utf8_lossy(&line);
        match handle(understand(&line), setup, report, interrupt, None) {
            Outcome::Continue => {}
            Outcome::Exit => return OK,
            Outcome::Failed(e) => return report.fail(e),
            Outcome::Paused(note) => {
                report.note(&note);
                return PAUSED;
            }
        }
    }
}

fn interactive(setup: &mut Setup, report: &mut Reporter, interrupt: &Interrupt) -> u8 {
    // At the prompt the line editor owns Ctrl-C; a signal between two turns (while
    // saving) must not end the conversation either.
    interrupt.keep_running_when_idle();
    let mut editor = match editor() {
        Ok(editor) => editor,
        Err(e) => return report.fail(Error::config(format!("cannot set up the prompt: {e}"))),
    };
    let history = paths::chat_history_file();
    let keep_history = history
        .parent()
        .is_some_and(|dir| paths::create_private_dir(dir).is_ok());
    if keep_history {
        let _ = editor.load_history(&history);
    }
    eprintln!("{}", greeting(setup));
    let mut typed = turn::TypedLines::default();
    loop {
        interrupt.idle();
        let line = match editor.readline("> ") {
            Ok(line) => line,
            // Ctrl-C clears the line; the editor already moved to a fresh one.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => return OK,
            Err(e) => return report.fail(Error::config(format!("cannot read the prompt: {e}"))),
        };
        if !line.trim().is_empty() {
            let _ = editor.add_history_entry(line.as_str());
            if keep_history {
                let _ = editor.append_history(&history);
                private(&history);
            }
        }
        match handle(
            understand(&line),
            setup,
            report,
            interrupt,
            Some(&mut typed),
        ) {
            Outcome::Continue => {}
            Outcome::Exit => return OK,
            Outcome::Paused(note) => {
                report.note(&note);
                return PAUSED;
            }
            // The conversation goes on after a failed or cancelled turn.
            Outcome::Failed(e) => {
                if e.kind == ErrorKind::Cancelled {
                    eprintln!("panto: cancelled");
                } else {
                    report.fail(e);
                }
            }
        }
    }
}

/// What you typed may be as private as the conversation.
fn private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

fn editor() -> rustyline::Result<Editor<ChatHelper, FileHistory>> {
    let config = Config::builder()
        // The terminal itself, so the prompt works with stdout redirected.
        .behavior(Behavior::PreferTerm)
        .auto_add_history(false)
        .history_ignore_dups(true)?
        .history_ignore_space(true)
        .max_history_size(HISTORY_ENTRIES)?
        .bracketed_paste(true)
        .build();
    let mut editor = Editor::with_config(config)?;
    editor.set_helper(Some(ChatHelper));
    Ok(editor)
}

/// The startup line: what answers, and which conversation this is.
fn greeting(setup: &Setup) -> String {
    let config = setup.agent.config();
    let messages = setup.agent.history().len();
    let conversation = match (&setup.session, messages) {
        (_, 0) => "new conversation".to_owned(),
        (_, 1) => "resumed 1 message".to_owned(),
        (_, n) => format!("resumed {n} messages"),
    };
    let profile = setup
        .target
        .profile
        .as_ref()
        .map_or_else(String::new, |p| format!(" (profile {p})"));
    format!(
        "panto chat · {}{profile} at {} · {conversation} · /help for commands",
        config.model, config.base_url
    )
}

/// Tells the line editor that an open `"""` block continues on the next line.
struct ChatHelper;

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        let input = ctx.input().trim_start();
        let open = input
            .strip_prefix(BLOCK_FENCE)
            .is_some_and(|body| !body.contains(BLOCK_FENCE));
        Ok(if open {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Completer for ChatHelper {
    type Candidate = String;
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Helper for ChatHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_understood() {
        assert!(matches!(understand("exit\n"), Input::Exit));
        assert!(matches!(understand("  quit "), Input::Exit));
        assert!(matches!(understand("/exit"), Input::Exit));
        assert!(matches!(understand("exit the loop"), Input::Message(_)));
        assert!(matches!(understand("/model gpt-4o"), Input::Model(m) if m == "gpt-4o"));
        assert!(matches!(understand("/save a.json"), Input::Save(f) if f == "a.json"));
        assert!(matches!(understand("/model"), Input::Unknown(_)));
        assert!(matches!(understand("/nope"), Input::Unknown(_)));
        assert!(matches!(
            understand("/etc/passwd\nexplain"),
            Input::Message(_)
        ));
        assert!(
            matches!(understand("\"\"\"\nline one\nline two\n\"\"\""), Input::Message(m) if m == "line one\nline two")
        );
        assert!(matches!(understand("   "), Input::Nothing));
    }
}
