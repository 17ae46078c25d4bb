"""``AsyncStream``: one turn as an async iterator, over the same native ``Stream``.

``__anext__`` first takes, on the event loop's thread, whatever the native stream has
ready (``_try_next``: the native buffer, or a burst drained without waiting). Only when
nothing is ready does it wait, in a thread of panto's own wait pool (``_wait``, without
the GIL), and the loop awaits that. So a burst of events costs one thread hop, not one
per event, and waiting streams never take the threads of the default executor.

Cancelling the task that awaits, ``aclose()``, or leaving ``async with`` cancels the
turn; the cancel wakes the waiting thread at once, so no thread stays behind.

This is a class, not an async generator: it can be closed from another task while one
awaits it, and it does not depend on the garbage collector to clean up.

asyncio only: under another async library (trio, curio) the async API raises
``RuntimeError`` saying so (found through ``sniffio``, if it is imported; trio is never
imported here). asyncio itself is imported when first needed, not by ``import panto``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional

from ._pool import Pool

if TYPE_CHECKING:
    import asyncio

    from ._native import Stream
    from ._vocab import Event, MessageComplete

__all__ = ["AsyncStream", "WAIT_POOL"]

#: The threads async streams wait in: one per waiting stream, created on demand.
WAIT_POOL = Pool("panto-wait", max_threads=4096)


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class AsyncStream:
    """One turn as an async iterator and an async context manager
    (``agent.astream(prompt)``). ``MessageComplete`` is the last event."""

    __slots__ = ("_stream", "_runner", "__weakref__")

    def __init__(self, stream: Stream, runner: Any) -> None:
        self._stream = stream
        self._runner = runner

    def __aiter__(self) -> AsyncStream:
        return self

    async def __anext__(self) -> Event:
        stream = self._stream
        ev = stream._try_next()
        if ev is not None:
            return ev
        while True:
            await self._wait()
            ev = stream._try_next()
            if ev is not None:
                return ev

    async def _wait(self) -> None:
        loop = require_asyncio("iterating an AsyncStream")
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
            # Cancelled (task cancel, Ctrl-C under asyncio.run): end the turn. The cancel
            # wakes the waiting thread at once; close() then waits (briefly) for the turn
            # to end, so the agent is free and its history whole when this returns.
            stream.close()
            raise

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancels the turn if it is still running and waits (in a thread, not on the
        loop) for it to end. Idempotent."""
        import asyncio

        stream = self._stream
        stream.cancel()
        loop = require_asyncio("AsyncStream.aclose()")
        await asyncio.shield(loop.run_in_executor(WAIT_POOL, stream.close))

    close = aclose

    def cancel(self) -> None:
        """Cancels the turn; safe from any thread."""
        self._stream.cancel()

    @property
    def cancelled(self) -> bool:
        return bool(self._stream.cancelled)

    def submit_tool_result(self, call_id: str, output: str, is_error: bool = False) -> None:
        """Answers a host-tool call announced by ``ToolCallStart(host=True)``."""
        self._stream.submit_tool_result(call_id, output, is_error)

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
        """How many times this stream waited in a thread (one hop per burst, at most)."""
        return int(self._stream.waits)

    def consumer_waiting(self) -> bool:
        return bool(self._stream.consumer_waiting())

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
