"""The ``reclaim`` workload (issue 11): a queue takes back its share from another.

1,000 nodes of 4 CPU; queue ``a`` (weight 1) runs 4,000 pods of 1 CPU (4 per node, the
cluster full, ``terminationGracePeriodSeconds: 0``); after the first (idle) cycle queue
``b`` (weight 1) submits 2,000 pods of 1 CPU in one burst. Each queue deserves half of
the cluster (2,000 CPU), so ``b`` must reclaim 2,000 pods of ``a``: no more, and none once
``b`` holds its half. Every API call of the embedded cluster takes 20 ms; the real loop
runs on the real clock with the default configuration (reclaim after preempt).

Reported: ``seconds_to_share`` (from the burst entering the store to the bind of ``b``'s
last pod), the evictions (``evictions``: successful deletes; ``evictions_after_share``:
those after ``b`` reached its share, over ``SETTLE`` seconds more), the cycles and where
their time went, and the checks (every ``b`` pod bound, exactly 2,000 evictions, all of
``a``, none after the share was reached, no node over-allocated). Target: ``b`` at its
share within 10 s of submitting.
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
from scheduler.sim.faults import CALL_KINDS, ApiBehaviour
from scheduler.sim.scenario import Arrival, Scenario

API_LATENCY = 0.02
SETTLE = 5.0
"""Seconds the run goes on after ``b`` reached its share, to see that nothing more goes."""
DEADLINE = 300.0
POD = {"cpu": "1", "memory": "100Mi"}
TARGET_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class ReclaimWorkload:
    name: str = "reclaim"
    nodes: int = 1000
    running: int = 4000
    pods: int = 2000
    description: str = (
        "queue a (weight 1) fills 1,000 nodes with 4,000 pods of 1 CPU; queue b (weight 1) "
        "submits 2,000 and reclaims its half"
    )


WORKLOADS = {"reclaim": ReclaimWorkload()}


def _queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }


def _pod(queue: str, i: int, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": L.SCHEDULER_NAME,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "resources": {"requests": dict(POD), "limits": dict(POD)}}],
    }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{queue}-{i}",
            "namespace": NAMESPACE,
            "labels": {L.QUEUE_LABEL: queue},
        },
        "spec": spec,
    }
    if node is not None:
        spec["nodeName"] = node
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return obj


def run(w: ReclaimWorkload, *, wrap: Any = None) -> dict[str, Any]:
    quiet()
    load_before = os.getloadavg()
    src = "bench:reclaim"
    arrivals = [Arrival(0.0, _queue(q), src) for q in ("a", "b")]
    arrivals += [Arrival(0.0, cpu_node(i), src) for i in range(w.nodes)]
    arrivals += [Arrival(0.0, _pod("a", i, f"node-{i % w.nodes}"), src) for i in range(w.running)]
    burst = [_pod("b", i) for i in range(w.pods)]
    resolved = app.resolve()
    cycles: list[tuple[float, CycleReport]] = []
    bound_b: list[float] = []
    deletes: list[tuple[float, str]] = []
    failed: list[str] = []

    def on_cycle(report: CycleReport, events: list[dict[str, Any]]) -> None:
        del events
        cycles.append((time.monotonic(), report))

    def on_call(call: ApiCall) -> None:
        if call.kind == "bind" and call.ok and call.ref.name.startswith("b-"):
            bound_b.append(time.monotonic())
        elif call.kind in ("delete", "evict"):
            if call.ok:
                deletes.append((time.monotonic(), call.ref.name))
            else:
                failed.append(call.ref.name)

    sim = HoldingSimulation(
        Scenario(arrivals=arrivals, sources=[src]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(latency=dict.fromkeys(CALL_KINDS, API_LATENCY)),
        real_time=True,
        on_cycle=on_cycle,
    )
    sim.loop.freeze_heap = True
    sim.backend.add_observer(on_call)
    times: dict[str, float] = {}

    async def drive() -> None:
        deadline = time.monotonic() + DEADLINE
        while not cycles:
            await anyio.sleep(0.005)
        cpu0 = time.process_time()
        for p in burst:
            sim.store.create(p)
        times["submitted"] = time.monotonic()
        times["cpu_submitted"] = cpu0
        sim.loop.wake()
        while len(bound_b) < w.pods and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        times["at_share"] = time.monotonic()
        times["cpu_at_share"] = time.process_time()
        await anyio.sleep(SETTLE)
        sim.holding = False
        sim.loop.stop()

    t0 = time.monotonic()
    run_driven(sim, drive, wrap)
    run_seconds = time.monotonic() - t0
    submitted, at_share = times["submitted"], times["at_share"]
    seconds = at_share - submitted
    after = [name for t, name in deletes if t > at_share]
    not_a = [name for _, name in deletes if not name.startswith("a-")]
    during = [(t, r) for t, r in cycles if submitted <= t <= at_share]
    registry = sim.loop.metrics.registry
    checks = {
        "every b pod bound": len(bound_b) >= w.pods,
        "exactly the evictions needed": len(deletes) == w.pods,
        "only pods of queue a evicted": not not_a,
        "no eviction once b is at its share": not after,
        "no failed delete": not failed,
    }
    return {
        "workload": w.name,
        "description": w.description,
        "api_latency_seconds": API_LATENCY,
        "nodes": w.nodes,
        "running_pods": w.running,
        "pods": w.pods,
        "seconds_to_share": _r(seconds),
        "target_seconds": TARGET_SECONDS,
        "pods_per_second": _r(len(bound_b) / seconds if seconds > 0 else None),
        "cpu_seconds": _r(times["cpu_at_share"] - times["cpu_submitted"]),
        "evictions": len(deletes),
        "evictions_after_share": len(after),
        "reclaim_attempts": registry.get_sample_value("scheduler_reclaim_attempts_total"),
        "cycles": len(during),
        "deciding_cycles": sum(1 for _, r in during if r.decided),
        "decision_seconds": _r(sum(r.seconds for _, r in during)),
        **cycle_holds(r for _, r in during),
        "action_seconds": {
            a.name: _r(
                registry.get_sample_value(
                    "scheduler_cycle_duration_seconds_sum", {"action": a.name}
                )
            )
            for a in resolved.actions
        },
        "run_seconds": _r(run_seconds),
        "peak_rss_mb": peak_rss_mb(),
        **machine(load_before),
        "checks": checks,
        "failures": [name for name, ok in checks.items() if not ok],
    }
