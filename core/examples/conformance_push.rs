//! The conformance runner for Rust push (`panto::Receiver` on a current-thread tokio
//! runtime): runs one turn described on the command line and prints its trace, one
//! canonical JSON line per event as the receiver gets it, then the error line if the
//! turn failed. `scripts/conformance.sh` compares it with the golden
//! trace of the scenario; `tests/conformance/README.md` describes the arguments, which
//! every language's runner shares.
//!
//! ```sh
//! conformance_push --config '{"model":"m","base_url":"http://127.0.0.1:PORT/v1",…}' \
//!   (--prompt "Hi" | --input PARTS) [--cancel-after K]
//!   [--answer NAME DELAY_MS IS_ERROR OUTPUT | --answer-parts NAME DELAY_MS IS_ERROR PARTS]…
//!   [--resume (end | K) ANSWERS] [--after-resume NAME]… [--steer-during NAME TEXT]
//! ```
//!
//! With `--resume`, the runner takes the turn's checkpoint (`TurnControl::checkpoint`)
//! when the turn ends, or inside the callback of event K (then stops that turn with
//! `Flow::Stop` and prints no more of it), prints `{"runner":"resume"}`, and resumes the
//! checkpoint on a new agent of the same configuration with `Agent::resume` and
//! `Answers::from_json(ANSWERS)`.

use std::collections::{HashMap, HashSet};

use panto::{Agent, Answers, Checkpoint, Config, Event, Flow, Receiver, TurnControl};
use panto_testkit::conformance::{parse_args, Answer, ResumeAt};

/// Prints each event and answers host tools from inside the callback, as a push caller
/// would; cancels through the turn's token after event `cancel_after`; steers before
/// answering the tool `steer`; takes the checkpoint after event `stop_after` and stops.
struct Runner<'a> {
    answers: &'a HashMap<String, Answer>,
    /// Tools not answered in this turn (`--after-resume`, in the first turn).
    held: HashSet<String>,
    cancel_after: Option<usize>,
    steer: Option<(String, String)>,
    stop_after: Option<usize>,
    checkpoint: Option<Checkpoint>,
    stopped: bool,
    control: TurnControl,
    index: usize,
}

impl Receiver for Runner<'_> {
    fn on_event(&mut self, event: Event) -> Flow {
        if self.stopped {
            return Flow::Stop;
        }
        println!("{}", event.to_json());
        if self.stop_after == Some(self.index) {
            // The turn is abandoned here, as if its process died: the checkpoint is what
            // it reached, the rest of it is never seen.
            self.checkpoint = self.control.checkpoint();
            self.stopped = true;
            return Flow::Stop;
        }
        if let Event::ToolCallStart {
            call_id,
            name,
            host: true,
            ..
        } = &event
        {
            if self.steer.as_ref().is_some_and(|(tool, _)| tool == name) {
                let (_, text) = self.steer.take().expect("checked");
                if let Err(e) = self.control.steer(text) {
                    eprintln!("conformance_push: steer: {}", e.error);
                }
            }
            if let Some(
                answer @ Answer {
                    delay: Some(delay), ..
                },
            ) = self.answers.get(name).filter(|_| !self.held.contains(name))
            {
                let submit = {
                    let (host, call_id) = (self.control.host.clone(), call_id.clone());
                    let (output, parts, is_error) =
                        (answer.output.clone(), answer.parts.clone(), answer.is_error);
                    move || match parts {
                        Some(parts) => host.submit_parts(&call_id, parts, is_error),
                        None => host.submit(&call_id, output, is_error),
                    }
                };
                if delay.is_zero() {
                    if let Err(e) = submit() {
                        eprintln!("conformance_push: submit: {e}");
                    }
                } else {
                    let delay = *delay;
                    // A late answer to a call the turn gave up on is refused; that refusal
                    // is what a slow tool gets, so it is ignored.
                    std::thread::spawn(move || {
                        std::thread::sleep(delay);
                        let _ = submit();
                    });
                }
            }
        }
        if self.cancel_after == Some(self.index) {
            self.control.cancel.cancel();
        }
        self.index += 1;
        Flow::Continue
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("conformance_push: {e}");
            std::process::exit(2);
        }
    };
    let agent = match Config::from_json(&args.config).and_then(Agent::new) {
        Ok(agent) => agent,
        Err(e) => return println!("{}", e.to_json()),
    };
    let control = TurnControl::default();
    let mut runner = Runner {
        answers: &args.answers,
        held: args.after_resume.clone(),
        cancel_after: args.cancel_after,
        steer: args.steer_during.clone(),
        stop_after: match args.resume {
            Some((ResumeAt::After(k), _)) => Some(k),
            _ => None,
        },
        checkpoint: None,
        stopped: false,
        control: control.clone(),
        index: 0,
    };
    let result = agent
        .run(args.input, &mut runner, &control, Default::default())
        .await;
    if let Err(e) = result {
        if !runner.stopped {
            println!("{}", e.to_json());
        }
    }
    let Some((at, answers)) = &args.resume else {
        return;
    };
    let checkpoint = match at {
        ResumeAt::End => control.checkpoint(),
        ResumeAt::After(_) => runner.checkpoint.take(),
    };
    let Some(checkpoint) = checkpoint else {
        return;
    };
    println!("{{\"runner\":\"resume\"}}");
    let (agent, answers) = match Config::from_json(&args.config)
        .and_then(Agent::new)
        .and_then(|agent| Ok((agent, Answers::from_json(answers)?)))
    {
        Ok(pair) => pair,
        Err(e) => return println!("{}", e.to_json()),
    };
    let control = TurnControl::default();
    let mut runner = Runner {
        answers: &args.answers,
        held: HashSet::new(),
        cancel_after: None,
        steer: None,
        stop_after: None,
        checkpoint: None,
        stopped: false,
        control: control.clone(),
        index: 0,
    };
    if let Err(e) = agent
        .resume(checkpoint, answers, &mut runner, &control)
        .await
    {
        println!("{}", e.to_json());
    }
}
