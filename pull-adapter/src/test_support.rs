//! Helpers of the crate's tests: its unit tests, and `tests/ready.rs`, which includes
//! this file (`#[path]`) and uses part of it.
#![allow(dead_code)]

/// The scheduling state of thread `tid` of this process (`R`, `S`, `D`…).
fn thread_state(tid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Thread `tid` sleeps inside `poll` (the kernel's wait channel or system call says so).
pub(crate) fn blocked_in_poll(tid: libc::pid_t) -> bool {
    if thread_state(tid) != Some('S') {
        return false;
    }
    let task = format!("/proc/self/task/{tid}");
    let wchan = std::fs::read_to_string(format!("{task}/wchan")).unwrap_or_default();
    if wchan.contains("poll") {
        return true;
    }
    // A kernel that hides wait channels still shows the system call a thread is in.
    let syscall = std::fs::read_to_string(format!("{task}/syscall")).unwrap_or_default();
    let nr: i64 = syscall
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1);
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_poll {
        return true;
    }
    nr == libc::SYS_ppoll
}

/// Returns once thread `tid` is asleep in `poll` (panics after a minute: it never got
/// there).
pub(crate) fn wait_until_blocked(tid: libc::pid_t) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !blocked_in_poll(tid) {
        assert!(
            std::time::Instant::now() < deadline,
            "thread {tid} never blocked in poll"
        );
        std::thread::yield_now();
    }
}

/// A thread blocked in `poll` on `fd` (established from its state before this returns);
/// it answers whether `fd` turned readable within a minute (the bound only turns a lost
/// wake-up into a failure instead of a hang).
pub(crate) fn spawn_poller(fd: std::os::fd::RawFd) -> std::thread::JoinHandle<bool> {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let poller = std::thread::spawn(move || {
        // SAFETY: gettid has no arguments.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        let n = unsafe { libc::poll(&mut p, 1, 60_000) };
        n == 1 && p.revents & libc::POLLIN != 0
    });
    wait_until_blocked(tid_rx.recv().unwrap());
    poller
}
