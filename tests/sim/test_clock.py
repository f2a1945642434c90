"""Virtual time: instant, ordered, deterministic, and loud about deadlocks."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from scheduler.loop.system_clock import SystemClock
from scheduler.sim.virtual_time import (
    DEFAULT_EPOCH,
    SimulationStalled,
    VirtualClock,
    VirtualTimeLoop,
    run_virtual,
)


@pytest.mark.parametrize(
    "seconds", [0.0, 0.001, 1.0, 3600.0, 7 * 24 * 3600.0], ids=["zero", "1ms", "1s", "1h", "1w"]
)
def test_sleep_takes_no_wall_time(seconds: float) -> None:
    async def main() -> float:
        clock = VirtualClock()
        await clock.sleep(seconds)
        return clock.now()

    started = time.perf_counter()
    assert run_virtual(main) == pytest.approx(seconds)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("delays", "expected"),
    [
        ([3.0, 1.0, 2.0], [(1.0, 1), (2.0, 2), (3.0, 0)]),
        ([5.0, 5.0, 0.5], [(0.5, 2), (5.0, 0), (5.0, 1)]),
        ([0.0, 0.0], [(0.0, 0), (0.0, 1)]),
    ],
    ids=["sorted-by-delay", "ties-in-start-order", "zero-delays"],
)
def test_timers_fire_in_order(delays: list[float], expected: list[tuple[float, int]]) -> None:
    async def main() -> list[tuple[float, int]]:
        fired: list[tuple[float, int]] = []

        async def sleeper(i: int, d: float) -> None:
            await anyio.sleep(d)
            fired.append((anyio.current_time(), i))

        async with anyio.create_task_group() as tg:
            for i, d in enumerate(delays):
                tg.start_soon(sleeper, i, d)
        return fired

    assert run_virtual(main) == expected


@pytest.mark.parametrize(
    ("deadline", "lands_at"),
    [
        (0.1 + 0.2, 0.1 + 0.2),
        (1 / 3, 1 / 3),
        (86_400 * 3 + 0.7, 86_400 * 3 + 0.7),
        # past ~2e7 s a float step exceeds asyncio's 1 ns resolution: one step later
        (1e9 + 0.3, math.nextafter(1e9 + 0.3, math.inf)),
    ],
    ids=["sum-of-tenths", "third", "beyond-one-select-cap", "huge-time-steps-past"],
)
def test_time_lands_exactly_on_deadlines(deadline: float, lands_at: float) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen: list[float] = []
        done = asyncio.Event()
        await asyncio.sleep(0.1)  # start from a time that is not zero

        def fire() -> None:
            seen.append(loop.time())
            done.set()

        loop.call_at(deadline, fire)
        await done.wait()
        return seen

    assert run_virtual(main) == [lands_at]


def test_two_runs_interleave_the_same() -> None:
    async def main() -> list[str]:
        log: list[str] = []
        send, receive = anyio.create_memory_object_stream[int](5)

        async def producer(k: int) -> None:
            for i in range(20):
                await anyio.sleep((i * 7 + k * 3) % 5 * 0.1)
                await send.send(k * 100 + i)
                log.append(f"{anyio.current_time():.3f} sent {k}/{i}")

        async def consumer() -> None:
            for _ in range(60):
                item = await receive.receive()
                log.append(f"{anyio.current_time():.3f} got {item}")
                await anyio.sleep(0.05)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            for k in range(3):
                tg.start_soon(producer, k)
        return log

    first, second = run_virtual(main), run_virtual(main)
    assert len(first) == 120
    assert first == second


async def _wait_for_event_never_set() -> None:
    await anyio.sleep(5)
    await anyio.Event().wait()


async def _read_stream_never_written() -> None:
    await anyio.sleep(5)
    _send, receive = anyio.create_memory_object_stream[int]()
    await receive.receive()


async def _lock_order_deadlock() -> None:
    a, b = anyio.Lock(), anyio.Lock()

    async def one(x: anyio.Lock, y: anyio.Lock) -> None:
        async with x:
            await anyio.sleep(5)
            async with y:
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, a, b)
        tg.start_soon(one, b, a)


@pytest.mark.parametrize(
    "main",
    [_wait_for_event_never_set, _read_stream_never_written, _lock_order_deadlock],
    ids=["event-never-set", "stream-never-written", "lock-order-deadlock"],
)
def test_stall_raises(main: Callable[[], Awaitable[None]]) -> None:
    started = time.perf_counter()
    with pytest.raises(SimulationStalled, match=r"at virtual time 5\.0+s: every task is waiting"):
        run_virtual(main)
    assert time.perf_counter() - started < 1.0


def test_stalled_is_a_runtime_error() -> None:
    assert issubclass(SimulationStalled, RuntimeError)
    assert "can never happen" in str(SimulationStalled())


@pytest.mark.parametrize(
    ("epoch", "sleep", "wall"),
    [
        (DEFAULT_EPOCH, 0.0, 1_767_225_600.0),
        (DEFAULT_EPOCH, 90.5, 1_767_225_690.5),
        (1000.0, 10.0, 1010.0),
    ],
    ids=["default-epoch", "after-sleep", "custom-epoch"],
)
def test_virtual_wall(epoch: float, sleep: float, wall: float) -> None:
    async def main() -> float:
        clock = VirtualClock(epoch)
        await clock.sleep(sleep)
        return clock.wall()

    assert run_virtual(main) == pytest.approx(wall)


def test_virtual_clock_outside_a_loop_keeps_the_last_time() -> None:
    clock = VirtualClock()
    assert clock.now() == 0.0

    async def main() -> None:
        await clock.sleep(42)
        clock.now()

    run_virtual(main)
    assert clock.now() == 42.0
    assert clock.wall() == DEFAULT_EPOCH + 42.0


def test_virtual_clock_refuses_a_real_loop() -> None:
    async def main() -> None:
        VirtualClock().now()

    with pytest.raises(RuntimeError, match="VirtualTimeLoop"):
        asyncio.run(main())


def test_loop_can_be_used_directly() -> None:
    loop = VirtualTimeLoop()
    try:
        assert loop.time() == 0.0
        loop.run_until_complete(asyncio.sleep(10))
        assert loop.time() == pytest.approx(10.0)
    finally:
        loop.close()


def test_call_soon_threadsafe_still_works() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        loop.call_soon_threadsafe(fut.set_result, 7)
        return await fut

    assert run_virtual(main) == 7


def test_real_clock() -> None:
    clock = SystemClock()
    assert abs(clock.wall() - time.time()) < 1.0
    before = clock.now()

    async def main() -> None:
        await clock.sleep(0.01)

    anyio.run(main)
    assert clock.now() >= before + 0.005
