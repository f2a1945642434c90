"""The ``idle-gangs`` workload (issue 16 point 2): what a steady state costs.

500 nodes of 4 CPU; 600 PodGroups of 8 pods of 500m (``minMember`` 8) arrive at once:
500 are bound (each fills a node) and 100 can never fit; all have the same priority, so
no victim exists anywhere. Once the 500 are bound nothing changes; the loop still runs a
cycle every ``schedulePeriod`` (1 s). Measured over ``WINDOW`` seconds of that steady
state, on the real clock: the scheduler's CPU (process time over wall time, as a share
of one core), the cycles run and their mean decision time, and the time spent in
``preempt``. Unschedulable gangs are parked (not searched again until something changes,
or after 5 minutes), so an idle cycle costs a snapshot, a session and a status report.

Checks: 500 gangs bound whole and none in part; the 100 others pending with a reason.
Target: under 5 % of one core.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import anyio

from bench.common import HoldingSimulation, cpu_node, machine, run_driven
from bench.workloads import NAMESPACE, _r, cycle_holds, peak_rss_mb
from scheduler import app
from scheduler.api import labels as L
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.backend import ApiCall
from scheduler.sim.scenario import Arrival, Scenario

WINDOW = 20.0
"""Seconds of steady state measured."""
DEADLINE = 300.0
POD = {"cpu": "500m", "memory": "100Mi"}
GANG = 8
TARGET_CORE_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class IdleWorkload:
    name: str = "idle-gangs"
    nodes: int = 500
    pods: int = 4800
    """Pods in all (gangs of 8): 600 gangs for 500 nodes."""
    running: int = 0
    description: str = (
        "500 nodes of 4 CPU, 600 gangs of 8 pods of 500m: 500 bound, 100 that can never "
        "fit; the CPU of the steady state that follows"
    )


WORKLOADS = {"idle-gangs": IdleWorkload()}


def _objects(gangs: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g in range(gangs):
        out.append(
            {
                "apiVersion": L.API_VERSION,
                "kind": "PodGroup",
                "metadata": {"name": f"g{g}", "namespace": NAMESPACE},
                "spec": {"minMember": GANG},
            }
        )
        for k in range(GANG):
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"g{g}-{k}",
                        "namespace": NAMESPACE,
                        "labels": {L.POD_GROUP_LABEL: f"g{g}"},
                    },
                    "spec": {
                        "schedulerName": L.SCHEDULER_NAME,
                        "containers": [
                            {"name": "c", "resources": {"requests": POD, "limits": POD}}
                        ],
                    },
                }
            )
    return out


def run(w: IdleWorkload, *, wrap: Any = None) -> dict[str, Any]:
    quiet()
    load_before = os.getloadavg()
    src = "bench:idle-gangs"
    gangs = w.pods // GANG
    fit = min(gangs, w.nodes)
    arrivals = [Arrival(0.0, cpu_node(i), src) for i in range(w.nodes)]
    arrivals += [Arrival(0.0, o, src) for o in _objects(gangs)]
    resolved = app.resolve()
    cycles: list[tuple[float, CycleReport]] = []
    bound: list[str] = []

    def on_cycle(report: CycleReport, events: list[dict[str, Any]]) -> None:
        del events
        cycles.append((time.monotonic(), report))

    def on_call(call: ApiCall) -> None:
        if call.kind == "bind" and call.ok:
            bound.append(call.ref.name)

    sim = HoldingSimulation(
        Scenario(arrivals=arrivals, sources=[src]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        real_time=True,
        on_cycle=on_cycle,
    )
    sim.loop.freeze_heap = True
    sim.backend.add_observer(on_call)
    times: dict[str, float] = {}

    async def drive() -> None:
        deadline = time.monotonic() + DEADLINE
        while len(bound) < fit * GANG and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        await anyio.sleep(3.0)  # the last status writes, the first parked cycles
        times["start"], times["cpu_start"] = time.monotonic(), time.process_time()
        times["cycles_start"] = len(cycles)
        await anyio.sleep(WINDOW)
        times["end"], times["cpu_end"] = time.monotonic(), time.process_time()
        sim.holding = False
        sim.loop.stop()

    t0 = time.monotonic()
    run_driven(sim, drive, wrap)
    wall = times["end"] - times["start"]
    cpu = times["cpu_end"] - times["cpu_start"]
    steady = cycles[times["cycles_start"] :]
    steady = [(t, r) for t, r in steady if t <= times["end"]]
    registry = sim.loop.metrics.registry
    by_gang: dict[str, int] = {}
    for name in bound:
        gang = name.rsplit("-", 1)[0]
        by_gang[gang] = by_gang.get(gang, 0) + 1
    partial = sorted(g for g, n in by_gang.items() if n < GANG)
    pending = [k for k, reason in sim.result.pending.items() if reason]
    share = cpu / wall if wall > 0 else None
    checks = {
        f"{fit} gangs bound whole": sum(1 for n in by_gang.values() if n == GANG) == fit,
        "no gang bound in part": not partial,
        "the others pending with a reason": len(pending) >= (gangs - fit) * GANG,
        f"under {TARGET_CORE_SHARE:.0%} of a core": share is not None and share < TARGET_CORE_SHARE,
    }
    return {
        "workload": w.name,
        "description": w.description,
        "nodes": w.nodes,
        "gangs": gangs,
        "window_seconds": _r(wall),
        "cpu_seconds": _r(cpu),
        "core_share": _r(share),
        "target_core_share": TARGET_CORE_SHARE,
        "cycles": len(steady),
        "mean_cycle_seconds": _r(sum(r.seconds for _, r in steady) / len(steady))
        if steady
        else None,
        **cycle_holds(r for _, r in steady),
        "parked_jobs": sim.loop.queue.parked,
        "preempt_seconds_total": _r(
            registry.get_sample_value("scheduler_cycle_duration_seconds_sum", {"action": "preempt"})
        ),
        "run_seconds": _r(time.monotonic() - t0),
        "peak_rss_mb": peak_rss_mb(),
        **machine(load_before),
        "checks": checks,
        "failures": [name for name, ok in checks.items() if not ok],
    }
