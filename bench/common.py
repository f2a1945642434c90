"""What the embedded-cluster benchmarks share: a simulation the driver holds open, a
4-CPU node, running a driver beside the loop, and the machine's figures every result
carries."""

from __future__ import annotations

import os
import platform
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from bench.workloads import source_revision
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.runner import Simulation

NODE = {"cpu": "4", "memory": "32Gi", "pods": "110"}
"""A node of 4 CPU (the shapes of reclaim, gang-preemption and idle-gangs)."""


class HoldingSimulation(Simulation):
    """A Simulation that does not stop while its driver holds it (``holding``): the
    driver still has pods to create, or a steady state to measure."""

    holding = True

    def _should_stop(self, report: CycleReport) -> bool:
        return not self.holding and super()._should_stop(report)


def cpu_node(i: int) -> dict[str, Any]:
    """``node-i`` with :data:`NODE` allocatable."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"node-{i}"},
        "status": {"allocatable": dict(NODE), "capacity": dict(NODE)},
    }


def run_driven(
    sim: Simulation,
    drive: Callable[[], Awaitable[None]],
    wrap: Callable[[Callable[[], Any]], Any] | None = None,
) -> None:
    """Run ``sim`` with ``drive`` beside it until the simulation ends (the driver stops
    the loop); under ``wrap`` (a profiler) when given."""

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await sim.run()
            tg.cancel_scope.cancel()

    if wrap is None:
        anyio.run(main)
    else:
        wrap(lambda: anyio.run(main))


def machine(load_before: tuple[float, float, float]) -> dict[str, Any]:
    """The fields about the machine and the code every result ends with."""
    return {
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "revision": source_revision(),
    }
