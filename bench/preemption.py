"""The preemption workloads: kube-scheduler's PreemptionBasic and PreemptionAsync, and
PreemptionBurst.

They run the real loop on the embedded cluster on the real clock, with every API call of
the embedded cluster taking ``API_LATENCY`` seconds (bind, delete, evict, patch, create;
deletes ``BURST_DELETE_LATENCY`` in PreemptionBurst), and with the feature gate
``SchedulerAsyncPreemption`` on or off (the ``-off`` names).
The pod templates are scheduler_perf's (``config/templates/pod-*.yaml``):

* low priority (running at the start, 4 per node): no priority (0), 900m CPU / 500Mi,
  ``terminationGracePeriodSeconds: 0``, so a victim is gone as soon as its delete lands;
* high priority (the preemptors): priority 10, 3 CPU / 500Mi. On a node of 4 CPU with
  four low-priority pods (3.6 CPU) each one must evict three of them;
* default (PreemptionAsync's measured pods): no priority (0), 100m CPU / 500Mi. They
  cannot preempt (the low-priority pods have the same priority) and need not: every node
  keeps 400m free, room for four of them (nodes whose room is being freed for a
  nominated preemptor excepted). Being of lower priority than the preemptors, a bound
  one may be chosen as a victim too, as in kube-scheduler.

**PreemptionBasic**: nodes and low-priority pods at the start; after the first (idle)
cycle the high-priority pods are created in one burst; they are the measured pods.
**PreemptionAsync**: the same start; after the first cycle a high-priority pod is due
every ``CHURN_INTERVAL`` seconds (kube's ``churn`` op) until every measured pod is bound,
and ``MEASURED_AT`` seconds after the churn started the default pods are created in one
burst; they are the measured pods. **PreemptionBurst**: PreemptionBasic's burst at
``BURST_SHAPE``'s size behind slow deletes; each preemptor's time from the cycle that
chose its victims to their deletion (when its gate can open) and to its bind is
reported. The preemptors' time from creation to binding is
reported beside. The embedded cluster shares the one thread with the scheduler, so a
preemptor due while a cycle runs is created when the cycle yields; its time counts from
when it was due (``created_to_bound_seconds``; ``in_store_to_bound_seconds`` counts from
when the store had it). The run goes on after the churn stops until the last preemptor is
bound (or nothing is left to do).

The benchmark checks itself (``checks``; a failed one is listed in ``failures`` and makes
the exit status 1): every measured pod bound, every preemptor bound by the end, every
eviction decided of a pod of strictly lower priority than its preemptor, every pod
deleted one decided as a victim, no failed delete, no node holding more CPU or pods
than its allocatable at the end, and for PreemptionBasic exactly three victims for each
preemptor.
"""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from bench.common import HoldingSimulation
from bench.workloads import (
    NAMESPACE,
    NODE_ALLOCATABLE,
    Meter,
    _quantiles,
    _r,
    cycle_holds,
    node,
    peak_rss_mb,
    source_revision,
    throughput,
)
from scheduler import app
from scheduler.api import labels as L
from scheduler.config import SchedulerConfiguration, with_feature_gates
from scheduler.framework.effects import Evict, parts
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.backend import ApiCall
from scheduler.sim.faults import CALL_KINDS, ApiBehaviour
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.store import WatchEvent

GATE = "SchedulerAsyncPreemption"
API_LATENCY = 0.02
"""Seconds every API call of the embedded cluster takes (each kind of CALL_KINDS)."""
CHURN_INTERVAL = 0.2
"""Seconds between two preemptors of PreemptionAsync (kube's ``intervalMilliseconds``)."""
MEASURED_AT = 0.05
"""Seconds after the first (idle) cycle (PreemptionAsync: after the churn started) at
which the measured pods are created."""
LATE = 0.05
"""A churned preemptor entering the store more than this after it was due is late."""
DEADLINE = 900.0
"""Seconds (real clock) after which the churn stops and the run is wound up anyway."""
SETTLE = 120.0
"""Seconds the run may take to settle once the churn stopped; then the loop is stopped."""

LOW_PRIORITY = 0
HIGH_PRIORITY = 10
LOW = {"cpu": "900m", "memory": "500Mi"}
HIGH = {"cpu": "3000m", "memory": "500Mi"}
DEFAULT = {"cpu": "100m", "memory": "500Mi"}
VICTIMS_PER_PREEMPTOR = 3
"""PreemptionBasic: 400m free + 3 x 900m >= 3000m > 400m + 2 x 900m."""

