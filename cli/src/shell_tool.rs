//! Owns `--tool NAME=COMMAND`: host tools backed by shell commands. When the stream
//! announces a host call, the command runs on its own thread (`sh -c COMMAND`, the
//! call's arguments JSON on stdin) and its result is submitted through the stream's
//! control, so several calls run at once while the main thread keeps pulling events.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use panto_pull::StreamControl;
use serde_json::Value;

type Running = Arc<Mutex<HashMap<String, Arc<Mutex<Child>>>>>;

/// The shell commands of the `--tool` options and the calls currently running.
#[derive(Clone, Default)]
pub struct ShellTools {
    commands: Arc<HashMap<String, String>>,
    /// call id → its child process, so a cancelled turn can kill what it started.
    running: Running,
}

impl ShellTools {
    pub fn new(commands: HashMap<String, String>) -> ShellTools {
        ShellTools {
            commands: Arc::new(commands),
            running: Running::default(),
        }
    }

    /// Starts the command of tool `name` for one host call; its result goes to
    /// `control.submit_tool_result` when it finishes.
    pub fn start(&self, call_id: &str, name: &str, arguments: &Value, control: &StreamControl) {
        let Some(command) = self.commands.get(name).cloned() else {
            // The core only announces host calls for tools declared in the config, and
            // every declared tool has a command; answer anyway so the turn never waits.
            submit(
                control,
                call_id,
                &format!("no command is configured for tool {name:?}"),
                true,
            );
            return;
        };
        // A trailing newline so `read line` in the command sees a complete line.
        let input = format!("{arguments}\n");
        let job = Job {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            command,
            input,
            running: self.running.clone(),
        };
        let thread_control = control.clone();
        let spawned = thread::Builder::new()
            .name(format!("tool-{name}"))
            .spawn(move || {
                let (output, is_error) = job.run();
                submit(&thread_control, &job.call_id, &output, is_error);
            });
        if let Err(e) = spawned {
            submit(
                control,
                call_id,
                &format!("cannot start a thread for tool {name:?}: {e}"),
                true,
            );
        }
    }

    /// The turn reported a result for `call_id` (for instance the core gave up on it
    /// after its timeout): a command still running for it is no longer wanted.
    pub fn abandon(&self, call_id: &str) {
        let child = lock(&self.running).remove(call_id);
        if let Some(child) = child {
            kill(&child);
        }
    }

