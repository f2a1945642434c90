"""The process metrics a scrape reads (issue 26): asyncio tasks of the scheduler's loop,
open sockets, and Prometheus' process collector, on a registry of their own."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from scheduler.metrics.runtime import RuntimeCollector, open_sockets, register_runtime_metrics


def _sample(registry: CollectorRegistry, name: str) -> float | None:
    """The sum of ``name``'s samples (None: none)."""
    values = [s.value for m in registry.collect() for s in m.samples if s.name == name]
    return sum(values) if values else None


def test_tasks_and_sockets_follow_what_the_process_holds() -> None:
    async def scenario() -> tuple[float | None, float | None, float | None, float | None]:
        registry = CollectorRegistry()
        register_runtime_metrics(registry)
        tasks_before = _sample(registry, "sluice_asyncio_tasks")
        sockets_before = _sample(registry, "sluice_open_sockets")
        blockers = [asyncio.create_task(asyncio.sleep(60)) for _ in range(5)]
        pairs = [socket.socketpair() for _ in range(3)]
        try:
            return (
                tasks_before,
                _sample(registry, "sluice_asyncio_tasks"),
                sockets_before,
                _sample(registry, "sluice_open_sockets"),
            )
        finally:
            for t in blockers:
                t.cancel()
            for a, b in pairs:
                a.close()
                b.close()

    tasks_before, tasks_after, sockets_before, sockets_after = asyncio.run(scenario())
    assert tasks_before is not None and tasks_after == tasks_before + 5
    if sockets_before is None:
        pytest.skip("no /proc/self/fd here")
    assert sockets_after == sockets_before + 6


def test_the_process_collector_is_on_the_same_registry() -> None:
    async def scrape() -> bytes:
        registry = CollectorRegistry()
        register_runtime_metrics(registry)
        return generate_latest(registry)

    text = asyncio.run(scrape()).decode()
    assert '<locals>.scrape"} 1.0' in text
    if Path("/proc/self/stat").exists():
        assert "process_resident_memory_bytes " in text
        assert "process_open_fds " in text


@pytest.mark.parametrize(
    ("links", "expected"),
    [
        ({}, 0),
        ({"3": "socket:[1]", "4": "/dev/null", "5": "socket:[2]"}, 2),
        ({"7": "pipe:[9]", "8": "anon_inode:[eventpoll]"}, 0),
    ],
    ids=["none", "two-sockets-and-a-file", "no-socket"],
)
def test_open_sockets_counts_socket_links(
    tmp_path: Path, links: dict[str, str], expected: int
) -> None:
    for name, target in links.items():
        os.symlink(target, tmp_path / name)
    assert open_sockets(tmp_path) == expected


def test_no_proc_no_socket_metric(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    try:
        families = list(RuntimeCollector(loop, tmp_path / "absent").collect())
    finally:
        loop.close()
    assert [f.name for f in families] == ["sluice_asyncio_tasks"]
    assert open_sockets(tmp_path / "absent") is None


def test_tasks_are_counted_by_the_function_they_run() -> None:
    async def stuck() -> None:
        await asyncio.sleep(60)

    async def scenario() -> dict[str, float]:
        registry = CollectorRegistry()
        register_runtime_metrics(registry)
        blockers = [asyncio.create_task(stuck()) for _ in range(3)]
        await asyncio.sleep(0)
        try:
            return {
                s.labels["coroutine"]: s.value
                for m in registry.collect()
                for s in m.samples
                if s.name == "sluice_asyncio_tasks"
            }
        finally:
            for t in blockers:
                t.cancel()

    by_function = asyncio.run(scenario())
    assert by_function["test_tasks_are_counted_by_the_function_they_run.<locals>.stuck"] == 3


def test_tasks_started_by_anyio_are_counted_by_their_function() -> None:
    import anyio

    async def waiting() -> None:
        await anyio.sleep(60)

    async def scenario() -> dict[str, float]:
        registry = CollectorRegistry()
        register_runtime_metrics(registry)
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            tg.start_soon(waiting, name="named")
            await anyio.sleep(0)
            counted = {
                s.labels["coroutine"]: s.value
                for m in registry.collect()
                for s in m.samples
                if s.name == "sluice_asyncio_tasks"
            }
            tg.cancel_scope.cancel()
        return counted

    counted = anyio.run(scenario)
    (anonymous,) = [name for name in counted if name.endswith("<locals>.waiting")]
    assert counted[anonymous] == 1
    assert counted["named"] == 1
