"""An action's time budget (``actionTimeBudget``).

allocate keeps its place when its budget is spent (``Session.carry``) and goes on, on the
same session, in the next slice of the cycle, after the loop has handed on what was
decided so far, and so do preempt and reclaim (``Session.for_each_job(keep_place=True)``:
the jobs left are carried); backfill defers the jobs left to the next cycle instead
(``Session.try_job``). Either way
a cut is a pause: the jobs left are the last of the action's order, a gang is placed
whole in the slice that tries it, later actions do not try deferred jobs, which say
nothing new, and every guarantee holds (nothing over-allocated).
"""

from __future__ import annotations

import time
from typing import Any
from unittest.mock import patch

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.config import SchedulerConfiguration, parse_configuration
from scheduler.framework.effects import Bind, Evict, SetPhase, parts
from scheduler.framework.session import Session, open_session
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.queue import JobQueue
from scheduler.loop.scheduler_loop import SchedulingLoop
from scheduler.loop.status import StatusReporter
from scheduler.loop.system_clock import SystemClock
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, cached_session, node, pod, pod_group, queue
from tests.fakes import FakeCluster, RecordingDispatcher
from tests.test_properties import (
    Cluster,
    assert_session_consistent,
    check_placements,
    clusters,
    initially_placed,
)

Obj = dict[str, Any]


class JobsThenOut:
    """An ``out_of_time`` that lets an action try ``jobs`` jobs, then says it is spent
    (asked before every job but the first)."""

    def __init__(self, jobs: int) -> None:
        self.left = jobs - 1

    def __call__(self) -> bool:
        self.left -= 1
        return self.left < 0


def cut(budget: int | None) -> JobsThenOut | None:
    return JobsThenOut(budget) if budget is not None else None


def run(session: Session, budget: int | None) -> int:
    """The session's actions as the loop runs them, each run of an action with a budget
    of ``budget`` jobs (None: no budget); an action that carried its place runs again at
    once. Returns how many runs it took."""
    runs = 0
    for action in session.resolved.actions:
        session.run_action(action, cut(budget))
        runs += 1
        while session.unfinished:
            session.run_action(action, cut(budget))
            runs += 1
    return runs


def binds(session: Session) -> list[str]:
    return [e.task.name for e in session.effects if isinstance(e, Bind)]


CORE = SchedulerConfiguration(actions=("enqueue", "allocate", "backfill"))
LONE = [node("n1", cpu="8"), *(pod(f"p{i}", cpu="1", creationTimestamp=f"{i}") for i in range(6))]


@pytest.mark.parametrize(
    ("budget", "first"),
    [
        pytest.param(None, 6, id="no-budget"),
        pytest.param(1, 1, id="one-job: the first is always tried"),
        pytest.param(4, 4, id="four-jobs"),
        pytest.param(6, 6, id="budget-enough"),
    ],
)
def test_allocate_goes_on_where_it_stopped(budget: int | None, first: int) -> None:
    session = cached_session(LONE, config=CORE)
    allocate = next(a for a in session.resolved.actions if a.name == "allocate")
    session.run_action(allocate, cut(budget))
    assert binds(session) == [f"p{i}" for i in range(first)]  # a prefix of the job order
    assert session.unfinished is (first < 6)
    while session.unfinished:
        session.run_action(allocate, cut(budget))
    assert binds(session) == [f"p{i}" for i in range(6)]  # each once, in order
    assert not session.deferred


IN_B = {L.QUEUE_LABEL: "b"}
PREEMPTORS = [
    node("n1", cpu="2"),
    pod("low-0", cpu="1", node="n1"),
    pod("low-1", cpu="1", node="n1"),
    pod("high-0", cpu="1", priority=100, creationTimestamp="1"),
    pod("high-1", cpu="1", priority=100, creationTimestamp="2"),
]
RECLAIMERS = [  # queue a holds the node; queue b (the same weight) asks for half
    queue("a"),
    queue("b"),
    node("n1", cpu="4"),
    *(pod(f"a-{i}", cpu="1", node="n1", labels={L.QUEUE_LABEL: "a"}) for i in range(4)),
    *(pod(f"b-{i}", cpu="1", labels=IN_B, creationTimestamp=str(i)) for i in range(2)),
]


