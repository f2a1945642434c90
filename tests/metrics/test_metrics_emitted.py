"""The Prometheus metrics the loop and the preemption executor emit, read from the
scheduler's own registry after a whole run of the real loop on the embedded cluster.

The scenario: queue ``qa`` holds two low-priority pods filling node n1 and a
high-priority pod that preempts them; queue ``qb`` holds a pod that binds to n2 and one
that fits nowhere. API failures are scripted (the first call of a kind fails, the next
ones succeed), so a run can hold both a failed and a successful preemption.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from prometheus_client import CollectorRegistry

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.errors import ServerError
from scheduler.config import SchedulerConfiguration
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.ports import Clock
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

Obj = dict[str, Any]
DEFAULT_ACTIONS = SchedulerConfiguration().actions


@pytest.fixture(autouse=True)
def _log_to_the_live_stderr() -> None:
    """Point structlog at the current stderr (see tests/preemption/test_executor.py)."""
    quiet()


# The scenario ---------------------------------------------------------------------------------


def sim_pod(name: str, queue: str, cpu: str, **spec: Any) -> Obj:
    """A pod of ``queue`` (by the queue label) requesting ``cpu``; ``spec`` fields as in the
    API, plus ``annotations``."""
    annotations = spec.pop("annotations", None)
    meta: Obj = {"name": name, "labels": {L.QUEUE_LABEL: queue}}
    if annotations:
        meta["annotations"] = annotations
    body: Obj = {
        "schedulerName": L.SCHEDULER_NAME,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def sim_node(name: str, cpu: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"}},
    }


def sim_queue(name: str) -> Obj:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }


HIGH: Obj = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "high"},
    "value": 1000,
}

MIXED: list[Obj] = [
    HIGH,
    sim_queue("qa"),
    sim_queue("qb"),
    sim_node("n1", "4"),
    sim_node("n2", "2"),
    sim_pod("low", "qa", "2", priority=1, nodeName="n1"),
    sim_pod("mid", "qa", "2", priority=5, nodeName="n1"),
    sim_pod("high", "qa", "2", priorityClassName="high"),
    sim_pod("fits", "qb", "1"),
    sim_pod("huge", "qb", "8"),
]
"""``fits`` binds to n2; ``huge`` fits nowhere, ever; ``high`` preempts on n1, then binds."""


class FailFirst(FaultInjector):
    """Fails the first ``fail[kind]`` calls of each kind with ServerError (as an injected
    failure of the embedded cluster would), and lets every later call through."""

    def __init__(self, clock: Clock, fail: Mapping[str, int]) -> None:
        super().__init__(ApiBehaviour(), clock)
        self.left = dict(fail)

    @asynccontextmanager
    async def call(self, kind: str) -> AsyncIterator[None]:
        if self.left.get(kind, 0) > 0:
            self.left[kind] -= 1
            raise ServerError(f"scripted failure of {kind}")
        async with super().call(kind):
            yield


def simulate(
    docs: Sequence[Obj],
    *,
    actions: Sequence[str] = DEFAULT_ACTIONS,
    fail: Mapping[str, int] | None = None,
    on_cycle: Callable[[Simulation, CycleReport], None] | None = None,
) -> tuple[Simulation, SimulationResult]:
    """Run ``docs`` through the real loop (built by ``app.build_loop``) on virtual time."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
        scenario = load_scenario([str(path)])
    resolved = app.resolve(dataclasses.replace(SchedulerConfiguration(), actions=tuple(actions)))
    sims: list[Simulation] = []

    def observe(report: CycleReport, _: list[dict[str, Any]]) -> None:
        if on_cycle is not None:
            on_cycle(sims[0], report)

    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        max_cycles=400,
        on_cycle=observe,
    )
    sims.append(sim)
    if fail:
        sim.faults = sim.backend.faults = FailFirst(sim.clock, fail)
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    assert result.cycles < 400, "the run did not settle"
    return sim, result


def by_label(registry: CollectorRegistry, sample: str, label: str) -> dict[str, float]:
    """The value of every sample named ``sample``, by the value of its ``label``."""
    return {
        s.labels[label]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == sample
    }


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


