"""panto's own thread pools: one for async streams' waits, one for sync tools.

Why not ``asyncio.to_thread`` / the default executor: it is small (``cpu + 4`` threads)
and shared, every blocked stream holds one of its threads, so streams starve each other
and everything else that uses it; its threads are also joined at interpreter exit, so a
wait still running delays exit. These pools grow on demand up to a high cap (a waiting
thread costs memory, not CPU), shrink when idle, and use daemon threads that never block
exit (panto's ``atexit`` hook cancels every stream, which ends every wait).

**Stuck threads.** A job may carry a deadline: the time after which nobody waits for
its result (a tool call past its agent's ``tool_timeout_ms``: the turn has answered the
model with a timeout and moved on). A thread still running its job past the deadline is
*stuck* — a tool that blocks forever cannot be interrupted in Python. Stuck threads are
not counted against ``max_threads``, so they cannot starve every other agent's tools;
the pool grows past them (up to ``hard_max_threads``, a bound on what leaks), logs a
warning on the ``panto`` logger once per stuck job, and ``stuck`` counts them (in
``panto.diagnostics()``). A queued job whose deadline passes before a thread takes it is
dropped (its future cancelled): its turn no longer waits for it.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from concurrent.futures import Executor, Future
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

__all__ = ["Pool"]

_log = logging.getLogger("panto")


def _done() -> None:
    """What a finished job's function becomes."""


class _Job:
    __slots__ = ("fut", "fn", "args", "kwargs", "deadline", "what", "stuck")

    def __init__(
        self,
        fut: "Future[Any]",
        fn: Callable[..., Any],
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        deadline: Optional[float],
        what: str,
    ) -> None:
        self.fut = fut
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.deadline = deadline
        self.what = what
        self.stuck = False


