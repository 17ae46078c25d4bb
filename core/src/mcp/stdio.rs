//! Owns the stdio transport: the server's process (spawned in a process group of its
//! own, with its arguments, its private environment and working directory), newline-delimited
//! JSON-RPC on its stdin and stdout, the bounded log of its stderr, noticing that it
//! exited, and stopping it: stdin closed, a wait, SIGTERM to the group, a wait, SIGKILL
//! to the group, and the process reaped — on a short-lived thread of its own, so that
//! dropping an agent never blocks and works with no runtime left.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::rpc::{Peer, Wire};
use crate::error::{Error, ErrorKind, Result};

/// How much of the server's stderr is kept (the end of it).
const STDERR_KEEP: usize = 16 * 1024;
/// How much of it an error shows.
const STDERR_SHOWN: usize = 2 * 1024;
/// Most messages waiting to be written to a server: one that does not read its stdin
/// fails new requests instead of growing the queue.
const MAX_QUEUED: usize = 1024;
/// How long a server has to exit after its stdin is closed, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The end of a server's stderr.
#[derive(Default)]
pub(crate) struct StderrLog(Mutex<VecDeque<u8>>);

impl StderrLog {
    fn push(&self, bytes: &[u8]) {
        let mut log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        log.extend(bytes);
        let excess = log.len().saturating_sub(STDERR_KEEP);
        log.drain(..excess);
    }

    /// The last lines, at most `STDERR_SHOWN` bytes, or "" if it wrote nothing.
    pub fn tail(&self) -> String {
        let log = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let skip = log.len().saturating_sub(STDERR_SHOWN);
        let bytes: Vec<u8> = log.iter().skip(skip).copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let text = text.trim_end();
        // Start at a line if the cut fell inside one.
        match (skip > 0, text.find('\n')) {
            (true, Some(i)) => text[i + 1..].to_owned(),
            _ => text.to_owned(),
        }
    }
}

/// Words for an error: the stderr's end, or that it said nothing.
pub(crate) fn stderr_note(log: &StderrLog) -> String {
    let tail = log.tail();
    if tail.is_empty() {
        "it wrote nothing to stderr".to_owned()
    } else {
        format!("its stderr ends with:\n{tail}")
    }
}

struct StdioWire {
    tx: mpsc::Sender<Vec<u8>>,
    peer: std::sync::Weak<Peer>,
}

impl Wire for StdioWire {
    fn send(&self, message: Value, request: Option<u64>) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        match self.tx.try_send(line) {
            Ok(()) => {}
            // The writer is gone (the server closed its input, or it is stopping): the
            // request cannot be delivered, and fails now rather than at its timeout.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                if let (Some(id), Some(peer)) = (request, self.peer.upgrade()) {
                    let why = peer.closed().unwrap_or_else(|| {
                        Error::new(
                            ErrorKind::Connection,
                            format!(
                                "MCP server {:?} no longer reads its input: the request \
                                 could not be delivered",
                                peer.name
                            ),
                        )
                    });
                    peer.fail(id, super::rpc::RpcError::Failed(why));
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                if let (Some(id), Some(peer)) = (request, self.peer.upgrade()) {
                    peer.fail(
                        id,
                        super::rpc::RpcError::Failed(Error::new(
                            ErrorKind::Connection,
                            format!(
                                "MCP server {:?} is not reading its input ({MAX_QUEUED} messages wait)",
                                peer.name
                            ),
                        )),
                    );
                }
            }
        }
    }
}

/// A running server process. Dropping it stops the server (see the module's doc).
pub(crate) struct Process {
    pid: i32,
    child: Option<std::process::Child>,
    closing: CancellationToken,
    tasks: Vec<tokio::task::AbortHandle>,
    pub stderr: Arc<StderrLog>,
    /// `command args…`, for messages.
    pub command_line: String,
}

/// The whole environment of a server: of panto's own variables (read through `get`),
/// only [`super::DEFAULT_INHERITED_ENV`] and the names in `inherit`, then `env` over
/// them. A default variable whose value starts with `()` is a shell function exported
/// by bash, not a setting, and is left out as the official SDKs do; a variable
/// `inherit` names is passed as it is.
pub(crate) fn environment(
    env: &BTreeMap<String, String>,
    inherit: &[String],
    get: impl Fn(&str) -> Option<OsString>,
) -> BTreeMap<OsString, OsString> {
    let mut out = BTreeMap::new();
    for name in super::DEFAULT_INHERITED_ENV {
        if let Some(value) = get(name) {
            if !value.as_encoded_bytes().starts_with(b"()") {
                out.insert(OsString::from(name), value);
            }
        }
    }
    for name in inherit {
        if let Some(value) = get(name) {
            out.insert(OsString::from(name), value);
        }
    }
    for (name, value) in env {
        out.insert(OsString::from(name), OsString::from(value));
    }
    out
}

