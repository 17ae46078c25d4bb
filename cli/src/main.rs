//! `panto`: the command-line agent, written on the pull stream (`panto-pull`).
//!
//! ```text
//!  args ──► setup (config, --tool/--tools, --session) ──► Agent
//!  run:  prompt (arg or stdin) ──► turn ──► save session ──► exit code
//!  chat: loop { line ──► turn ──► save session }
//!  turn: stream.next() ─► render (json | human) ; tool_call_start{host} ─► shell_tool thread
//!                                                    └─► control.submit_tool_result
//!  Ctrl-C (interrupt) ─► control.cancel() during a turn, exit 130 otherwise
//!                        (killing tool process groups, removing a half-written save)
//! ```

mod args;
mod exit;
mod interrupt;
mod render;
mod sanitize;
mod session;
mod setup;
mod shell_tool;
mod turn;

use std::io::{self, BufRead, IsTerminal, Read, Write};
use std::process::ExitCode;

use clap::Parser;
use panto::{Error, ErrorKind};

use crate::args::{AgentArgs, Cli, Command, RunArgs};
use crate::exit::{exit_code, OK};
use crate::interrupt::Interrupt;
use crate::render::Render;
use crate::setup::Setup;

fn main() -> ExitCode {
    // Usage errors exit here with code 2 (clap's own), --help / --version with 0.
    let cli = Cli::parse();
    let json = match &cli.command {
        Command::Run(args) => args.agent.json,
        Command::Chat(args) => args.json,
    };
    let interrupt = Interrupt::install(json);
    let code = match cli.command {
        Command::Run(args) => run(args, &interrupt),
        Command::Chat(args) => chat(args, &interrupt),
    };
    ExitCode::from(code)
}

/// Reports failures, never showing the API key.
struct Reporter {
    out: Box<dyn Render>,
    secret: String,
}

impl Reporter {
    fn new(args: &AgentArgs) -> Reporter {
        let env = setup::provider_kind(args.provider).api_key_env();
        let secret = args
            .api_key
            .clone()
            .or_else(|| std::env::var(env).ok())
            .unwrap_or_default();
        Reporter {
            out: render::for_mode(args.json),
            secret,
        }
    }

    /// Prints `error` and returns its exit code.
    fn fail(&mut self, error: Error) -> u8 {
        let error = self.redact(error);
        // If even the error cannot be written there is nobody left to tell.
        let _ = self.out.error(&error);
        exit_code(error.kind)
    }

    fn warn(&mut self, error: Error) {
        let error = self.redact(error);
        let _ = self.out.warn(&error.message);
    }

    /// The core already redacts what it builds from server text; this second pass
    /// covers everything else (a key echoed in a path, in a session error, …).
    fn redact(&self, mut error: Error) -> Error {
        if self.secret.len() >= 4 {
            error.message = error.message.replace(&self.secret, "[REDACTED]");
            if let Some(code) = &mut error.provider_code {
                *code = code.replace(&self.secret, "[REDACTED]");
            }
        }
        error
    }
}

fn run(args: RunArgs, interrupt: &Interrupt) -> u8 {
    let mut report = Reporter::new(&args.agent);
    let setup = match Setup::build(&args.agent) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    let prompt = match args.prompt {
        Some(prompt) => prompt,
        None => match read_prompt() {
            Ok(prompt) => prompt,
            Err(e) => return report.fail(e),
        },
    };
    if prompt.trim().is_empty() {
        return report.fail(Error::config(
            "the prompt is empty: give PROMPT or pipe it on stdin",
        ));
    }
    let result = turn::run(&setup, &prompt, report.out.as_mut(), interrupt);
    let saved = save(&setup);
    match (result, saved) {
        (Ok(()), Ok(())) => OK,
        (Ok(()), Err(e)) | (Err(e), Ok(())) => report.fail(e),
        // The turn's failure is the one that explains the exit code.
        (Err(e), Err(save_error)) => {
            report.warn(save_error);
            report.fail(e)
        }
    }
}

fn save(setup: &Setup) -> Result<(), Error> {
    match &setup.session {
        Some(session) => session.save(&setup.agent),
        None => Ok(()),
    }
}

/// The prompt from stdin, when no PROMPT argument was given.
fn read_prompt() -> Result<String, Error> {
    let mut stdin = io::stdin();
    if stdin.is_terminal() {
        eprintln!("panto: reading the prompt from stdin (end it with Ctrl-D)");
    }
    let mut bytes = Vec::new();
    stdin
        .read_to_end(&mut bytes)
        .map_err(|e| Error::config(format!("cannot read the prompt from stdin: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::config("the prompt on stdin is not valid UTF-8"))?;
    // The newline `echo` or the terminal adds is not part of the prompt.
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

const CHAT_HELP: &str = "\
commands:
  /clear   forget the conversation (and empty the --session file)
  /exit    leave (as does end of input, Ctrl-D)
  /help    this list
Ctrl-C cancels a running turn; at the prompt it leaves.";

fn chat(args: AgentArgs, interrupt: &Interrupt) -> u8 {
    let mut report = Reporter::new(&args);
    let setup = match Setup::build(&args) {
        Ok(setup) => setup,
        Err(e) => return report.fail(e),
    };
    // A person at a terminal gets a prompt and keeps going after a failed turn; a
    // script feeding stdin gets the first failure as the exit code.
    let interactive = io::stdin().is_terminal();
    let mut stdin = io::stdin().lock();
    loop {
        interrupt.idle();
        if interactive {
            eprint!("> ");
            let _ = io::stderr().flush();
        }
        let mut line = Vec::new();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => {
                if interactive {
                    eprintln!();
                }
                return OK;
            }
            Ok(_) => {}
            Err(e) => return report.fail(Error::config(format!("cannot read stdin: {e}"))),
        }
        let line = String::from_utf8_lossy(&line);
        let input = line.trim();
        let result = match input {
            "" => continue,
            "/exit" | "/quit" => return OK,
            "/help" => {
                eprintln!("{CHAT_HELP}");
                continue;
            }
            "/clear" => setup.agent.clear_history().and_then(|()| save(&setup)),
            command if command.starts_with('/') && !command.contains(char::is_whitespace) => {
                eprintln!("panto: unknown command {command} (/help lists them)");
                continue;
            }
            prompt => {
                let turn = turn::run(&setup, prompt, report.out.as_mut(), interrupt);
                match (turn, save(&setup)) {
                    (Ok(()), saved) => saved,
                    (Err(e), Ok(())) => Err(e),
                    (Err(e), Err(save_error)) => {
                        report.warn(save_error);
                        Err(e)
                    }
                }
            }
        };
        if let Err(e) = result {
            let cancelled = e.kind == ErrorKind::Cancelled;
            let code = report.fail(e);
            // Ctrl-C ends the turn only; the conversation goes on.
            if !interactive && !cancelled {
                return code;
            }
        }
    }
}
