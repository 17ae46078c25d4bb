//! Owns what the user sees: `--json` (one canonical JSON line per event, a final error
//! line on failure) and the human output: the answer on stdout, and on stderr the
//! trace (labelled reasoning, tool lines, retries, a spinner while waiting, usage).
//!
//! Everything the human output shows that came from the server, the model or a tool
//! goes through [`crate::sanitize`] first: only panto's own attributes reach the
//! terminal as escape sequences. `--json` needs no such pass: JSON escaping already
//! encodes every control character, and its lines stay byte-exact.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use panto::{DeltaKind, Error, Event, StopReason, Usage};

use crate::sanitize::{clean, Sanitizer};

/// How often the spinner advances; also how long the turn loop waits for an event
/// before redrawing it.
const SPINNER_TICK: Duration = Duration::from_millis(80);
const SPINNER_FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// Tool output lines shown before the rest is summarized.
const RESULT_LINES: usize = 4;
/// Longest tool argument / output line shown, in characters.
const LINE_CHARS: usize = 200;

const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const CYAN: &str = "\x1b[36m";
const RED: &str = "\x1b[31m";
const MAGENTA: &str = "\x1b[35m";
const CLEAR_LINE: &str = "\r\x1b[2K";

/// An output mode. Write errors are returned so the turn can stop (stdout closed).
pub trait Render {
    /// A turn begins.
    fn turn_start(&mut self) -> io::Result<()>;
    fn event(&mut self, event: &Event) -> io::Result<()>;
    /// How long to wait for an event before calling [`Render::tick`]; `None` when
    /// nothing is animated.
    fn tick_interval(&self) -> Option<Duration>;
    /// Called after every wait for an event, whether one arrived or not.
    fn tick(&mut self) -> io::Result<()>;
    /// The command failed: the turn, or what came before it.
    fn error(&mut self, error: &Error) -> io::Result<()>;
    /// A problem worth telling but not failing for (stderr).
    fn warn(&mut self, message: &str) -> io::Result<()>;
    /// A line about what panto did for the user, on stderr (not with --quiet).
    fn notice(&mut self, text: &str) -> io::Result<()>;
    /// What to do about the error just reported (stderr).
    fn hint(&mut self, hint: &str) -> io::Result<()>;
}

pub fn for_mode(json: bool, options: HumanOptions) -> Box<dyn Render> {
    if json {
        Box::new(Json)
    } else {
        Box::new(Human::new(options))
    }
}

/// Whether the `--json` error line that ends stdout was written (see
/// [`write_exit_line`]); cleared by [`new_final_line`].
static FINAL_LINE_WRITTEN: AtomicBool = AtomicBool::new(false);

/// A new turn or prompt begins: its failure gets its own final error line.
pub fn new_final_line() {
    FINAL_LINE_WRITTEN.store(false, Ordering::SeqCst);
}

/// On a forced exit in `--json` mode (a second Ctrl-C, or one at the prompt): ends
/// stdout with the `cancelled` error line unless the main thread already wrote the final
/// error line. Waits at most `patience` for stdout, which the main thread may hold
/// forever when the consumer stopped reading.
pub fn write_exit_line(patience: Duration) {
    let (done, wait) = mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("exit-line".to_owned())
        .spawn(move || {
            let mut out = io::stdout().lock();
            if !FINAL_LINE_WRITTEN.swap(true, Ordering::SeqCst) {
                let _ = writeln!(out, "{}", Error::cancelled().to_json());
                let _ = out.flush();
            }
            let _ = done.send(());
        });
    if writer.is_ok() {
        let _ = wait.recv_timeout(patience);
    }
}

fn error_line(error: &Error) -> String {
    // The message often quotes the server; the kind is panto's own.
    let mut line = format!("panto: error[{}]: {}", error.kind, clean(&error.message));
    if error.status != 0 && !error.message.contains(&error.status.to_string()) {
        line.push_str(&format!(" (HTTP {})", error.status));
    }
    line
}

