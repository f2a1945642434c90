"""WorkerPool: bounded-concurrency background tasks, owned by a task group (layer 3).

The binding cycle submits each bind's steps (their writes go through the API
dispatcher) without waiting; a pool runs at most ``concurrency`` at once, in submission
order. A task that raises is reported to ``on_error`` with its label and never takes the
pool down: every failure is handled by the component that submitted it (its callable
catches what it expects; anything else reaches ``on_error``, which logs and counts it).
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
