"""``AsyncStream``: one turn as an async iterator, over the same native ``Stream``.

``__anext__`` first takes, on the event loop's thread, whatever the native stream has
ready (``_try_next_more``: the native buffer, or a burst drained without waiting, and
whether anything is left after it). Only when
nothing is ready does it wait — **on the event loop itself**, through the loop's **ready
set** (``_LoopSet``): one native ``ReadySet`` per event loop, whose one descriptor is
given to ``loop.add_reader`` once. A stream that waits is attached to its loop's set
under a token of its own (``Stream._attach``); the set's descriptor is readable while a
stream's token waits to be taken, and the loop's reader takes the tokens and wakes those
streams' tasks. No thread waits for a stream, and no descriptor is spent on one: 10,000
waiting streams cost their 10,000 sockets and one descriptor (a descriptor per stream
would have doubled that, past common limits), and a burst of streams turning ready costs
the loop one wake-up, not one per stream.

The native set reports a stream once per turn to ready after it last answered "nothing"
(``_try_next_more`` returning ``None``, or an event with ``more`` false), and never
answers either with a report pending, so a task that found nothing and then waits cannot
miss the report that follows. So a sparse event costs one native call, not an event and
then a "nothing": after ``more`` false the next ``__anext__`` waits at once. Between that
answer and the wait the task may be elsewhere (the body of ``async for`` awaits), and the
loop's reader may take the stream's one report with no task waiting for it: the stream
is **armed** in its set meanwhile (``_LoopSet.armed``), and a report taken for an armed
stream with nobody waiting disarms it, so its next ``__anext__`` asks the native stream
first instead of waiting for a report that already came. A stream first awaited on one
loop and later on another waits, on the second, in a thread.

``WAIT_POOL`` is what is left of the threads: it serves only loops that cannot watch a
descriptor (``add_reader`` raises ``NotImplementedError``: Windows' Proactor loop) and
systems without one (not Unix), where a wait takes one of its threads (``_wait``,
without the GIL) as before; and the blocking native calls the async API makes
(``AsyncStream.aclose``'s close, ``Agent.acompact``).

Cancelling the task that awaits, ``aclose()``, or leaving ``async with`` cancels the
turn; the cancel makes the descriptor readable (or wakes the waiting thread) at once.

This is a class, not an async generator: it can be closed from another task while one
awaits it, and it does not depend on the garbage collector to clean up.

asyncio only: under another async library (trio, curio) the async API raises
``RuntimeError`` saying so (found through ``sniffio``, if it is imported; trio is never
imported here). asyncio itself is imported when first needed, not by ``import panto``.
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Union

from ._pool import Pool

if TYPE_CHECKING:
    import asyncio

    from ._media import Image, Input
    from ._native import Checkpoint, Stream
    from ._vocab import Event, MessageComplete

__all__ = ["AsyncStream", "WAIT_POOL"]

#: Threads for waits on loops that cannot watch a descriptor, and for the async API's
#: blocking native calls: one per such wait, created on demand.
WAIT_POOL = Pool("panto-wait", max_threads=4096)

# Streams waiting on an event loop right now, for diagnostics().
_loop_waits = 0
_loop_waits_lock = threading.Lock()


def loop_waits() -> int:
    """How many async streams wait on an event loop's reader right now."""
    return _loop_waits


