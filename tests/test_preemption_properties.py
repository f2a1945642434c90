"""Invariants of preemption (issue 3), on generated clusters run as whole simulations.

A cluster is 1-4 nodes filled to half or all of their CPU with running low-priority pods (priority
0-4, grace periods of 0, 5 or 30 s, a few not preemptable), plus 1-6 pods arriving at 0, 2
or 7 s with priorities from 0 to 30 (a few with ``preemptionPolicy: Never``), and
sometimes a PodGroup of 2-3 pending members. Each run has
asynchronous preemption on or off, a delete latency of 0 or 1 s, and sometimes 30 % of the
deletes failing. The real loop (``app.build_loop``) runs it on the virtual clock. Then:

- every evicted pod has strictly lower priority than the preemptor it was evicted for
  (the Evict effects of every cycle);
- after every cycle, in the scheduler's cache: no node holds more than it offers (bound
  pods, victims still terminating included); and every nominated pod fits its node once
  the victims are gone, with the pods that may not take its room (bound pods of its
  priority or lower, and nominations of its priority; KEP-4832 lets a higher-priority pod
  take the room, after which the nomination is withdrawn). Only a failed eviction of
  another preemption may break that (its victims hold their room again), and then the
  first cycle in which the nominee's job is not gated withdraws or renews the nomination;
- a gate is open by the end of the cycle in which its calls ended and its victims are
  gone, and at most ``MAX_GRACE`` seconds after its calls ended (checked after every
  cycle); at the end no job is gated;
- at the end, once every victim is gone, every nominated pod that is not bound has a
  reason, and no node is over-allocated when the nominated pods are counted with the
  bound ones (the store's pods).

Gangs are generated with or without failing deletes, and their members are checked like
every other pod. A counterexample found so (a gang one of whose nominations a
higher-priority preemption cleared kept the others nominated, with no reason, for ever)
is kept as an explicit case:
:func:`test_a_gang_whose_nomination_a_higher_preemption_cleared_lets_the_rest_go`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
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
from scheduler.api.task_states import USES_NODE
from scheduler.config import SchedulerConfiguration, with_feature_gates
from scheduler.framework.effects import Evict, EvictReason, Nominate, parts
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.queue.preemption_gates import GATE_TIMEOUT
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

Obj = dict[str, Any]
MAX_CYCLES = 400
MAX_GRACE = 30.0
"""The longest grace period generated: once a gate's calls end (the victims' deletions
have been made), its victims are gone, and the gate open, within that many seconds."""
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


def _node(name: str, milli_cpu: int, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"allocatable": {"cpu": f"{milli_cpu}m", "memory": "8Gi", "pods": "110"}},
    }


@st.composite
def cases(draw: st.DrawFn) -> Case:
    objects: list[Obj] = []
    for i in range(draw(st.integers(1, 4), label="nodes")):
        name = f"n{i}"
        capacity = draw(st.sampled_from([2000, 4000]), label="node cpu")
        objects.append(_node(name, capacity))
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
    if draw(st.booleans(), label="gang?"):
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
    problems: list[str]
    """What the checks after every cycle (:class:`CycleChecks`) found."""


@dataclass
class CycleChecks:
    """The invariants checked after every cycle, on the cache and the executor's gates."""

    sim: Simulation
    problems: list[str] = field(default_factory=list)
    failed_delete: bool = False
    """Has a delete failed so far in this run?"""
    short: set[str] = field(default_factory=set)
    """Nominated pods (uids) short of room at the end of the last cycle, their job not
    gated: the next cycle must withdraw or renew their nomination."""

    def __call__(self, report: CycleReport, fresh: list[dict[str, Any]]) -> None:
        self.failed_delete |= any(e["event"] == "delete-failed" for e in fresh)
        where = f"cycle {report.number} t={report.started}"
        self._gates(where)
        renewed = {e.task.uid for e in parts(report.effects) if isinstance(e, Nominate)}
        self._room(where, renewed)

    def _gates(self, where: str) -> None:
        gates = self.sim.loop.queue.gates()
        pods, _ = self.sim.store.list("Pod")
        present = {str(p["metadata"].get("uid")) for p in pods}
        now = self.sim.clock.now()
        for job, hold in gates.items():
            if hold.calls_left > 0:
                continue
            if not hold.victims & present:
                self.problems.append(
                    f"{where}: {job} gated with its calls done and no victim left "
                    f"({sorted(hold.victims)})"
                )
            calls_ended = hold.until - GATE_TIMEOUT
            if now - calls_ended > MAX_GRACE:
                self.problems.append(
                    f"{where}: {job} still gated {now - calls_ended:g} s after its calls "
                    f"ended (waiting for {sorted(hold.victims)})"
                )

    def _gated(self) -> frozenset[str]:
        return frozenset(self.sim.loop.queue.gates())

    def _room(self, where: str, renewed: set[str]) -> None:
        cache = self.sim.cache
        short: set[str] = set()
        for node in cache.nodes.values():
            tasks = list(node.tasks.values())
            used = sum((t.request for t in tasks if t.status in USES_NODE), Resource())
            if not used.fits_in(node.allocatable):
                self.problems.append(f"{where}: {node.name} holds {used} > {node.allocatable}")
            staying = [t for t in tasks if t.status in USES_NODE - {TaskStatus.RELEASING}]
            nominated = [t for t in tasks if t.status is TaskStatus.PIPELINED]
            for p in nominated:
                load = p.request
                for t in staying:
                    if t.priority <= p.priority:
                        load = load + t.request
                for t in nominated:
                    if t is not p and t.priority == p.priority:
                        load = load + t.request
                if load.fits_in(node.allocatable):
                    continue
                gated = p.job_id in self._gated()
                if not self.failed_delete or (p.uid in self.short and p.uid not in renewed):
                    self.problems.append(
                        f"{where}: {p.key} (priority {p.priority}) nominated to {node.name} "
                        f"would not fit once the victims are gone: {load} > "
                        f"{node.allocatable}" + (" (job gated)" if gated else "")
                    )
                if not gated:
                    short.add(p.uid)
        self.short = short


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
    checks: list[CycleChecks] = []

    def on_cycle(report: CycleReport, fresh: list[dict[str, Any]]) -> None:
        reports.append(report)
        checks[0](report, fresh)

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
    checks.append(CycleChecks(sim))
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return Run(sim, reports, result.cycles, result.pending, checks[0].problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_preemption_invariants(case: Case) -> None:
    r = run(case)

    # Victims always have strictly lower priority than their preemptor.
    for report in r.reports:
        nominated = {e.task.uid for e in parts(report.effects) if isinstance(e, Nominate)}
        for e in parts(report.effects):
            # reclaim is across queues
            if isinstance(e, Evict) and e.reason is EvictReason.PREEMPTED:
                assert e.preemptor is not None, f"cycle {report.number}: {e.task.key}"
                assert e.task.priority < e.preemptor.priority, (
                    f"cycle {report.number}: {e.task.key} (priority {e.task.priority}) "
                    f"evicted for {e.preemptor.key} (priority {e.preemptor.priority})"
                )
                assert e.preemptor.uid in nominated
                assert e.task.preemptable

    # Gates open in time; nodes and nominations hold after every cycle.
    assert r.problems == []
    assert r.cycles < MAX_CYCLES, "the run did not settle"
    sim = r.sim
    assert not sim.loop.queue.gates()
    for t in sim.cache.tasks.values():
        if t.status is TaskStatus.PIPELINED:
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
        if not spec.get("nodeName"):
            assert r.pending.get(key, NO_REASON) != NO_REASON, (
                f"{key} nominated to {where} but not bound, with no reason"
            )
        load[where] = load[where] + pod_request(spec, obj=key)
    for name, used in load.items():
        assert used.fits_in(allocatable[name]), f"{name}: {used} > {allocatable[name]}"


GANG = {L.POD_GROUP_LABEL: "g"}
GANG_NOMINATION_CLEARED: list[Obj] = [
    _node("n0", 1000),
    _node("n1", 2000),
    # capacity no pod here may use: the queue's share is no limit in this case
    _node("spare", 8000, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 2},
    },
    _pod("low-a", "1", 0, nodeName="n0", terminationGracePeriodSeconds=0),
    _pod("low-b", "2", 0, nodeName="n1", terminationGracePeriodSeconds=30),
    _pod("g-0", "1", 10, labels=GANG),
    _pod("g-1", "2", 10, labels=GANG),
    _pod("top", "2", 20, annotations={"sim.sluice.dev/arrival": "2s"}),
    _pod("filler", "1", 5, annotations={"sim.sluice.dev/arrival": "40s"}),
]


