"""How long the guard keeps review answers (scheduler/serving/ttl_cache.py): one fetch for
callers asking at once, nothing kept from a failure, a cancelled fetch taken over by a
waiting caller, the oldest dropped past the size."""

from __future__ import annotations

import anyio
import pytest

from scheduler.serving.ttl_cache import TtlCache

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Source:
    """Answers ``value-N`` on the Nth fetch; waits for ``gate`` when one is set."""

    def __init__(self) -> None:
        self.fetches = 0
        self.gate: anyio.Event | None = None
        self.error: Exception | None = None

    async def fetch(self) -> str:
        self.fetches += 1
        n = self.fetches
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return f"value-{n}"


async def test_an_answer_is_kept_until_its_ttl() -> None:
    clock, source = Clock(), Source()
    cache: TtlCache[str] = TtlCache(lambda _: 10.0, now=clock)
    assert await cache.get("k", source.fetch) == "value-1"
    clock.t = 9.99
    assert await cache.get("k", source.fetch) == "value-1"
    clock.t = 10.0
    assert await cache.get("k", source.fetch) == "value-2"
    assert source.fetches == 2


async def test_the_ttl_may_depend_on_the_answer() -> None:
    clock, source = Clock(), Source()
    cache: TtlCache[str] = TtlCache(lambda v: 0.0 if v == "value-1" else 5.0, now=clock)
    assert await cache.get("k", source.fetch) == "value-1"  # ttl 0: not kept
    assert await cache.get("k", source.fetch) == "value-2"
    assert await cache.get("k", source.fetch) == "value-2"
    assert len(cache) == 1


async def test_callers_asking_at_once_share_one_fetch() -> None:
    source = Source()
    source.gate = anyio.Event()
    cache: TtlCache[str] = TtlCache(lambda _: 10.0)
    got: list[str] = []

    async def ask() -> None:
        got.append(await cache.get("k", source.fetch))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        source.gate.set()
    assert got == ["value-1"] * 5
    assert source.fetches == 1


async def test_a_failure_reaches_every_waiter_and_is_not_kept() -> None:
    source = Source()
    source.gate = anyio.Event()
    source.error = RuntimeError("down")
    cache: TtlCache[str] = TtlCache(lambda _: 10.0)
    errors: list[str] = []

    async def ask() -> None:
        try:
            await cache.get("k", source.fetch)
        except RuntimeError as exc:
            errors.append(str(exc))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        source.gate.set()
    assert errors == ["down"] * 3
    source.error, source.gate = None, None
    assert await cache.get("k", source.fetch) == "value-2"


async def test_a_waiter_fetches_again_when_the_fetching_caller_is_cancelled() -> None:
    source = Source()
    source.gate = anyio.Event()
    cache: TtlCache[str] = TtlCache(lambda _: 10.0)
    got: list[str] = []

    async def ask() -> None:
        got.append(await cache.get("k", source.fetch))

    async with anyio.create_task_group() as outer:
        with anyio.CancelScope() as first:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)  # fetches, then is cancelled
                await anyio.wait_all_tasks_blocked()
                outer.start_soon(ask)  # waits for that fetch
                await anyio.wait_all_tasks_blocked()
                first.cancel()
        source.gate.set()
    assert got == ["value-2"]
    assert source.fetches == 2


async def test_the_oldest_answer_goes_first_past_the_size() -> None:
    source = Source()
    cache: TtlCache[str] = TtlCache(lambda _: 10.0, size=2)
    for key in ("a", "b", "c"):
        await cache.get(key, source.fetch)
    assert len(cache) == 2
    assert await cache.get("b", source.fetch) == "value-2"  # kept
    assert await cache.get("a", source.fetch) == "value-4"  # dropped, fetched again


def test_the_size_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="size"):
        TtlCache(lambda _: 1.0, size=0)