    /// Kills every command still running (after a cancelled or failed turn), so no
    /// process outlives the turn that asked for it.
    pub fn kill_running(&self) {
        let children: Vec<_> = lock(&self.running).drain().map(|(_, c)| c).collect();
        for child in &children {
            kill(child);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the maps inconsistent (single
    // insert/remove operations), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn kill(child: &Mutex<Child>) {
    // The tool thread holds this lock only inside `wait()`, i.e. once the command has
    // closed its output and is exiting; `try_lock` keeps a kill from blocking on it.
    if let Ok(mut c) = child.try_lock() {
        // Fails only if the process is already gone, which is what we want anyway.
        let _ = c.kill();
    }
}

fn submit(control: &StreamControl, call_id: &str, output: &str, is_error: bool) {
    // A `tool` error here means the turn no longer waits for this call (cancelled, or
    // given up after the tool timeout); the result is simply not needed any more.
    let _ = control.submit_tool_result(call_id, output, is_error);
}

struct Job {
    call_id: String,
    name: String,
    command: String,
    input: String,
    running: Running,
}

impl Job {
    /// Runs the command; returns (output, is_error).
    fn run(&self) -> (String, bool) {
        match self.execute() {
            Ok((status, stdout, stderr)) => outcome(status, &stdout, &stderr),
            Err(e) => (
                format!("cannot run the command of tool {:?}: {e}", self.name),
                true,
            ),
        }
    }

    fn execute(&self) -> io::Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .env("PANTO_TOOL_NAME", &self.name)
            .env("PANTO_TOOL_CALL_ID", &self.call_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let child = Arc::new(Mutex::new(child));
        lock(&self.running).insert(self.call_id.clone(), child.clone());
        let collected = self.collect(stdin, stdout, stderr);
        let status = lock(&child).wait();
        lock(&self.running).remove(&self.call_id);
        let (stdout, stderr) = collected?;
        Ok((status?, stdout, stderr))
    }

    /// Feeds stdin and drains stdout and stderr at the same time: doing them one after
    /// the other deadlocks as soon as a pipe buffer fills.
    fn collect(
        &self,
        stdin: Option<impl Write + Send + 'static>,
        stdout: Option<impl Read>,
        stderr: Option<impl Read + Send + 'static>,
    ) -> io::Result<(Vec<u8>, Vec<u8>)> {
        let input = self.input.clone().into_bytes();
        let writer = stdin.map(|mut w| {
            spawn("tool-stdin", move || {
                // A command that does not read its input closes the pipe early
                // (broken pipe): that is its right, not an error.
                let _ = w.write_all(&input);
            })
        });
        let reader = stderr.map(|mut r| {
            spawn("tool-stderr", move || {
                let mut buf = Vec::new();
                // A read error ends the output early; what was read is still reported.
                let _ = r.read_to_end(&mut buf);
                buf
            })
        });
        let mut out = Vec::new();
        if let Some(mut r) = stdout {
            let _ = r.read_to_end(&mut out);
        }
        let err = match reader.transpose()? {
            Some(h) => h.join().unwrap_or_default(),
            None => Vec::new(),
        };
        if let Some(h) = writer.transpose()? {
            let _ = h.join();
        }
        Ok((out, err))
    }
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    thread::Builder::new().name(name.to_owned()).spawn(f)
}

/// The tool result for a finished command: stdout on success; on failure stdout and
/// stderr together, or a description of the status when both are empty.
fn outcome(status: ExitStatus, stdout: &[u8], stderr: &[u8]) -> (String, bool) {
    let stdout = String::from_utf8_lossy(stdout);
    if status.success() {
        return (stdout.trim_end().to_owned(), false);
    }
    let mut both = stdout.into_owned();
    both.push_str(&String::from_utf8_lossy(stderr));
    let both = both.trim();
    if !both.is_empty() {
        return (both.to_owned(), true);
    }
    let why = match status.code() {
        Some(code) => format!("the command exited with status {code}"),
        None => describe_signal(&status),
    };
    (why, true)
}

#[cfg(unix)]
fn describe_signal(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig) => format!("the command was killed by signal {sig}"),
        None => format!("the command failed ({status})"),
    }
}

#[cfg(not(unix))]
fn describe_signal(status: &ExitStatus) -> String {
    format!("the command failed ({status})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &str, input: &str) -> (String, bool) {
        Job {
            call_id: "c1".into(),
            name: "t".into(),
            command: command.into(),
            input: input.into(),
            running: Running::default(),
        }
        .run()
    }

    #[test]
    fn stdout_is_the_result_and_stdin_carries_the_arguments() {
        assert_eq!(run("cat", "{\"a\":1}\n"), ("{\"a\":1}".to_owned(), false));
        assert_eq!(
            run("echo \"$PANTO_TOOL_NAME $PANTO_TOOL_CALL_ID\"", ""),
            ("t c1".to_owned(), false)
        );
    }

    #[test]
    fn failure_reports_stdout_and_stderr() {
        assert_eq!(
            run("echo out; echo err >&2; exit 3", ""),
            ("out\nerr".to_owned(), true)
        );
        assert_eq!(
            run("exit 4", ""),
            ("the command exited with status 4".to_owned(), true)
        );
    }

    #[test]
    fn large_output_and_unread_input_do_not_deadlock() {
        let big = "x".repeat(1 << 20);
        let (out, is_error) = run("head -c 300000 /dev/zero | tr '\\0' y", &big);
        assert!(!is_error);
        assert_eq!(out.len(), 300_000);
    }
}
