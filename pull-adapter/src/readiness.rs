//! The readiness descriptor of a stream: a file descriptor that `poll`, `epoll`,
//! `select` (and Go's netpoller, asyncio's `add_reader`, …) can wait on, readable while
//! the stream has something to report. An eventfd on Linux, a pipe elsewhere. Created
//! only when someone asks for it; owned by the stream and closed when the stream is
//! dropped. Every operation runs under the stream's outbox lock (see
//! `handoff::Outbox::ready`), which is what makes "set" and "clear" race-free: the
//! consumer clears only after checking, under that lock, that nothing is waiting, and
//! whoever hands something over sets it under the same lock.

use std::io;

/// Where a stream's descriptor stands.
pub(crate) enum ReadyFd {
    /// Nobody asked for one: flushes and wake-ups cost nothing extra.
    NotAsked,
    #[cfg(unix)]
    Open(Readiness),
    /// The stream reports to a shared set (`crate::ReadySet`) instead of a descriptor of
    /// its own: "readable" means "its token is in the set's queue".
    #[cfg(unix)]
    Member(crate::ready_set::Membership),
    /// The stream was dropped: the descriptor is closed and will not be made again.
    Closed,
}

impl ReadyFd {
    /// Makes the descriptor readable (nothing if none was asked for).
    pub(crate) fn set(&mut self) {
        #[cfg(unix)]
        match self {
            ReadyFd::Open(r) => r.set(),
            ReadyFd::Member(m) => m.set(),
            _ => {}
        }
    }

    /// Makes it unreadable; the caller has checked that nothing waits.
    pub(crate) fn clear(&mut self) {
        #[cfg(unix)]
        match self {
            ReadyFd::Open(r) => r.clear(),
            ReadyFd::Member(m) => m.clear(),
            _ => {}
        }
    }

    /// The stream is gone: its own descriptor is made readable (a poller waiting on it
    /// returns) and closed; a set never reports it again.
    pub(crate) fn close(&mut self) {
        #[cfg(unix)]
        match self {
            ReadyFd::Open(r) => r.set(),
            ReadyFd::Member(m) => m.leave(),
            _ => {}
        }
        *self = ReadyFd::Closed;
    }
}

/// An open readiness descriptor, and whether it is readable now (so that setting it
/// again, or clearing it when it is not set, costs no system call).
#[cfg(unix)]
pub(crate) struct Readiness {
    /// What pollers wait on.
    read_fd: std::os::fd::OwnedFd,
    /// Where it is made readable: the same eventfd, or a pipe's write end.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    write_fd: std::os::fd::OwnedFd,
    signaled: bool,
}

#[cfg(unix)]
impl Readiness {
    /// A new, unreadable descriptor: non-blocking and close-on-exec.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn new() -> io::Result<Readiness> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd has no memory arguments; a non-negative result is a new fd
        // that nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Readiness {
            // SAFETY: `fd` was just created and is owned by nothing else.
            read_fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) },
            signaled: false,
        })
    }

    /// A new, unreadable descriptor: the read end of a non-blocking, close-on-exec pipe.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn new() -> io::Result<Readiness> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just created and are owned by nothing else.
        let (read_fd, write_fd) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        for fd in [fds[0], fds[1]] {
            // (No pipe2 everywhere: a fork between pipe and here leaks these two into a
            // child that execs, which is harmless for a pipe nobody else writes.)
            // SAFETY: fcntl on descriptors this function owns.
            let ok = unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
                    && libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) == 0
            };
            if !ok {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Readiness {
            read_fd,
            write_fd,
            signaled: false,
        })
    }

    pub(crate) fn raw(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.read_fd.as_raw_fd()
    }

    /// Readable now (set and not cleared since).
    pub(crate) fn is_set(&self) -> bool {
        self.signaled
    }

    pub(crate) fn set(&mut self) {
        if self.signaled {
            return;
        }
        self.signaled = true;
        // The write cannot block or fail for want of room: it happens only when the
        // descriptor is unreadable (the counter is 0, the pipe empty).
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use std::os::fd::AsRawFd;
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local u64 to a descriptor this owns.
            unsafe {
                libc::write(
                    self.read_fd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            use std::os::fd::AsRawFd;
            let one = 1u8;
            // SAFETY: writes one byte from a local to a descriptor this owns.
            unsafe { libc::write(self.write_fd.as_raw_fd(), (&one as *const u8).cast(), 1) };
        }
    }

    pub(crate) fn clear(&mut self) {
        if !self.signaled {
            return;
        }
        self.signaled = false;
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 8];
        // Reading an eventfd returns its counter and resets it; a pipe holds the one
        // byte written since it was last readable. Non-blocking either way.
        // SAFETY: reads at most 8 bytes into a local buffer of 8.
        unsafe { libc::read(self.read_fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }
}

/// Why a descriptor cannot be had.
pub(crate) fn closed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the stream was dropped: its readiness descriptor is closed",
    )
}

/// Why a stream has no descriptor of its own, or cannot join a set.
pub(crate) fn member_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        "the stream already reports its readiness one way (its own descriptor, or a ready \
         set): it has one, never both",
    )
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn readable(fd: std::os::fd::RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn set_and_clear_are_levels_and_idempotent() {
        let mut r = Readiness::new().unwrap();
        let fd = r.raw();
        assert!(!readable(fd));
        r.set();
        r.set();
        assert!(readable(fd));
        r.clear();
        assert!(!readable(fd));
        r.clear();
        assert!(!readable(fd));
        r.set();
        assert!(readable(fd));
        // SAFETY: F_GETFD / F_GETFL on a descriptor owned by `r`.
        let (fd_flags, fl_flags) = unsafe {
            (
                libc::fcntl(fd, libc::F_GETFD),
                libc::fcntl(fd, libc::F_GETFL),
            )
        };
        assert!(fd_flags & libc::FD_CLOEXEC != 0);
        assert!(fl_flags & libc::O_NONBLOCK != 0);
    }
}