def nominated(session: Session) -> set[str]:
    return {e.task.name for e in parts(session.effects) if not isinstance(e, (Evict, SetPhase))}


@pytest.mark.parametrize(
    ("action_name", "objects", "first", "second"),
    [
        pytest.param("preempt", PREEMPTORS, "high-0", "high-1", id="preempt"),
        pytest.param("reclaim", RECLAIMERS, "b-0", "b-1", id="reclaim"),
    ],
)
def test_evicting_actions_keep_their_place(
    action_name: str, objects: list[Obj], first: str, second: str
) -> None:
    """The action may try one job per run: it evicts for the first and carries the other,
    for which it evicts when run again on the same session (the next slice), before any
    later action; nothing is deferred to the next cycle."""
    session = cached_session(objects, config=SchedulerConfiguration())
    evicting = next(a for a in session.resolved.actions if a.name == action_name)
    for action in session.resolved.actions:
        session.run_action(action, JobsThenOut(1) if action is evicting else None)
        if action is evicting:
            assert nominated(session) == {first} and session.unfinished
            while session.unfinished:
                session.run_action(evicting, JobsThenOut(1))
    assert nominated(session) == {first, second}
    assert len([e for e in parts(session.effects) if isinstance(e, Evict)]) == 2
    assert not session.deferred


def test_later_actions_do_not_try_deferred_jobs() -> None:
    """backfill, run first here, may try one pod: it places the first and defers the
    other, which then says nothing (it is tried next cycle), and allocate leaves it."""
    objects = [
        node("n1", cpu="2"),
        pod("be-0", cpu=None, memory=None, creationTimestamp="1"),
        pod("be-1", cpu=None, memory=None, creationTimestamp="2"),
    ]
    config = SchedulerConfiguration(actions=("enqueue", "backfill", "allocate"))
    session = cached_session(objects, config=config)
    for action in session.resolved.actions:
        session.run_action(action, JobsThenOut(1) if action.name == "backfill" else None)
    assert binds(session) == ["be-0"]
    (deferred,) = session.deferred
    job = session.jobs[deferred]
    assert [t.name for t in job.tasks.values()] == ["be-1"]
    assert deferred not in session.job_reasons
    assert not any(t.uid in session.task_reasons for t in job.tasks.values())


@pytest.mark.parametrize(
    ("action", "carried", "deferred"),
    [
        pytest.param("allocate", True, 0, id="allocate keeps its place: carries"),
        pytest.param("backfill", False, 0, id="backfill does not ask: tries every job"),
    ],
)
def test_a_slice_over_ends_only_an_action_that_keeps_its_place(
    action: str, carried: bool, deferred: int
) -> None:
    """The loop's shorter first slice (``slice_over``) stops an action that keeps its
    place after one job, as a spent budget would; it is not a spent budget, so an action
    that defers the jobs it does not reach (backfill) is not cut by it."""
    objects = [
        node("n1", cpu="8"),
        *(pod(f"p{i}", cpu="1", creationTimestamp=f"{i}") for i in range(3)),
        *(pod(f"be-{i}", cpu=None, memory=None, creationTimestamp=f"{i}") for i in range(3)),
    ]
    session = cached_session(objects, config=CORE)
    (run,) = [a for a in session.resolved.actions if a.name == action]
    session.run_action(run, None, JobsThenOut(1))
    assert session.unfinished is carried
    assert len(binds(session)) == (1 if carried else 3)
    assert len(session.deferred) == deferred


def test_the_first_slice_of_a_cycle_is_short() -> None:
    """On the real clock, with a budget of 10 s and allocate taking 10 ms a pod, the
    cycle's first slice ends after about FIRST_SLICE_SECONDS (a few pods), its binds
    handed on, and the rest is decided in one slice of the budget: the first binds of a
    long cycle go out at once, not after a whole budget."""
    config = parse_configuration(
        {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", "actionTimeBudget": "10s"}
    )
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, SystemClock())
    objects = [node("n1", cpu="64"), *(pod(f"p{i:02d}", cpu="1") for i in range(30))]
    loop = SchedulingLoop(cache_with(*objects), app.resolve(config), ports)
    (allocate,) = [a for a in loop.resolved.actions if a.name == "allocate"]
    slow = allocate._allocate  # type: ignore[attr-defined]

    def one_pod_in_10ms(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.01)
        return slow(*args, **kwargs)

    allocate._allocate = one_pod_in_10ms  # type: ignore[attr-defined]

    async def main() -> CycleReport:
        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            loop.dispatcher.attach(tg)
            report = await loop.run_cycle()
            tg.cancel_scope.cancel()
        return report

    report = anyio.run(main)
    assert report.slices == 2, report  # the short first one, then one within the budget
    assert 1 <= report.handed_on <= 10, report  # 50 ms of 10 ms pods, not all 30
    assert len([e for e in report.effects if isinstance(e, Bind)]) == 30