def _count_loop_wait(delta: int) -> None:
    global _loop_waits
    with _loop_waits_lock:
        _loop_waits += delta


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class _LoopSet:
    """The ready set of one event loop: its descriptor is watched by the loop's one
    reader for panto, registered for the loop's life (``_ready`` takes what the set
    reported and wakes those streams' waiting tasks).

    A loop closed while tasks still wait on it (stopped without cancelling them) will
    never resume them: its set is then dropped (``_drop``) — its waiters let go and
    counted out, its native set freed, which closes its descriptor — as soon as the
    loop lets go of the reader (a selector loop does so when it closes), or else when
    the next loop's set is made. The stranded tasks then hold the only references to
    their streams, and the collector, closing their coroutines, closes the streams."""

    __slots__ = ("native", "fd", "waiters", "armed", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from ._native import ReadySet

        self.native: Optional[ReadySet] = ReadySet()
        self.fd = self.native.fd()
        #: The futures of the tasks waiting, by stream token.
        self.waiters: Dict[int, List[asyncio.Future[None]]] = {}
        #: The tokens of streams whose last answer was an event with nothing else ready
        #: and whose consumer has not waited since: their next ``__anext__`` waits
        #: without asking first, unless a report is taken for them before (``_ready``).
        self.armed: Set[int] = set()
        # Level-triggered: called on every loop iteration while readable, and `take`
        # leaves it unreadable once it has taken everything. The reader is an object of
        # its own, so that the loop letting go of it (its close) is seen.
        reader = _Reader(self)
        weakref.finalize(reader, _reader_released, weakref.ref(self), weakref.ref(loop))
        loop.add_reader(self.fd, reader)

    def _ready(self) -> None:
        native = self.native
        if native is None:
            return
        waiters = self.waiters
        armed = self.armed
        for token in native.take():
            futs = waiters.get(token)
            if futs:
                for fut in futs:
                    _wake(fut)
            elif armed:
                # Nobody waits: the stream's one report would be lost to a consumer that
                # waits for it next. Disarmed, that consumer asks the stream first.
                armed.discard(token)

    def _discard(self, token: int, fut: "asyncio.Future[None]") -> None:
        """A wait ended: its future leaves the waiters and the count (unless the set
        was dropped, which did both)."""
        futs = self.waiters.get(token)
        if futs is None or fut not in futs:
            return
        futs.remove(fut)
        if not futs:
            del self.waiters[token]
        _count_loop_wait(-1)

    def _drop(self) -> None:
        """The loop is closed (or gone): nothing will resume its waiting tasks. Lets go
        of their futures (and so of the loop), counts them out, and frees the native
        set (its descriptor closes; streams still attached to it report nowhere)."""
        gone = sum(len(futs) for futs in self.waiters.values())
        self.waiters.clear()
        self.armed.clear()
        _count_loop_wait(-gone)
        self.native = None


class _Reader:
    """The callable a loop's reader holds for its set: the set's ``_ready``."""

    __slots__ = ("ls", "__weakref__")

    def __init__(self, ls: _LoopSet) -> None:
        self.ls = ls

    def __call__(self) -> None:
        self.ls._ready()


def _reader_released(
    ls_ref: "weakref.ReferenceType[_LoopSet]", loop_ref: "weakref.ReferenceType[asyncio.AbstractEventLoop]"
) -> None:
    """The loop let go of a set's reader: when the loop is closed or gone, the set is
    dropped. (A reader removed from a loop that runs on is its remover's business.)"""
    loop = loop_ref()
    if loop is not None and not loop.is_closed():
        return
    ls = ls_ref()
    if ls is not None:
        _forget(loop, ls)


def _forget(loop: Optional[asyncio.AbstractEventLoop], ls: _LoopSet) -> None:
    if loop is not None and _loop_sets.get(loop) is ls:
        del _loop_sets[loop]
    ls._drop()


def _sweep_closed_loops() -> None:
    """Drops the sets of loops closed without letting go of their reader."""
    for loop, ls in list(_loop_sets.items()):
        if ls is not None and loop.is_closed():
            _forget(loop, ls)


#: Each loop's set, or None for a loop that cannot have one (no ``add_reader``, no
#: descriptor to be had). The loop keeps its set alive through its reader; the set ends
#: with the loop.
_loop_sets: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[_LoopSet]]" = (
    weakref.WeakKeyDictionary()
)
_tokens = itertools.count(1)


def _loop_set(loop: asyncio.AbstractEventLoop) -> Optional[_LoopSet]:
    try:
        return _loop_sets[loop]
    except KeyError:
        pass
    _sweep_closed_loops()
    ls: Optional[_LoopSet]
    try:
        ls = _LoopSet(loop)
    except (NotImplementedError, OSError):
        # A loop that watches no descriptors (Windows' Proactor), or none to be had:
        # threads it is.
        ls = None
    _loop_sets[loop] = ls
    return ls


