//! Owns `--tool NAME=COMMAND`: host tools backed by shell commands. When the stream
//! announces a host call, the command runs on its own thread (`sh -c COMMAND`, the
//! call's arguments JSON on stdin) and its result is submitted through the stream's
//! control, so several calls run at once while the main thread keeps pulling events.
//!
//! Each command runs in its own process group, and "kill the command" always means the
//! whole group: `sh -c` forks, and a child that kept running after its shell was killed
//! (or after it closed its pipes) would outlive the turn. The group is killed when the
//! call is cancelled, timed out or abandoned, when its output passes the cap, and when
//! the command exits (what it left running in the background ends with it; a command
//! that really means to leave a daemon behind must detach it with `setsid`).
//!
//! What is read from a command (stdout and stderr together) is capped at
//! `--max-tool-output-bytes`: past it, reading stops, the command is killed, and the
//! result ends with a marker the model can read.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use panto_pull::StreamControl;
use serde_json::Value;

/// The default of `--max-tool-output-bytes` (the core's `max_tool_output_bytes` too).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 100 * 1024;

type Running = Arc<Mutex<HashMap<String, Arc<Group>>>>;

/// Every process group started and not yet reaped, in this process: what a forced exit
/// (a second Ctrl-C) must kill. Keyed by group id.
static LIVE: Mutex<BTreeMap<i32, Arc<Group>>> = Mutex::new(BTreeMap::new());

/// The shell commands of the `--tool` options and the calls currently running.
#[derive(Clone)]
pub struct ShellTools {
    commands: Arc<HashMap<String, String>>,
    /// Cap on the bytes read from one command (stdout and stderr together).
    max_output: usize,
    /// call id → its process group, so a cancelled turn can kill what it started.
    running: Running,
}

impl ShellTools {
    pub fn new(commands: HashMap<String, String>, max_output: usize) -> ShellTools {
        ShellTools {
            commands: Arc::new(commands),
            max_output,
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
            max_output: self.max_output,
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
        let group = lock(&self.running).remove(call_id);
        if let Some(group) = group {
            group.kill();
        }
    }

    /// Kills every command still running (after a cancelled or failed turn), so no
    /// process outlives the turn that asked for it.
    pub fn kill_running(&self) {
        let groups: Vec<_> = lock(&self.running).drain().map(|(_, g)| g).collect();
        for group in &groups {
            group.kill();
        }
    }
}

/// For a forced exit: kills every tool process group of this process, and keeps any
/// new one from starting until the process is gone (a tool thread would otherwise
/// spawn a command that nobody kills).
pub fn kill_all_for_exit() {
    let live = lock(&LIVE);
    for group in live.values() {
        group.kill();
    }
    // Held until the process exits: spawning takes this lock.
    std::mem::forget(live);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the maps inconsistent (single
    // insert/remove operations), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn submit(control: &StreamControl, call_id: &str, output: &str, is_error: bool) {
    // A `tool` error here means the turn no longer waits for this call (cancelled, or
    // given up after the tool timeout); the result is simply not needed any more.
    let _ = control.submit_tool_result(call_id, output, is_error);
}

/// The process group of one command; its id is the pid of the `sh` that leads it.
struct Group {
    id: i32,
    /// The leader was reaped: its id may now be reused by an unrelated process group,
    /// so the group must not be signalled any more. While it is unreaped (a zombie at
    /// worst) the id cannot be reused, so a kill can never hit a stranger.
    reaped: Mutex<bool>,
}

impl Group {
    fn kill(&self) {
        let reaped = lock(&self.reaped);
        if !*reaped {
            signal_group(self.id);
        }
    }

    /// Waits for the leader to exit, kills what it left in its group, then reaps it.
    fn reap(&self, child: &mut Child) -> io::Result<ExitStatus> {
        // Without reaping, so the id stays reserved for the kill below.
        if !wait_exited(self.id) {
            // Cannot happen for a child of ours; if it does, never wait while holding
            // the lock (a kill would block on it), and signal nothing after the wait.
            let status = child.wait();
            *lock(&self.reaped) = true;
            return status;
        }
        let mut reaped = lock(&self.reaped);
        signal_group(self.id);
        // Immediate: the leader has exited.
        let status = child.wait();
        *reaped = true;
        status
    }
}

#[cfg(unix)]
fn signal_group(id: i32) {
    // SIGKILL at once: a tool being killed was cancelled, timed out or flooded its
    // output; none of these deserve a grace period. ESRCH (nobody left) is fine.
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(-id, libc::SIGKILL);
    }
}

/// Blocks until process `pid` (a child of ours) has exited, leaving it unreaped; false
/// if that could not be waited for.
#[cfg(unix)]
fn wait_exited(pid: i32) -> bool {
    let Ok(id) = libc::id_t::try_from(pid) else {
        return false;
    };
    loop {
        // SAFETY: `info` is a plain C struct that waitid fills; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOWAIT;
        // SAFETY: waitid writes only into `info`, which outlives the call.
        if unsafe { libc::waitid(libc::P_PID, id, &mut info, flags) } == 0 {
            return true;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// What was read from a command.
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// The output passed the cap: reading stopped and the command was killed.
    truncated: bool,
}

/// The bytes a command may still send (stdout and stderr share it).
struct Budget {
    left: Mutex<usize>,
    exceeded: AtomicBool,
    group: Arc<Group>,
}

impl Budget {
    /// Reads `r` to its end or until the budget is spent; in the latter case kills the
    /// command, so a runaway producer (`yes`) stops instead of filling memory.
    fn drain(&self, mut r: impl Read) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // A read error ends the output early; what was read is still reported.
                Err(_) => break,
            };
            let take = {
                let mut left = lock(&self.left);
                let take = n.min(*left);
                *left -= take;
                take
            };
            out.extend_from_slice(&buf[..take]);
            if take < n {
                self.exceeded.store(true, Ordering::SeqCst);
                self.group.kill();
                break;
            }
        }
        out
    }
}