def test_a_gang_is_placed_whole_in_the_slice_that_tries_it() -> None:
    """A budget cuts between jobs, never inside one."""
    objects = [
        node("n1", cpu="8"),
        pod_group("g", min_member=3, phase="Inqueue"),
        *(pod(f"g-{i}", cpu="1", group="g", creationTimestamp="2") for i in range(3)),
        pod("a", cpu="1", creationTimestamp="1"),
    ]
    session = cached_session(objects, config=CORE)
    allocate = next(a for a in session.resolved.actions if a.name == "allocate")
    session.run_action(allocate, JobsThenOut(1))
    assert binds(session) == ["a"]
    session.run_action(allocate, JobsThenOut(1))
    assert sorted(binds(session)) == ["a", "g-0", "g-1", "g-2"]


@pytest.mark.parametrize(
    ("clock", "budget"),
    [
        pytest.param(SystemClock(), 0.05, id="real clock: the configured budget"),
        pytest.param(VirtualClock(), 0.0, id="virtual clock: none (decisions stay the same)"),
    ],
)
def test_the_budget_applies_on_the_real_clock_only(clock: Any, budget: float) -> None:
    config = parse_configuration(
        {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", "actionTimeBudget": "50ms"}
    )
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock)
    loop = SchedulingLoop(cache_with(), app.resolve(config), ports)
    assert loop.action_budget == budget


def test_a_long_cycle_hands_its_binds_on_slice_by_slice() -> None:
    """Each run of an action may try one job: the six pods are decided in one cycle of
    six slices, and the binds of each slice are handed on before the next is decided."""
    clock = VirtualClock()
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock)
    loop = SchedulingLoop(cache_with(*LONE), app.resolve(CORE), ports)
    loop.action_budget = 1e-9  # spent as soon as an action has tried its first job
    landed_before: list[int] = []
    allocate = loop.resolved.actions[1]
    original = allocate.execute

    def execute(session: Session) -> None:
        landed_before.append(len([c for c in cluster.landed if c[0] == "bind"]))
        original(session)

    allocate.execute = execute  # type: ignore[method-assign]
    reports: list[CycleReport] = []

    def done(report: CycleReport) -> bool:
        reports.append(report)
        return True

    async def main() -> None:
        await loop.run(should_stop=done)

    anyio.run(main, backend_options={"loop_factory": VirtualTimeLoop})
    (report,) = reports
    assert (report.slices, report.handed_on, report.deferred) == (6, 5, 0)
    held = loop.metrics.registry.get_sample_value("sluice_cycle_longest_hold_seconds")
    assert held == report.longest_hold > 0  # the metric: the longest stretch so far
    assert landed_before == [0, 1, 2, 3, 4, 5]  # each slice's bind out before the next
    assert [name for call, name, _ in cluster.landed if call == "bind"] == [
        f"p{i}" for i in range(6)
    ]


