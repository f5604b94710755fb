"""One generation at a time on a loaded model pair, with a bounded queue in front.

A llama.cpp context holds a single sequence, so requests take turns. A request
is admitted with `async with queue.admission(...) as slot:`, which owns both
ends: it waits its turn (refusing with `QueueFull` past the queue's size, and
with `ClientGone` when the client leaves while it waits), and however the block
exits (a result, an error, a cancelled task) it stops the slot's generation and
hands the models to the next request once the worker thread has really finished.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from ..engine.generation import Generation, StopReason
from ..settings import GenerationSettings
from .session import Session

POLL_SECONDS = 0.1  # how often a waiting request checks whether its client is still there


class QueueFull(Exception):
    """Too many requests are waiting already."""


class ClientGone(Exception):
    """The client disconnected while its request waited for its turn."""


class Slot:
    """An admitted request's turn on the models: at most one generation, run in the worker thread."""

    def __init__(self, session: Session, worker: concurrent.futures.ThreadPoolExecutor) -> None:
        self.session = session
        self.cancelled = threading.Event()  # set: the generation stops after the target pass (or prompt batch) in progress
        self._worker = worker
        self._work: concurrent.futures.Future[Generation] | None = None

    async def generate(self, tokens: list[int], settings: GenerationSettings, speculative: bool,
                       on_chunk: Callable[[str], None] | None = None, grammar: str | None = None) -> Generation:
        """Generate in the worker thread; `on_chunk` gets text as it is accepted (in that thread);
        `grammar`: the llguidance grammar the output is held to (None: free text)."""
        if self._work is not None:
            raise RuntimeError("one generation per admission")
        self._work = self._worker.submit(self._generate, tokens, settings, speculative, on_chunk, grammar)
        return await asyncio.wrap_future(self._work)

    def _generate(self, tokens: list[int], settings: GenerationSettings, speculative: bool,
                  on_chunk: Callable[[str], None] | None, grammar: str | None) -> Generation:
        generation = self.session.generation(tokens, settings, speculative=speculative, grammar=grammar,
                                             stop_requested=self.cancelled.is_set)
        chunks = iter(generation)
        try:
            for chunk in chunks:
                if chunk.text and on_chunk is not None:
                    on_chunk(chunk.text)
                if self.cancelled.is_set():
                    break
        finally:
            chunks.close()  # a generation cut short records why ("interrupted")
            if generation.stop_reason in (None, StopReason.INTERRUPTED):  # stopped, or failed, mid-pass
                self.session.recover_caches()
        if generation.stop_reason not in (None, StopReason.INTERRUPTED):
            self.session.remember(generation, "serve")
        return generation

    def finish(self, release: Callable[[], None]) -> None:
        """Stop the generation, and call `release` (on the event loop) once the worker thread is done with it."""
        self.cancelled.set()
        if self._work is None:
            release()
            return
        loop = asyncio.get_running_loop()

        def released(_: object) -> None:
            try:
                loop.call_soon_threadsafe(release)
            except RuntimeError:  # the loop is closed: the server has stopped, nobody waits any more
                pass

        self._work.add_done_callback(released)


class GenerationQueue:
    """The loaded models, used by one admitted request at a time; at most `queue_size` wait."""

    def __init__(self, session: Session, queue_size: int) -> None:
        self.session = session
        self.queue_size = queue_size
        self._acquiring: set[asyncio.Future] = set()  # the waiting requests' turns, each done once it is taken
        self.admitted = 0  # requests that got their turn, since the start
        self._lock = asyncio.Lock()
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="generation")

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn (not one whose turn has just come, though it has not yet seen it)."""
        return sum(not acquiring.done() for acquiring in self._acquiring)

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def close(self) -> None:
        """Wait for the generation in progress (stopped at its next pass) to end, before the models close."""
        self._worker.shutdown(wait=True)

    @asynccontextmanager
    async def admission(self, gone: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[Slot]:
        """Wait for the models, hold them for the block, release them however it exits.

        `gone` says whether the client has left; a client that leaves while waiting is not admitted.
        """
        await self._admit(gone)
        slot = Slot(self.session, self._worker)
        try:
            yield slot
        finally:
            slot.finish(self._lock.release)

    async def _admit(self, gone: Callable[[], Awaitable[bool]] | None) -> None:
        if self._lock.locked() and self.waiting >= self.queue_size:
            raise QueueFull()
        acquiring = asyncio.ensure_future(self._lock.acquire())
        self._acquiring.add(acquiring)
        try:
            while not (await asyncio.wait({acquiring}, timeout=POLL_SECONDS))[0]:
                if gone is not None and await gone():
                    raise ClientGone()
            if gone is not None and await gone():  # it left just as its turn came
                raise ClientGone()
            self.admitted += 1
        except BaseException:
            if acquiring.done() and not acquiring.cancelled() and acquiring.exception() is None:
                self._lock.release()
            else:
                acquiring.cancel()
            raise
        finally:
            self._acquiring.discard(acquiring)
