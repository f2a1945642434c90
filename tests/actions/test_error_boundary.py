"""The error boundary (issue 9 point 3): a plugin that raises for one pod.

A job whose attempt raises is rolled back; its pods say ``SchedulerError`` naming the
plugin; it backs off; every other job of the cycle is scheduled as usual. Something that
raises outside any one job (a plugin's ``open``, a job order, a rollback that fails)
throws the whole cycle away, and the loop goes on. Tested on a session (the actions
alone), and on the embedded cluster through the real loop.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from scheduler import app
from scheduler.api.errors import PluginError, SessionCorruptedError
from scheduler.api.reasons import ReasonCode
from scheduler.api.task import TaskStatus
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.effects import Bind
from scheduler.framework.extension_points import POINTS, Scope
from scheduler.framework.session import Session, open_session
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests import faulty
from tests.builders import cache_with, node, pod, pod_group, queue, task_of

Obj = dict[str, Any]
DEFAULT = SchedulerConfiguration()


def config(point: str) -> SchedulerConfiguration:
    """The default configuration with ``faulty`` (raising at ``point``) in the first tier."""
    first, *rest = DEFAULT.tiers
    arguments = {"point": point}
    tiers = (TierConfig((*first.plugins, PluginConfig("faulty", arguments))), *rest)
    return SchedulerConfiguration(actions=DEFAULT.actions, tiers=tiers)


def registry() -> Any:
    r = app.builtin_registry()
    faulty.register(r)
    return r


def cluster(*extra: Obj) -> list[Obj]:
    return [
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod("good-1", cpu="1", memory=None),
        pod("bad", cpu="1", memory=None),
        pod("good-2", cpu="1", memory=None),
        *extra,
    ]


def decide(point: str, objects: list[Obj]) -> Session:
    """One cycle's actions on ``objects`` with ``faulty`` raising at ``point`` (not closed)."""
    cache = cache_with(*objects)
    session = open_session(cache.snapshot(), registry().resolve(config(point)))
    for action in session.resolved.actions:
        session.run_action(action)
    return session


@pytest.mark.parametrize(
    "point",
    ["filter", "onPlace", "jobReady", "jobValid", "bindAnnotations", "subsetNodes"],
)
def test_a_plugin_raising_for_one_job_fails_that_job_only(point: str) -> None:
    session = decide(point, cluster())
    bound = sorted(e.task.name for e in session.effects if isinstance(e, Bind))
    assert bound == ["good-1", "good-2"]
    bad = task_of(session, "bad")
    assert (bad.status, bad.node_name) == (TaskStatus.PENDING, "")
    assert list(session.job_errors) == [bad.job_id]
    exc = session.job_errors[bad.job_id]
    assert isinstance(exc, PluginError)
    assert (exc.plugin, exc.point) == ("faulty", point)
    assert isinstance(exc.__cause__, faulty.Boom)
    reason = session.job_reasons[bad.job_id].message
    assert session.job_reasons[bad.job_id].code is ReasonCode.SCHEDULER_ERROR
    assert reason == f"SchedulerError: plugin 'faulty' failed in {point}: boom in {point}"
    assert bad.job_id in session.failing_jobs
    # the session is consistent after the rollback: the node table counts the two binds
    used = {n.name: n.used.to_dict().get("cpu", 0) for n in session.nodes.values()}
    assert sum(used.values()) == 2000


def test_a_failing_gang_member_rolls_back_the_whole_gang() -> None:
    gang = [
        pod_group("g", min_member=2),
        pod("g-ok", cpu="1", memory=None, group="g"),
        pod("bad-g", cpu="1", memory=None, group="g"),
    ]
    session = decide("onPlace", cluster(*gang))
    bound = sorted(e.task.name for e in session.effects if isinstance(e, Bind))
    assert bound == ["good-1", "good-2"]
    ok = task_of(session, "g-ok")
    assert (ok.status, ok.node_name) == (TaskStatus.PENDING, "")


