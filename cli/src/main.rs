//! `panto`: the command-line agent, written on the pull stream (`panto-pull`).
//!
//! ```text
//!  args (a bare `panto "hi"` is a run) ──► setup (config file profile, flags, env,
//!        key rule, tools, conversation file) ──► Agent
//!  run:  prompt (words, `-`, piped stdin + words) ──► turn ──► save ──► exit code
//!  chat: loop { prompt line (rustyline on a terminal) ──► turn ──► save }
//!  turn: stream.next() ─► render (json | human: answer on stdout, trace on stderr)
//!        tool_call_start{host} ─► [--confirm] ─► shell_tool thread ─► submit_tool_result
//!  failure ─► one line + a hint (hint) ─► exit code (exit)
//!  OTEL_EXPORTER_OTLP_ENDPOINT ─► telemetry: the turns' spans exported (parent:
//!                                 TRACEPARENT), flushed before the exit
//!  Ctrl-C (interrupt) ─► control.cancel() during a turn, exit 130 otherwise
//!                        (killing tool process groups, removing a half-written save)
//! ```

mod args;
mod chat;
mod checkpoint;
mod confirm;
mod exit;
mod hint;
mod interrupt;
mod mcp;
mod mcp_ask;
mod mcp_resources;
mod paths;
mod profile;
mod render;
mod sanitize;
mod session;
mod setup;
mod shell_tool;
mod telemetry;
mod turn;

use std::io::{self, IsTerminal, Read, Write};
use std::process::ExitCode;

use panto::{Error, Input};

use crate::args::{AgentArgs, Command, ResumeArgs, RunArgs};
use crate::checkpoint::CheckpointFile;
use crate::exit::{exit_code, OK, PAUSED, STDOUT_CLOSED};
use crate::interrupt::Interrupt;
use crate::render::{HumanOptions, Render};
use crate::setup::{Setup, Target};

fn main() -> ExitCode {
    let cli = match args::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        // Usage errors exit here with code 2 (clap's own), --help / --version with 0.
        Err(e) => e.exit(),
    };
    let json = match &cli.command {
        Command::Run(args) => args.agent.json,
        Command::Resume(args) => args.agent.json,
        Command::Chat(args) => args.json,
        Command::Tokens(args) => args.agent.json,
        Command::Completions { .. } | Command::Mcp(_) => false,
    };
    let interrupt = Interrupt::install(json);
    telemetry::start();
    let code = match cli.command {
        Command::Run(args) => run(args, &interrupt),
        Command::Resume(args) => resume(args, &interrupt),
        Command::Chat(args) => chat::chat(args, &interrupt),
        Command::Mcp(args::McpCommand::List(args)) => mcp::list(&args),
        Command::Mcp(args::McpCommand::Resources(args)) => mcp_resources::resources(&args),
        Command::Mcp(args::McpCommand::Read(args)) => mcp_resources::read(&args),
        Command::Mcp(args::McpCommand::Prompts(args)) => mcp_resources::prompts(&args),
        Command::Mcp(args::McpCommand::Prompt(args)) => mcp_resources::prompt(&args),
        Command::Tokens(args) => tokens(&args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut args::command(), "panto", &mut io::stdout());
            OK
        }
    };
    // MCP servers of the dropped agents are stopped on threads the exit would end.
    panto::mcp::wait_stopped(std::time::Duration::from_secs(5));
    telemetry::finish();
    ExitCode::from(code)
}

/// Reports failures with a hint, never showing an API key.
pub struct Reporter {
    pub out: Box<dyn Render>,
    json: bool,
    options: HumanOptions,
    secrets: Vec<String>,
    target: Option<Target>,
}

impl Reporter {
    pub fn new(args: &AgentArgs) -> Reporter {
        let options = HumanOptions {
            quiet: args.quiet,
            hide_reasoning: args.hide_reasoning,
            no_stream: args.no_stream,
            tools: false,
            structured: false,
        };
        // Every key this process could have read, whichever it ends up sending.
        let mut secrets: Vec<String> = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
            .iter()
            .filter_map(|var| std::env::var(var).ok())
            .collect();
        secrets.extend(args.api_key.clone());
        secrets.extend(
            args.api_key_env
                .as_ref()
                .and_then(|v| std::env::var(v).ok()),
        );
        Reporter {
            out: render::for_mode(args.json, options),
            json: args.json,
            options,
            secrets,
            target: None,
        }
    }

    /// The setup is known: errors now name its URL, and the output knows about tools.
    pub fn set_up(&mut self, setup: &Setup) {
        self.target = Some(setup.target.clone());
        self.secrets.push(setup.key.clone());
        self.options.tools =
            !setup.agent.config().tools.is_empty() || !setup.agent.config().mcp_servers.is_empty();
        self.out = render::for_mode(self.json, self.options);
    }

