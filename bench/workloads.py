"""The benchmark workloads, shaped like kube-scheduler's scheduler_perf suite.

Each workload builds an in-memory :class:`~scheduler.sim.scenario.Scenario` and runs it
with the real loop on the embedded cluster on the real clock. Nodes, the already running
pods, the PodGroups and the default Queue enter the cluster at the start; the measured
(pending) pods enter a moment later (``MEASURED_AT``), all in one burst (no cycle runs in
between), after a first cycle has run with nothing to schedule. The interval measured is
from the moment the last measured pod is in the cluster (the store has it and the
scheduler cache has taken its watch event) until the last of them is bound (its bind call
to the embedded API server returned).
"""

from __future__ import annotations

import hashlib
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

import scheduler
from scheduler import app
from scheduler.api import labels as L
from scheduler.framework.effects import Bind
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.backend import ApiCall
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.store import WatchEvent

NAMESPACE = "bench"
MEASURED_AT = 0.05
"""Seconds (real clock) after the start at which the measured pods enter the cluster."""
GANG_SIZE = 16

NODE_ALLOCATABLE = {"cpu": "4", "memory": "32Gi", "pods": "110"}
POD_REQUESTS = {"cpu": "100m", "memory": "500Mi"}


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    nodes: int
    pods: int
    """Measured (pending) pods."""
    running: int
    """Pods already running before the measured pods arrive."""
    gang: bool = False
    description: str = ""
    gang_size: int = GANG_SIZE
    pod_cpu: str = POD_REQUESTS["cpu"]
    racks: tuple[int, int] | None = None
    """(zones, racks per zone): nodes labelled with a zone and a rack, in equal parts, and
    every PodGroup requiring one rack (a ``Topology`` of the two levels)."""


DEFAULTS: dict[str, Workload] = {
    "scheduling-basic": Workload(
        "scheduling-basic",
        nodes=5000,
        pods=10000,
        running=1000,
        description=(
            "SchedulingBasic: 5,000 nodes, 1,000 running pods, 10,000 pending pods of "
            "100m CPU / 500Mi, no PodGroup (each pod a gang of one)"
        ),
    ),
    "gang": Workload(
        "gang",
        nodes=1000,
        pods=8000,
        running=0,
        gang=True,
        description=(
            "Gang: 1,000 nodes, 500 PodGroups of 16 pods (minMember 16) of 100m CPU / 500Mi"
        ),
    ),
    "topology": Workload(
        "topology",
        nodes=4000,
        pods=8000,
        running=0,
        gang=True,
        gang_size=8,
        pod_cpu="1",
        racks=(10, 20),
        description=(
            "Topology: 4,000 nodes in 10 zones of 20 racks of 20 nodes, 1,000 PodGroups of 8 "
            "pods of 1 CPU (minMember 8) that each require one rack"
        ),
    ),
}

ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "example.com/rack"


# Objects ------------------------------------------------------------------------------


def node(i: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {"kubernetes.io/hostname": f"node-{i}", **(labels or {})},
        },
        "spec": {},
        "status": {"allocatable": dict(NODE_ALLOCATABLE), "capacity": dict(NODE_ALLOCATABLE)},
    }


def topology() -> dict[str, Any]:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": [{"nodeLabel": ZONE_LABEL}, {"nodeLabel": RACK_LABEL}]},
    }