@pytest.mark.parametrize(
    ("point", "objects", "error"),
    [
        ("open", cluster(), PluginError),
        ("jobOrder", cluster(), PluginError),
        # a gang that cannot fit (room enough in all, not on any two nodes) is rolled
        # back, and the rollback itself raises
        (
            "onUnplace",
            [
                node("n1", cpu="1500m"),
                node("n2", cpu="1500m"),
                pod_group("g", min_member=3),
                *(pod(name, cpu="1", memory=None, group="g") for name in ("bad-1", "g-2", "g-3")),
            ],
            SessionCorruptedError,
        ),
    ],
    ids=["plugin-open", "job-order", "failed-rollback"],
)
def test_failures_outside_one_job_fail_the_cycle(
    point: str, objects: list[Obj], error: type[Exception]
) -> None:
    with pytest.raises(error):
        decide(point, objects)


# Through the loop, on the embedded cluster ----------------------------------------------------


def simulate(
    point: str, objects: list[Obj], cycles: int, *, later: Obj | None = None
) -> Simulation:
    arrivals = [Arrival(0.0, o, "test") for o in [queue("default"), *objects]]
    if later is not None:  # keeps the run going: something is still to come
        arrivals.append(Arrival(60.0, later, "test"))
    scenario = Scenario(arrivals=arrivals)
    resolved = registry().resolve(config(point))
    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        max_cycles=cycles,
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim


def sample(sim: Simulation, name: str, **labels: str) -> float:
    return sim.loop.metrics.registry.get_sample_value(name, labels) or 0.0


def test_the_loop_schedules_the_others_and_backs_the_failing_job_off() -> None:
    sim = simulate("filter", cluster(), cycles=12)
    result = sim.result
    assert sorted(result.bindings) == ["default/good-1", "default/good-2"]
    assert result.pending["default/bad"].startswith("SchedulerError: plugin 'faulty'")
    stored = sim.store.try_get("Pod", "default", "bad")
    assert stored is not None
    [scheduled] = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SchedulerError")
    events, _ = sim.store.list("Event", "default")
    failed = [e for e in events if e.get("reason") == "FailedScheduling"]
    assert any("plugin 'faulty' failed in filter" in e.get("note", "") for e in failed)
    # 12 cycles, one a second: attempts at 0 s, then after backoffs of 1, 2, 4 s
    attempts = sample(sim, "scheduler_schedule_attempts_total", result="error", profile="sluice")
    assert attempts == 4
    assert sample(sim, "sluice_cycle_failures_total", where="open") == 0


def test_a_cycle_that_fails_whole_is_thrown_away_and_the_loop_goes_on() -> None:
    sim = simulate("open", cluster(), cycles=5, later=pod("late"))
    assert sim.result.cycles == 5
    assert sim.result.bindings == {}
    assert sample(sim, "sluice_cycle_failures_total", where="open") == 5


# Every extension point (issue 24 point 2) ---------------------------------------------------

Q = {"labels": {"scheduling.sluice.dev/queue": "bad-q"}}


def _in(q: str, obj: Obj) -> Obj:
    """``obj`` (a pod) in queue ``q``."""
    obj["metadata"].setdefault("labels", {})["scheduling.sluice.dev/queue"] = q
    return obj


