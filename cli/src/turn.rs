//! Owns one turn on the pull stream: pull events, hand host-tool calls to their shell
//! commands, render, and leave the agent with a final history (worker joined) whatever
//! the outcome.

use std::io;
use std::time::Duration;

use panto::{Error, Event, StopReason};
use panto_pull::{AgentStreamExt, Next, Stream, StreamControl};

use crate::checkpoint::CheckpointFile;
use crate::confirm;
use crate::interrupt::Interrupt;
use crate::render::Render;
use crate::setup::Setup;

/// How a turn that did not fail ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The model is done (or a limit ended the turn).
    Complete,
    /// The turn paused for these calls (stop reason `deferred`); its checkpoint is in
    /// the file.
    Paused {
        calls: Vec<panto::DeferredCall>,
        file: std::path::PathBuf,
    },
}

/// Runs one turn of `prompt`. On return the stream's worker has ended, so the history
/// is complete and valid (also after a failure or a cancel) and can be saved. Ctrl-C
/// cancels this turn from the moment the stream exists until the next
/// [`Interrupt::idle`]. With `checkpoint`, the turn's latest checkpoint is kept in it.
pub fn run(
    setup: &Setup,
    prompt: impl Into<panto::Input>,
    options: panto::TurnOptions,
    out: &mut dyn Render,
    interrupt: &Interrupt,
    checkpoint: Option<&mut CheckpointFile>,
) -> Result<Ended, Error> {
    let mut options = options;
    if options.traceparent.is_none() {
        options.traceparent = crate::telemetry::traceparent();
    }
    let stream = setup.agent.stream_with(prompt, options)?;
    drive(stream, setup, out, interrupt, checkpoint, None)
}

/// [`run`] for the interactive chat: a line typed on the terminal while the turn runs
/// steers it (delivered at the next step boundary).
pub fn run_steered(
    setup: &Setup,
    prompt: impl Into<panto::Input>,
    out: &mut dyn Render,
    interrupt: &Interrupt,
    lines: &mut TypedLines,
) -> Result<Ended, Error> {
    let options = panto::TurnOptions {
        traceparent: crate::telemetry::traceparent(),
        ..panto::TurnOptions::default()
    };
    let stream = setup.agent.stream_with(prompt, options)?;
    drive(stream, setup, out, interrupt, None, Some(lines))
}

/// How often a turn that takes typed lines looks for one while no event comes.
const TYPED_LINE_POLL: Duration = Duration::from_millis(50);

/// Lines typed on the terminal (stdin) while a turn runs, read without waiting: the
/// terminal is in its line mode between two prompts, so a read returns a whole line
/// once Enter is pressed, and a line still being typed when the turn ends stays for the
/// prompt.
#[derive(Default)]
pub struct TypedLines {
    buffer: Vec<u8>,
}

impl TypedLines {
    /// The next complete line typed, if one is there now.
    pub fn poll(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Some(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            if !stdin_readable() {
                return None;
            }
            let mut chunk = [0u8; 4096];
            // SAFETY: read(2) into a buffer this function owns, of its length.
            let n = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
            match n {
                n if n > 0 => self.buffer.extend_from_slice(&chunk[..n as usize]),
                // Ctrl-D: what was typed before it is a line. A terminal's end of input
                // is one keypress, not the end of the terminal: later lines still steer
                // (the next poll reads again, once per poll however stdin ends).
                0 if self.buffer.is_empty() => return None,
                0 => self.buffer.push(b'\n'),
                _ => return None,
            }
        }
    }
}

/// Whether a read of stdin would return at once.
fn stdin_readable() -> bool {
    let mut fd = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd this function owns, without waiting.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n == 1 && fd.revents & (libc::POLLIN | libc::POLLHUP) != 0
}

/// Continues the turn `checkpoint` holds (`panto resume`), as [`run`] runs one.
pub fn resume(
    setup: &Setup,
    from: panto::Checkpoint,
    answers: panto::Answers,
    out: &mut dyn Render,
    interrupt: &Interrupt,
    checkpoint: Option<&mut CheckpointFile>,
) -> Result<Ended, Error> {
    let stream = panto_pull::resume(&setup.agent, from, answers)?;
    drive(stream, setup, out, interrupt, checkpoint, None)
}