@pytest.mark.parametrize("async_on", [True, False], ids=["async", "sync"])
def test_a_gang_whose_nomination_a_higher_preemption_cleared_lets_the_rest_go(
    async_on: bool,
) -> None:
    """Reduced from a counterexample of :func:`test_preemption_invariants`. Gang g
    (minMember 2, priority 10): g-0 is nominated to n0 (evicting low-a, gone at once)
    and g-1 to n1 (evicting low-b, 30 s grace). At 2 s top (priority 20) is nominated to
    n1, whose room is being freed, and g-1's nomination is cleared as a lower one (by the
    executor, not by the withdrawal of stale nominations): g cannot be placed any more.
    g-0 must not keep holding n0, with no reason: at 40 s filler (priority 5) gets it."""
    case = Case(GANG_NOMINATION_CLEARED, async_on, 0.0, 0.0, seed=0)
    r = run(case)
    assert r.problems == []
    assert r.sim.result.bindings.get("default/top") == "n1"
    assert r.sim.result.evictions == ["default/low-a", "default/low-b"]
    g0 = next(t for t in r.sim.cache.tasks.values() if t.name == "g-0")
    assert g0.status is not TaskStatus.PIPELINED, "g-0 still holds n0 for a gang that cannot run"
    assert r.sim.result.bindings.get("default/filler") == "n0"
