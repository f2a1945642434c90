"""What a pod and its PodGroup are told when preemption cannot help them.

The pods' FailedScheduling message and the PodGroup's ``Unschedulable`` condition carry
the same sentence, so a user reading either learns that no eviction would make room.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions.preempt import NO_VICTIMS
from scheduler.api import labels as L
from scheduler.app import builtin_registry
from scheduler.config import parse_configuration
from tests.builders import cached_session, node, pod, pod_group, task_of

Obj = dict[str, Any]
CONFIG = parse_configuration(
    {
        "apiVersion": L.API_VERSION,
        "kind": "SchedulerConfiguration",
        "actions": ["enqueue", "allocate", "preempt"],
    }
)


def _gang(priority: int, running_priority: int) -> list[Obj]:
    """One node of 2 CPU full with a 2-CPU pod; a gang of two 1-CPU pods (minMember 2)."""
    return [
        node("n1", cpu="2"),
        pod("running", cpu="2", memory=None, node="n1", priority=running_priority),
        pod_group("g", min_member=2, phase="Inqueue"),
        *(pod(f"g-{i}", cpu="1", memory=None, group="g", priority=priority) for i in range(2)),
    ]


@pytest.mark.parametrize(
    ("priority", "running_priority", "told"),
    [
        (5, 9, True),  # the running pod is more important: no eviction helps
        (5, 5, True),  # equal priority is never a victim
        (9, 5, False),  # a victim exists: the gang is nominated, nothing to tell
    ],
)
def test_the_pod_group_says_what_its_pods_say(
    priority: int, running_priority: int, told: bool
) -> None:
    session = cached_session(_gang(priority, running_priority), config=CONFIG)
    for action in builtin_registry().resolve(CONFIG).actions:
        session.run_action(action)
    said = session.job_reasons.get("default/g")
    job_reason = said.message if said is not None else ""
    pod_reasons = [
        r.message if (r := session.task_reasons.get(task_of(session, f"g-{i}").uid)) else ""
        for i in (0, 1)
    ]
    assert job_reason.endswith(NO_VICTIMS) is told, job_reason
    assert any(r.endswith(NO_VICTIMS) for r in pod_reasons) is told, pod_reasons


def test_a_pods_reason_follows_its_preemption_step_by_step() -> None:
    """Issue 15 point 2: one node of 2 CPU running a low-priority pod of 2 CPU (grace
    period 30 s), a high-priority pod of 2 CPU, half of the deletes failing (seed 7). The
    pod's reason says each failure and its backoff, then, once a delete succeeded, that
    it is nominated and waits for its victim, in one message until it is bound: never the
    stale word of an earlier step."""
    import anyio

    from scheduler import app
    from scheduler.loop.cycle_report import CycleReport
    from scheduler.sim.faults import ApiBehaviour
    from scheduler.sim.runner import Simulation
    from scheduler.sim.scenario import Arrival, Scenario
    from scheduler.sim.virtual_time import VirtualTimeLoop

    low = pod("low", cpu="2", memory=None, node="n1", priority=0)
    low["spec"]["terminationGracePeriodSeconds"] = 30
    objects = [node("n1", cpu="2"), low, pod("high", cpu="2", memory=None, priority=100)]
    said: list[tuple[float, str | None]] = []

    def watch(report: CycleReport, fresh: list[dict[str, Any]]) -> None:
        del fresh
        told = report.task_reasons.get("default/high")
        reason = told.message if told is not None else None
        if not said or said[-1][1] != reason:
            said.append((report.started, reason))

    resolved = app.resolve()
    sim = Simulation(
        Scenario(arrivals=[Arrival(0.0, o, "test") for o in objects]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        behaviour=ApiBehaviour(failure_rate={"delete": 0.5, "evict": 0.5}, seed=7),
        on_cycle=watch,
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    deleted = next(e["t"] for e in sim.result.timeline if e["event"] == "delete")
    bound = next(e["t"] for e in sim.result.timeline if e["event"] == "bind")
    assert bound - deleted == pytest.approx(30.0)  # the victim's grace period
    waiting = [(t, r) for t, r in said if deleted <= t < bound]
    # One message for the whole wait: the gate's progress writes nothing new.
    assert waiting == [
        (deleted, "nominated to node n1; waiting for the pods evicted for it to terminate"),
    ]
    failures = [r for t, r in said if t < deleted and r and "failed" in r]
    assert failures and all("preemption retried in" in r for r in failures), said
    assert said[-1] == (bound, None)  # bound: nothing left to say


def test_a_pod_groups_condition_follows_the_gangs_current_reason() -> None:
    """Issue 15 point 2: a gang created pod by pod, with no room for it: while members are
    missing its PodGroup says so; once all exist, it says what stops it now (the room),
    not the first reason seen."""
    import anyio

    from scheduler import app
    from scheduler.sim.runner import Simulation
    from scheduler.sim.scenario import Arrival, Scenario
    from scheduler.sim.virtual_time import VirtualTimeLoop

    hog = pod("hog", cpu="3", memory=None, node="n1")
    members = []
    for i in range(4):
        member = pod(f"g-{i}", cpu="1", memory=None, group="g")
        if i:
            member["metadata"]["annotations"] = {"sim.sluice.dev/arrival": f"{4 + i}s"}
        members.append(member)
    objects = [node("n1", cpu="4"), hog, pod_group("g", min_member=4), *members]
    resolved = app.resolve()
    sim = Simulation(
        Scenario(arrivals=[Arrival(0.0, o, "test") for o in objects]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        until=20.0,
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    group = sim.store.get("PodGroup", "default", "g")
    [condition] = [c for c in group["status"]["conditions"] if c["type"] == "Unschedulable"]
    assert "fewer than its minMember" not in condition["message"], condition
    assert "too little for 4 pods of 1 CPU" in condition["message"], condition