    /// Prints `error` (and what to do about it) and returns its exit code. Once stdout
    /// was found closed there is nobody reading: the end is quiet.
    pub fn fail(&mut self, error: Error) -> u8 {
        if render::stdout_closed() {
            return STDOUT_CLOSED;
        }
        let mut error = self.redact(error);
        let hint = self.target.as_ref().and_then(|t| hint::hint(&error, t));
        if let (false, Some(target)) = (self.json, &self.target) {
            error.message = hint::with_url(&error, target);
        }
        // If even the error cannot be written there is nobody left to tell.
        let _ = self.out.error(&error);
        if let Some(hint) = hint {
            let _ = self.out.hint(&self.redact_text(hint));
        }
        exit_code(error.kind)
    }

    /// A message on stderr (in every mode: stdout carries only the answer or events).
    pub fn note(&mut self, text: &str) {
        if !render::stdout_closed() {
            eprintln!("panto: {}", self.redact_text(text.to_owned()));
        }
    }

    pub fn warn(&mut self, error: Error) {
        let error = self.redact(error);
        let _ = self.out.warn(&error.message);
    }

    /// The core already redacts what it builds from server text; this second pass
    /// covers everything else (a key echoed in a path, in a session error, …).
    fn redact(&self, mut error: Error) -> Error {
        error.message = self.redact_text(error.message);
        if let Some(code) = error.provider_code.take() {
            error.provider_code = Some(self.redact_text(code));
        }
        if let Some(output) = error.output.take() {
            error.output = Some(Box::new(self.redact_text(*output)));
        }
        error
    }

    fn redact_text(&self, mut text: String) -> String {
        for secret in &self.secrets {
            if secret.len() >= 4 {
                text = text.replace(secret.as_str(), "[REDACTED]");
            }
        }
        text
    }
}

fn run(args: RunArgs, interrupt: &Interrupt) -> u8 {
    let mut report = Reporter::new(&args.agent);
    report.options.structured = args.schema.is_some();
    let schema = match args.schema.as_deref().map(read_schema).transpose() {
        Ok(schema) => schema,
        Err(e) => return report.fail(e),
    };
    let setup = match Setup::build(&args.agent) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    report.set_up(&setup);
    // Without --checkpoint, a conversation keeps its turn's checkpoint next to it. An
    // unfinished turn left there (a killed process, a pause) comes first, with or
    // without --checkpoint: a turn run past it would be replaced by the one resuming it.
    let conversation = match (&args.checkpoint, &setup.session) {
        (None, Some(session)) => Some(session.path().to_owned()),
        _ => None,
    };
    if let Some(session) = &setup.session {
        match checkpoint::unfinished(session.path()) {
            Ok(None) => {}
            Ok(Some((path, from))) => {
                let resumes = match &args.checkpoint {
                    Some(_) => Ok(false),
                    None => asks_nothing(&args),
                };
                return match resumes {
                    Ok(true) => {
                        let mut file = CheckpointFile::of_conversation(session.path());
                        let result = turn::resume(
                            &setup,
                            from,
                            panto::Answers::new(),
                            report.out.as_mut(),
                            interrupt,
                            Some(&mut file),
                        );
                        finish_conversation_turn(&mut report, &setup, result, &file)
                    }
                    Ok(false) => report.fail(unfinished_turn_error(&path)),
                    Err(e) => report.fail(e),
                };
            }
            Err(e) => return report.fail(e),
        }
    }
    let input = match prompt(&args.prompt).and_then(|p| attach(p, &args.attach, &setup)) {
        Ok(input) => input,
        Err(e) => return report.fail(e),
    };
    let options = panto::TurnOptions {
        output_schema: schema.map_or(panto::TurnSchema::Agent, panto::TurnSchema::Schema),
        ..panto::TurnOptions::default()
    };
    let mut file = match (&args.checkpoint, &conversation) {
        (Some(path), _) => Some(CheckpointFile::new(path)),
        (None, Some(conversation)) => Some(CheckpointFile::of_conversation(conversation)),
        (None, None) => None,
    };
    let result = turn::run(
        &setup,
        input,
        options,
        report.out.as_mut(),
        interrupt,
        file.as_mut(),
    );
    match (&conversation, &file) {
        (Some(_), Some(file)) => finish_conversation_turn(&mut report, &setup, result, file),
        _ => finish(&mut report, &setup, result),
    }
}