KUBE_SHAPES: dict[str, dict[str, int]] = {
    "basic": {"nodes": 1000, "running": 4000, "pods": 1000},
    "async": {"nodes": 5000, "running": 20000, "pods": 5000},
}
"""scheduler_perf's sizes (``misc/performance-config.yaml``); ``scaled_from`` when not."""
BURST_DELETE_LATENCY = 0.1
"""PreemptionBurst: seconds every delete takes (a slow API server, or admission)."""
BURST_SHAPE: dict[str, int] = {"nodes": 500, "running": 2000, "pods": 500}


@dataclass(frozen=True, slots=True)
class PreemptionWorkload:
    name: str
    shape: str
    """``basic`` (PreemptionBasic) or ``async`` (PreemptionAsync)."""
    nodes: int
    pods: int
    """Measured pods: the preemptors (basic) or the default-priority pods (async)."""
    running: int
    """Low-priority pods running at the start, spread round-robin over the nodes."""
    async_preemption: bool = True
    description: str = ""
    delete_latency: float = API_LATENCY
    """Seconds a delete (or eviction) call takes; the other calls take ``API_LATENCY``."""


def _pair(shape: str, title: str, text: str, **sizes: Any) -> dict[str, PreemptionWorkload]:
    base = f"preemption-{shape}"
    return {
        f"{base}{suffix}": PreemptionWorkload(
            f"{base}{suffix}",
            shape,
            async_preemption=on,
            description=f"{title} ({GATE}={'true' if on else 'false'}): {text}",
            **sizes,
        )
        for suffix, on in (("", True), ("-off", False))
    }


WORKLOADS: dict[str, PreemptionWorkload] = {
    **_pair(
        "basic",
        "PreemptionBasic",
        "1,000 nodes, 4,000 low-priority pods of 900m, then 1,000 pods of priority 10 asking "
        "3 CPU that must evict three each; every API call 20 ms",
        **KUBE_SHAPES["basic"],
    ),
    **_pair(
        "async",
        "PreemptionAsync",
        "5,000 nodes, 20,000 low-priority pods of 900m, a priority-10 pod asking 3 CPU "
        "every 200 ms, 5,000 default pods of 100m measured; every API call 20 ms",
        **KUBE_SHAPES["async"],
    ),
    **_pair(
        "burst",
        "PreemptionBurst",
        "500 nodes, 2,000 low-priority pods of 900m, then 500 pods of priority 10 asking "
        "3 CPU at once, each with three victims of its own; every delete 100 ms, the other "
        "calls 20 ms",
        delete_latency=BURST_DELETE_LATENCY,
        **BURST_SHAPE,
    ),
}


# Objects ------------------------------------------------------------------------------


