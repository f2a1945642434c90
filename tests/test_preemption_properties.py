"""Invariants of preemption (issue 3), on generated clusters run as whole simulations.

A cluster is 1-4 nodes filled to half or all of their CPU with running low-priority pods (priority
0-4, grace periods of 0, 5 or 30 s, a few not preemptable), plus 1-6 pods arriving at 0, 2
or 7 s with priorities from 0 to 30 (a few with ``preemptionPolicy: Never``), and
sometimes a PodGroup of 2-3 pending members. Each run has
asynchronous preemption on or off, a delete latency of 0 or 1 s, and sometimes 30 % of the
deletes failing. The real loop (``app.build_loop``) runs it on the virtual clock. Then:

- every evicted pod has strictly lower priority than the preemptor it was evicted for
  (the Evict effects of every cycle);
- a gate never stays closed once its calls have ended and its victims are gone (checked
  after every cycle), and at the end no job is gated;
- at the end, once every victim is gone, every nominated pod that is not bound has a
  reason, and no node is over-allocated when the nominated pods are counted with the
  bound ones (the store's pods).

Members of a PodGroup are left out of the "has a reason" check: a gang whose other
member lost its nomination keeps the rest nominated, with no reason, for ever (the xfail
``test_a_gang_that_lost_a_nomination_does_not_keep_the_others`` in
tests/actions/test_preempt.py); every other invariant holds for them too.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.pod import pod_request
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from scheduler.config import SchedulerConfiguration, with_feature_gates
from scheduler.framework.effects import Evict, Nominate
from scheduler.logging import quiet
from scheduler.loop.scheduler_loop import CycleReport
from scheduler.preemption import PreemptionExecutor
from scheduler.sim.clock import VirtualTimeLoop
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario

Obj = dict[str, Any]
MAX_CYCLES = 400
NO_REASON = "not scheduled yet"
"""What the simulator reports for a pending pod no cycle gave a reason for."""
CPU_MILLI = {"500m": 500, "1": 1000, "2": 2000, "3": 3000}


@pytest.fixture(autouse=True)
def _log_to_the_live_stderr() -> None:
    """``sluice simulate`` (run by tests/test_scenarios.py under capsys) leaves structlog
    printing to a stderr that pytest has closed since; a warning logged by the executor
    would then raise inside its task group. Point the logs at the current stderr."""
    quiet()


@dataclass
class Case:
    objects: list[Obj]
    async_on: bool
    delete_latency: float
    delete_failures: float
    seed: int


def _pod(name: str, cpu: str, priority: int, **spec: Any) -> Obj:
    meta: Obj = {"name": name, "namespace": "default"}
    annotations = spec.pop("annotations", None)
    labels = spec.pop("labels", None)
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": L.SCHEDULER_NAME,
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


@st.composite
def cases(draw: st.DrawFn) -> Case:
    objects: list[Obj] = []
    for i in range(draw(st.integers(1, 4), label="nodes")):
        name = f"n{i}"
        capacity = draw(st.sampled_from([2000, 4000]), label="node cpu")
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": f"{capacity}m", "memory": "8Gi", "pods": "110"}},
            }
        )
        used = 0
        fill = draw(st.sampled_from([0.5, 1.0, 1.0]), label="fill")
        for j in range(8):
            cpu = draw(st.sampled_from(["500m", "1", "2"]), label="running cpu")
            if used + CPU_MILLI[cpu] > capacity * fill:
                break
            used += CPU_MILLI[cpu]
            spec: Obj = {
                "nodeName": name,
                "terminationGracePeriodSeconds": draw(st.sampled_from([0, 5, 30])),
            }
            if draw(st.integers(0, 7), label="protected?") == 0:
                spec["labels"] = {L.PREEMPTABLE_LABEL: "false"}
            objects.append(
                _pod(f"{name}-run-{j}", cpu, draw(st.integers(0, 4), label="low prio"), **spec)
            )
    for k in range(draw(st.integers(1, 6), label="pending")):
        spec = {}
        at = draw(st.sampled_from([0, 0, 2, 7]), label="arrival")
        if at:
            spec["annotations"] = {"sim.sluice.dev/arrival": f"{at}s"}
        if draw(st.integers(0, 5), label="never?") == 0:
            spec["preemptionPolicy"] = "Never"
        spec["terminationGracePeriodSeconds"] = 0
        cpu = draw(st.sampled_from(["500m", "1", "2", "3"]), label="pending cpu")
        prio = draw(st.sampled_from([0, 2, 4, 10, 20, 20, 30]), label="pending prio")
        objects.append(_pod(f"p{k}", cpu, prio, **spec))
    failures = draw(st.sampled_from([0.0, 0.0, 0.3]), label="failures")
    if not failures and draw(st.booleans(), label="gang?"):
        # not with failures: see the xfail on gang gates in tests/preemption/test_executor.py
        members = draw(st.integers(2, 3), label="members")
        objects.append(
            {
                "apiVersion": L.API_VERSION,
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"minMember": draw(st.integers(1, members), label="minMember")},
            }
        )
        prio = draw(st.sampled_from([10, 20, 30]), label="gang prio")
        for m in range(members):
            cpu = draw(st.sampled_from(["500m", "1", "2"]), label="member cpu")
            objects.append(
                _pod(
                    f"g-{m}",
                    cpu,
                    prio,
                    labels={L.POD_GROUP_LABEL: "g"},
                    terminationGracePeriodSeconds=0,
                )
            )
    return Case(
        objects,
        async_on=draw(st.booleans(), label="async"),
        delete_latency=draw(st.sampled_from([0.0, 1.0]), label="latency"),
        delete_failures=failures,
        seed=draw(st.integers(0, 1000), label="seed"),
    )


@dataclass
class Run:
    sim: Simulation
    reports: list[CycleReport]
    cycles: int
    pending: dict[str, str]
    gate_problems: list[str]


def run(case: Case) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(yaml.safe_dump_all(case.objects, sort_keys=False))
        scenario = load_scenario([str(path)])
    config = with_feature_gates(
        SchedulerConfiguration(), {"SchedulerAsyncPreemption": case.async_on}
    )
    resolved = app.resolve(config)
    reports: list[CycleReport] = []
    problems: list[str] = []
    holder: list[Simulation] = []

    def on_cycle(report: CycleReport, _: list[dict[str, Any]]) -> None:
        reports.append(report)
        sim = holder[0]
        executor = sim.loop.preemption
        assert isinstance(executor, PreemptionExecutor)
        pods, _ = sim.store.list("Pod")
        present = {str(p["metadata"].get("uid")) for p in pods}
        for job, gate in executor.gates.items():
            if gate.calls <= 0 and not (gate.waiting_for & present):
                problems.append(
                    f"cycle {report.number} t={report.started}: {job} gated with calls="
                    f"{gate.calls} and no victim left ({sorted(gate.waiting_for)})"
                )
        assert set(executor.gates) == sim.cache.gated

    behaviour = ApiBehaviour(
        latency={"delete": case.delete_latency},
        failure_rate={"delete": case.delete_failures},
        seed=case.seed,
    )
    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=behaviour,
        max_cycles=MAX_CYCLES,
        on_cycle=on_cycle,
    )
    holder.append(sim)
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return Run(sim, reports, result.cycles, result.pending, problems)


def _priority(obj: Obj) -> int:
    return int(obj["spec"].get("priority") or 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_preemption_invariants(case: Case) -> None:
    r = run(case)

    # Victims always have strictly lower priority than their preemptor.
    for report in r.reports:
        nominated = {e.task.uid for e in report.effects if isinstance(e, Nominate)}
        for e in report.effects:
            if isinstance(e, Evict):
                assert e.preemptor is not None, f"cycle {report.number}: {e.task.key}"
                assert e.task.priority < e.preemptor.priority, (
                    f"cycle {report.number}: {e.task.key} (priority {e.task.priority}) "
                    f"evicted for {e.preemptor.key} (priority {e.preemptor.priority})"
                )
                assert e.preemptor.uid in nominated
                assert e.task.preemptable

    # Gates open once their calls end and their victims are gone.
    assert r.gate_problems == []
    assert r.cycles < MAX_CYCLES, "the run did not settle"
    sim = r.sim
    assert sim.cache.gated == set()
    for t in sim.cache.tasks.values():
        if t.status is TaskStatus.PIPELINED and L.POD_GROUP_LABEL not in (t.labels or {}):
            # nominated, never placed though all is quiet, and no reason why
            assert r.pending.get(t.key, NO_REASON) != NO_REASON, t.key

    # At the end every victim is gone: nominated pods have room, or a reason.
    pods, _ = sim.store.list("Pod")
    assert not any(p["metadata"].get("deletionTimestamp") for p in pods)
    allocatable = {
        n["metadata"]["name"]: Resource.parse(n["status"]["allocatable"])
        for n in sim.store.list("Node")[0]
    }
    load = {name: Resource() for name in allocatable}
    for p in pods:
        spec, status = p["spec"], p.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        where = spec.get("nodeName") or status.get("nominatedNodeName")
        if not where:
            continue
        in_gang = L.POD_GROUP_LABEL in (p["metadata"].get("labels") or {})
        if not spec.get("nodeName") and not in_gang:
            assert r.pending.get(key, NO_REASON) != NO_REASON, (
                f"{key} nominated to {where} but not bound, with no reason"
            )
        load[where] = load[where] + pod_request(spec, obj=key)
    for name, used in load.items():
        assert used.fits_in(allocatable[name]), f"{name}: {used} > {allocatable[name]}"