fn drive(
    mut stream: Stream,
    setup: &Setup,
    out: &mut dyn Render,
    interrupt: &Interrupt,
    mut checkpoint: Option<&mut CheckpointFile>,
    lines: Option<&mut TypedLines>,
) -> Result<Ended, Error> {
    let control = stream.control();
    interrupt.begin_turn(control.clone());
    let steered = lines.is_some();
    let mut result = pull(
        &mut stream,
        &control,
        setup,
        out,
        checkpoint.as_deref_mut(),
        lines,
    );
    if steered {
        // A line said to be noted that the turn did not deliver (cancelled, failed,
        // paused, at a limit) is not dropped in silence.
        for input in stream.take_undelivered() {
            let text: Vec<&str> = input
                .parts()
                .iter()
                .filter_map(|part| match part {
                    panto::Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let note = format!(
                "panto: not delivered, the turn ended first (send it again at the prompt): {}",
                text.join(" ")
            );
            let _ = out.notice(&note);
        }
    }
    // Whatever ended the turn (a failure, a cancel), the file keeps its latest state; a
    // paused turn without a file gets one.
    let kept = match (checkpoint, &mut result) {
        (None, Ok(Ended::Paused { file, .. })) => {
            let mut fallback = CheckpointFile::new(&crate::checkpoint::paused_path(setup));
            let written = fallback.write(&stream);
            *file = fallback.path().to_owned();
            written
        }
        (Some(cf), result) => {
            if let Ok(Ended::Paused { file, .. }) = result {
                *file = cf.path().to_owned();
            }
            if matches!(result, Err(ref e) if e.kind == panto::ErrorKind::Config) {
                Ok(())
            } else {
                cf.write(&stream)
            }
        }
        (None, _) => Ok(()),
    };
    // Dropping cancels a turn left early (output error) and joins the worker.
    drop(stream);
    // Commands of a turn that did not finish are not wanted any more.
    setup.tools.kill_running();
    let ended = result?;
    kept?;
    Ok(ended)
}

fn pull(
    stream: &mut Stream,
    control: &StreamControl,
    setup: &Setup,
    out: &mut dyn Render,
    mut checkpoint: Option<&mut CheckpointFile>,
    mut lines: Option<&mut TypedLines>,
) -> Result<Ended, Error> {
    let tools = &setup.tools;
    out.turn_start().map_err(output_error)?;
    loop {
        let wait = match (out.tick_interval(), lines.is_some()) {
            (Some(tick), true) => Some(tick.min(TYPED_LINE_POLL)),
            (Some(tick), false) => Some(tick),
            (None, true) => Some(TYPED_LINE_POLL),
            (None, false) => None,
        };
        let next = match wait {
            Some(wait) => stream.next_timeout(wait)?,
            None => match stream.next()? {
                Some(event) => Next::Event(event),
                None => Next::Done,
            },
        };
        if let Some(lines) = lines.as_deref_mut() {
            while let Some(line) = lines.poll() {
                if line.trim().is_empty() {
                    continue;
                }
                let note = match stream.steer(line.as_str()) {
                    Ok(()) => "panto: noted; it goes in before the model's next answer",
                    Err(_) => "panto: the turn has ended; send it again at the prompt",
                };
                out.notice(note).map_err(output_error)?;
            }
        }
        match next {
            Next::Done => return Ok(Ended::Complete),
            Next::Pending => {}
            Next::Event(event) => {
                if let Some(file) = checkpoint.as_deref_mut() {
                    if let Err(e) = file.after(stream, &event) {
                        control.cancel();
                        return Err(e);
                    }
                }
                let confirm_first =
                    setup.confirm && matches!(&event, Event::ToolCallStart { host: true, .. });
                if confirm_first {
                    // The call is shown before the question about it.
                    out.event(&event).map_err(output_error)?;
                }
                match &event {
                    // Start the command first: it runs on its own thread while this one
                    // goes on rendering and pulling. The core announces calls it rejects
                    // (unparsable or non-object arguments) with `host: false`; checking
                    // for an object here too keeps such a call from ever running.
                    Event::ToolCallStart {
                        call_id,
                        name,
                        arguments: Some(arguments),
                        host: true,
                        ..
                    } if arguments.is_object() => {
                        if !confirm_first {
                            tools.start(call_id, name, arguments, control);
                        } else {
                            match confirm::ask(name, arguments) {
                                Ok(()) => tools.start(call_id, name, arguments, control),
                                Err(refusal) => {
                                    let _ = control.submit_tool_result(call_id, &refusal, true);
                                }
                            }
                        }
                    }
                    Event::ToolResult { call_id, .. } => tools.abandon(call_id),
                    _ => {}
                }
                if !confirm_first {
                    out.event(&event).map_err(output_error)?;
                }
                if let Event::MessageComplete {
                    stop_reason: StopReason::Deferred,
                    deferred,
                    ..
                } = &event
                {
                    return Ok(Ended::Paused {
                        calls: deferred.clone(),
                        file: std::path::PathBuf::new(),
                    });
                }
                if event.is_terminal() {
                    return Ok(Ended::Complete);
                }
            }
        }
        out.tick().map_err(output_error)?;
    }
}

fn output_error(e: io::Error) -> Error {
    // A closed stdout (`| head`) is noted by the renderer; the caller ends quietly.
    Error::internal(format!("cannot write the output: {e}"))
}