/// Starts `command` and connects it to `peer`, with `env` as its whole environment.
pub(crate) fn spawn(
    peer: &Arc<Peer>,
    command: &str,
    args: &[String],
    env: &BTreeMap<OsString, OsString>,
    cwd: Option<&str>,
    max_message_bytes: usize,
) -> Result<(Process, Arc<dyn Wire>)> {
    let command_line = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = std::process::Command::new(command);
    // Never panto's environment: it holds the API keys, and a server's tools can show
    // the model (and the saved conversation) anything the server can read.
    cmd.args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: the whole group can be signalled, and a Ctrl-C at panto's
        // terminal does not reach it before panto decides.
        .process_group(0);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|e| {
        Error::config(format!(
            "mcp_servers.{}: cannot start `{command_line}`: {e}",
            peer.name
        ))
    })?;
    let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let pipes = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
        return Err(Error::internal("a spawned MCP server has no pipes"));
    };
    let wrap =
        |e: std::io::Error| Error::internal(format!("cannot watch an MCP server's pipe: {e}"));
    let stdin = tokio::process::ChildStdin::from_std(stdin).map_err(wrap)?;
    let stdout = tokio::process::ChildStdout::from_std(stdout).map_err(wrap)?;
    let stderr = tokio::process::ChildStderr::from_std(stderr).map_err(wrap)?;
    let log = Arc::new(StderrLog::default());
    let closing = CancellationToken::new();
    let (tx, rx) = mpsc::channel(MAX_QUEUED);
    let mut process = Process {
        pid,
        child: Some(child),
        closing: closing.clone(),
        tasks: Vec::new(),
        stderr: log.clone(),
        command_line,
    };
    let writer = tokio::spawn(write_loop(
        stdin,
        rx,
        closing,
        peer.clone(),
        log.clone(),
        pid,
    ));
    let stderr_task = tokio::spawn(stderr_loop(stderr, log.clone()));
    let reader = tokio::spawn(read_loop(
        stdout,
        peer.clone(),
        tx.clone(),
        log,
        pid,
        max_message_bytes,
    ));
    process.tasks = vec![
        writer.abort_handle(),
        stderr_task.abort_handle(),
        reader.abort_handle(),
    ];
    Ok((
        process,
        Arc::new(StdioWire {
            tx,
            peer: Arc::downgrade(peer),
        }),
    ))
}

/// Writes the queued lines to the server's stdin. A write that fails means the server
/// closed its input: if it exited, the reader says so (with its exit status); if it
/// keeps running, nothing can reach it any more, and the connection ends now with that
/// account — its requests fail at once instead of at their timeout, and the server is
/// started again before the next step.
async fn write_loop(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::Receiver<Vec<u8>>,
    closing: CancellationToken,
    peer: Arc<Peer>,
    log: Arc<StderrLog>,
    pid: i32,
) {
    loop {
        let line = tokio::select! {
            biased;
            _ = closing.cancelled() => return,
            line = rx.recv() => match line {
                Some(line) => line,
                None => return,
            },
        };
        if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
    // Later sends find the channel closed and fail their requests at once.
    drop(rx);
    if exit_status_soon(pid).await.is_some() {
        return;
    }
    peer.close(Error::new(
        ErrorKind::Connection,
        format!(
            "MCP server {:?} closed its input (stdin) but keeps running: the request \
             could not be delivered; {}",
            peer.name,
            stderr_note(&log)
        ),
    ));
    // Dropping stdin closes it: the server's signal to exit.
}

async fn stderr_loop(mut stderr: tokio::process::ChildStderr, log: Arc<StderrLog>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        log.push(&buf[..n]);
    }
}

/// The newline-delimited framing of a server's stdout: bytes in as they arrive, whole
/// lines out. A line longer than `max` bytes (its newline not counted) ends the
/// connection rather than memory: at most `max + 1` bytes are ever held.
pub(crate) struct Lines {
    line: Vec<u8>,
    /// Whether `line` holds a whole line, given out by the last [`Lines::take`].
    complete: bool,
    max: usize,
}

impl Lines {
    pub fn new(max: usize) -> Lines {
        Lines {
            line: Vec::new(),
            complete: false,
            max,
        }
    }