/// `--json`: stdout carries exactly the canonical JSON lines.
struct Json;

impl Json {
    fn line(&self, json: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(json.as_bytes()).map_err(note_stdout_error)?;
        out.write_all(b"\n").map_err(note_stdout_error)?;
        // Consumers read line by line while the turn runs.
        out.flush().map_err(note_stdout_error)
    }
}

impl Render for Json {
    fn turn_start(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn event(&mut self, event: &Event) -> io::Result<()> {
        self.line(&event.to_json())
    }
    fn tick_interval(&self) -> Option<Duration> {
        None
    }
    fn tick(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn error(&mut self, error: &Error) -> io::Result<()> {
        // stderr too: a person running a script sees why it failed without parsing.
        let _ = writeln!(io::stderr(), "{}", error_line(error));
        let mut out = io::stdout().lock();
        // Under the stdout lock, so a forced exit never writes a second final line.
        FINAL_LINE_WRITTEN.store(true, Ordering::SeqCst);
        out.write_all(error.to_json().as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()
    }
    fn warn(&mut self, message: &str) -> io::Result<()> {
        writeln!(io::stderr(), "panto: warning: {}", clean(message))
    }
    fn notice(&mut self, text: &str) -> io::Result<()> {
        writeln!(io::stderr(), "{}", clean(text))
    }
    fn hint(&mut self, hint: &str) -> io::Result<()> {
        writeln!(io::stderr(), "hint: {}", clean(hint))
    }
}

/// How the human output behaves (the flags that shape it).
#[derive(Debug, Clone, Copy, Default)]
pub struct HumanOptions {
    /// `-q`: the answer and errors only.
    pub quiet: bool,
    pub hide_reasoning: bool,
    /// `--no-stream`: the final answer, once complete.
    pub no_stream: bool,
    /// Host tools are declared, so a turn may have several messages.
    pub tools: bool,
    /// `run --schema`: stdout gets the validated output, as one line of JSON, instead
    /// of the streamed text.
    pub structured: bool,
}

/// Set when stdout turned out closed (`panto … | head`): the program then ends quietly.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether a write to stdout found it closed.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::SeqCst)
}

fn note_stdout_error(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        STDOUT_CLOSED.store(true, Ordering::SeqCst);
    }
    e
}

/// The line that tells what a compaction did (automatic, or `/compact`).
pub fn compacted_note(c: &panto::Compaction) -> String {
    format!(
        "compacted the conversation: {} → {} messages, about {} → {} tokens",
        c.messages_before, c.messages_after, c.tokens_before, c.tokens_after
    )
}

/// Colours and animation are allowed: `NO_COLOR` (any non-empty value) and `TERM=dumb`
/// turn them off.
pub fn decorations_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    !no_color && !dumb
}

/// Human output. stdout carries the answer and nothing else; everything else (tool
/// lines, reasoning, retries, spinner, usage) goes to stderr, or nowhere with `-q`. On
/// a terminal: colours, labelled and dimmed reasoning, usage, a spinner.
///
/// When stdout is not a terminal and tools are declared, a message's text is held until
/// the message ends: text the model wrote before calling tools goes to stderr with the
/// trace, so stdout ends up holding only the final answer.
struct Human {
    options: HumanOptions,
    /// Colours on stderr (the answer on stdout is never painted).
    err_color: bool,
    /// stdout and stderr are the same terminal: they share the cursor.
    shared_screen: bool,
    /// The spinner may be drawn on stderr.
    spinner: bool,
    /// The last byte written to stdout / stderr ended a line.
    out_at_line_start: bool,
    err_at_line_start: bool,
    /// Reasoning text is being streamed (on stderr).
    in_reasoning: bool,
    /// The answer is held (see the type's documentation) in `held`.
    hold_answer: bool,
    held: String,
    /// Waiting for the model or for tools: the spinner may run.
    waiting: bool,
    spinner_shown: bool,
    frame: usize,
    /// When the spinner last advanced (events arriving faster than the tick, such as
    /// tool-argument fragments, must not freeze it).
    last_frame: Instant,
    tools_running: usize,
    /// The latest progress of a running tool (its call id and the line to show), drawn
    /// in place of the spinner's label on a terminal.
    progress: Option<(String, String)>,
    /// Filters streamed text and reasoning; its state spans fragments, so an escape
    /// sequence split between two deltas is still removed.
    filter: Sanitizer,
    /// The kind of delta `filter` is in the middle of.
    filtering: Option<DeltaKind>,
}

