"""The ``gang-preemption`` workload (issue 12): gangs preempting gangs.

1,000 nodes of 4 CPU, full: 500 low-priority gangs of 8 pods of 1 CPU (``minMember`` 6,
so two spare members each), member ``k`` of gang ``g`` on node ``(125 k + g) mod 1000``:
every node runs four pods of four different gangs. After the first (idle) cycle, 100
high-priority gangs of 8 pods (``minMember`` 8) each asking a node's worth (4 CPU) are
created in one burst. Each needs eight empty nodes: the victim search takes spare members
first (four spares of four gangs empty a node and break nothing), and breaks gangs only
when the spares run out, whole (a broken gang's other members go too). Every API call of
the embedded cluster takes 20 ms; the real loop runs on the real clock with the default
configuration.

Reported: ``pods_per_second`` (the 800 preemptors, from the burst entering the store to
the last bind), ``gangs_broken`` and ``gangs_broken_per_preemptor_gang`` (low gangs that
lost a member of their core, over the 100), the evictions, the cycles and where their
time went, and the checks: every preemptor bound; every victim of lower priority; no low
gang left running below its minimum (a gang is broken whole or not at all); no node
over-allocated. Target: at least 100 pods/s.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import anyio

from bench.common import NODE, HoldingSimulation, cpu_node, machine, run_driven
from bench.workloads import NAMESPACE, _r, cycle_holds, peak_rss_mb
from scheduler import app
from scheduler.api import labels as L
from scheduler.framework.effects import Evict, parts
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.backend import ApiCall
from scheduler.sim.faults import CALL_KINDS, ApiBehaviour
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario

API_LATENCY = 0.02
DEADLINE = 600.0
SETTLE = 3.0
"""Seconds the run goes on after the last preemptor is bound (nothing more may go)."""
LOW = {"cpu": "1", "memory": "100Mi"}
HIGH = {"cpu": "4", "memory": "100Mi"}
GANG = 8
LOW_MIN = 6
HIGH_PRIORITY = 100
TARGET_PODS_PER_SECOND = 100.0


@dataclass(frozen=True, slots=True)
class GangPreemptionWorkload:
    name: str = "gang-preemption"
    nodes: int = 1000
    running: int = 4000
    """Low-priority pods at the start (gangs of 8; four per node)."""
    pods: int = 800
    """Preemptors (gangs of 8)."""
    description: str = (
        "1,000 nodes full of 500 low-priority gangs of 8 (minMember 6), four gangs per "
        "node; 100 high-priority gangs of 8 node-sized pods preempt; every API call 20 ms"
    )


WORKLOADS = {"gang-preemption": GangPreemptionWorkload()}


def _group(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"minMember": min_member},
    }


def _pod(
    name: str, group: str, requests: dict[str, str], priority: int, node: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": L.SCHEDULER_NAME,
        "priority": priority,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "c", "resources": {"requests": dict(requests), "limits": dict(requests)}}
        ],
    }
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {L.POD_GROUP_LABEL: group}},
        "spec": spec,
    }
    if node is not None:
        spec["nodeName"] = node
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return obj


def low_objects(nodes: int, running: int) -> list[dict[str, Any]]:
    """The low gangs, member ``k`` of gang ``g`` on node ``(k * nodes // 8 + g) % nodes``:
    with ``running = 4 * nodes``, four pods of four different gangs on every node."""
    out: list[dict[str, Any]] = []
    stride = max(nodes // GANG, 1)
    for g in range(running // GANG):
        out.append(_group(f"low-{g}", LOW_MIN))
        for k in range(GANG):
            where = f"node-{(k * stride + g) % nodes}"
            out.append(_pod(f"low-{g}-{k}", f"low-{g}", LOW, 0, where))
    return out


def high_objects(pods: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g in range(pods // GANG):
        out.append(_group(f"high-{g}", GANG))
        out.extend(_pod(f"high-{g}-{k}", f"high-{g}", HIGH, HIGH_PRIORITY) for k in range(GANG))
    return out


def _milli(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _over_allocated(sim: Simulation) -> list[str]:
    cpu: Counter[str] = Counter()
    for p in sim.store.list("Pod")[0]:
        where = (p.get("spec") or {}).get("nodeName")
        if where:
            for c in p["spec"]["containers"]:
                cpu[where] += _milli(c["resources"]["requests"]["cpu"])
    return sorted(n for n, used in cpu.items() if used > _milli(NODE["cpu"]))


def run(w: GangPreemptionWorkload, *, wrap: Any = None) -> dict[str, Any]:
    quiet()
    load_before = os.getloadavg()
    src = "bench:gang-preemption"
    arrivals = [Arrival(0.0, cpu_node(i), src) for i in range(w.nodes)]
    arrivals += [Arrival(0.0, o, src) for o in low_objects(w.nodes, w.running)]
    burst = high_objects(w.pods)
    preemptors = sum(1 for o in burst if o["kind"] == "Pod")
    resolved = app.resolve()
    cycles: list[tuple[float, CycleReport]] = []
    bound: list[float] = []
    deleted: list[str] = []
    failed: list[str] = []
    bad_victims: list[str] = []
    kinds: Counter[str] = Counter()

    def on_cycle(report: CycleReport, events: list[dict[str, Any]]) -> None:
        del events
        cycles.append((time.monotonic(), report))
        for e in parts(report.effects):
            if isinstance(e, Evict):
                kinds[e.bundle.value] += 1
                if e.preemptor is None or e.task.priority >= e.preemptor.priority:
                    bad_victims.append(e.task.key)

    def on_call(call: ApiCall) -> None:
        if call.kind == "bind" and call.ok and call.ref.name.startswith("high-"):
            bound.append(time.monotonic())
        elif call.kind in ("delete", "evict"):
            (deleted if call.ok else failed).append(call.ref.name)

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
        times["cpu_submitted"] = time.process_time()
        for obj in burst:
            sim.store.create(obj)
        times["submitted"] = time.monotonic()
        sim.loop.wake()
        while len(bound) < preemptors and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        times["done"] = time.monotonic()
        times["cpu_done"] = time.process_time()
        await anyio.sleep(SETTLE)
        sim.holding = False
        sim.loop.stop()

    t0 = time.monotonic()
    run_driven(sim, drive, wrap)
    run_seconds = time.monotonic() - t0
    seconds = times["done"] - times["submitted"]
    running: Counter[str] = Counter()
    for p in sim.store.list("Pod")[0]:
        name = p["metadata"]["name"]
        if name.startswith("low-") and (p.get("spec") or {}).get("nodeName"):
            running[name.rsplit("-", 1)[0]] += 1
    low_gangs = w.running // GANG
    broken = sum(1 for g in range(low_gangs) if running[f"low-{g}"] < LOW_MIN)
    part_broken = sorted(g for g, n in running.items() if 0 < n < LOW_MIN)
    after = [t for t in bound if t > times["done"]]
    over = _over_allocated(sim)
    during = [(t, r) for t, r in cycles if times["submitted"] <= t <= times["done"]]
    registry = sim.loop.metrics.registry
    gangs = max(preemptors // GANG, 1)
    rate = len(bound) / seconds if seconds > 0 else None
    checks = {
        "every preemptor bound": len(bound) >= preemptors,
        "victims of lower priority": not bad_victims,
        "no low gang left below its minimum": not part_broken,
        "no node over-allocated": not over,
        "no failed delete": not failed,
    }
    return {
        "workload": w.name,
        "description": w.description,
        "api_latency_seconds": API_LATENCY,
        "nodes": w.nodes,
        "running_pods": w.running,
        "pods": preemptors,
        "seconds": _r(seconds),
        "pods_per_second": _r(rate),
        "target_pods_per_second": TARGET_PODS_PER_SECOND,
        "cpu_seconds": _r(times["cpu_done"] - times["cpu_submitted"]),
        "gangs_broken": broken,
        "gangs_broken_per_preemptor_gang": _r(broken / gangs),
        "evictions": len(deleted),
        "evictions_by_bundle": dict(sorted(kinds.items())),
        "binds_after_done": len(after),
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
        "part_broken_gangs": part_broken[:10],
        "over_allocated_nodes": over[:10],
    }
