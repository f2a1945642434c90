"""Waiting in tests: bounded concurrency, polling with a deadline, free ports.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import inspect
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.abc

from harness.constants import T


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Run ``calls``, at most ``concurrency`` at a time; their results, in order."""
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await calls[i]()

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return results


async def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``condition`` (sync or async) until it returns something truthy; return it.

    After ``timeout`` seconds fail the test with ``what``, the last value and, if given,
    ``detail()`` (sync or async: what to show of the state to explain the failure).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = condition()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        await anyio.sleep(interval)
    extra = ""
    if detail is not None:
        shown = detail()
        if inspect.isawaitable(shown):
            shown = await shown
        extra = f"\n{shown}"
    raise AssertionError(
        f"timed out after {timeout:g} s waiting for {what} (last: {last!r}){extra}"
    )


async def hold_for(
    condition: Callable[[], Any], *, seconds: float, what: str, interval: float = 0.1
) -> None:
    """Check that ``condition`` (sync or async) stays truthy for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if not value:
            raise AssertionError(f"{what} stopped holding (got {value!r})")
        if time.monotonic() >= deadline:
            return
        await anyio.sleep(interval)


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