class Pool(Executor):
    """A thread pool that grows to ``max_threads`` (not counting stuck threads, and never
    past ``hard_max_threads``) and lets idle threads go."""

    def __init__(
        self,
        name: str,
        max_threads: int,
        idle_timeout: float = 10.0,
        hard_max_threads: Optional[int] = None,
    ) -> None:
        self._name = name
        self._max = max_threads
        self._hard_max = max(4096 if hard_max_threads is None else hard_max_threads, max_threads)
        self._idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._jobs: Deque[_Job] = deque()
        self._wakeup = threading.Condition(self._lock)
        self._threads = 0
        # Started but not yet waiting for or running a job: each will take one.
        self._starting = 0
        self._idle = 0
        self._busy = 0
        self._stuck = 0
        self._serial = 0
        self._shutdown = False
        # Running jobs with a deadline, by deadline; watched by one thread, started with
        # the first such job.
        self._deadlines: List[Tuple[float, int, _Job]] = []
        self._watch = threading.Condition(self._lock)
        self._watching = False

    # -- diagnostics -----------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        return self._threads

    @property
    def busy(self) -> int:
        """Jobs running now (stuck ones included)."""
        return self._busy

    @property
    def stuck(self) -> int:
        """Threads still running a job past its deadline (nobody waits for it)."""
        return self._stuck

    @property
    def queued(self) -> int:
        return len(self._jobs)

    @property
    def max_threads(self) -> int:
        return self._max

    def set_max_threads(self, n: int) -> None:
        if n < 1:
            raise ValueError("max_threads: must be at least 1")
        with self._lock:
            self._max = n
            self._hard_max = max(self._hard_max, n)
            self._grow()

    # -- Executor --------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
        return self.submit_job(None, "", fn, *args, **kwargs)

    def submit_job(
        self, deadline: Optional[float], what: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> "Future[Any]":
        """``submit`` for a job nobody waits for after ``deadline`` (``time.monotonic()``
        seconds; ``None``: no deadline). ``what`` names the job in the warning logged if
        its thread is still running it then."""
        fut: "Future[Any]" = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self._name}: the pool is shut down")
            self._jobs.append(_Job(fut, fn, args, kwargs, deadline, what))
            # Every idle thread takes one queued job; start a thread for each job beyond
            # them (a notified thread counts as idle until it has taken its job).
            self._wakeup.notify()
            self._grow()
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._jobs:
                    self._jobs.popleft().fut.cancel()
            self._wakeup.notify_all()
            self._watch.notify_all()

    # -- threads (called with the lock held) ------------------------------------------
    def _grow(self) -> None:
        """Starts a thread for each queued job that no idle or starting thread will take,
        within the limits."""
        while (
            len(self._jobs) > self._idle + self._starting
            and self._threads - self._stuck < self._max
            and self._threads < self._hard_max
        ):
            try:
                self._start(self._work, f"{self._name}-{self._serial + 1}")
            except RuntimeError as exc:  # the OS refused a thread: the jobs wait for one
                _log.warning("panto: %s: cannot start a thread (%s); %d job(s) wait", self._name, exc, len(self._jobs))
                return
            self._threads += 1
            self._starting += 1
        if self._jobs and self._threads >= self._hard_max and self._threads - self._stuck < self._max:
            _log.warning(
                "panto: %s: %d threads, %d of them stuck past their deadline: no thread is "
                "started past %d; new jobs wait",
                self._name,
                self._threads,
                self._stuck,
                self._hard_max,
            )

    def _start(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._serial += 1

    # -- worker ----------------------------------------------------------------------
    def _take(self) -> Optional[_Job]:
        """The next job to run (with the lock held), waiting while idle; ``None``: this
        thread ends. Jobs whose deadline passed while queued are dropped."""
        while True:
            while not self._jobs:
                if self._shutdown:
                    return None
                self._idle += 1
                woke = self._wakeup.wait(self._idle_timeout)
                self._idle -= 1
                if not woke and not self._jobs:
                    return None
            job = self._jobs.popleft()
            if job.deadline is not None and time.monotonic() >= job.deadline:
                job.fut.cancel()
                continue
            return job

    def _work(self) -> None:
        starting = True
        while True:
            with self._lock:
                if starting:
                    # From here this thread counts as idle (waiting) or busy.
                    self._starting -= 1
                    starting = False
                job = self._take()
                if job is None:
                    self._threads -= 1
                    return
                self._busy += 1
                if job.deadline is not None:
                    heapq.heappush(self._deadlines, (job.deadline, id(job), job))
                    if not self._watching:
                        try:
                            self._start(self._watcher, f"{self._name}-watch")
                            self._watching = True
                        except RuntimeError as exc:  # tried again with the next job
                            _log.warning("panto: %s: cannot start its watcher (%s)", self._name, exc)
                    else:
                        self._watch.notify()
            fut = job.fut
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        result = job.fn(*job.args, **job.kwargs)
                    except BaseException as exc:  # noqa: BLE001 - handed to the future
                        fut.set_exception(exc)
                    else:
                        fut.set_result(result)
            finally:
                with self._lock:
                    self._busy -= 1
                    if job.stuck:
                        self._stuck -= 1
                        _log.info("panto: %s: %s ended after all", self._name, job.what or "a job")
                    # A finished job is never stuck; the watcher drops it from its heap,
                    # which keeps only this shell (not the function and its arguments).
                    job.deadline = None
                    job.fn = _done
                    job.args, job.kwargs = (), {}
                del job, fut

    def _watcher(self) -> None:
        """Marks running jobs stuck as their deadlines pass, and starts the threads that
        frees room for."""
        with self._lock:
            while not self._shutdown:
                now = time.monotonic()
                while self._deadlines and (self._deadlines[0][2].deadline is None or self._deadlines[0][0] <= now):
                    _, _, job = heapq.heappop(self._deadlines)
                    if job.deadline is None:
                        continue  # it ended
                    job.stuck = True
                    self._stuck += 1
                    _log.warning(
                        "panto: %s: %s is still running after its deadline (nobody waits for "
                        "its result); its thread no longer counts against the pool's %d; "
                        "%d thread(s) stuck",
                        self._name,
                        job.what or "a job",
                        self._max,
                        self._stuck,
                    )
                    self._grow()
                if not self._deadlines:
                    self._watching = False
                    return
                self._watch.wait(max(self._deadlines[0][0] - now, 0.001))
