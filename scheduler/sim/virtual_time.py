"""Virtual time for the embedded cluster (layer 4).

:class:`VirtualTimeLoop` is an asyncio event loop whose clock starts at 0.0 and only moves
when every task is waiting on a timer: then it jumps straight to the earliest timer. A
simulated hour of ``asyncio.sleep`` costs no wall time, and because nothing depends on
the wall clock or on thread timing, two runs of the same program interleave their tasks
in exactly the same way.

The loop still polls real file descriptors (with a zero timeout), so ``call_soon_threadsafe``
and signals work, but it never waits for them: real network I/O and worker threads are
outside simulated time and should not be used under it. If no timer is pending and nothing
is ready, no task can ever make progress again; the loop raises :class:`SimulationStalled`
instead of hanging.

`VirtualClock` implements the ``Clock`` port of :mod:`scheduler.ports` on virtual time
(real time is :class:`scheduler.loop.system_clock.SystemClock`); :func:`run_virtual` runs an
async function on a fresh virtual loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import math
import selectors
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, Unpack

import anyio

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = [
    "DEFAULT_EPOCH",
    "SimulationStalled",
    "VirtualClock",
    "VirtualTimeLoop",
    "run_virtual",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: 2026-01-01T00:00:00Z, the wall time at virtual time 0 unless told otherwise.
DEFAULT_EPOCH = 1_767_225_600.0
#: A jump of virtual time that ends this close before the next deadline lands on it.
_SNAP = 1e-6


class SimulationStalled(RuntimeError):
    """Every task waits on something that can never happen under virtual time.

    Raised out of the event loop (and so out of :func:`run_virtual`) when no timer is
    pending, no callback is ready and no file descriptor is readable: a deadlock, or a
    task waiting for an event nobody will set.
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "simulation stalled at virtual time: every task is waiting on something "
            "that can never happen (no timer pending, nothing ready)"
        )


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never blocks; it owns the virtual time of its loop.

    ``select(timeout)`` polls the real selector. With nothing ready it advances virtual
    time by ``timeout`` (the delay to the earliest timer, which asyncio computed), or
    raises :class:`SimulationStalled` when asyncio asked to wait forever. When the jump
    reaches the earliest timer, time is set to that timer's deadline exactly (not
    ``now + (when - now)``, which can miss it by a rounding error), so a task that sleeps
    until ``t`` wakes up at ``loop.time() == t``.
    """

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0
        #: the loop's heap of timers (set by VirtualTimeLoop), to land exactly on deadlines
        self.timers: list[asyncio.TimerHandle] = []
        #: the loop's clock resolution: timers due within it are run
        self.resolution = 1e-9

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready:
            return ready
        if timeout is None:
            raise SimulationStalled(
                f"simulation stalled at virtual time {self.now:.6f}s: every task is waiting "
                "on something that can never happen (no timer pending, nothing ready)"
            )
        if timeout > 0:
            target = self.now + timeout
            if self.timers:
                head = self.timers[0].when()
                if self.now < head <= target + _SNAP:
                    target = head
            self.now = target
        if self.timers:
            head = self.timers[0].when()
            if self.now + self.resolution <= head <= self.now:
                # so large a time that adding the loop's clock resolution does not change
                # it: asyncio would never see this due timer as ready; step past it
                self.now = math.nextafter(head, math.inf)
        return []

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._real.get_map()


class _FifoTimerHandle(asyncio.TimerHandle):
    """A timer that sorts after every earlier-scheduled timer with the same deadline."""

    __slots__ = ("_seq",)

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        *,
        context: contextvars.Context | None,
        seq: int,
    ) -> None:
        super().__init__(when, callback, args, loop, context)
        self._seq = seq

    def __lt__(self, other: object) -> bool:
        if isinstance(other, _FifoTimerHandle):
            return (self.when(), self._seq) < (other.when(), other._seq)
        if isinstance(other, asyncio.TimerHandle):
            return self.when() < other.when()
        return NotImplemented


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time: ``time()`` starts at 0.0 and jumps to the next timer.

    Timers with the same deadline fire in the order they were scheduled (under virtual
    time, equal deadlines are common). Use it as an anyio ``loop_factory`` (see
    :func:`run_virtual`) or directly with ``loop.run_until_complete``. Deterministic as
    long as the program does not depend on threads or real I/O.
    """

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        self._timer_seq = 0
        super().__init__(self._virtual)
        self._virtual.timers = self._scheduled  # type: ignore[attr-defined]
        self._virtual.resolution = self._clock_resolution  # type: ignore[attr-defined]

    def time(self) -> float:
        return self._virtual.now

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """As :meth:`asyncio.BaseEventLoop.call_at`, with first-in-first-out ties."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        self._timer_seq += 1
        timer = _FifoTimerHandle(when, callback, args, self, context=context, seq=self._timer_seq)
        if timer._source_traceback:  # type: ignore[attr-defined]
            del timer._source_traceback[-1]  # type: ignore[attr-defined]
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer


def _running_virtual_loop() -> VirtualTimeLoop | None:
    loop = asyncio._get_running_loop()
    if loop is None:
        return None
    if type(loop) is not VirtualTimeLoop and not isinstance(loop, VirtualTimeLoop):
        raise RuntimeError(
            "VirtualClock needs a VirtualTimeLoop; run the program with run_virtual()"
        )
    return loop


class VirtualClock:
    """The ``Clock`` port on virtual time: ``now()`` is the running VirtualTimeLoop's time.

    ``wall()`` is ``epoch + now()``. Outside a running loop (setting a scenario up before
    :func:`run_virtual`) both report the last time seen, 0.0 at first. Calling it inside a
    loop that is not a :class:`VirtualTimeLoop` raises RuntimeError, because virtual and
    real time must never be mixed.
    """

    def __init__(self, epoch: float = DEFAULT_EPOCH) -> None:
        self.epoch = epoch
        self._last = 0.0

    def now(self) -> float:
        loop = _running_virtual_loop()
        if loop is not None:
            self._last = loop._virtual.now
        return self._last

    def wall(self) -> float:
        return self.epoch + self.now()

    async def sleep(self, seconds: float) -> None:
        """Suspend for ``seconds`` of virtual time (no wall time passes)."""
        await anyio.sleep(seconds)


def run_virtual(fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
    """Run ``fn(*args)`` under anyio on a fresh :class:`VirtualTimeLoop` and return its result.

    Blocks the calling thread until ``fn`` returns; virtual time starts at 0.0 each call.
    Raises :class:`SimulationStalled` if the program deadlocks.
    """
    return anyio.run(
        fn, *args, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop}
    )
