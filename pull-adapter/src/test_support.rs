//! Helpers of the crate's unit tests.

/// The scheduling state of thread `tid` of this process (`R`, `S`, `D`…).
fn thread_state(tid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Thread `tid` sleeps inside `poll` (the kernel's wait channel or system call says so).
fn blocked_in_poll(tid: libc::pid_t) -> bool {
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
