"""Loops for the live page's tests: the default configuration over a cache of given
objects, with fake ports, and their background pools attached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from scheduler import app
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import ClusterPorts
from tests.builders import cache_with
from tests.fakes import FakeCluster


def loop_of(*objects: Any) -> Any:
    """The loop of the default configuration over a cache fed ``objects``."""
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, SystemClock())
    return app.build_loop(app.resolve(), cache_with(*objects), ports)


@asynccontextmanager
async def running(*loops: Any) -> AsyncIterator[None]:
    """The loops' background pools attached, so that ``run_cycle`` may be called."""
    async with anyio.create_task_group() as tg:
        for loop in loops:
            loop.binds.attach(tg)
            loop.dispatcher.attach(tg)
            loop.preemption.attach(tg)
        yield
        tg.cancel_scope.cancel()