def rack_labels(i: int, nodes: int, racks: tuple[int, int]) -> dict[str, str]:
    """Node ``i`` of ``nodes`` in zones and racks of equal size, consecutive nodes together."""
    zones, per_zone = racks
    per_rack = max(nodes // (zones * per_zone), 1)
    rack = i // per_rack
    return {ZONE_LABEL: f"zone-{rack // per_zone}", RACK_LABEL: f"rack-{rack}"}


def pod(
    name: str,
    *,
    node_name: str | None = None,
    group: str | None = None,
    scheduler_name: str = L.SCHEDULER_NAME,
    cpu: str = POD_REQUESTS["cpu"],
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    requests = {**POD_REQUESTS, "cpu": cpu}
    if group is not None:
        meta["labels"] = {L.POD_GROUP_LABEL: group}
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "priority": 0,
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(requests), "limits": dict(requests)},
            }
        ],
    }
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if node_name is not None:
        spec["nodeName"] = node_name
        obj["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    return obj


def pod_group(name: str, min_member: int, *, rack: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "queue": L.DEFAULT_QUEUE}
    if rack:
        spec["topologyConstraint"] = {"topology": "dc", "requiredLevel": RACK_LABEL}
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def build_scenario(w: Workload) -> tuple[Scenario, set[str]]:
    """The scenario of ``w`` and the keys (``namespace/name``) of the measured pods."""
    arrivals: list[Arrival] = []
    src = f"bench:{w.name}"
    if w.racks is not None:
        racks = w.racks
        arrivals.append(Arrival(0.0, topology(), src))
        arrivals.extend(
            Arrival(0.0, node(i, rack_labels(i, w.nodes, racks)), src) for i in range(w.nodes)
        )
    else:
        arrivals.extend(Arrival(0.0, node(i), src) for i in range(w.nodes))
    # Running pods spread round-robin over the nodes, as scheduler_perf's initPods land.
    arrivals.extend(
        Arrival(0.0, pod(f"running-{i}", node_name=f"node-{i % w.nodes}"), src)
        for i in range(w.running)
    )
    measured: list[dict[str, Any]] = []
    if w.gang:
        groups = -(-w.pods // w.gang_size)
        for g in range(groups):
            members = min(w.gang_size, w.pods - g * w.gang_size)
            name = f"gang-{g}"
            group = pod_group(name, members, rack=w.racks is not None)
            arrivals.append(Arrival(0.0, group, src))
            measured.extend(pod(f"{name}-{k}", group=name, cpu=w.pod_cpu) for k in range(members))
    else:
        measured.extend(pod(f"pod-{i}", cpu=w.pod_cpu) for i in range(w.pods))
    arrivals.extend(Arrival(MEASURED_AT, p, src) for p in measured)
    keys = {f"{NAMESPACE}/{p['metadata']['name']}" for p in measured}
    return Scenario(arrivals=arrivals, sources=[src]), keys


# Running ------------------------------------------------------------------------------

now = time.monotonic
"""Every timestamp here: the clock the RealClock of the simulation reports (CycleReport)."""


@dataclass(frozen=True, slots=True)
class Interval:
    """What :meth:`Meter.interval` measured (times are ``time.monotonic``)."""

    start: float
    first_created: float
    last_bound: float | None
    seconds: float | None
    cpu: float | None
    """CPU seconds of the process over the interval."""
    during: list[tuple[float, CycleReport]]
    """(end, report) of the cycles that ran, wholly or partly, in the interval."""
    snapshots: list[float]
    """Seconds the snapshots of those cycles took."""


class Meter:
    """Timestamps (``time.monotonic``) of what the figures are made of."""

    def __init__(self, measured: set[str]) -> None:
        self.measured = measured
        self.created = 0
        self.first_created: float | None = None
        self.all_created: float | None = None
        self.cpu_created: float | None = None
        self.cpu_last_bound: float | None = None
        self.bound = 0
        self.bind_failures = 0
        self.bind_times: list[float] = []
        self.cycles: list[tuple[float, CycleReport]] = []
        """(time at the end of the cycle, report), every cycle of the run."""
        self.snapshots: list[float] = []
        """Seconds each cycle's ``cache.snapshot()`` took, in cycle order."""

    @property
    def last_bound(self) -> float | None:
        return self.bind_times[-1] if self.bind_times else None

    def on_store(self, ev: WatchEvent) -> None:
        if ev.type != "ADDED":
            return
        meta = ev.obj["metadata"]
        if f"{meta.get('namespace')}/{meta['name']}" not in self.measured:
            return
        t = now()
        self.created += 1
        if self.first_created is None:
            self.first_created = t
        if self.created == len(self.measured):
            self.all_created = t
            self.cpu_created = time.process_time()

    def on_call(self, call: ApiCall) -> None:
        if call.kind != "bind" or call.ref.key not in self.measured:
            return
        if call.ok:
            self.bound += 1
            self.bind_times.append(now())
            self.cpu_last_bound = time.process_time()
        else:
            self.bind_failures += 1

    def on_cycle(self, report: CycleReport, _events: list[dict[str, Any]]) -> None:
        self.cycles.append((now(), report))

    def interval(self) -> Interval:
        """The measured interval: from the moment the last measured pod is in the cluster
        until the last measured bind returned, and the cycles that ran in it."""
        start, first_created, last_bound = self.all_created, self.first_created, self.last_bound
        if start is None or first_created is None:
            raise RuntimeError("the measured pods never entered the cluster")
        # Cycles that ran (wholly or partly) while the measured pods were being scheduled.
        during = [
            (end, r)
            for end, r in self.cycles
            if end >= start and (last_bound is None or r.started <= last_bound)
        ]
        cpu = None
        if self.cpu_created is not None and self.cpu_last_bound is not None:
            cpu = self.cpu_last_bound - self.cpu_created
        return Interval(
            start=start,
            first_created=first_created,
            last_bound=last_bound,
            seconds=(last_bound - start) if last_bound is not None else None,
            cpu=cpu,
            during=during,
            snapshots=[
                self.snapshots[r.number - 1] for _, r in during if r.number <= len(self.snapshots)
            ],
        )

    def timed_snapshot(self, snapshot: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return snapshot(*args, **kwargs)
            finally:
                self.snapshots.append(time.perf_counter() - t0)

        return timed


def peak_rss_mb() -> float:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # bytes there
        return round(kib / (1024 * 1024), 1)
    return round(kib / 1024, 1)


def source_revision() -> str | None:
    """``git describe --always --dirty`` of the checkout the scheduler is imported from,
    and for a dirty tree ``+`` the first 8 hex digits of the SHA-1 of ``git diff HEAD``
    (so that runs on different uncommitted states can be told apart)."""
    root = Path(scheduler.__file__).resolve().parent.parent

    def git(*argv: str) -> str:
        return subprocess.run(
            ["git", *argv], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout

    try:
        rev = git("describe", "--always", "--dirty").strip()
        if rev.endswith("-dirty"):
            diff = git("diff", "HEAD", "--", "scheduler")
            rev += "+" + hashlib.sha1(diff.encode()).hexdigest()[:8]
    except (OSError, subprocess.SubprocessError):
        return None
    return rev or None


def run(w: Workload, *, wrap: Callable[[Callable[[], Any]], Any] | None = None) -> dict[str, Any]:
    """Run ``w`` once in this process and return its figures as one JSON-able dict.

    ``wrap``, if given, is called with the function that runs the simulation (the
    profiler uses it so that building the scenario is not profiled).
    """
    quiet()
    t_build = now()
    scenario, measured = build_scenario(w)
    resolved = app.resolve()
    meter = Meter(measured)
    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        real_time=True,
        on_cycle=meter.on_cycle,
    )
    sim.loop.freeze_heap = True  # as `sluice run` does after its first cycle
    sim.store.subscribe(meter.on_store, kinds=("Pod",))
    sim.backend.add_observer(meter.on_call)
    sim.cache.snapshot = meter.timed_snapshot(sim.cache.snapshot)  # type: ignore[method-assign]
    build_seconds = now() - t_build

    t_run = now()
    if wrap is None:
        result = anyio.run(sim.run)
    else:
        result = wrap(lambda: anyio.run(sim.run))
    t_end = now()

    span = meter.interval()
    start, first_created = span.start, span.first_created
    during, seconds, cpu, snaps = span.during, span.seconds, span.cpu, span.snapshots
    deciding = [(end, r) for end, r in during if r.decided]
    registry = sim.loop.metrics.registry
    actions = {
        a.name: _r(
            registry.get_sample_value("scheduler_cycle_duration_seconds_sum", {"action": a.name})
        )
        for a in resolved.actions
    }
    first: dict[str, Any] | None = None
    if deciding:
        end, r = deciding[0]
        first = {
            "number": r.number,
            "started_after": _r(r.started - start),
            "snapshot_seconds": _r(meter.snapshots[r.number - 1]),
            "decision_seconds": _r(r.seconds),
            "hand_off_seconds": _r(end - r.started - r.seconds),
            "binds": _binds(r),
            "effects": len(r.effects),
        }
    return {
        "workload": w.name,
        "nodes": w.nodes,
        "pods": w.pods,
        "running_pods": w.running,
        "pod_groups": -(-w.pods // GANG_SIZE) if w.gang else 0,
        **throughput(meter, w.pods, seconds, cpu),
        "cycles": len(during),
        "deciding_cycles": len(deciding),
        "cycles_total": result.cycles,
        "first_cycle": first,
        "decision_seconds": _r(sum(r.seconds for _, r in during)),
        "snapshot_seconds": _r(sum(snaps)),
        **cycle_holds(r for _, r in during),
        "actions": [a.name for a in resolved.actions],
        "action_seconds": actions,
        "bound_by_seconds": _quantiles(meter.bind_times, start, w.pods),
        "create_seconds": _r(start - first_created),
        "setup_seconds": _r(build_seconds + (first_created - t_run)),
        "run_seconds": _r(t_end - t_run),
        "peak_rss_mb": peak_rss_mb(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
        "revision": source_revision(),
    }


def _binds(report: CycleReport) -> int:
    return sum(1 for e in report.effects if isinstance(e, Bind))


def throughput(meter: Meter, pods: int, seconds: float | None, cpu: float | None) -> dict[str, Any]:
    """The keys every in-memory workload reports on its measured pods: bound, unbound,
    bind failures, seconds and CPU seconds of the interval, and the rates."""
    return {
        "bound": meter.bound,
        "unbound": pods - meter.bound,
        "bind_failures": meter.bind_failures,
        "seconds": _r(seconds),
        "pods_per_second": _r(meter.bound / seconds, 1) if seconds else None,
        "cpu_seconds": _r(cpu),
        "pods_per_cpu_second": _r(meter.bound / cpu, 1) if cpu else None,
        "interval": (
            "from the moment the last measured pod is in the cluster (store and scheduler "
            "cache) until the last measured pod's bind call returned"
        ),
    }


def _quantiles(times: list[float], start: float, total: int) -> dict[str, float]:
    """Seconds from ``start`` until 10%, 50%, 90% and 99% of ``total`` pods were bound."""
    out: dict[str, float] = {}
    for pct in (10, 50, 90, 99):
        n = -(-total * pct // 100)
        if 0 < n <= len(times):
            out[f"p{pct}"] = round(times[n - 1] - start, 4)
    return out


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


HOLD_TARGET = 1.0
"""Issue 25's bound on one stretch of a cycle (seconds)."""


def cycle_holds(reports: Iterable[CycleReport]) -> dict[str, Any]:
    """How long the cycles of ``reports`` held the loop: ``max_cycle_seconds``, the
    longest stretch without a bind handed on or a watch event taken
    (``CycleReport.longest_hold``: a cycle cut in slices by ``actionTimeBudget`` lets
    them run between slices); ``max_cycle_decision_seconds``, the longest cycle's
    decisions end to end, its slices together (``CycleReport.seconds``); and
    ``cycles_holding_over_a_second``."""
    reports = list(reports)
    return {
        "max_cycle_seconds": _r(max((r.longest_hold for r in reports), default=0.0)),
        "max_cycle_decision_seconds": _r(max((r.seconds for r in reports), default=0.0)),
        "cycles_holding_over_a_second": sum(1 for r in reports if r.longest_hold > HOLD_TARGET),
    }