# scheduler_schedule_attempts_total and scheduler_preemption_goroutines_duration_seconds --------

ATTEMPTS = "scheduler_schedule_attempts_total"
PREEMPTION = "scheduler_preemption_goroutines_duration_seconds"


@pytest.mark.parametrize(
    ("fail", "attempts", "preemptions", "bindings"),
    [
        pytest.param({}, {"scheduled": 2}, {"success": 1}, None, id="no failure"),
        pytest.param(
            {"bind": 1}, {"scheduled": 2, "error": 1}, {"success": 1}, None, id="first bind fails"
        ),
        pytest.param(
            {"delete": 1},
            {"scheduled": 2},
            {"success": 1, "error": 1},
            None,
            id="first delete fails",
        ),
        pytest.param(
            {"bind": 1, "delete": 1},
            {"scheduled": 2, "error": 1},
            {"success": 1, "error": 1},
            # fits' refused bind backs off for 1 s, and high, its preemption failed, takes
            # n2 meanwhile; fits then takes the room low (evicted) leaves on n1
            {"default/high": "n2", "default/fits": "n1"},
            id="both fail once",
        ),
    ],
)
def test_attempts_and_preemption_durations_by_result(
    fail: dict[str, int],
    attempts: dict[str, float],
    preemptions: dict[str, float],
    bindings: dict[str, str] | None,
) -> None:
    reasons_per_cycle: list[int] = []
    huge_cycles: list[int] = []

    def on_cycle(_: Simulation, report: CycleReport) -> None:
        reasons_per_cycle.append(len(report.task_reasons))
        if "default/huge" in report.task_reasons:
            huge_cycles.append(report.number)

    sim, result = simulate(MIXED, fail=fail, on_cycle=on_cycle)
    registry = sim.loop.metrics.registry
    # the run went the way the row says: every pod but huge bound, the failures happened
    assert result.bindings == (bindings or {"default/fits": "n2", "default/high": "n1"})  # MIXED
    assert sorted(result.pending) == ["default/huge"]
    failed = [e["event"] for e in result.timeline if e["event"].endswith("-failed")]
    assert sorted(failed) == sorted(f"{kind}-failed" for kind in fail)

    # scheduled: one per successful bind; error: one per failed bind; unschedulable: one
    # per pod left pending by a cycle, summed over the cycles (huge, in every cycle)
    unschedulable = sum(reasons_per_cycle)
    assert huge_cycles == list(range(1, result.cycles + 1))
    assert by_label(registry, ATTEMPTS, "result") == {**attempts, "unschedulable": unschedulable}
    assert set(by_label(registry, ATTEMPTS, "profile")) == {"sluice"}
    assert unschedulable >= result.cycles

    # one observation per batch of preemption calls, labelled by how the batch ended
    assert by_label(registry, f"{PREEMPTION}_count", "result") == preemptions
    for result_label, count in preemptions.items():
        inf = sample(registry, f"{PREEMPTION}_bucket", result=result_label, le="+Inf")
        assert inf == count
        total = sample(registry, f"{PREEMPTION}_sum", result=result_label)
        assert total is not None and 0 <= total < 16
        executions = sample(
            registry, "scheduler_preemption_goroutines_execution_total", result=result_label
        )
        assert executions == count


# scheduler_cycle_duration_seconds -------------------------------------------------------------

CYCLE = "scheduler_cycle_duration_seconds"


