//! Owns one turn on the pull stream: pull events, hand host-tool calls to their shell
//! commands, render, and leave the agent with a final history (worker joined) whatever
//! the outcome.

use std::io;

use panto::{Error, Event};
use panto_pull::{AgentStreamExt, Next, Stream, StreamControl};

use crate::confirm;
use crate::interrupt::Interrupt;
use crate::render::Render;
use crate::setup::Setup;

/// Runs one turn of `prompt`. On return the stream's worker has ended, so the history
/// is complete and valid (also after a failure or a cancel) and can be saved. Ctrl-C
/// cancels this turn from the moment the stream exists until the next
/// [`Interrupt::idle`].
pub fn run(
    setup: &Setup,
    prompt: impl Into<panto::Input>,
    options: panto::TurnOptions,
    out: &mut dyn Render,
    interrupt: &Interrupt,
) -> Result<(), Error> {
    let mut stream = setup.agent.stream_with(prompt, options)?;
    let control = stream.control();
    interrupt.begin_turn(control.clone());
    let result = pull(&mut stream, &control, setup, out);
    // Dropping cancels a turn left early (output error) and joins the worker.
    drop(stream);
    // Commands of a turn that did not finish are not wanted any more.
    setup.tools.kill_running();
    result
}

fn pull(
    stream: &mut Stream,
    control: &StreamControl,
    setup: &Setup,
    out: &mut dyn Render,
) -> Result<(), Error> {
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
            Next::Done => return Ok(()),
            Next::Pending => {}
            Next::Event(event) => {
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
                if event.is_terminal() {
                    return Ok(());
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