impl Human {
    fn new(options: HumanOptions) -> Human {
        let out_tty = io::stdout().is_terminal();
        let err_tty = io::stderr().is_terminal();
        let decorations = decorations_allowed();
        Human {
            options,
            err_color: err_tty && decorations,
            shared_screen: out_tty && err_tty,
            spinner: err_tty && decorations && !options.quiet,
            out_at_line_start: true,
            err_at_line_start: true,
            in_reasoning: false,
            hold_answer: options.no_stream || options.structured || (!out_tty && options.tools),
            held: String::new(),
            waiting: false,
            spinner_shown: false,
            frame: 0,
            last_frame: Instant::now(),
            tools_running: 0,
            progress: None,
            filter: Sanitizer::new(),
            filtering: None,
        }
    }

    fn paint(&self, color: &str, text: &str) -> String {
        if self.err_color {
            format!("{color}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    fn clear_spinner(&mut self) -> io::Result<()> {
        if self.spinner_shown {
            self.spinner_shown = false;
            let _ = io::stderr().write_all(CLEAR_LINE.as_bytes());
        }
        Ok(())
    }

    fn ended_line(&mut self, stdout: bool, text: &str) {
        let at_start = text.ends_with('\n');
        if stdout || self.shared_screen {
            self.out_at_line_start = at_start;
        }
        if !stdout || self.shared_screen {
            self.err_at_line_start = at_start;
        }
    }

    /// Writes answer text to stdout as it is.
    fn answer(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.clear_spinner()?;
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes()).map_err(note_stdout_error)?;
        // Streamed fragments rarely end a line; show them now.
        out.flush().map_err(note_stdout_error)?;
        drop(out);
        self.ended_line(true, text);
        Ok(())
    }

    /// Writes trace text to stderr. A closed or failing stderr loses the trace only: the
    /// answer still matters.
    fn trace(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let _ = self.clear_spinner();
        let mut err = io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
        drop(err);
        self.ended_line(false, text);
    }

    /// A terminal attribute on stderr: invisible, so the line position stays as it is.
    fn attribute(&mut self, code: &str) {
        let _ = io::stderr().write_all(code.as_bytes());
    }

    /// Makes sure the next stderr line starts at the left edge of its screen.
    fn trace_line_start(&mut self) {
        if !self.err_at_line_start || (self.shared_screen && !self.out_at_line_start) {
            self.trace("\n");
        }
    }

    /// Prints a whole line on stderr, unless quiet.
    fn note(&mut self, text: &str) -> io::Result<()> {
        if self.options.quiet {
            return Ok(());
        }
        self.warning(text)
    }

    /// Prints a whole line on stderr, even when quiet.
    fn warning(&mut self, text: &str) -> io::Result<()> {
        let _ = self.clear_spinner();
        self.leave_reasoning()?;
        self.trace_line_start();
        self.trace(&format!("{text}\n"));
        Ok(())
    }

    fn filtered(&mut self, kind: DeltaKind, text: &str) -> String {
        if self.filtering != Some(kind) {
            let mut rest = self.end_filtered();
            self.filtering = Some(kind);
            self.filter.push(text, &mut rest);
            return rest;
        }
        let mut safe = String::with_capacity(text.len());
        self.filter.push(text, &mut safe);
        safe
    }

    /// The streamed block ended: what the filter held back, so an unfinished sequence
    /// cannot swallow what follows.
    fn end_filtered(&mut self) -> String {
        let mut rest = String::new();
        if self.filtering.take().is_some() {
            self.filter.finish(&mut rest);
        }
        rest
    }

    /// Writes what the filter held back to where its kind of text goes.
    fn flush_filtered(&mut self) -> io::Result<()> {
        let kind = self.filtering;
        let rest = self.end_filtered();
        match kind {
            Some(DeltaKind::Text) => self.answer_text(&rest),
            Some(DeltaKind::Reasoning) => {
                self.trace(&rest);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn answer_text(&mut self, safe: &str) -> io::Result<()> {
        if self.hold_answer {
            self.held.push_str(safe);
            Ok(())
        } else {
            self.answer(safe)
        }
    }

    fn leave_reasoning(&mut self) -> io::Result<()> {
        self.flush_filtered()?;
        if self.in_reasoning {
            self.in_reasoning = false;
            if self.err_color {
                self.attribute(RESET);
            }
            self.trace_line_start();
        }
        Ok(())
    }

    fn delta(&mut self, kind: DeltaKind, text: &str) -> io::Result<()> {
        match kind {
            DeltaKind::Text => {
                self.waiting = false;
                if self.in_reasoning {
                    self.leave_reasoning()?;
                }
                let safe = self.filtered(kind, text);
                self.answer_text(&safe)
            }
            DeltaKind::Reasoning if !(self.options.quiet || self.options.hide_reasoning) => {
                self.waiting = false;
                if !self.in_reasoning {
                    self.flush_filtered()?;
                    self.trace_line_start();
                    let label = self.paint(MAGENTA, "thinking:");
                    self.trace(&format!("{label}\n"));
                    self.in_reasoning = true;
                    if self.err_color {
                        self.attribute(DIM);
                    }
                }
                let safe = self.filtered(kind, text);
                self.trace(&safe);
                Ok(())
            }
            // Arguments are shown whole when the call starts.
            _ => Ok(()),
        }
    }

    /// The text of a message that called tools, held back from stdout: part of the trace.
    fn release_held_as_trace(&mut self) {
        let held = std::mem::take(&mut self.held);
        if !self.options.quiet && !held.trim().is_empty() {
            self.trace_line_start();
            self.trace(held.trim_end());
            self.trace("\n");
        }
    }

    /// `arguments` is the JSON text of the call's arguments as the model gave them.
    fn tool_call(&mut self, name: &str, arguments: &str) -> io::Result<()> {
        self.tools_running += 1;
        self.waiting = true;
        // serde_json escapes C0 controls in strings, but not DEL or C1.
        let args = shorten(&clean(arguments), LINE_CHARS);
        let head = self.paint(CYAN, &format!("→ {}", clean(name)));
        self.note(&format!("{head} {args}"))
    }

    /// A running tool's progress: on a terminal, the spinner's line shows it (replaced
    /// by each update); elsewhere one line per update (at most ten a second per call:
    /// the core coalesces them).
    fn tool_progress(&mut self, call_id: &str, line: String) -> io::Result<()> {
        if self.spinner {
            self.progress = Some((call_id.to_owned(), line));
            // Drawn now, not at the next tick, so a quick update is seen.
            let now = Instant::now();
            self.last_frame = now.checked_sub(SPINNER_TICK).unwrap_or(now);
            self.tick()
        } else {
            self.note(&line)
        }
    }

    fn tool_result(&mut self, name: &str, output: &str, is_error: bool) -> io::Result<()> {
        self.tools_running = self.tools_running.saturating_sub(1);
        self.waiting = true;
        let name = clean(name);
        let head = if is_error {
            self.paint(RED, &format!("✗ {name}:"))
        } else {
            self.paint(CYAN, &format!("← {name}:"))
        };
        let lines: Vec<&str> = output.lines().collect();
        let mut text = match lines.first() {
            None => format!("{head} (no output)"),
            Some(first) => format!("{head} {}", shorten(&clean(first), LINE_CHARS)),
        };
        for l in lines.iter().skip(1).take(RESULT_LINES - 1) {
            text.push_str(&format!("\n  {}", shorten(&clean(l), LINE_CHARS)));
        }
        if lines.len() > RESULT_LINES {
            let more = lines.len() - RESULT_LINES;
            text.push_str(&self.paint(DIM, &format!("\n  … ({more} more lines)")));
        }
        self.note(&text)
    }

    fn complete(
        &mut self,
        stop_reason: &StopReason,
        usage: &Usage,
        text: &str,
        output: Option<&panto::JsonText>,
    ) -> io::Result<()> {
        self.waiting = false;
        self.clear_spinner()?;
        self.leave_reasoning()?;
        if let (true, Some(output)) = (self.options.structured, output) {
            // One line of JSON: its escaping already encodes every control character,
            // and U+2028/U+2029 are escaped as in the --json lines.
            self.held.clear();
            let line = panto::event::escape_line_separators(output.to_string());
            self.answer(&format!("{line}\n"))?;
        } else if self.hold_answer {
            self.held.clear();
            let mut safe = String::with_capacity(text.len());
            let mut filter = Sanitizer::new();
            filter.push(text, &mut safe);
            filter.finish(&mut safe);
            self.answer(&safe)?;
        }
        if !self.out_at_line_start {
            self.answer("\n")?;
        }
        if let Some(why) = unusual_stop(stop_reason) {
            self.warning(&format!("panto: {why}"))?;
        }
        if self.err_color && !self.options.quiet {
            let usage = usage_line(usage);
            self.trace(&format!("{DIM}{usage}{RESET}\n"));
        }
        Ok(())
    }
}

/// The turn's token counts for the trace; usage the server did not report is said to be
/// unknown rather than shown as 0.
fn usage_line(usage: &Usage) -> String {
    let counts = format!(
        "tokens: in {}, out {}",
        usage.input_tokens, usage.output_tokens
    );
    if usage.reported {
        counts
    } else if usage.input_tokens == 0 && usage.output_tokens == 0 {
        "tokens: not reported by the server".into()
    } else {
        format!("{counts} (some responses not reported by the server)")
    }
}

impl Render for Human {
    fn turn_start(&mut self) -> io::Result<()> {
        self.waiting = true;
        self.tools_running = 0;
        self.progress = None;
        self.frame = 0;
        self.held.clear();
        self.last_frame = Instant::now();
        Ok(())
    }

    fn event(&mut self, event: &Event) -> io::Result<()> {
        match event {
            Event::ContentDelta { kind, text, .. } => self.delta(*kind, text),
            // Also ends the filter: a sequence left open in a block dies with it.
            Event::BlockComplete { .. } => self.leave_reasoning(),
            Event::MessageEnd { stop_reason, .. } => {
                self.leave_reasoning()?;
                if self.hold_answer && *stop_reason == StopReason::ToolUse {
                    self.release_held_as_trace();
                }
                if !self.out_at_line_start && !self.hold_answer {
                    self.answer("\n")?;
                }
                // Next come tool calls (which restart the spinner) or the end of the
                // turn, both at once: nothing to wait for.
                self.waiting = false;
                Ok(())
            }
            Event::ToolCallStart {
                name,
                arguments,
                arguments_raw,
                ..
            } => {
                let shown = match (arguments, arguments_raw) {
                    (Some(args), _) => args.to_string(),
                    (None, Some(raw)) => raw.clone(),
                    (None, None) => String::new(),
                };
                self.tool_call(name, &shown)
            }
            Event::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => {
                if self.progress.as_ref().is_some_and(|(id, _)| id == call_id) {
                    self.progress = None;
                }
                self.tool_result(name, output, *is_error)
            }
            Event::ToolProgress {
                call_id,
                name,
                progress,
                total,
                text,
                ..
            } => {
                let line = progress_line(name, *progress, *total, text.as_deref());
                self.tool_progress(call_id, line)
            }
            Event::ServerLog {
                server,
                level,
                logger,
                data,
            } => {
                let from = match logger {
                    Some(l) => format!("{} ({})", clean(server), clean(l)),
                    None => clean(server),
                };
                let line = format!("{from} [{}]: {}", clean(level), clean(data));
                self.note(&shorten(&line, LINE_CHARS))
            }
            Event::McpSamplingRequest {
                server,
                summary,
                max_tokens,
                outcome,
            } => {
                let line = format!(
                    "MCP server {} asked the model ({} tokens at most): {}: {}",
                    clean(server),
                    max_tokens,
                    clean(summary),
                    clean(outcome)
                );
                self.note(&shorten(&line, LINE_CHARS))
            }
            Event::McpElicitationRequest {
                server,
                message,
                outcome,
            } => {
                let line = format!(
                    "MCP server {} asked: {}: {}",
                    clean(server),
                    clean(message),
                    clean(outcome)
                );
                self.note(&shorten(&line, LINE_CHARS))
            }
            Event::ProviderRetry {
                attempt,
                max_attempts,
                delay_ms,
                reason,
                ..
            } => self.note(&format!(
                "panto: retrying (attempt {attempt} of {max_attempts}) in {delay_ms} ms: {}",
                clean(reason)
            )),
            Event::ProviderFallback {
                from_provider,
                from_model,
                to_provider,
                to_model,
                error_message,
                ..
            } => self.note(&format!(
                "panto: {from_provider}:{from_model} failed ({}); falling back to {to_provider}:{to_model}",
                clean(error_message)
            )),
            Event::HistoryCompacted {
                messages_before,
                messages_after,
                tokens_before,
                tokens_after,
            } => self.note(&format!(
                "panto: {}",
                compacted_note(&panto::Compaction {
                    changed: true,
                    messages_before: *messages_before,
                    messages_after: *messages_after,
                    tokens_before: *tokens_before,
                    tokens_after: *tokens_after,
                })
            )),
            Event::SteeringDelivered { text, .. } => {
                self.note(&format!("panto: your message went in: {}", clean(text)))
            }
            Event::OutputRepair {
                attempt,
                max_attempts,
                error,
                ..
            } => {
                // The answer that did not match was held back; the next one replaces it.
                self.held.clear();
                self.note(&format!(
                    "panto: the answer did not match the schema; asking again (repair \
                     {attempt} of {max_attempts}): {}",
                    clean(error)
                ))
            }
            Event::MessageComplete {
                stop_reason,
                usage,
                text,
                output,
                ..
            } => self.complete(stop_reason, usage, text, output.as_ref()),
            // message_start, block_start, tool_details, and whatever a newer core adds.
            _ => Ok(()),
        }
    }

    fn tick_interval(&self) -> Option<Duration> {
        self.spinner.then_some(SPINNER_TICK)
    }

    fn tick(&mut self) -> io::Result<()> {
        // Only on an empty line: `\r` would otherwise overwrite streamed text.
        let line_free = self.err_at_line_start && (!self.shared_screen || self.out_at_line_start);
        if !(self.spinner && self.waiting && line_free && !self.in_reasoning)
            || self.last_frame.elapsed() < SPINNER_TICK
        {
            return Ok(());
        }
        self.last_frame = Instant::now();
        let frame = SPINNER_FRAMES[self.frame % SPINNER_FRAMES.len()];
        self.frame += 1;
        let label = match (self.tools_running, &self.progress) {
            (0, _) => "thinking".to_owned(),
            (_, Some((_, line))) => line.clone(),
            (1, None) => "running 1 tool".to_owned(),
            (n, None) => format!("running {n} tools"),
        };
        self.spinner_shown = true;
        let _ = write!(io::stderr(), "{CLEAR_LINE}{frame} {DIM}{label}{RESET}");
        Ok(())
    }

    fn error(&mut self, error: &Error) -> io::Result<()> {
        self.waiting = false;
        self.warning(&error_line(error))
    }

    fn warn(&mut self, message: &str) -> io::Result<()> {
        self.warning(&format!("panto: warning: {}", clean(message)))
    }

    fn notice(&mut self, text: &str) -> io::Result<()> {
        self.note(&clean(text))
    }

    fn hint(&mut self, hint: &str) -> io::Result<()> {
        let hint = format!("hint: {}", clean(hint));
        let hint = if self.err_color {
            format!("{DIM}{hint}{RESET}")
        } else {
            hint
        };
        self.warning(&hint)
    }
}

/// Why a completed turn stopped, when it is not the model simply finishing.
fn unusual_stop(stop: &StopReason) -> Option<String> {
    match stop {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => None,
        StopReason::MaxTokens => {
            Some("the answer was cut off at the token limit (--max-tokens)".into())
        }
        StopReason::MaxSteps => Some("stopped at the step limit (--max-steps)".into()),
        // `other:<raw>` carries the server's own words.
        other => Some(format!("the model stopped: {}", clean(&other.as_string()))),
    }
}

/// A running tool's progress as one line: `weather: 40% fetching` with a total,
/// `weather: 3 fetching` without (sanitized, cut to [`LINE_CHARS`]).
fn progress_line(name: &str, progress: f64, total: Option<f64>, text: Option<&str>) -> String {
    let amount = match total {
        Some(t) if t > 0.0 => format!("{:.0}%", (progress / t * 100.0).clamp(0.0, 100.0)),
        _ => format!("{progress}"),
    };
    let line = match text {
        Some(t) if !t.is_empty() => format!("{}: {amount} {}", clean(name), clean(t)),
        _ => format!("{}: {amount}", clean(name)),
    };
    shorten(&line, LINE_CHARS)
}

/// `text` cut to `max` characters, with an ellipsis when cut.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_respects_char_boundaries() {
        assert_eq!(shorten("héllo", 2), "hé…");
        assert_eq!(shorten("hé", 2), "hé");
    }

    #[test]
    fn progress_lines() {
        assert_eq!(
            progress_line("weather", 2.0, Some(5.0), Some("fetching")),
            "weather: 40% fetching"
        );
        assert_eq!(progress_line("w", 3.0, None, None), "w: 3");
        assert_eq!(progress_line("w", 2.5, None, Some("")), "w: 2.5");
        assert_eq!(progress_line("w", 9.0, Some(4.0), None), "w: 100%");
        let hostile = progress_line("w\x1b[31m", 1.0, Some(2.0), Some("a\x1b]0;t\x07b"));
        assert!(!hostile.contains(['\x1b', '\x07']), "{hostile:?}");
        assert!(hostile.contains("50%"));
    }

    #[test]
    fn usage_line_tells_unknown_from_zero() {
        let mut u = Usage {
            reported: true,
            ..Usage::default()
        };
        assert_eq!(usage_line(&u), "tokens: in 0, out 0");
        u.reported = false;
        assert_eq!(usage_line(&u), "tokens: not reported by the server");
        u.input_tokens = 7;
        assert_eq!(
            usage_line(&u),
            "tokens: in 7, out 0 (some responses not reported by the server)"
        );
    }

    #[test]
    fn error_line_names_the_kind() {
        let e = Error::new(panto::ErrorKind::RateLimited, "slow down").with_status(429);
        assert_eq!(
            error_line(&e),
            "panto: error[rate_limited]: slow down (HTTP 429)"
        );
        let e = Error::new(panto::ErrorKind::Authentication, "HTTP 401: bad key").with_status(401);
        assert_eq!(
            error_line(&e),
            "panto: error[authentication]: HTTP 401: bad key"
        );
    }
}
