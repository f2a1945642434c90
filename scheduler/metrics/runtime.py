"""What the scheduler process holds, read when ``/metrics`` is scraped (layer 0, metrics).

A long-running scheduler must not leak: memory, asyncio tasks and sockets stay bounded
however long it runs (issue 26's soak watches them through ``/metrics``). This module
adds to a :class:`~prometheus_client.CollectorRegistry`:

* Prometheus' standard process collector: ``process_resident_memory_bytes``,
  ``process_open_fds``, ``process_cpu_seconds_total``... (Linux ``/proc``);
* ``sluice_asyncio_tasks{coroutine}``: the tasks alive on the event loop the scheduler
  runs on, by the function each runs (what piles up, if anything does);
* ``sluice_open_sockets``: the process' open sockets (its connections to the API server,
  the listening port, scrapes in progress), from ``/proc/self/fd``.

Everything is computed by the collector when a scrape asks, never on the scheduling
path: a cycle pays nothing for it. Contract: :func:`register_runtime_metrics` is called
once per registry, from the event loop's thread while the loop runs (the loop it sees
then is the one whose tasks are counted); a scrape from another thread still counts
that loop's tasks.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["RuntimeCollector", "open_sockets", "register_runtime_metrics"]

_FD_DIR = Path("/proc/self/fd")


def open_sockets(fd_dir: Path = _FD_DIR) -> int | None:
    """How many of the process' open file descriptors are sockets; None where
    ``/proc`` cannot tell (not Linux)."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    count = 0
    for name in names:
        try:
            if os.readlink(fd_dir / name).startswith("socket:"):
                count += 1
        except OSError:  # closed between the listing and the read
            continue
    return count


def _coroutine(task: asyncio.Task[object]) -> str:
    """What ``task`` runs, a bounded set of names: the name anyio gives the tasks it
    starts (the function's qualified name, or the name given), else the coroutine's
    qualified name (asyncio's own names, ``Task-<n>``, are not kept: one per task)."""
    name = task.get_name()
    if name and not name.startswith("Task-"):
        return name
    coro = task.get_coro()
    return str(getattr(coro, "__qualname__", None) or type(coro).__name__)


class RuntimeCollector(Collector):
    """``sluice_asyncio_tasks`` and ``sluice_open_sockets`` (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd_dir: Path = _FD_DIR) -> None:
        self._loop = loop
        self._fd_dir = fd_dir

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tasks = GaugeMetricFamily(
            "sluice_asyncio_tasks",
            "asyncio tasks alive on the scheduler's event loop, by the function each runs "
            "(bounded in a healthy process: binds, status writes, preemptions and watches "
            "in flight).",
            labels=["coroutine"],
        )
        for name, count in sorted(Counter(map(_coroutine, asyncio.all_tasks(self._loop))).items()):
            tasks.add_metric([name], float(count))
        yield tasks
        sockets = open_sockets(self._fd_dir)
        if sockets is not None:
            family = GaugeMetricFamily(
                "sluice_open_sockets",
                "Open sockets of the process: connections to the API server, the "
                "metrics and probes port, scrapes in progress.",
            )
            family.add_metric([], float(sockets))
            yield family


def register_runtime_metrics(registry: CollectorRegistry) -> None:
    """Add the process collector and :class:`RuntimeCollector` (for the running event
    loop) to ``registry``. Called once, from inside the running loop."""
    ProcessCollector(registry=registry)
    registry.register(RuntimeCollector(asyncio.get_running_loop()))