def _pod(name: str, requests: dict[str, str], priority: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": L.SCHEDULER_NAME,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{"containerPort": 80}],
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def low_pod(i: int, node_name: str) -> dict[str, Any]:
    obj = _pod(f"low-{i}", LOW, LOW_PRIORITY)
    obj["spec"]["terminationGracePeriodSeconds"] = 0
    obj["spec"]["nodeName"] = node_name
    obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return obj


def high_pod(i: int) -> dict[str, Any]:
    return _pod(f"high-{i}", HIGH, HIGH_PRIORITY)


def default_pod(i: int) -> dict[str, Any]:
    return _pod(f"default-{i}", DEFAULT, None)


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def _milli_cpu(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


# Measuring ----------------------------------------------------------------------------


class Tracker:
    """Preemptors (creation and bind times), evictions decided and made."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        """When each preemptor entered the store."""
        self.due: dict[str, float] = {}
        """When each churned preemptor was due (its creation may come later, see churn)."""
        self.bound: dict[str, float] = {}
        self.deleted: list[str] = []
        """Pods deleted (or evicted) by a successful call, in order."""
        self.failed_deletes = 0
        self.decided: Counter[str] = Counter()
        """Victims decided (committed Evict effects), by preemptor key."""
        self.victims: set[str] = set()
        """Keys of every pod decided as a victim."""
        self.bad_victims: list[str] = []
        """Evict effects whose victim is not of strictly lower priority than its preemptor."""
        self.decided_at: dict[str, float] = {}
        """When the cycle that first decided each preemptor's victims ended."""
        self.victims_of: dict[str, list[str]] = {}
        self.gone: dict[str, float] = {}
        """When each pod's deletion reached the store."""

    def on_store(self, ev: WatchEvent) -> None:
        if ev.type == "ADDED" and ev.obj["metadata"]["name"].startswith("high-"):
            self.created[_key(ev.obj)] = time.monotonic()
        elif ev.type == "DELETED":
            self.gone[_key(ev.obj)] = time.monotonic()

    def on_call(self, call: ApiCall) -> None:
        if call.kind == "bind" and call.ok and call.ref.name.startswith("high-"):
            self.bound[call.ref.key] = time.monotonic()
        elif call.kind in ("delete", "evict"):
            if call.ok:
                self.deleted.append(call.ref.key)
            else:
                self.failed_deletes += 1

    def on_cycle(self, report: CycleReport) -> None:
        for e in parts(report.effects):
            if not isinstance(e, Evict):
                continue
            if e.preemptor is None or not e.task.priority < e.preemptor.priority:
                by = "nobody" if e.preemptor is None else e.preemptor.key
                self.bad_victims.append(f"{e.task.key} ({e.task.priority}) by {by}")
            if e.preemptor is not None:
                self.decided[e.preemptor.key] += 1
                # the end of the decisions (``started`` is time.monotonic on the real
                # clock); with async preemption off the report comes after the calls
                decided = report.started + report.seconds
                self.decided_at.setdefault(e.preemptor.key, decided)
                self.victims_of.setdefault(e.preemptor.key, []).append(e.task.key)
            self.victims.add(e.task.key)

    def gate_seconds(self) -> list[float]:
        """Per preemptor, from the cycle that decided its victims to the deletion of the
        last of them (when its gate can open), sorted; preemptors with a victim never
        deleted are left out."""
        out = []
        for p, victims in self.victims_of.items():
            if all(v in self.gone for v in victims):
                out.append(max(self.gone[v] for v in victims) - self.decided_at[p])
        return sorted(out)

    def decided_to_bound(self) -> list[float]:
        """Per preemptor, from the cycle that decided its victims to its bind, sorted."""
        return sorted(t - self.decided_at[k] for k, t in self.bound.items() if k in self.decided_at)

    def latencies(self, *, from_due: bool) -> list[float]:
        """Seconds from creation (or from when it was due) to binding, sorted."""
        since = {**self.created, **self.due} if from_due else self.created
        return sorted(t - since[k] for k, t in self.bound.items() if k in since)

    def late(self, slack: float) -> int:
        """Churned preemptors created more than ``slack`` seconds after they were due."""
        return sum(1 for k, t in self.due.items() if self.created.get(k, t) - t > slack)


def _over_allocated(sim: Simulation) -> list[str]:
    """Nodes whose pods (not yet removed) request more CPU or pods than allocatable."""
    cpu: Counter[str] = Counter()
    pods: Counter[str] = Counter()
    for p in sim.store.list("Pod")[0]:
        node_name = (p.get("spec") or {}).get("nodeName")
        if not node_name or (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        pods[node_name] += 1
        for c in p["spec"].get("containers") or ():
            cpu[node_name] += _milli_cpu(c["resources"]["requests"]["cpu"])
    cap_cpu = _milli_cpu(NODE_ALLOCATABLE["cpu"])
    cap_pods = int(NODE_ALLOCATABLE["pods"])
    return sorted(n for n in pods if cpu[n] > cap_cpu or pods[n] > cap_pods)


# Running ------------------------------------------------------------------------------


def run(
    w: PreemptionWorkload, *, wrap: Callable[[Callable[[], Any]], Any] | None = None
) -> dict[str, Any]:
    """Run ``w`` once in this process and return its figures as one JSON-able dict."""
    quiet()
    load_before = os.getloadavg()
    t_build = time.monotonic()
    src = f"bench:{w.name}"
    arrivals = [Arrival(0.0, node(i), src) for i in range(w.nodes)]
    arrivals.extend(Arrival(0.0, low_pod(i, f"node-{i % w.nodes}"), src) for i in range(w.running))
    if w.shape in ("basic", "burst"):
        measured = [high_pod(i) for i in range(w.pods)]
    else:
        measured = [default_pod(i) for i in range(w.pods)]
    config = with_feature_gates(SchedulerConfiguration(), {GATE: w.async_preemption})
    resolved = app.resolve(config)
    meter = Meter({_key(p) for p in measured})
    tracker = Tracker()

    def on_cycle(report: CycleReport, events: list[dict[str, Any]]) -> None:
        meter.on_cycle(report, events)
        tracker.on_cycle(report)

    sim = HoldingSimulation(
        Scenario(arrivals=arrivals, sources=[src]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(
            latency={
                **dict.fromkeys(CALL_KINDS, API_LATENCY),
                "delete": w.delete_latency,
                "evict": w.delete_latency,
            }
        ),
        real_time=True,
        on_cycle=on_cycle,
    )
    sim.loop.freeze_heap = True  # as `sluice run` does after its first cycle
    sim.store.subscribe(meter.on_store, kinds=("Pod",))
    sim.store.subscribe(tracker.on_store, kinds=("Pod",))
    sim.backend.add_observer(meter.on_call)
    sim.backend.add_observer(tracker.on_call)
    sim.cache.snapshot = meter.timed_snapshot(sim.cache.snapshot)  # type: ignore[method-assign]
    build_seconds = time.monotonic() - t_build
    churned = 0
    churn_stopped: float | None = None
    deadline_hit = False

    async def churn() -> None:
        # The embedded API server shares the thread with the scheduler: while a cycle runs
        # nothing is created. Pods due meanwhile are created as soon as this task runs,
        # and their time to binding counts from when they were due.
        nonlocal churned
        began = time.monotonic()
        while True:
            due = began + churned * CHURN_INTERVAL
            while due <= time.monotonic():
                obj = high_pod(churned)
                tracker.due[_key(obj)] = due
                sim.store.create(obj)
                churned += 1
                due = began + churned * CHURN_INTERVAL
            sim.loop.wake()
            await anyio.sleep(due - time.monotonic())

    async def drive() -> None:
        nonlocal churn_stopped, deadline_hit
        deadline = time.monotonic() + DEADLINE
        while not meter.cycles:
            await anyio.sleep(0.005)
        async with anyio.create_task_group() as tg:
            if w.shape == "async":
                tg.start_soon(churn)
            await anyio.sleep(MEASURED_AT)
            for p in measured:
                sim.store.create(p)
            sim.loop.wake()
            while meter.bound < len(measured) and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            deadline_hit = meter.bound < len(measured)
            churn_stopped = time.monotonic()
            tg.cancel_scope.cancel()
        sim.holding = False
        sim.loop.wake()
        await anyio.sleep(SETTLE)
        sim.loop.stop()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await sim.run()
            tg.cancel_scope.cancel()

    t_run = time.monotonic()
    if wrap is None:
        anyio.run(main)
    else:
        wrap(lambda: anyio.run(main))
    t_end = time.monotonic()
    return _figures(
        w,
        sim,
        meter,
        tracker,
        resolved=resolved,
        times={"build": build_seconds, "run": t_run, "end": t_end},
        churned=churned,
        churn_stopped=churn_stopped,
        deadline_hit=deadline_hit,
        load_before=load_before,
    )


def _figures(
    w: PreemptionWorkload,
    sim: Simulation,
    meter: Meter,
    tracker: Tracker,
    *,
    resolved: Any,
    times: dict[str, float],
    churned: int,
    churn_stopped: float | None,
    deadline_hit: bool,
    load_before: tuple[float, float, float],
) -> dict[str, Any]:
    span = meter.interval()
    start, first_created = span.start, span.first_created
    during, seconds, cpu, snaps = span.during, span.seconds, span.cpu, span.snapshots
    registry = sim.loop.metrics.registry

    def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
        return registry.get_sample_value(name, labels or {})

    lat = tracker.latencies(from_due=True)
    preemptors = len(tracker.created)
    unbound_preemptors = sorted(set(tracker.created) - set(tracker.bound))
    victims = Counter(tracker.decided.values())
    undecided_deletes = [k for k in tracker.deleted if k not in tracker.victims]
    deleted_by_kind = Counter(k.split("/", 1)[1].split("-", 1)[0] for k in tracker.deleted)
    over = _over_allocated(sim)
    checks: dict[str, bool] = {
        "every measured pod bound": meter.bound == w.pods,
        "every preemptor bound": not unbound_preemptors,
        "victims of strictly lower priority": not tracker.bad_victims,
        "only decided victims deleted": not undecided_deletes,
        "no node over-allocated": not over,
        "no failed delete": tracker.failed_deletes == 0,
    }
    if w.shape in ("basic", "burst"):
        checks["three victims per preemptor"] = (
            set(tracker.decided.values()) == {VICTIMS_PER_PREEMPTOR}
            and len(tracker.decided) == w.pods
        )
    failures = [name for name, ok in checks.items() if not ok]
    if deadline_hit:
        failures.append(f"stopped after {DEADLINE:.0f} s with measured pods unbound")
    here_sizes = {"nodes": w.nodes, "running": w.running, "pods": w.pods}
    kube = KUBE_SHAPES.get(w.shape, BURST_SHAPE if w.shape == "burst" else here_sizes)
    here = {"nodes": w.nodes, "running": w.running, "pods": w.pods}
    gates = resolved.config.feature_gates
    return {
        "workload": w.name,
        "description": w.description,
        "feature_gates": {GATE: bool(gates.get(GATE))},
        "api_latency_seconds": API_LATENCY,
        "delete_latency_seconds": w.delete_latency,
        "nodes": w.nodes,
        "pods": w.pods,
        "running_pods": w.running,
        "scaled_from": None if here == kube else kube,
        **throughput(meter, w.pods, seconds, cpu),
        "bound_by_seconds": _quantiles(meter.bind_times, start, w.pods),
        "preemptors": {
            "created": preemptors,
            "churned": churned,
            "bound": len(tracker.bound),
            "unbound": unbound_preemptors[:10],
            "unbound_count": len(unbound_preemptors),
            "created_to_bound_seconds": _latency_quantiles(lat),
            "in_store_to_bound_seconds": _latency_quantiles(tracker.latencies(from_due=False)),
            "decided_to_victims_gone_seconds": _latency_quantiles(tracker.gate_seconds()),
            "decided_to_bound_seconds": _latency_quantiles(tracker.decided_to_bound()),
            "created_late": tracker.late(LATE),
            "churn_seconds": (
                _r(churn_stopped - start) if w.shape == "async" and churn_stopped else None
            ),
        },
        "evictions": len(tracker.deleted),
        "evictions_decided": sum(tracker.decided.values()),
        "evicted_by_kind": dict(sorted(deleted_by_kind.items())),
        "victims_per_preemptor": {str(k): v for k, v in sorted(victims.items())},
        "preemption_attempts": sample("scheduler_preemption_attempts_total"),
        "preemption_calls": {
            result: sample("scheduler_preemption_goroutines_execution_total", {"result": result})
            for result in ("success", "error")
        },
        "api_calls": dict(sim.faults.calls),
        "cycles": len(during),
        "deciding_cycles": sum(1 for _, r in during if r.decided),
        "cycles_total": sim.loop.cycles,
        "decision_seconds": _r(sum(r.seconds for _, r in during)),
        "snapshot_seconds": _r(sum(snaps)),
        **cycle_holds(r for _, r in during),
        "actions": [a.name for a in resolved.actions],
        "action_seconds": {
            a.name: _r(sample("scheduler_cycle_duration_seconds_sum", {"action": a.name}))
            for a in resolved.actions
        },
        "create_seconds": _r(start - first_created),
        "setup_seconds": _r(times["build"] + (first_created - times["run"])),
        "run_seconds": _r(times["end"] - times["run"]),
        "peak_rss_mb": peak_rss_mb(),
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "checks": checks,
        "failures": failures,
        "over_allocated_nodes": over[:10],
        "bad_victims": tracker.bad_victims[:10],
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
        "revision": source_revision(),
    }


def _latency_quantiles(sorted_seconds: list[float]) -> dict[str, float]:
    """p50, p90, p99 (nearest rank) and max of ``sorted_seconds``."""
    if not sorted_seconds:
        return {}
    n = len(sorted_seconds)
    out = {f"p{p}": round(sorted_seconds[-(-n * p // 100) - 1], 4) for p in (50, 90, 99)}
    out["max"] = round(sorted_seconds[-1], 4)
    return out