class AsyncStream:
    """One turn as an async iterator and an async context manager
    (``agent.astream(prompt)``). ``MessageComplete`` is the last event."""

    __slots__ = ("_stream", "_runner", "_token", "_set", "_waits", "_dry", "__weakref__")

    def __init__(self, stream: Stream, runner: Any) -> None:
        """Wraps a native stream; ``Agent.astream`` makes these (not meant to be called
        directly)."""
        self._stream = stream
        self._runner = runner
        #: The stream's token in its loop's set (0: not attached yet) and that set
        #: (None: not attached, or waits in a thread).
        self._token = 0
        self._set: Optional[_LoopSet] = None
        self._waits = 0
        #: Armed in ``_set`` (``_arm``): the next ``__anext__`` looks there first.
        self._dry = False

    def __del__(self) -> None:
        # Armed and never reported again (dropped unclosed): its token leaves the set.
        if getattr(self, "_dry", False) and self._set is not None:
            self._set.armed.discard(self._token)

    def __aiter__(self) -> AsyncStream:
        """Returns the stream itself: ``async for event in stream``."""
        return self

    async def __anext__(self) -> Event:
        """The next event, awaited without holding a thread (on the loop's reader of
        the stream's readiness descriptor). Raises ``StopAsyncIteration`` after
        ``MessageComplete``, or the turn's ``PantoError`` (again on every later call);
        cancelling the awaiting task cancels the turn."""
        stream = self._stream
        ask = True
        if self._dry:
            # The last event came with nothing else ready: unless a report for this
            # stream was taken since (which disarmed it), wait for the next one without
            # asking to hear "nothing".
            self._dry = False
            ls = self._set
            if ls is not None and self._token in ls.armed:
                ls.armed.discard(self._token)
                ask = False
        if ask:
            got = stream._try_next_more()
            if got is not None:
                ev, more = got
                if not more:
                    self._arm()
                return ev
        while True:
            await self._wait()
            # A report may be for what an earlier call already took: then this is None
            # and the loop waits again.
            got = stream._try_next_more()
            if got is not None:
                ev, more = got
                if not more:
                    self._arm()
                return ev

    def _arm(self) -> None:
        """The stream said nothing else is ready: armed in its loop's set (if it has
        one), its next ``__anext__`` waits without asking."""
        ls = self._set
        if ls is not None:
            ls.armed.add(self._token)
            self._dry = True

    def _attached(self, loop: asyncio.AbstractEventLoop) -> Optional[_LoopSet]:
        """The loop's set with this stream attached to it (attached on its first wait);
        None when it waits in a thread instead."""
        ls = self._set
        if self._token:
            if ls is not None and _loop_sets.get(loop) is ls:
                return ls
            return None  # attached to another loop's set (or to none)
        ls = _loop_set(loop)
        token = next(_tokens)
        if ls is not None:
            native = ls.native  # a set in _loop_sets is never a dropped one
            try:
                if native is None:
                    raise OSError("the loop's set was dropped")
                self._stream._attach(native, token)
            except OSError:
                ls = None
        self._token, self._set = token, ls
        return ls

    async def _wait(self) -> None:
        """Waits until the native stream has something to report (an event, the end, a
        failure, a cancel); cancels the turn if the waiting task is cancelled."""
        loop = require_asyncio("iterating an AsyncStream")
        ls = self._attached(loop)
        if ls is None:
            return await self._wait_in_thread(loop)
        fut = loop.create_future()
        token = self._token
        ls.waiters.setdefault(token, []).append(fut)
        self._waits += 1
        _count_loop_wait(1)
        try:
            try:
                await fut
            finally:
                ls._discard(token, fut)
        except BaseException:
            # Cancelled (task cancel, Ctrl-C under asyncio.run): end the turn; close()
            # waits (briefly) for the turn to end, so the agent is free and its history
            # whole when this returns.
            self._stream.close()
            raise

    async def _wait_in_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        fut = loop.create_future()
        stream = self._stream
        holder = [stream]

        def wait() -> None:
            s = holder.pop()
            try:
                s._wait(None)
            finally:
                # Let go of the stream before waking the loop: the loop may drop its
                # last reference right away, and the turn must end there, not later
                # on this thread.
                del s
                try:
                    loop.call_soon_threadsafe(_wake, fut)
                except RuntimeError:
                    pass  # the loop is closed: nobody waits any more

        WAIT_POOL.submit(wait)
        try:
            await fut
        except BaseException:
            # As in _wait: the cancel wakes the waiting thread at once.
            stream.close()
            raise

    async def __aenter__(self) -> AsyncStream:
        """Returns the stream, for ``async with agent.astream(...) as stream:``."""
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Ends the turn when the block ends (``aclose()``): a turn still running is
        cancelled, and the history it leaves is valid."""
        await self.aclose()

    async def aclose(self) -> None:
        """Cancels the turn if it is still running and waits (in a thread, not on the
        loop) for it to end. Idempotent."""
        stream = self._stream
        if stream._state in ("done", "failed"):
            # The turn reported its end (or its failure): there is nothing to wait for,
            # and no thread is taken (`async with` around a stream read to its end).
            stream.close()
            return
        import asyncio

        stream.cancel()
        loop = require_asyncio("AsyncStream.aclose()")
        await asyncio.shield(loop.run_in_executor(WAIT_POOL, stream.close))

    close = aclose

    def cancel(self) -> None:
        """Cancels the turn; safe from any thread."""
        self._stream.cancel()

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel()`` (or ``aclose()``) was called on this stream."""
        return bool(self._stream.cancelled)

    def submit_tool_result(self, call_id: str, output: str, is_error: bool = False) -> None:
        """Answers a host-tool call announced by ``ToolCallStart(host=True)``."""
        self._stream.submit_tool_result(call_id, output, is_error)

    def submit_tool_parts(self, call_id: str, parts: "List[Union[str, Image]]", is_error: bool = False) -> None:
        """Answers a host-tool call with text and ``panto.Image`` parts, in order."""
        self._stream.submit_tool_parts(call_id, parts, is_error)

    def checkpoint(self) -> Optional[Checkpoint]:
        """The turn at its latest step boundary (``Stream.checkpoint``); never waits."""
        return self._stream.checkpoint()

    def steer(self, input: "Input") -> None:
        """Queues a user message into the running turn (``Stream.steer``); never waits,
        safe from any thread."""
        self._stream.steer(input)

    def undelivered(self) -> "List[Union[str, List[Any]]]":
        """The steering messages the turn did not deliver (``Stream.undelivered``)."""
        return self._stream.undelivered()

    async def final(self) -> MessageComplete:
        """Consumes the rest of the stream; returns the ``MessageComplete``."""
        async for _ in self:
            pass
        return self._stream.final()

    async def text(self) -> str:
        """Consumes the rest of the stream; returns the final assistant text."""
        return (await self.final()).text

    @property
    def waits(self) -> int:
        """How many times this stream waited (on the loop, in a thread, or spun for a
        burst being produced): one per burst, at most."""
        return int(self._stream.waits) + self._waits

    def consumer_waiting(self) -> bool:
        """Whether a task waits for this stream's next event (on the loop or in a
        thread)."""
        ls = self._set
        return (ls is not None and self._token in ls.waiters) or bool(
            self._stream.consumer_waiting()
        )

    def __repr__(self) -> str:
        return f"<panto.AsyncStream cancelled={self.cancelled}>"


