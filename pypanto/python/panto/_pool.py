"""panto's own thread pools: one for async streams' waits, one for sync tools.

Why not ``asyncio.to_thread`` / the default executor: it is small (``cpu + 4`` threads)
and shared, every blocked stream holds one of its threads, so streams starve each other
and everything else that uses it; its threads are also joined at interpreter exit, so a
wait still running delays exit. These pools grow on demand up to a high cap (a waiting
thread costs memory, not CPU), shrink when idle, and use daemon threads that never block
exit (panto's ``atexit`` hook cancels every stream, which ends every wait).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Executor, Future
from typing import Any, Callable, Deque, Dict, Optional, Tuple

__all__ = ["Pool"]

_Job = Tuple["Future[Any]", Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]


class Pool(Executor):
    """A thread pool that grows to ``max_threads`` and lets idle threads go."""

    def __init__(self, name: str, max_threads: int, idle_timeout: float = 10.0) -> None:
        self._name = name
        self._max = max_threads
        self._idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._jobs: Deque[_Job] = deque()
        self._wakeup = threading.Condition(self._lock)
        self._threads = 0
        self._idle = 0
        self._busy = 0
        self._serial = 0
        self._shutdown = False

    # -- diagnostics -----------------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads alive now (busy or idle)."""
        return self._threads

    @property
    def busy(self) -> int:
        """Jobs running now."""
        return self._busy

    @property
    def queued(self) -> int:
        return len(self._jobs)

    def set_max_threads(self, n: int) -> None:
        if n < 1:
            raise ValueError("max_threads: must be at least 1")
        with self._lock:
            self._max = n

    # -- Executor --------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> "Future[Any]":
        fut: "Future[Any]" = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self._name}: the pool is shut down")
            self._jobs.append((fut, fn, args, kwargs))
            # Every idle thread takes one queued job; start a thread for each job beyond
            # them (a notified thread counts as idle until it has taken its job).
            self._wakeup.notify()
            if len(self._jobs) > self._idle and self._threads < self._max:
                self._threads += 1
                self._serial += 1
                t = threading.Thread(
                    target=self._work,
                    name=f"{self._name}-{self._serial}",
                    daemon=True,
                )
                try:
                    t.start()
                except BaseException:
                    self._threads -= 1
                    raise
        return fut

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._jobs:
                    self._jobs.popleft()[0].cancel()
            self._wakeup.notify_all()

    # -- worker ----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._lock:
                job: Optional[_Job] = None
                while not self._jobs:
                    if self._shutdown:
                        self._threads -= 1
                        return
                    self._idle += 1
                    woke = self._wakeup.wait(self._idle_timeout)
                    self._idle -= 1
                    if not woke and not self._jobs:
                        self._threads -= 1
                        return
                job = self._jobs.popleft()
                self._busy += 1
            fut, fn, args, kwargs = job
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:  # noqa: BLE001 - handed to the future
                        fut.set_exception(exc)
                    else:
                        fut.set_result(result)
            finally:
                del job, fut, fn, args, kwargs
                with self._lock:
                    self._busy -= 1
