//! Owns Ctrl-C (and SIGTERM/SIGHUP): during a turn it cancels the turn — the main thread
//! then sees `cancelled`, saves the session and decides what follows (exit 130 for
//! `run`, back to the prompt for `chat`); outside a turn, or a second time while the
//! cancelled turn winds down, it exits with 130 at once. Exiting at once still kills the
//! tool processes, removes a half-written session file, and in `--json` mode ends
//! stdout with the error line.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use panto::CancellationToken;
use panto_pull::StreamControl;

use crate::exit::exit_code;
use crate::render;
use crate::session;
use crate::shell_tool;

/// Longest wait for stdout when leaving on a signal (see [`render::write_exit_line`]).
const EXIT_LINE_PATIENCE: Duration = Duration::from_secs(1);

enum Phase {
    /// No turn is running (reading the prompt, setting up): nothing to save, exit now.
    Idle,
    /// A turn is running or being finished (printed, saved).
    Turn(StreamControl),
    /// `/compact` is summarizing the conversation: Ctrl-C cancels it (the history is
    /// then untouched).
    Compact(CancellationToken),
}

/// Shared between the main thread and the signal handler thread.
#[derive(Clone)]
pub struct Interrupt {
    phase: Arc<Mutex<Phase>>,
    /// `--json`: leaving on a signal still ends stdout with the error line.
    json: bool,
    /// An interactive chat: a signal outside a turn is ignored (the prompt's line
    /// editor reads Ctrl-C as a key; only Ctrl-D or a command leaves).
    keep_running_when_idle: Arc<std::sync::atomic::AtomicBool>,
}

impl Interrupt {
    /// Installs the handler. If that fails (a handler already set by an embedding
    /// process, or no signal support), Ctrl-C keeps its default effect of killing the
    /// process: worse for the session file, but never a reason not to run.
    pub fn install(json: bool) -> Interrupt {
        let interrupt = Interrupt {
            phase: Arc::new(Mutex::new(Phase::Idle)),
            json,
            keep_running_when_idle: Arc::default(),
        };
        let handler = interrupt.clone();
        let _ = ctrlc::set_handler(move || handler.on_signal());
        interrupt
    }

    /// From now on a signal outside a turn is ignored.
    pub fn keep_running_when_idle(&self) {
        self.keep_running_when_idle
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Ctrl-C now cancels this turn instead of exiting.
    pub fn begin_turn(&self, control: StreamControl) {
        *self.lock() = Phase::Turn(control);
        render::new_final_line();
    }

    /// Ctrl-C now cancels this compaction instead of exiting.
    pub fn begin_compact(&self, cancel: CancellationToken) {
        *self.lock() = Phase::Compact(cancel);
    }

    /// Ctrl-C now exits (back at the prompt).
    pub fn idle(&self) {
        *self.lock() = Phase::Idle;
        render::new_final_line();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        // The handler and the main thread only swap the phase; a poisoned lock still
        // holds a meaningful one.
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn on_signal(&self) {
        let phase = self.lock();
        // The first signal of a turn cancels it cleanly; the main thread takes it from
        // there. A second one while the cancelled turn is still winding down means the
        // user insists; at the prompt there is nothing to wind down. Both leave now.
        match &*phase {
            Phase::Turn(control) if !control.is_cancelled() => {
                control.cancel();
                return;
            }
            Phase::Compact(cancel) if !cancel.is_cancelled() => {
                cancel.cancel();
                return;
            }
            Phase::Idle
                if self
                    .keep_running_when_idle
                    .load(std::sync::atomic::Ordering::SeqCst) =>
            {
                return;
            }
            _ => {}
        }
        drop(phase);
        self.leave_now()
    }

    fn leave_now(&self) -> ! {
        // Both stay locked until the process is gone, so nothing new starts meanwhile.
        shell_tool::kill_all_for_exit();
        session::abandon_save_for_exit();
        leave_terminal_clean();
        if self.json {
            render::write_exit_line(EXIT_LINE_PATIENCE);
        }
        std::process::exit(i32::from(exit_code(panto::ErrorKind::Cancelled)));
    }
}

/// Resets text attributes (dimmed reasoning may be active) and ends the line after the
/// echoed `^C`, so the shell prompt comes back clean.
fn leave_terminal_clean() {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        // Best effort: the process is exiting either way.
        let _ = err.write_all(b"\x1b[0m\n");
    }
}
