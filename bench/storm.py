"""The ``preemption-storm`` workload (issue 9 point 7): what asynchronous preemption is for.

KEP-4832's point is that slow preemption calls must not hold up the scheduling of
everyone else. 1,000 nodes of 4 CPU, each running four low-priority pods of 900m
(PreemptionBasic's start: 400m free per node); after the first cycle, for ``SECONDS``
seconds, default pods of 100m arrive at ``DEFAULT_RATE`` a second and preemptors (priority
10, 3 CPU: three victims each) at ``PREEMPTOR_RATE`` a second. Every delete takes
``DELETE_LATENCY`` (1 s), the other calls 20 ms. With the feature gate
``SchedulerAsyncPreemption`` on, a preemption's calls run in the background and the
default pods are bound meanwhile; off, each cycle that preempts awaits them.

Reported, from when each pod was due (the driver shares the thread with the scheduler:
a pod due while a cycle runs is created when it yields) to its bind: p50, p99 and max of
the default pods and of the preemptors. Checks: every pod bound, victims of lower
priority, no node over-allocated. Target: the default pods' p99 with async on at most a
fifth of async off, and under 1.5 s.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import anyio

from bench.common import HoldingSimulation, machine, run_driven
from bench.preemption import (
    GATE,
    _over_allocated,
    default_pod,
    high_pod,
    low_pod,
)
from bench.workloads import _r, cycle_holds, node, peak_rss_mb
from scheduler import app
from scheduler.config import SchedulerConfiguration, with_feature_gates
from scheduler.framework.effects import Evict, parts
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.backend import ApiCall
from scheduler.sim.faults import CALL_KINDS, ApiBehaviour
from scheduler.sim.scenario import Arrival, Scenario

API_LATENCY = 0.02
DELETE_LATENCY = 1.0
SECONDS = 30.0
DEFAULT_RATE = 100.0
PREEMPTOR_RATE = 5.0
DEADLINE = 300.0
TARGET_P99 = 1.5
TARGET_RATIO = 5.0


@dataclass(frozen=True, slots=True)
class StormWorkload:
    name: str
    async_preemption: bool
    nodes: int = 1000
    running: int = 4000
    pods: int = 0
    """Unused (the arrivals are by rate); kept for the common --pods flag."""
    description: str = ""


WORKLOADS = {
    f"preemption-storm{suffix}": StormWorkload(
        f"preemption-storm{suffix}",
        on,
        description=(
            f"PreemptionStorm ({GATE}={'true' if on else 'false'}): 1,000 nodes of four 900m "
            "pods; for 30 s, 100 default pods (100m) a second and 5 preemptors (3 CPU, three "
            "victims each) a second; deletes 1 s, other calls 20 ms"
        ),
    )
    for suffix, on in (("", True), ("-off", False))
}


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    n = len(ordered)
    out = {f"p{p}": _r(ordered[min(n - 1, -(-n * p // 100) - 1)]) or 0.0 for p in (50, 99)}
    out["max"] = _r(ordered[-1]) or 0.0
    return out


def run(w: StormWorkload, *, wrap: Any = None) -> dict[str, Any]:
    quiet()
    load_before = os.getloadavg()
    src = f"bench:{w.name}"
    arrivals = [Arrival(0.0, node(i), src) for i in range(w.nodes)]
    arrivals += [Arrival(0.0, low_pod(i, f"node-{i % w.nodes}"), src) for i in range(w.running)]
    resolved = app.resolve(with_feature_gates(SchedulerConfiguration(), {GATE: w.async_preemption}))
    cycles: list[CycleReport] = []
    due: dict[str, float] = {}
    bound: dict[str, float] = {}
    bad_victims: list[str] = []
    failed: list[str] = []

    def on_cycle(report: CycleReport, events: list[dict[str, Any]]) -> None:
        del events
        cycles.append(report)
        for e in parts(report.effects):
            if isinstance(e, Evict) and (
                e.preemptor is None or e.task.priority >= e.preemptor.priority
            ):
                bad_victims.append(e.task.key)

    def on_call(call: ApiCall) -> None:
        if call.kind == "bind" and call.ok:
            bound.setdefault(call.ref.name, time.monotonic())
        elif not call.ok:
            failed.append(f"{call.kind} {call.ref.key}")

    sim = HoldingSimulation(
        Scenario(arrivals=arrivals, sources=[src]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(
            latency={
                **dict.fromkeys(CALL_KINDS, API_LATENCY),
                "delete": DELETE_LATENCY,
                "evict": DELETE_LATENCY,
            }
        ),
        real_time=True,
        on_cycle=on_cycle,
    )
    sim.loop.freeze_heap = True
    sim.backend.add_observer(on_call)
    times: dict[str, float] = {}

    async def drive() -> None:
        while not cycles:
            await anyio.sleep(0.005)
        began = times["start"] = time.monotonic()
        made = {"default": 0, "high": 0}
        rates = {"default": DEFAULT_RATE, "high": PREEMPTOR_RATE}
        makers = {"default": default_pod, "high": high_pod}
        while time.monotonic() - began < SECONDS:
            now = time.monotonic()
            for kind, rate in rates.items():
                while made[kind] < rate * SECONDS and began + made[kind] / rate <= now:
                    obj = makers[kind](made[kind])
                    due[obj["metadata"]["name"]] = began + made[kind] / rate
                    sim.store.create(obj)
                    made[kind] += 1
            sim.loop.wake()
            await anyio.sleep(0.005)
        deadline = time.monotonic() + DEADLINE
        while len(bound.keys() & due.keys()) < len(due) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        times["end"] = time.monotonic()
        sim.holding = False
        sim.loop.stop()

    run_driven(sim, drive, wrap)
    latency = {
        kind: [bound[n] - due[n] for n in due if n.startswith(prefix) and n in bound]
        for kind, prefix in (("default", "default-"), ("preemptors", "high-"))
    }
    unbound = sorted(n for n in due if n not in bound)
    default_p99 = _quantiles(latency["default"]).get("p99")
    over = _over_allocated(sim)
    checks = {
        "every pod bound": not unbound,
        "victims of lower priority": not bad_victims,
        "no node over-allocated": not over,
    }
    if w.async_preemption:
        checks[f"default pods' p99 under {TARGET_P99:g} s"] = (
            default_p99 is not None and default_p99 < TARGET_P99
        )
    return {
        "workload": w.name,
        "description": w.description,
        "feature_gates": {GATE: w.async_preemption},
        "delete_latency_seconds": DELETE_LATENCY,
        "nodes": w.nodes,
        "running_pods": w.running,
        "default_pods": sum(1 for n in due if n.startswith("default-")),
        "preemptors": sum(1 for n in due if n.startswith("high-")),
        "default_due_to_bound_seconds": _quantiles(latency["default"]),
        "preemptors_due_to_bound_seconds": _quantiles(latency["preemptors"]),
        "target": f"default p99 async on <= 1/{TARGET_RATIO:g} of off, and < {TARGET_P99:g} s",
        "unbound": unbound[:10],
        "cycles": len(cycles),
        **cycle_holds(cycles),
        "failed_calls": failed[:10],
        "run_seconds": _r(times.get("end", 0.0) - times.get("start", 0.0)),
        "peak_rss_mb": peak_rss_mb(),
        **machine(load_before),
        "checks": checks,
        "failures": [name for name, ok in checks.items() if not ok],
    }