struct Job {
    call_id: String,
    name: String,
    command: String,
    input: String,
    max_output: usize,
    running: Running,
}

impl Job {
    /// Runs the command; returns (output, is_error).
    fn run(&self) -> (String, bool) {
        match self.execute() {
            Ok((status, collected)) => outcome(status, &collected, self.max_output),
            Err(e) => (
                format!("cannot run the command of tool {:?}: {e}", self.name),
                true,
            ),
        }
    }

    fn execute(&self) -> io::Result<(ExitStatus, Collected)> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&self.command)
            .env("PANTO_TOOL_NAME", &self.name)
            .env("PANTO_TOOL_CALL_ID", &self.call_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            // Its own group: killable as a whole, and a Ctrl-C at the terminal reaches
            // panto only, which then cancels the turn and kills the group itself.
            command.process_group(0);
        }
        let (mut child, group) = {
            // Spawned under the lock, so a forced exit never misses a group.
            let mut live = lock(&LIVE);
            let child = command.spawn()?;
            let id = i32::try_from(child.id()).unwrap_or(i32::MAX);
            let group = Arc::new(Group {
                id,
                reaped: Mutex::new(false),
            });
            live.insert(id, group.clone());
            (child, group)
        };
        lock(&self.running).insert(self.call_id.clone(), group.clone());
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let collected = self.collect(stdin, stdout, stderr, &group);
        let status = group.reap(&mut child);
        lock(&LIVE).remove(&group.id);
        lock(&self.running).remove(&self.call_id);
        Ok((status?, collected?))
    }

    /// Feeds stdin and drains stdout and stderr at the same time: doing them one after
    /// the other deadlocks as soon as a pipe buffer fills.
    fn collect(
        &self,
        stdin: Option<impl Write + Send + 'static>,
        stdout: Option<impl Read>,
        stderr: Option<impl Read + Send + 'static>,
        group: &Arc<Group>,
    ) -> io::Result<Collected> {
        let input = self.input.clone().into_bytes();
        let writer = stdin.map(|mut w| {
            spawn("tool-stdin", move || {
                // A command that does not read its input closes the pipe early
                // (broken pipe): that is its right, not an error.
                let _ = w.write_all(&input);
            })
        });
        let budget = Arc::new(Budget {
            left: Mutex::new(self.max_output),
            exceeded: AtomicBool::new(false),
            group: group.clone(),
        });
        let reader = stderr.map(|r| {
            let budget = budget.clone();
            spawn("tool-stderr", move || budget.drain(r))
        });
        let out = match stdout {
            Some(r) => budget.drain(r),
            None => Vec::new(),
        };
        let err = match reader.transpose()? {
            Some(h) => h.join().unwrap_or_default(),
            None => Vec::new(),
        };
        if let Some(h) = writer.transpose()? {
            let _ = h.join();
        }
        Ok(Collected {
            stdout: out,
            stderr: err,
            truncated: budget.exceeded.load(Ordering::SeqCst),
        })
    }
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    thread::Builder::new().name(name.to_owned()).spawn(f)
}

