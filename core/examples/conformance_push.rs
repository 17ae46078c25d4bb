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
//! ```

use std::collections::HashMap;

use panto::{Agent, Config, Event, Flow, Receiver, TurnControl};
use panto_testkit::conformance::{parse_args, Answer};

/// Prints each event and answers host tools from inside the callback, as a push caller
/// would; cancels through the turn's token after event `cancel_after`.
struct Runner {
    answers: HashMap<String, Answer>,
    cancel_after: Option<usize>,
    control: TurnControl,
    index: usize,
}

impl Receiver for Runner {
    fn on_event(&mut self, event: Event) -> Flow {
        println!("{}", event.to_json());
        if let Event::ToolCallStart {
            call_id,
            name,
            host: true,
            ..
        } = &event
        {
            if let Some(
                answer @ Answer {
                    delay: Some(delay), ..
                },
            ) = self.answers.get(name)
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
        answers: args.answers,
        cancel_after: args.cancel_after,
        control: control.clone(),
        index: 0,
    };
    if let Err(e) = agent
        .run(args.input, &mut runner, &control, Default::default())
        .await
    {
        println!("{}", e.to_json());
    }
}