ALLOCATE = cluster()
"""Two free nodes and three lone pods, the middle one bad: placing, scoring, binding."""
IN_A_BAD_QUEUE = [
    queue("bad-q"),
    node("n1", cpu="4"),
    node("n2", cpu="4"),
    _in("bad-q", pod("p", cpu="1", memory=None)),
    pod("good", cpu="1", memory=None),
]
"""A pod of a bad queue: questions about the queue."""
PREEMPT = [
    node("n1", cpu="2"),
    pod("bad-low", cpu="2", memory=None, node="n1", priority=1),
    pod("bad", cpu="2", memory=None, priority=100),
]
"""A full node and a bad preemptor, whose victim is bad too (its removal is simulated)."""
GANG_PREEMPT = [
    node("n1", cpu="2"),
    node("n2", cpu="2"),
    pod("low-1", cpu="2", memory=None, node="n1", priority=1),
    pod("low-2", cpu="2", memory=None, node="n2", priority=1),
    pod_group("bad-g", min_member=2),
    pod("bad-1", cpu="2", memory=None, priority=100, group="bad-g"),
    pod("bad-2", cpu="2", memory=None, priority=100, group="bad-g"),
]
"""A gang that must preempt, domain-wide."""
RECLAIM = [
    queue("good-q"),
    queue("bad-q"),
    node("n1", cpu="2"),
    _in("good-q", pod("g-1", cpu="1", memory=None, node="n1")),
    _in("good-q", pod("g-2", cpu="1", memory=None, node="n1")),
    _in("bad-q", pod("bad", cpu="1", memory=None)),
]
"""A queue above its share and a bad pod of a queue at zero: reclaim."""
ENQUEUE = [node("n1", cpu="4"), pod_group("bad-g", min_member=1, min_resources={"cpu": "1"})]
"""A PodGroup waiting to be admitted."""
BORROW = [
    queue("bad-q"),
    queue("a"),
    queue("b"),
    *(node(f"n{i}", cpu="4") for i in range(4)),
    *(_in(q, pod(f"{q}-{i}", cpu="1", memory=None)) for q in ("a", "b") for i in range(6)),
    *(_in("bad-q", pod(f"bad-{i}", cpu="1", memory=None)) for i in range(6)),
]
"""Three queues asking 18 CPU of 16: the 16th pod borrows beyond a share."""

WORLDS: dict[str, list[Obj]] = {
    "taskOrder": ALLOCATE,
    "jobValid": ALLOCATE,
    "jobReady": ALLOCATE,
    "jobPipelined": PREEMPT,
    "jobStarving": PREEMPT,
    "jobEnqueueable": ENQUEUE,
    "enqueueRoom": ENQUEUE,
    "filter": ALLOCATE,
    "rowFilter": PREEMPT,
    "shortfall": PREEMPT,
    "score": ALLOCATE,
    "queueAllocatable": IN_A_BAD_QUEUE,
    "queueBorrowable": BORROW,
    "queueReclaims": RECLAIM,
    "queueOverused": IN_A_BAD_QUEUE,
    "queueShare": RECLAIM,
    "preemptable": PREEMPT,
    "reclaimable": RECLAIM,
    "onEnqueue": ENQUEUE,
    "onPlace": ALLOCATE,
    "onUnplace": PREEMPT,
    "bindAnnotations": ALLOCATE,
    "bindClaims": ALLOCATE,
    "bindVolumes": ALLOCATE,
    "subsetNodes": ALLOCATE,
    "gangVictimSelector": GANG_PREEMPT,
    "jobOrder": ALLOCATE,
    "queueOrder": IN_A_BAD_QUEUE,
}
"""For each extension point, a cluster whose cycle asks it about something bad."""


def test_every_declared_extension_point_has_a_fault_test() -> None:
    assert set(WORLDS) == {p.name for p in POINTS}
    assert set(faulty.POINT_NAMES) == {"open", *WORLDS}


@pytest.mark.parametrize("point", [p for p in POINTS if p.scope is Scope.JOB], ids=lambda p: p.name)
def test_a_fault_at_any_job_point_fails_that_job_only(point: Any) -> None:
    session = decide(point.name, WORLDS[point.name])
    assert faulty.FIRED[point.name] > 0, f"no fault was injected at {point.name}"
    failed = {
        uid: exc
        for uid, exc in session.job_errors.items()
        if isinstance(exc, PluginError) and (exc.plugin, exc.point) == ("faulty", point.name)
    }
    queue_failed = any(e.point == point.name for e in session.queue_errors.values())
    assert failed or queue_failed, (point.name, session.job_errors)
    for uid in failed:
        assert session.job_reasons[uid].message.startswith("SchedulerError: plugin 'faulty'")


@pytest.mark.parametrize(
    "point", [p for p in POINTS if p.scope is Scope.CYCLE], ids=lambda p: p.name
)
def test_a_fault_at_a_cycle_point_fails_the_cycle(point: Any) -> None:
    with pytest.raises(PluginError) as raised:
        decide(point.name, WORLDS[point.name])
    assert raised.value.point == point.name
    assert faulty.FIRED[point.name] > 0
