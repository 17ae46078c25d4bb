//! Owns one turn on the pull stream: pull events, hand host-tool calls to their shell
//! commands, render, and leave the agent with a final history (worker joined) whatever
//! the outcome.

use std::io;

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
    let stream = setup.agent.stream_with(prompt, options)?;
    drive(stream, setup, out, interrupt, checkpoint)
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
    drive(stream, setup, out, interrupt, checkpoint)
}

fn drive(
    mut stream: Stream,
    setup: &Setup,
    out: &mut dyn Render,
    interrupt: &Interrupt,
    mut checkpoint: Option<&mut CheckpointFile>,
) -> Result<Ended, Error> {
    let control = stream.control();
    interrupt.begin_turn(control.clone());
    let mut result = pull(&mut stream, &control, setup, out, checkpoint.as_deref_mut());
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
) -> Result<Ended, Error> {
    let tools = &setup.tools;
    out.turn_start().map_err(output_error)?;
    loop {
        let next = match out.tick_interval() {
            Some(tick) => stream.next_timeout(tick)?,
            None => match stream.next()? {
                Some(event) => Next::Event(event),
                None => Next::Done,
            },
        };
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
