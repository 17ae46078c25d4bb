//! `panto-testserver` binary: serves a scenario (or a replayed capture) for tests written in
//! other languages. It owns only argument parsing, the `listening on URL` handshake line
//! and the process lifetime (signals, `--exit-on-stdin-eof`); serving is the library's.

use std::io::{Read, Write};
use std::process::ExitCode;

use panto_testserver::{Scenario, TestServer};

const USAGE: &str = "\
usage: panto-testserver [--scenario FILE | --capture FILE [--chunk-size N]] [--port P]
                        [--exit-on-stdin-eof]

  --scenario FILE       scenario JSON to play (default: none, every request gets 404
                        until one is POSTed to /_panto/scenario)
  --capture FILE        answer every request with a captured <name>.sse or
                        <name>.error.json body (status and content type from
                        <name>.meta.json)
  --chunk-size N        with --capture: send the body in N-byte chunks
  --port P              port on 127.0.0.1 (default 0: a free port)
  --exit-on-stdin-eof   exit when standard input closes (so a dead parent never
                        leaks the server)

Prints `listening on http://127.0.0.1:PORT` as its first line, then serves until
SIGTERM or SIGINT.";

#[derive(Default)]
struct Args {
    scenario: Option<String>,
    capture: Option<String>,
    chunk_size: Option<usize>,
    port: u16,
    exit_on_stdin_eof: bool,
}

enum ParseOutcome {
    Run(Args),
    Help,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<ParseOutcome, String> {
    let mut args = Args::default();
    while let Some(arg) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(ParseOutcome::Help),
            "--scenario" => args.scenario = Some(value("--scenario")?),
            "--capture" => args.capture = Some(value("--capture")?),
            "--chunk-size" => {
                let v = value("--chunk-size")?;
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => args.chunk_size = Some(n),
                    _ => {
                        return Err(format!(
                            "--chunk-size must be a positive integer, got {v:?}"
                        ))
                    }
                }
            }
            "--port" => {
                let v = value("--port")?;
                args.port = v
                    .parse()
                    .map_err(|_| format!("--port must be 0..65535, got {v:?}"))?;
            }
            "--exit-on-stdin-eof" => {
                if inline.is_some() {
                    return Err("--exit-on-stdin-eof takes no value".to_string());
                }
                args.exit_on_stdin_eof = true;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.scenario.is_some() && args.capture.is_some() {
        return Err("give --scenario or --capture, not both".to_string());
    }
    if args.chunk_size.is_some() && args.capture.is_none() {
        return Err("--chunk-size only applies to --capture".to_string());
    }
    Ok(ParseOutcome::Run(args))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(ParseOutcome::Run(args)) => args,
        Ok(ParseOutcome::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("panto-testserver: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let scenario = if let Some(path) = &args.scenario {
        Scenario::from_file(path)
    } else if let Some(path) = &args.capture {
        Scenario::replay_capture(path, args.chunk_size)
    } else {
        Ok(Scenario::empty())
    };
    let scenario = match scenario {
        Ok(s) => s,
        Err(msg) => {
            eprintln!("panto-testserver: {msg}");
            return ExitCode::from(2);
        }
    };
    let server = match TestServer::start_on_port(scenario, args.port) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "panto-testserver: cannot listen on 127.0.0.1:{}: {e}",
                args.port
            );
            return ExitCode::from(1);
        }
    };
    // The signal handlers are installed before the port is announced: a harness may send
    // SIGTERM as soon as it has read the line, and must find the server ready to stop
    // cleanly rather than killed by the default action.
    let stop = match StopSignals::install() {
        Ok(stop) => stop,
        Err(e) => {
            eprintln!("panto-testserver: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    };
    {
        // Harnesses read this first line to learn the port; flush so they are not stuck
        // behind a pipe's block buffering.
        let mut out = std::io::stdout().lock();
        if writeln!(out, "listening on {}", server.url())
            .and_then(|()| out.flush())
            .is_err()
        {
            // Nobody can learn the port: serving would only leak a process.
            return ExitCode::from(1);
        }
    }
    let waited = stop.wait(args.exit_on_stdin_eof);
    drop(server);
    match waited {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("panto-testserver: {e}");
            ExitCode::from(1)
        }
    }
}

/// The signals that stop the server, registered before the port is announced.
struct StopSignals {
    runtime: tokio::runtime::Runtime,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        #[cfg(unix)]
        let (terminate, interrupt) = {
            use tokio::signal::unix::{signal, SignalKind};
            let _entered = runtime.enter();
            (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            )
        };
        Ok(StopSignals {
            runtime,
            #[cfg(unix)]
            terminate,
            #[cfg(unix)]
            interrupt,
        })
    }

    /// Blocks until SIGINT, SIGTERM or (optionally) EOF on stdin.
    fn wait(self, exit_on_stdin_eof: bool) -> std::io::Result<()> {
        let StopSignals {
            runtime,
            #[cfg(unix)]
            mut terminate,
            #[cfg(unix)]
            mut interrupt,
        } = self;
        runtime.block_on(async move {
            let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
            if exit_on_stdin_eof {
                // A plain thread: blocking stdin reads cannot be cancelled, and this thread
                // simply dies with the process.
                std::thread::Builder::new()
                    .name("stdin-eof".to_string())
                    .spawn(move || {
                        let mut stdin = std::io::stdin().lock();
                        let mut sink = [0u8; 1024];
                        while let Ok(n) = stdin.read(&mut sink) {
                            if n == 0 {
                                break;
                            }
                        }
                        let _ = eof_tx.send(());
                    })?;
            } else {
                // Keep the sender alive forever so `eof_rx` never completes.
                std::mem::forget(eof_tx);
            }
            let stdin_eof = async {
                let _ = eof_rx.await;
            };
            #[cfg(unix)]
            tokio::select! {
                _ = terminate.recv() => Ok(()),
                _ = interrupt.recv() => Ok(()),
                () = stdin_eof => Ok(()),
            }
            #[cfg(not(unix))]
            tokio::select! {
                r = tokio::signal::ctrl_c() => r,
                () = stdin_eof => Ok(()),
            }
        })
    }
}
