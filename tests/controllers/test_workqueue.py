"""The pod grouper's work queue: one worker per key, the newest item, backoff, forgetting."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.controllers.workqueue import WorkQueue

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def take_now(q: WorkQueue[str, int]) -> tuple[str, int] | None:
    try:
        async with asyncio.timeout(0.05):
            return await q.take()
    except TimeoutError:
        return None


async def test_a_key_offered_twice_is_handed_out_once_with_its_newest_item() -> None:
    q: WorkQueue[str, int] = WorkQueue()
    q.offer("a", 1)
    q.offer("b", 1)
    q.offer("a", 2)
    assert await take_now(q) == ("a", 2)
    assert await take_now(q) == ("b", 1)
    assert await take_now(q) is None


async def test_a_key_in_work_waits_for_its_worker() -> None:
    q: WorkQueue[str, int] = WorkQueue()
    q.offer("a", 1)
    assert await take_now(q) == ("a", 1)
    q.offer("a", 2)  # news while a worker has it
    assert await take_now(q) is None
    q.done("a", 1, failed=False)
    assert await take_now(q) == ("a", 2)


async def test_failed_work_comes_back_after_a_doubling_delay() -> None:
    q: WorkQueue[str, int] = WorkQueue(base=0.02, cap=0.05)
    loop = asyncio.get_running_loop()
    delays = []
    q.offer("a", 1)
    key, item = await q.take()
    for _ in range(3):
        q.done(key, item, failed=True)
        start = loop.time()
        key, item = await q.take()
        delays.append(loop.time() - start)
    assert q.failures("a") == 3
    assert delays[0] >= 0.02
    assert delays[1] >= 0.04
    assert 0.05 <= delays[2] < 0.08  # capped


async def test_success_resets_the_failures() -> None:
    q: WorkQueue[str, int] = WorkQueue(base=0.01)
    q.offer("a", 1)
    key, item = await q.take()
    q.done(key, item, failed=True)
    assert q.failures("a") == 1
    key, item = await q.take()
    q.done(key, item, failed=False)
    assert q.failures("a") == 0
    assert len(q) == 0


async def test_news_during_the_backoff_is_handed_out_at_once() -> None:
    q: WorkQueue[str, int] = WorkQueue(base=10.0)
    q.offer("a", 1)
    key, item = await q.take()
    q.done(key, item, failed=True)
    assert await take_now(q) is None
    q.offer("a", 2)
    assert await take_now(q) == ("a", 2)


async def test_forgotten_keys_are_not_handed_out_nor_retried() -> None:
    q: WorkQueue[str, int] = WorkQueue(base=0.01)
    q.offer("a", 1)
    q.forget("a")
    assert await take_now(q) is None
    q.offer("b", 1)
    key, item = await q.take()
    q.forget("b")  # while in work
    q.done(key, item, failed=True)
    await asyncio.sleep(0.03)
    assert await take_now(q) is None
    assert not q.holds("b")
    q.offer("c", 1)
    key, item = await q.take()
    q.done(key, item, failed=True)
    q.forget("c")  # during its backoff
    await asyncio.sleep(0.03)
    assert await take_now(q) is None