/// `panto tokens`: the count of the request a turn with the prompt would send.
fn tokens(args: &args::TokensArgs) -> u8 {
    let mut report = Reporter::new(&args.agent);
    let setup = match Setup::build(&args.agent) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    report.set_up(&setup);
    let count = prompt(&args.prompt)
        .and_then(|p| attach(p, &[], &setup))
        .and_then(|input| panto_pull::count_tokens(&setup.agent, input));
    match count {
        Ok(count) => {
            let line = if args.agent.json {
                count.to_json()
            } else if count.estimated {
                format!("{} (estimated)", count.tokens)
            } else {
                count.tokens.to_string()
            };
            let mut out = io::stdout().lock();
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return STDOUT_CLOSED;
            }
            OK
        }
        Err(e) => report.fail(e),
    }
}

/// Whether this run gives nothing to ask: no prompt words, no attachment, no schema,
/// and nothing piped on stdin (a terminal is not read). Such a run of a conversation
/// with an unfinished turn resumes it.
fn asks_nothing(args: &RunArgs) -> Result<bool, Error> {
    if !args.prompt.is_empty() || !args.attach.is_empty() || args.schema.is_some() {
        return Ok(false);
    }
    if io::stdin().is_terminal() {
        return Ok(true);
    }
    let piped = read_stdin(false)?;
    Ok(piped.piped.is_none() && piped.text.trim().is_empty())
}

/// The refusal of a new turn (a prompt, `chat`) on a conversation whose last turn is
/// unfinished.
pub fn unfinished_turn_error(path: &std::path::Path) -> Error {
    Error::config(format!(
        "the conversation's last turn did not finish (killed, or paused for an answer); \
         its checkpoint is {shown}. Finish it first: `panto -c` (or the same --session) \
         without a prompt resumes it, `panto resume {shown} --approve CALL_ID` answers a \
         paused call; or remove {shown} to drop that turn",
        shown = path.display()
    ))
}

/// [`finish`] for a turn whose checkpoint lives next to its conversation: the file is
/// kept while the turn is paused (a completed, failed or cancelled turn has left the
/// conversation valid and saved), and when this process never wrote it: a resume
/// refused before it started (a tool flag forgotten, a lower --max-steps) left the
/// history as it was, and the turn only in the file.
fn finish_conversation_turn(
    report: &mut Reporter,
    setup: &Setup,
    result: Result<turn::Ended, Error>,
    file: &CheckpointFile,
) -> u8 {
    let paused = matches!(result, Ok(turn::Ended::Paused { .. }));
    let code = finish(report, setup, result);
    if !paused && file.written() {
        let _ = std::fs::remove_file(file.path());
    }
    code
}

/// `panto resume FILE`: the turn of the checkpoint file, with the answers given, kept in
/// the same file as it goes on.
fn resume(args: ResumeArgs, interrupt: &Interrupt) -> u8 {
    let mut report = Reporter::new(&args.agent);
    let from = match checkpoint::read(&args.file) {
        Ok(from) => from,
        Err(e) => return report.fail(e),
    };
    let setup = match Setup::build(&args.agent) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    report.set_up(&setup);
    // With the conversation FILE belongs to (`--session`, `-c`), the turn is that
    // conversation's: saved there, and its file removed once the turn ends unpaused.
    // Another conversation's own unfinished turn comes first.
    let conversation = match &setup.session {
        Some(session) => match checkpoint::unfinished(session.path()) {
            Ok(None) => None,
            Ok(Some((path, _))) if same_file(&path, &args.file) => Some(session.path()),
            Ok(Some((path, _))) => return report.fail(unfinished_turn_error(&path)),
            Err(e) => return report.fail(e),
        },
        None => None,
    };
    let answers = checkpoint::answers(&args.approve, &args.reject, &args.result);
    let mut file = match conversation {
        Some(conversation) => CheckpointFile::of_conversation(conversation),
        None => CheckpointFile::new(&args.file),
    };
    let result = turn::resume(
        &setup,
        from,
        answers,
        report.out.as_mut(),
        interrupt,
        Some(&mut file),
    );
    match conversation {
        Some(_) => finish_conversation_turn(&mut report, &setup, result, &file),
        None => finish(&mut report, &setup, result),
    }
}

/// Whether two paths name the same existing file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Saves the conversation after a turn and picks the exit code.
fn finish(report: &mut Reporter, setup: &Setup, result: Result<turn::Ended, Error>) -> u8 {
    let saved = setup.save();
    match (result, saved) {
        (Ok(turn::Ended::Complete), Ok(())) => OK,
        (Ok(turn::Ended::Paused { calls, file }), Ok(())) => {
            // The turn is resumed with its conversation, so that it is saved there.
            let conversation = setup.session.as_ref().map(|s| s.path());
            report.note(&checkpoint::paused_note(&calls, &file, conversation));
            PAUSED
        }
        (Ok(_), Err(e)) | (Err(e), Ok(())) => report.fail(e),
        // The turn's failure is the one that explains the exit code.
        (Err(e), Err(save_error)) => {
            report.warn(save_error);
            report.fail(e)
        }
    }
}