/// The tool result for a finished command: stdout on success; on failure stdout and
/// stderr together, or a description of the status when both are empty. Output cut at
/// the cap is an error result (the command was stopped before it finished) holding what
/// was read of stdout and stderr, then a marker saying so.
fn outcome(status: ExitStatus, collected: &Collected, limit: usize) -> (String, bool) {
    if collected.truncated {
        let mut text = whole_chars(&collected.stdout);
        text.push_str(&whole_chars(&collected.stderr));
        text.push_str(&format!(
            "\n[output truncated: the command wrote more than the {limit}-byte limit \
             (--max-tool-output-bytes) and was stopped]"
        ));
        return (text, true);
    }
    let stdout = String::from_utf8_lossy(&collected.stdout);
    if status.success() {
        return (stdout.trim_end().to_owned(), false);
    }
    let mut both = stdout.into_owned();
    both.push_str(&String::from_utf8_lossy(&collected.stderr));
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

/// Output cut at an arbitrary byte as text, without a replacement character for a
/// multi-byte character the cut split.
fn whole_chars(bytes: &[u8]) -> String {
    let mut end = bytes.len();
    // Back over at most three continuation bytes to the start of the last character.
    let mut start = end;
    while start > 0 && end - start < 3 && bytes[start - 1] & 0xC0 == 0x80 {
        start -= 1;
    }
    if start > 0 {
        let lead = bytes[start - 1];
        let needed = match lead {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 0,
        };
        if needed > end - (start - 1) {
            end = start - 1;
        }
    }
    String::from_utf8_lossy(&bytes[..end]).into_owned()
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
    use std::time::{Duration, Instant};

    fn run(command: &str, input: &str) -> (String, bool) {
        run_limited(command, input, DEFAULT_MAX_OUTPUT_BYTES)
    }

    fn run_limited(command: &str, input: &str, max_output: usize) -> (String, bool) {
        Job {
            call_id: "c1".into(),
            name: "t".into(),
            command: command.into(),
            input: input.into(),
            max_output,
            running: Running::default(),
        }
        .run()
    }

    /// Alive and not a zombie (a zombie's parent may be an init that never reaps).
    fn alive(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !matches!(
                stat.rsplit(')')
                    .next()
                    .and_then(|s| s.split_whitespace().next()),
                Some("Z" | "X")
            ),
            Err(_) => false,
        }
    }

    fn wait_gone(pid: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !alive(pid) {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
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
        let (out, is_error) = run_limited("head -c 300000 /dev/zero | tr '\\0' y", &big, 1 << 20);
        assert!(!is_error);
        assert_eq!(out.len(), 300_000);
    }

    #[test]
    fn output_up_to_the_limit_is_whole() {
        let (out, is_error) = run_limited("head -c 1000 /dev/zero | tr '\\0' y", "", 1000);
        assert_eq!((out.len(), is_error), (1000, false));
    }

    #[test]
    fn output_past_the_limit_is_cut_with_a_marker() {
        let (out, is_error) = run_limited("head -c 1001 /dev/zero | tr '\\0' y", "", 1000);
        assert!(is_error);
        let (kept, marker) = out.split_once('\n').expect("a marker line");
        assert_eq!(kept, "y".repeat(1000));
        assert_eq!(
            marker,
            "[output truncated: the command wrote more than the 1000-byte limit \
             (--max-tool-output-bytes) and was stopped]"
        );
    }

    #[test]
    fn stdout_and_stderr_share_the_limit() {
        let command = "head -c 600 /dev/zero | tr '\\0' o; head -c 600 /dev/zero | tr '\\0' e >&2";
        let (out, is_error) = run_limited(command, "", 1000);
        assert!(is_error);
        let kept = out.split('\n').next().unwrap_or_default();
        assert_eq!(kept.len(), 1000, "{out}");
        assert!(out.contains("[output truncated"), "{out}");
    }

    #[test]
    fn a_runaway_command_is_stopped_at_the_limit() {
        // `yes` never ends by itself: only the kill at the cap ends this call.
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(run_limited("echo $$ >&2; yes", "", 4096));
        });
        let (out, is_error) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the runaway command was stopped");
        assert!(is_error);
        assert!(out.len() < 4096 + 200, "{} bytes", out.len());
        assert!(out.ends_with("and was stopped]"), "{out}");
    }

    #[test]
    fn what_the_command_leaves_running_ends_with_it() {
        let (pid, is_error) = run("sleep 1000 >/dev/null 2>&1 & echo $!", "");
        assert!(!is_error, "{pid}");
        assert!(
            wait_gone(&pid),
            "background process {pid} outlived its command"
        );
    }

    #[test]
    fn abandoning_a_call_kills_its_whole_group() {
        let dir = std::env::temp_dir().join(format!("panto-shell-tool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pid_file = dir.join("pid");
        let _ = std::fs::remove_file(&pid_file);
        // A grandchild, and a shell that closed its pipes and keeps waiting.
        let command = format!(
            "sleep 1000 & echo $! > '{}.tmp'; mv '{0}.tmp' '{0}'; exec >/dev/null 2>&1; wait",
            pid_file.display()
        );
        let tools = ShellTools::new(HashMap::new(), DEFAULT_MAX_OUTPUT_BYTES);
        let job = Job {
            call_id: "c1".into(),
            name: "t".into(),
            command,
            input: String::new(),
            max_output: DEFAULT_MAX_OUTPUT_BYTES,
            running: tools.running.clone(),
        };
        let handle = thread::spawn(move || job.run());
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                break pid.trim().to_owned();
            }
            assert!(Instant::now() < deadline, "the command did not start");
            thread::sleep(Duration::from_millis(20));
        };
        tools.abandon("c1");
        let (out, is_error) = handle.join().expect("tool thread");
        assert!(is_error, "{out}");
        assert!(
            wait_gone(&pid),
            "grandchild {pid} outlived the abandoned call"
        );
    }

    #[test]
    fn whole_chars_drops_a_split_character() {
        let text = "aé€😀";
        for cut in 0..=text.len() {
            let got = whole_chars(&text.as_bytes()[..cut]);
            assert!(text.starts_with(&got), "{cut}: {got:?}");
            assert!(got.len() + 3 >= cut, "{cut}: {got:?}");
        }
        assert_eq!(whole_chars(b"ok\xff"), "ok\u{fffd}");
    }
}