@pytest.mark.parametrize(
    "actions",
    [
        pytest.param(DEFAULT_ACTIONS, id="default"),
        pytest.param(("enqueue", "allocate"), id="enqueue-allocate"),
        pytest.param(("allocate", "backfill"), id="allocate-backfill"),
        pytest.param(("enqueue", "allocate", "preempt"), id="enqueue-allocate-preempt"),
    ],
)
def test_cycle_duration_is_observed_once_per_cycle_for_each_action_and_the_whole(
    actions: tuple[str, ...],
) -> None:
    sim, result = simulate(MIXED, actions=actions)
    registry = sim.loop.metrics.registry
    assert result.cycles >= 2
    counts = by_label(registry, f"{CYCLE}_count", "action")
    assert counts == dict.fromkeys((*actions, "all"), result.cycles)
    infs = {
        s.labels["action"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == f"{CYCLE}_bucket" and s.labels["le"] == "+Inf"
    }
    assert infs == counts
    sums = by_label(registry, f"{CYCLE}_sum", "action")
    assert all(v >= 0 for v in sums.values())
    # the whole cycle contains every action's run
    assert sums["all"] >= sum(sums[a] for a in actions) - 1e-9


# scheduler_pending_pods -----------------------------------------------------------------------

PENDING = "scheduler_pending_pods"

BLOCKED_UNTIL_5S: list[Obj] = [
    sim_queue("qa"),
    sim_queue("qb"),
    sim_node("n1", "2"),
    sim_pod("blocker", "default", "2", nodeName="n1", annotations={"sim.sluice.dev/run-for": "5s"}),
    sim_pod("waiter", "qa", "2"),
]
"""``waiter`` (qa) is pending until ``blocker`` succeeds at 5 s, then binds."""

NEVER_FIT: list[Obj] = [
    sim_queue("qa"),
    sim_queue("qb"),
    sim_node("n1", "6"),
    sim_pod("fits", "default", "1"),
    sim_pod("big-1", "qa", "8"),
    sim_pod("big-2", "qa", "8"),
    sim_pod("big-3", "qb", "8"),
]


@pytest.mark.parametrize(
    ("docs", "first", "last"),
    [
        pytest.param(
            NEVER_FIT,
            {"default": 0, "qa": 2, "qb": 1},
            {"default": 0, "qa": 2, "qb": 1},
            id="each queue its own count",
        ),
        pytest.param(
            BLOCKED_UNTIL_5S,
            {"default": 0, "qa": 1, "qb": 0},
            {"default": 0, "qa": 0, "qb": 0},
            id="count falls to zero once placed",
        ),
        pytest.param(
            MIXED,
            {"default": 0, "qa": 0, "qb": 1},
            {"default": 0, "qa": 0, "qb": 1},
            id="preemptor and bound pods are not pending",
        ),
    ],
)
def test_pending_pods_by_queue_after_each_cycle(
    docs: list[Obj], first: dict[str, float], last: dict[str, float]
) -> None:
    seen: list[dict[str, float]] = []

    def on_cycle(sim: Simulation, _: CycleReport) -> None:
        seen.append(by_label(sim.loop.metrics.registry, PENDING, "queue"))

    sim, result = simulate(docs, on_cycle=on_cycle)
    assert seen[0] == first
    assert seen[-1] == last
    assert by_label(sim.loop.metrics.registry, PENDING, "queue") == last
    # the gauge is what the run leaves pending, queue by queue
    queue_of = {
        f"default/{d['metadata']['name']}": d["metadata"]["labels"][L.QUEUE_LABEL]
        for d in docs
        if d["kind"] == "Pod"
    }
    left = dict.fromkeys(last, 0.0)
    for key in result.pending:
        left[queue_of[key]] += 1
    assert left == last


def test_a_deleted_queue_loses_its_pending_pods_series() -> None:
    """Queue qa and its only pod, pending, are deleted after the second cycle: the gauge
    of qa must not keep counting that pod, and its series goes."""
    seen: list[dict[str, float]] = []

    def on_cycle(sim: Simulation, report: CycleReport) -> None:
        seen.append(by_label(sim.loop.metrics.registry, PENDING, "queue"))
        if report.number == 2:
            sim.store.delete("Pod", "default", "big", grace_period_seconds=0)
            sim.store.delete("Queue", "", "qa")

    sim, result = simulate(
        [sim_queue("qa"), sim_node("n1", "6"), sim_pod("big", "qa", "8")], on_cycle=on_cycle
    )
    assert result.pending == {}
    assert seen[0] == {"default": 0, "qa": 1}
    assert len(seen) > 2
    assert "qa" not in seen[-1]
    assert "qa" not in by_label(sim.loop.metrics.registry, PENDING, "queue")
