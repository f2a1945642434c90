"""WorkerPool: bounded-concurrency background calls, owned by a task group (layer 3).

The loop submits API calls (binds, status patches) without waiting; a pool runs at most
``concurrency`` at once, in submission order (status writes: one per object at a time,
the latest, :meth:`WorkerPool.submit_latest`). A call that raises is reported to
``on_error`` with its label and never takes the pool down: every failure is handled by
the component that submitted it (its callable catches what it expects; anything else
reaches ``on_error``, which logs and counts it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup


class WorkerPool:
    def __init__(
        self, name: str, concurrency: int, on_error: Callable[[str, BaseException], None]
    ) -> None:
        self.name = name
        self._limit = anyio.Semaphore(concurrency)
        self._on_error = on_error
        self._tg: TaskGroup | None = None
        self._pending = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._latest: dict[str, Callable[[], Awaitable[None]] | None] = {}
        """Per key of :meth:`submit_latest` with a call queued or running: the call
        waiting behind it (None: none)."""

    @property
    def in_flight(self) -> int:
        """Calls submitted and not yet finished (queued or running)."""
        return self._pending

    def attach(self, tg: TaskGroup) -> None:
        """Run this pool's calls in ``tg`` (the owner's task group). Call once before submit."""
        self._tg = tg

    def submit(self, label: str, call: Callable[[], Awaitable[None]]) -> None:
        """Queue ``call``; never blocks. Must be called from the owner's event loop."""
        if self._tg is None:
            raise RuntimeError(f"worker pool {self.name} is not attached to a task group")
        self._pending += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._tg.start_soon(self._run, label, call, name=f"{self.name}:{label}")

    def submit_latest(self, key: str, call: Callable[[], Awaitable[None]]) -> None:
        """Queue ``call`` as the latest write of ``key`` (an object's status): while a call
        of ``key`` is queued or running, ``call`` replaces the one waiting behind it, if
        any, and is made when the running one is over. At most one task per key, so
        writes that come faster than the API server takes them never pile up (issue 26's
        soak saw 2,000 status tasks, 45 of them for one Queue); the last one is written."""
        if key in self._latest:
            self._latest[key] = call
            return
        self._latest[key] = None

        async def in_turn() -> None:
            following: Callable[[], Awaitable[None]] | None = call
            try:
                while following is not None:
                    try:
                        await following()
                    except anyio.get_cancelled_exc_class():
                        raise
                    except Exception as exc:
                        self._on_error(key, exc)
                    following, self._latest[key] = self._latest.get(key), None
            finally:
                self._latest.pop(key, None)

        self.submit(key, in_turn)

    async def _run(self, label: str, call: Callable[[], Awaitable[None]]) -> None:
        try:
            async with self._limit:
                await call()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            self._on_error(label, exc)
        finally:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()

    async def drain(self) -> None:
        """Wait until every submitted call has finished."""
        await self._idle.wait()
