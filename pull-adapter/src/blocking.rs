//! Owns the blocking calls of the bindings that are not turns (an agent's MCP servers'
//! resources and prompts, for one): [`block_on_worker`] runs one on the agent's worker
//! thread, where its turns run and its MCP servers' pipes and connections are driven,
//! and blocks the calling thread until it ends. It does not own what the work does.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use crossbeam_channel::bounded;
use futures_util::FutureExt;
use panto::{Agent, CancellationToken, Error};

use crate::pool::{on_worker, worker_for};

/// Runs the future `work` makes (from a clone of `agent` and of `cancel`) on `agent`'s
/// worker thread and blocks the calling thread until it ends, returning its result.
/// `what` names the call in errors. A token already cancelled is a `cancelled` error at
/// once, with nothing started; cancelling it later is the work's to honour (give up and
/// answer `cancelled`). A panic in the work is an `internal` error. Must not be called
/// from a panto worker thread (that is a `config` error rather than a deadlock), nor
/// with an agent made before the process forked.
pub fn block_on_worker<T, F, Fut>(
    agent: &Agent,
    what: &str,
    cancel: &CancellationToken,
    work: F,
) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(Agent, CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    if on_worker() {
        return Err(Error::config(format!(
            "{what}: called on a panto worker thread, which would wait for itself"
        )));
    }
    if cancel.is_cancelled() {
        return Err(Error::cancelled());
    }
    let worker = worker_for(agent)?;
    let (tx, rx) = bounded::<Result<T, Error>>(1);
    let agent = agent.clone();
    let cancel = cancel.clone();
    let name = what.to_owned();
    drop(worker.spawn(async move {
        let run = AssertUnwindSafe(work(agent, cancel)).catch_unwind().await;
        let result = run.unwrap_or_else(|_| Err(Error::internal(format!("{name} panicked"))));
        let _ = tx.send(result);
    }));
    rx.recv().unwrap_or_else(|_| {
        Err(Error::internal(format!(
            "{what}: the task ended without a result"
        )))
    })
}
