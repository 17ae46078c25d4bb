//! The conformance runner for Rust pull (`panto_pull::Stream`): runs one turn described
//! on the command line and prints its trace, one canonical JSON line per event, then the
//! error line if the turn failed. `scripts/conformance.sh` compares it with the golden
//! trace of the scenario; `tests/conformance/README.md` describes the arguments, which
//! every language's runner shares.
//!
//! ```sh
//! conformance --config '{"model":"m","base_url":"http://127.0.0.1:PORT/v1",…}' \
//!   (--prompt "Hi" | --input PARTS) [--cancel-after K]
//!   [--answer NAME DELAY_MS IS_ERROR OUTPUT | --answer-parts NAME DELAY_MS IS_ERROR PARTS]…
//!   [--resume (end | K) ANSWERS] [--after-resume NAME]… [--steer-during NAME TEXT]
//! ```
//!
//! With `--resume`, the runner takes the stream's checkpoint (`Stream::checkpoint`) when
//! the turn ends, or right after event K (then cancels that turn and prints no more of
//! it), prints `{"runner":"resume"}`, and resumes the checkpoint on a new agent of the
//! same configuration with `panto_pull::resume` and `Answers::from_json(ANSWERS)`.

use panto::{Agent, Answers, Checkpoint, Config, Event};
use panto_pull::{AgentStreamExt, Stream};
use panto_testkit::conformance::{parse_args, Answer, Args, ResumeAt};

/// Which turn a stream plays: the first, or the resumed one.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    First,
    Resumed,
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("conformance: {e}");
            std::process::exit(2);
        }
    };
    let agent = match Config::from_json(&args.config).and_then(Agent::new) {
        Ok(agent) => agent,
        Err(e) => return println!("{}", e.to_json()),
    };
    let stream = match agent.stream(args.input.clone()) {
        Ok(stream) => stream,
        Err(e) => return println!("{}", e.to_json()),
    };
    let Some(checkpoint) = play(stream, &args, Phase::First) else {
        return;
    };
    println!("{{\"runner\":\"resume\"}}");
    let (_, answers) = args
        .resume
        .as_ref()
        .expect("a checkpoint only with --resume");
    let resumed = Config::from_json(&args.config)
        .and_then(Agent::new)
        .and_then(|agent| {
            let answers = Answers::from_json(answers)?;
            panto_pull::resume(&agent, checkpoint, answers)
        });
    match resumed {
        Ok(stream) => {
            play(stream, &args, Phase::Resumed);
        }
        Err(e) => println!("{}", e.to_json()),
    }
}

/// Prints the stream's events and answers its host tools; in the first phase, steers and
/// cancels as asked, and returns the checkpoint to resume from when `--resume` is given.
fn play(mut stream: Stream, args: &Args, phase: Phase) -> Option<Checkpoint> {
    let control = stream.control();
    let resume_at = match (phase, &args.resume) {
        (Phase::First, Some((at, _))) => Some(*at),
        _ => None,
    };
    let mut steer = match phase {
        Phase::First => args.steer_during.clone(),
        Phase::Resumed => None,
    };
    let mut index = 0;
    loop {
        match stream.next() {
            Ok(Some(event)) => {
                println!("{}", event.to_json());
                if resume_at == Some(ResumeAt::After(index)) {
                    // The turn is abandoned here, as if its process died: the checkpoint
                    // is what it reached, the rest of it is never seen.
                    let checkpoint = stream.checkpoint();
                    stream.cancel();
                    return checkpoint;
                }
                if let Event::ToolCallStart {
                    call_id,
                    name,
                    host: true,
                    ..
                } = &event
                {
                    if steer.as_ref().is_some_and(|(tool, _)| tool == name) {
                        let (_, text) = steer.take().expect("checked");
                        if let Err(e) = stream.steer(text) {
                            eprintln!("conformance: steer: {}", e.error);
                        }
                    }
                    let held = phase == Phase::First && args.after_resume.contains(name);
                    if let Some(
                        answer @ Answer {
                            delay: Some(delay), ..
                        },
                    ) = args.answers.get(name).filter(|_| !held)
                    {
                        let submit = {
                            let (control, call_id) = (control.clone(), call_id.clone());
                            let (output, parts, is_error) =
                                (answer.output.clone(), answer.parts.clone(), answer.is_error);
                            move || match parts {
                                Some(parts) => control.submit_tool_parts(&call_id, parts, is_error),
                                None => control.submit_tool_result(&call_id, &output, is_error),
                            }
                        };
                        if delay.is_zero() {
                            if let Err(e) = submit() {
                                eprintln!("conformance: submit: {e}");
                            }
                        } else {
                            let delay = *delay;
                            // A late answer to a call the turn gave up on is refused; that
                            // refusal is what a slow tool gets, so it is ignored.
                            std::thread::spawn(move || {
                                std::thread::sleep(delay);
                                let _ = submit();
                            });
                        }
                    }
                }
                if phase == Phase::First && args.cancel_after == Some(index) {
                    stream.cancel();
                }
                index += 1;
            }
            Ok(None) => break,
            Err(e) => {
                println!("{}", e.to_json());
                break;
            }
        }
    }
    match resume_at {
        Some(ResumeAt::End) => stream.checkpoint(),
        _ => None,
    }
}