def sliced_cycles(objects: list[Obj], budget: int, limit: int = 60) -> dict[str, str]:
    """Cycles of the core actions as the loop runs them (its scheduling queue's view on
    each snapshot, parking after each), each action with a budget of ``budget`` jobs,
    every decision assumed, until a cycle defers nothing. Returns the pods bound
    (``ns/name`` -> node). Between cycles the generation moves (something changed in
    the cluster each time), so only the round keeps tried jobs parked."""
    cache = cache_with(*objects)
    resolved = app.resolve(CORE)
    queue = JobQueue(VirtualClock(), FakeCluster(), Metrics())
    bound: dict[str, str] = {}
    for _ in range(limit):
        generation = cache.generation
        fresh = cache.take_fresh_jobs()
        snapshot = cache.snapshot()
        snapshot.queue = queue.view(0.0, generation, fresh, snapshot.jobs)
        session = open_session(snapshot, resolved)
        run(session, budget)
        assert_session_consistent(session)
        queue.after_cycle(session, generation, 0.0)
        for effect in session.effects:
            if isinstance(effect, Bind):
                assert effect.task.key not in bound
                cache.ledger.assume_bind(effect.task.uid, effect.node)
                bound[effect.task.key] = effect.node
            elif isinstance(effect, SetPhase):
                cache.ledger.assume_phase(effect.job.uid, effect.phase)
        for name, info in cache.nodes.items():
            assert info.used.fits_in(info.allocatable), f"cache: node {name} over-allocated"
        if not session.deferred:
            return bound
        cache.state.generation += 1
    raise AssertionError(f"still deferring after {limit} cycles")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), budget=st.integers(1, 4))
def test_cut_cycles_keep_every_guarantee(cluster: Cluster, budget: int) -> None:
    """Whatever the budget, the cycles end (every job is tried), no node is ever
    over-allocated, every gang bound is bound whole, and the same input gives the same
    bindings."""
    bound = sliced_cycles(cluster.objects, budget)
    check_placements(cluster, {**initially_placed(cluster), **bound}, set(bound))
    assert sliced_cycles(cluster.objects, budget) == bound


def test_a_deferred_gang_keeps_its_status() -> None:
    """Two gangs cannot fit; the session tried ``a`` and deferred ``b`` (an action ran
    out of time before it): ``a``'s PodGroup gets its Unschedulable condition, ``b``'s
    says what it said (no write), and ``b``'s pods get no new condition and no event."""
    said = {
        "phase": "Inqueue",
        "conditions": [
            {"type": "Unschedulable", "status": "True", "reason": "Unschedulable", "message": "x"}
        ],
    }
    objects = [node("n1", cpu="1")]
    for name, created in (("a", "1"), ("b", "2")):
        group = pod_group(name, min_member=2, phase="Inqueue")
        if name == "b":
            group["status"] = said
        objects.append(group)
        objects += [
            pod(f"{name}-{i}", cpu="1", group=name, creationTimestamp=created) for i in (0, 1)
        ]
    cache = cache_with(*objects)
    session = open_session(cache.snapshot(), app.resolve(CORE))
    run(session, None)
    assert not binds(session)
    session.defer(session.jobs["default/b"])
    cluster = FakeCluster()
    pool = RecordingDispatcher(cluster)
    StatusReporter(VirtualClock(), cache, pool, lambda *_: None).report(session)  # type: ignore[arg-type]
    assert [label for label in pool.labels if "PodGroup" in label] == ["PodGroup/default/a"]
    assert [label for label in pool.labels if label.startswith("Pod/")] == [
        "Pod/default/a-0",
        "Pod/default/a-1",
    ]
    assert {e.regarding.name for e in cluster.events} == {"a-0", "a-1"}


def test_the_loop_takes_events_between_the_snapshot_and_the_session() -> None:
    """On the real clock a cycle lets the event loop run once its snapshot is taken: a
    slow snapshot and a slow session are two stretches, not one, and what queued while
    the snapshot was taken runs between them."""
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, SystemClock())
    cache = cache_with(*LONE)
    loop = SchedulingLoop(cache, app.resolve(CORE), ports)
    order: list[str] = []
    take = cache.snapshot

    def slow_snapshot(**kwargs: Any) -> Any:
        time.sleep(0.2)
        order.append("snapshot")
        return take(**kwargs)

    opened = open_session

    def slow_open(*args: Any) -> Session:
        time.sleep(0.2)
        order.append("open")
        return opened(*args)

    async def main() -> CycleReport:
        async def meanwhile() -> None:
            order.append("event")

        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            loop.dispatcher.attach(tg)
            cache.snapshot = slow_snapshot
            tg.start_soon(meanwhile)  # queued before the cycle: runs at its first yield
            with patch("scheduler.loop.scheduler_loop.open_session", slow_open):
                report = await loop.run_cycle()
            tg.cancel_scope.cancel()
        return report

    report = anyio.run(main)
    assert order[:3] == ["snapshot", "event", "open"]
    assert 0.2 <= report.longest_hold < 0.35  # one slow part, not both