def running_loop() -> Optional[asyncio.AbstractEventLoop]:
    """The running asyncio loop of this thread, if any. There is none if asyncio was
    never imported, and it is not imported to find out."""
    asyncio_module = sys.modules.get("asyncio")
    if asyncio_module is None:
        return None
    try:
        loop: asyncio.AbstractEventLoop = asyncio_module.get_running_loop()
    except RuntimeError:
        return None
    return loop


def other_async_library() -> Optional[str]:
    """The async library running here if it is not asyncio (``"trio"``…), as ``sniffio``
    tells (every such library sets it); ``None`` if there is none or it is asyncio.
    Nothing is imported to find out: without ``sniffio`` loaded, no such library runs."""
    sniffio = sys.modules.get("sniffio")
    if sniffio is None:
        return None
    try:
        library = sniffio.current_async_library()
    except Exception:  # noqa: BLE001 - sniffio's AsyncLibraryNotFoundError: none runs
        return None
    return None if library == "asyncio" else str(library)


def require_asyncio(what: str) -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a ``RuntimeError`` that says why ``what`` needs one."""
    loop = running_loop()
    if loop is not None:
        return loop
    library = other_async_library()
    if library is not None:
        raise RuntimeError(
            f"{what}: panto's async API runs on asyncio only, and this is {library}. Use "
            f"the sync API in a worker thread instead (with trio: "
            f"`await trio.to_thread.run_sync(agent.run, prompt)`), or run under asyncio."
        )
    raise RuntimeError(f"{what} needs a running asyncio event loop")