    /// Takes the start of `available`, up to and including its first newline: how many
    /// bytes it took, and the line they completed (without the whitespace around it;
    /// maybe empty), if they did. `Err` says that the line is longer than `max`.
    pub fn take(
        &mut self,
        available: &[u8],
    ) -> std::result::Result<(usize, Option<&[u8]>), String> {
        if std::mem::take(&mut self.complete) {
            self.line.clear();
        }
        let (take, complete) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if self.line.len() + take > self.max.saturating_add(1) {
            return Err(format!("it sent a message larger than {} bytes", self.max));
        }
        self.line.extend_from_slice(&available[..take]);
        if !complete {
            return Ok((take, None));
        }
        self.complete = true;
        Ok((take, Some(self.line.trim_ascii())))
    }

    /// How many bytes are held (of the line being read, or the last one given out).
    pub fn buffered(&self) -> usize {
        self.line.len()
    }
}

async fn read_loop(
    stdout: tokio::process::ChildStdout,
    peer: Arc<Peer>,
    tx: mpsc::Sender<Vec<u8>>,
    log: Arc<StderrLog>,
    pid: i32,
    max: usize,
) {
    let mut reader = BufReader::new(stdout);
    let mut lines = Lines::new(max);
    let why = loop {
        let available = match reader.fill_buf().await {
            Ok([]) => break None,
            Ok(b) => b,
            Err(e) => break Some(format!("reading its output failed: {e}")),
        };
        let (took, line) = match lines.take(available) {
            Ok(t) => t,
            Err(why) => break Some(why),
        };
        reader.consume(took);
        let Some(text) = line.filter(|t| !t.is_empty()) else {
            continue;
        };
        match super::rpc::parse_message(text) {
            Some(message) => {
                for reply in peer.route(message) {
                    let mut out = reply.to_string().into_bytes();
                    out.push(b'\n');
                    // A server that asks without reading the answers loses them.
                    let _ = tx.try_send(out);
                }
            }
            None => {
                // Servers that print to stdout break the protocol; the line is
                // skipped, not fatal.
                debug!(server = %peer.name, "a line of an MCP server's stdout is not JSON");
            }
        }
    };
    drop(tx);
    let status = match why {
        Some(_) => None,
        None => exit_status_soon(pid).await,
    };
    let what = match (why, status) {
        (Some(why), _) => why,
        (None, Some(status)) => format!("it exited ({status})"),
        (None, None) => "it closed its output".to_owned(),
    };
    peer.close(Error::new(
        ErrorKind::Connection,
        format!(
            "MCP server {:?} stopped: {what}; {}",
            peer.name,
            stderr_note(&log)
        ),
    ));
}