/// The largest `--schema` file read (docs/cli.md): a schema is small, and this is no
/// place to read a mistaken multi-gigabyte path into memory.
const MAX_SCHEMA_BYTES: usize = 1 << 20;

/// `--schema FILE`: a JSON Schema object (whether the provider can take it is checked
/// when the turn starts, naming the keyword).
fn read_schema(path: &std::path::Path) -> Result<serde_json::Value, Error> {
    let shown = path.display();
    let bytes = panto::media::read_file(path, MAX_SCHEMA_BYTES, "--schema", "the --schema cap")?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::config(format!(
            "--schema {shown}: {}",
            panto::output::json_problem(&String::from_utf8_lossy(&bytes), &e)
        ))
    })?;
    if !value.is_object() {
        return Err(Error::config(format!(
            "--schema {shown}: must be a JSON Schema object"
        )));
    }
    Ok(value)
}

/// What stdin and the words of `run` give: text, and an attachment when stdin held a
/// recognised binary file.
struct Prompt {
    text: String,
    piped: Option<panto::Media>,
}

/// The prompt of `run`: the words joined; `-` (or no words) reads it from stdin; piped
/// stdin with words comes first, then the words, as other command-line LLM tools do.
/// Binary stdin (an image or a PDF, told by its bytes) is an attachment instead.
fn prompt(words: &[String]) -> Result<Prompt, Error> {
    if words.is_empty() || words == ["-"] {
        return read_stdin(true);
    }
    let words = words.join(" ");
    if io::stdin().is_terminal() {
        return Ok(Prompt {
            text: words,
            piped: None,
        });
    }
    // A stdin that cannot be read (closed by the parent) has nothing piped in; one that
    // holds binary data of no known type is an error.
    let mut bytes = Vec::new();
    let piped = match io::stdin().read_to_end(&mut bytes) {
        Ok(_) => classify_stdin(bytes)?,
        Err(_) => Prompt {
            text: String::new(),
            piped: None,
        },
    };
    if piped.piped.is_some() || piped.text.trim().is_empty() {
        return Ok(Prompt {
            text: words,
            piped: piped.piped,
        });
    }
    Ok(Prompt {
        text: format!("{}\n\n{words}", piped.text),
        piped: None,
    })
}

fn read_stdin(is_the_prompt: bool) -> Result<Prompt, Error> {
    let mut stdin = io::stdin();
    if is_the_prompt && stdin.is_terminal() {
        eprintln!("panto: reading the prompt from stdin (end it with Ctrl-D)");
    }
    let mut bytes = Vec::new();
    stdin
        .read_to_end(&mut bytes)
        .map_err(|e| Error::config(format!("cannot read stdin: {e}")))?;
    classify_stdin(bytes)
}

/// Stdin's bytes as the prompt's text, or as an attachment when they are an image or a
/// PDF; other binary data is a `config` error saying so.
fn classify_stdin(bytes: Vec<u8>) -> Result<Prompt, Error> {
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let bytes = e.into_bytes();
            return match panto::media::sniff(&bytes) {
                Some(_) => Ok(Prompt {
                    text: String::new(),
                    piped: Some(panto::Media::bytes(bytes, None)?.with_name("stdin")),
                }),
                None => Err(Error::config(format!(
                    "stdin holds {} bytes of binary data that is not a PNG, JPEG, GIF, WebP \
                     or PDF file, nor UTF-8 text; attach a file with -a",
                    bytes.len()
                ))),
            };
        }
    };
    // The newline `echo` or the terminal adds is not part of the prompt.
    Ok(Prompt {
        text: text.trim_end_matches(['\n', '\r']).to_owned(),
        piped: None,
    })
}

/// The turn's input: the prompt's text, then stdin's attachment, then each `-a` file (an
/// image or a PDF by its bytes; larger than the agent's `max_message_bytes` is refused
/// before it is read).
fn attach(prompt: Prompt, files: &[std::path::PathBuf], setup: &Setup) -> Result<Input, Error> {
    let nothing = prompt.text.trim().is_empty() && prompt.piped.is_none() && files.is_empty();
    if nothing {
        return Err(Error::config(
            "the prompt is empty: give PROMPT or pipe it on stdin",
        ));
    }
    let mut input = Input::new();
    if !prompt.text.trim().is_empty() {
        input = input.text(prompt.text);
    }
    let add = |input: Input, media: panto::Media| {
        if media.media_type() == Some("application/pdf") {
            input.document(media)
        } else {
            input.image(media)
        }
    };
    if let Some(media) = prompt.piped {
        input = add(input, media);
    }
    let max = setup.agent.config().max_message_bytes;
    for path in files {
        // Read bounded, whatever the metadata says: /dev/zero reports size 0.
        input = add(input, panto::Media::from_path_limited(path, max)?);
    }
    Ok(input)
}
