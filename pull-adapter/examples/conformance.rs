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
//! ```

use panto::{Agent, Config, Event};
use panto_pull::AgentStreamExt;
use panto_testkit::conformance::{parse_args, Answer};

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
    let mut stream = match agent.stream(args.input.clone()) {
        Ok(stream) => stream,
        Err(e) => return println!("{}", e.to_json()),
    };
    let control = stream.control();
    let mut index = 0;
    loop {
        match stream.next() {
            Ok(Some(event)) => {
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
                    ) = args.answers.get(name)
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
                if args.cancel_after == Some(index) {
                    stream.cancel();
                }
                index += 1;
            }
            Ok(None) => return,
            Err(e) => return println!("{}", e.to_json()),
        }
    }
}