/// The exit status of `pid` if it exits within a moment of closing its output, without
/// reaping it (the process's owner does that).
async fn exit_status_soon(pid: i32) -> Option<String> {
    let until = Instant::now() + Duration::from_millis(500);
    loop {
        if let Some(s) = peek_exit(pid) {
            return Some(s);
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `pid` has exited, as words, leaving it unreaped.
fn peek_exit(pid: i32) -> Option<String> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: after a successful waitid, si_pid and si_status are set (zero if
        // the process has not exited).
        if r != 0 || unsafe { info.si_pid() } == 0 {
            return None;
        }
        let status = unsafe { info.si_status() };
        Some(match info.si_code {
            libc::CLD_EXITED => format!("exit status {status}"),
            _ => format!("killed by signal {status}"),
        })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = pid;
        None
    }
}

impl Process {
    /// Whether the server process has exited (still unreaped).
    pub fn exited(&self) -> Option<String> {
        peek_exit(self.pid)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.closing.cancel();
        let Some(child) = self.child.take() else {
            return;
        };
        let tasks = std::mem::take(&mut self.tasks);
        let pid = self.pid;
        let stopping = super::Stopping::start();
        let stop = move || {
            stop(child, pid, tasks);
            drop(stopping);
        };
        if std::thread::Builder::new()
            .name("panto-mcp-stop".into())
            .spawn(stop)
            .is_err()
        {
            // No thread to be had: kill at once rather than leave the server running.
            kill_group(pid, libc::SIGKILL);
        }
    }
}

fn kill_group(pid: i32, signal: i32) {
    // SAFETY: kill has no memory effects; a negative pid names the process group the
    // server leads (it was spawned with process_group(0), so its group id is its pid,
    // and the group cannot be reused while the unreaped leader exists).
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// Waits until `pid` exits (unreaped) or `grace` passes.
fn wait_exit(pid: i32, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    loop {
        if peek_exit(pid).is_some() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The shutdown sequence (on its own thread): stdin was closed by cancelling `closing`
/// (the writer drops it); the server gets `EXIT_GRACE` to exit, then SIGTERM to its
/// group, `EXIT_GRACE` again, then SIGKILL. The group is signalled even when the
/// leader exited on its own, so that nothing it started outlives it; the leader is
/// reaped last, so its group id stays reserved until then.
fn stop(mut child: std::process::Child, pid: i32, tasks: Vec<tokio::task::AbortHandle>) {
    if !wait_exit(pid, EXIT_GRACE) {
        kill_group(pid, libc::SIGTERM);
        if !wait_exit(pid, EXIT_GRACE) {
            kill_group(pid, libc::SIGKILL);
        }
    }
    // What the leader left behind in its group.
    kill_group(pid, libc::SIGTERM);
    kill_group(pid, libc::SIGKILL);
    let _ = child.wait();
    for t in tasks {
        t.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panto_env(name: &str) -> Option<OsString> {
        let vars = [
            ("HOME", "/home/u"),
            ("PATH", "/usr/bin"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
            ("LANG", "C.UTF-8"),
            ("SHELL", "() { echo exported function; }"),
        ];
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| OsString::from(v))
    }

    fn names(env: &BTreeMap<OsString, OsString>) -> Vec<&str> {
        // Test data: every name above is ASCII.
        env.keys().filter_map(|k| k.to_str()).collect()
    }

    /// Feeds `chunks` to a framing with a cap of `max`: the lines given out, and
    /// whether it refused one.
    fn frame(chunks: &[&[u8]], max: usize) -> (Vec<String>, bool) {
        let mut lines = Lines::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            let mut rest = *chunk;
            while !rest.is_empty() {
                let Ok((took, line)) = lines.take(rest) else {
                    return (out, true);
                };
                out.extend(line.map(|l| String::from_utf8_lossy(l).into_owned()));
                assert!(lines.buffered() <= max + 1);
                rest = &rest[took..];
            }
        }
        (out, false)
    }

    #[test]
    fn lines_up_to_the_cap_pass_and_a_longer_one_is_refused() {
        // Exactly 8 bytes before the newline: accepted, whatever the chunking.
        assert_eq!(
            frame(&[b"12345678\n", b" \r\n", b"abc"], 8),
            (vec!["12345678".to_owned(), String::new()], false)
        );
        assert_eq!(
            frame(&[b"1234", b"5678", b"\nab", b"c\n"], 8),
            (vec!["12345678".to_owned(), "abc".to_owned()], false)
        );
        // 9 bytes: refused, also when it comes in pieces, after the lines before it.
        assert_eq!(
            frame(&[b"ok\n123456789\nnever"], 8),
            (vec!["ok".to_owned()], true)
        );
        assert_eq!(frame(&[b"12345", b"6789", b"\n"], 8), (Vec::new(), true));
        // No newline yet: refused as soon as it cannot fit any more.
        assert_eq!(frame(&[b"1234567890"], 8), (Vec::new(), true));
    }

    #[test]
    fn a_server_gets_only_the_default_variables() {
        let env = environment(&BTreeMap::new(), &[], panto_env);
        assert_eq!(names(&env), ["HOME", "PATH"]);
        assert_eq!(env[&OsString::from("HOME")], "/home/u");
    }

    #[test]
    fn inherit_env_names_more_and_env_sets_over_them() {
        let set = BTreeMap::from([
            ("PATH".to_owned(), "/opt/bin".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
        ]);
        let inherit = ["LANG".to_owned(), "NOT_SET_ANYWHERE".to_owned()];
        let env = environment(&set, &inherit, panto_env);
        assert_eq!(names(&env), ["HOME", "LANG", "PATH", "TZ"]);
        assert_eq!(env[&OsString::from("PATH")], "/opt/bin");
        assert_eq!(env[&OsString::from("LANG")], "C.UTF-8");
    }

    #[test]
    fn a_credential_reaches_a_server_only_when_named() {
        let env = environment(&BTreeMap::new(), &[], panto_env);
        assert!(!names(&env).contains(&"OPENAI_API_KEY"));
        let inherit = ["OPENAI_API_KEY".to_owned()];
        let env = environment(&BTreeMap::new(), &inherit, panto_env);
        assert_eq!(env[&OsString::from("OPENAI_API_KEY")], "sk-secret");
    }
}
