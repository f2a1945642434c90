"""Tests of scheduler.framework.session and the tier rules of scheduler.framework.tiers,
with small fake plugins that answer fixed values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from scheduler.api import reasons
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.extension_points import (
    JOB_ENQUEUEABLE,
    JOB_ORDER,
    JOB_PIPELINED,
    JOB_READY,
    JOB_STARVING,
    JOB_VALID,
    NODE_SCORER,
    QUEUE_ALLOCATABLE,
    QUEUE_OVERUSED,
    VICTIMS,
    HookSet,
    PluginContext,
    Vote,
)
from scheduler.framework.plugin_questions import nodes_to_score
from scheduler.framework.plugin_status import SUCCESS, Status
from scheduler.framework.registry import PluginSpec, Registry
from scheduler.framework.session import Session, cluster_capacity, open_session
from tests.builders import default_registry, node, pod, session_with, snapshot_of, task_of


@pytest.mark.parametrize(
    ("total", "percentage", "expected"),
    [
        (10, 0, 10),
        (99, 0, 99),
        (100, 0, 100),
        (1000, 0, 420),  # adaptive: 50 - 1000/125 = 42 %
        (5000, 0, 500),  # 50 - 40 = 10 %
        (10000, 0, 500),  # floor of 5 %
        (1000, 30, 300),
        (1000, 5, 100),  # never fewer than 100
        (1000, 100, 1000),
    ],
    ids=[
        "small",
        "just-under",
        "at-minimum",
        "adaptive-1000",
        "adaptive-5000",
        "adaptive-floor",
        "explicit",
        "explicit-floor",
        "all",
    ],
)
def test_nodes_to_score(total: int, percentage: int, expected: int) -> None:
    assert nodes_to_score(total, percentage) == expected


# Fake plugins ---------------------------------------------------------------------------------


@dataclass
class Answers:
    """What a fake plugin registers: each field a hook or None."""

    valid: Callable[[JobInfo], str | None] | None = None
    ready: bool | None = None
    pipelined: bool | None = None
    starving: bool | None = None
    enqueue: Vote | None = None
    allocatable: bool | None = None
    overused: bool | None = None
    victims: Callable[[list[TaskInfo]], list[TaskInfo]] | None = None
    job_key: Callable[[JobInfo], tuple[Any, ...]] | None = None
    score: Callable[[TaskInfo, Any, Any, bool], Any] | None = None


def fake(name: str, answers: Answers) -> PluginSpec:
    class Fake:
        def __init__(self, arguments: object) -> None:
            self.name = name

        def open(self, context: PluginContext, hooks: HookSet) -> None:
            a = answers
            if a.valid is not None:
                valid = a.valid
                hooks.add(JOB_VALID, lambda job: _status(valid(job)))
            if a.ready is not None:
                hooks.add(JOB_READY, lambda job, v=a.ready: _status(None if v else "not ready"))
            if a.pipelined is not None:
                hooks.add(
                    JOB_PIPELINED, lambda job, v=a.pipelined: _status(None if v else "not yet")
                )
            if a.starving is not None:
                hooks.add(JOB_STARVING, lambda job, v=a.starving: v)
            if a.enqueue is not None:
                hooks.add(JOB_ENQUEUEABLE, lambda job, v=a.enqueue: v)
            if a.allocatable is not None:
                hooks.add(QUEUE_ALLOCATABLE, lambda q, t, v=a.allocatable: v)
            if a.overused is not None:
                hooks.add(QUEUE_OVERUSED, lambda q, v=a.overused: v)
            if a.victims is not None:
                fn = a.victims
                hooks.add(VICTIMS, lambda p, cands: fn(list(cands)))
            if a.job_key is not None:
                hooks.add(JOB_ORDER, a.job_key)
            if a.score is not None:
                hooks.add(NODE_SCORER, a.score)

        def close(self) -> None:
            pass

    return PluginSpec(name, Fake)


def _status(reason: str | None) -> Status:
    return SUCCESS if reason is None else Status.unschedulable(reason)


def session_of(*tiers: list[Answers], nodes: int = 2, pods: int = 3) -> Session:
    registry = Registry()
    layout = []
    for i, tier in enumerate(tiers):
        names = []
        for j, answers in enumerate(tier):
            name = f"t{i}p{j}"
            registry.add_plugin(fake(name, answers))
            names.append(PluginConfig(name))
        layout.append(TierConfig(tuple(names)))
    config = SchedulerConfiguration(actions=(), tiers=tuple(layout))
    snapshot = snapshot_of(
        [node(f"n{i}") for i in range(1, nodes + 1)], [pod(f"p{i}") for i in range(pods)]
    )
    return open_session(snapshot, registry.resolve(config))


def a_job(session: Session) -> JobInfo:
    return next(iter(session.jobs.values()))


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [
        ([], None),
        ([[Answers(valid=lambda j: None)]], None),
        ([[Answers(valid=lambda j: None), Answers(valid=lambda j: "second")]], "second"),
        ([[Answers(valid=lambda j: "first")], [Answers(valid=lambda j: "later")]], "first"),
    ],
    ids=["none", "all-valid", "first-reason-in-tier", "earlier-tier-wins"],
)
def test_job_valid_first_reason_wins(tiers: list[list[Answers]], expected: str | None) -> None:
    session = session_of(*tiers)
    status = session.job_valid(a_job(session))
    assert (None if status.ok else status.message) == expected


@pytest.mark.parametrize(
    ("answers", "ready", "pipelined", "starving"),
    [
        ([], True, True, False),
        ([Answers(ready=True, pipelined=True, starving=True)], True, True, True),
        (
            [
                Answers(ready=True, pipelined=False, starving=True),
                Answers(ready=False, pipelined=True, starving=False),
            ],
            False,
            False,
            False,
        ),
    ],
    ids=["nobody-answers", "one-yes", "one-no"],
)
def test_job_predicates_need_every_plugin(
    answers: list[Answers], ready: bool, pipelined: bool, starving: bool
) -> None:
    session = session_of(answers) if answers else session_of()
    job = a_job(session)
    assert (
        bool(session.job_ready(job)),
        bool(session.job_pipelined(job)),
        session.job_starving(job),
    ) == (
        ready,
        pipelined,
        starving,
    )


P, R, A = Vote.PERMIT, Vote.REJECT, Vote.ABSTAIN


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [
        ([], True),
        ([[A, A]], True),
        ([[P, R]], False),
        ([[P, A]], True),
        ([[P], [R]], True),  # a permitting tier ends the vote
        ([[A], [R]], False),  # an abstaining tier defers
        ([[A], [A, P]], True),
    ],
    ids=[
        "none",
        "all-abstain",
        "reject-beats-permit",
        "permit",
        "earlier-permit-wins",
        "abstain-defers-to-reject",
        "abstain-defers-to-permit",
    ],
)
def test_enqueue_vote(tiers: list[list[Vote]], expected: bool) -> None:
    session = session_of(*[[Answers(enqueue=v) for v in tier] for tier in tiers])
    assert session.job_enqueueable(a_job(session)) is expected


@pytest.mark.parametrize(
    ("answers", "allocatable", "overused"),
    [
        ([], True, False),
        (
            [Answers(allocatable=True, overused=False), Answers(allocatable=False, overused=True)],
            False,
            True,
        ),
        ([Answers(allocatable=True, overused=False)], True, False),
    ],
    ids=["none", "any-no-any-yes", "one"],
)
def test_queue_questions(answers: list[Answers], allocatable: bool, overused: bool) -> None:
    session = session_of(answers) if answers else session_of()
    queue = session.queues["default"]
    task = next(iter(a_job(session).tasks.values()))
    assert session.queue_allocatable(queue, task) is allocatable
    assert session.queue_overused(queue) is overused


def _drop(name: str) -> Callable[[list[TaskInfo]], list[TaskInfo]]:
    return lambda cands: [t for t in cands if t.name != name]


@pytest.mark.parametrize(
    ("tiers", "left"),
    [
        ([], ["p0", "p1", "p2"]),
        ([[Answers(victims=_drop("p0")), Answers(victims=_drop("p1"))]], ["p2"]),
        ([[Answers(victims=_drop("p0"))], [Answers(victims=_drop("p1"))]], ["p1", "p2"]),
        ([[Answers()], [Answers(victims=_drop("p2"))]], ["p0", "p1"]),
    ],
    ids=["nobody", "intersection-in-tier", "first-tier-only", "first-tier-with-a-plugin"],
)
def test_victims(tiers: list[list[Answers]], left: list[str]) -> None:
    session = session_of(*tiers)
    tasks = sorted(
        (t for j in session.jobs.values() for t in j.tasks.values()), key=lambda t: t.name
    )
    assert [t.name for t in session.victims(tasks[0], tasks)] == left


def test_order_keys_are_lexicographic_with_identity_last() -> None:
    session = session_of(
        [Answers(job_key=lambda j: (0 if j.name == "p2" else 1,))],
        [Answers(job_key=lambda j: (-int(j.name[1:]),))],
    )
    jobs = list(session.jobs.values())
    assert [j.name for j in session.order_jobs(jobs)] == ["p2", "p1", "p0"]
    plain = session_of()
    assert [j.name for j in plain.order_jobs(list(reversed(list(plain.jobs.values()))))] == [
        "p0",
        "p1",
        "p2",
    ]


def test_select_node_takes_the_best_score_first_on_tie() -> None:
    def prefer_n3(task: TaskInfo, table: Any, rows: Any, releasing: bool) -> Any:
        return np.array([100.0 if table.nodes[r].name == "n3" else 0.0 for r in rows])

    session = session_of([Answers(score=prefer_n3)], nodes=4)
    task = task_of(session, "p0")
    fit = session.fit(task)
    assert fit.feasible.all()
    assert session.select_node(task, fit).name == "n3"  # type: ignore[union-attr]
    flat = session_of(nodes=3)
    fit = flat.fit(task_of(flat, "p0"))
    # every node is scored below 100 nodes: without scorers the first feasible row wins
    picks = [flat.select_node(task, fit) for _ in range(3)]
    assert [n.name for n in picks if n is not None] == ["n1", "n1", "n1"]


def test_select_node_none_when_nothing_fits() -> None:
    session = session_with(
        [node("n1", cpu="1")], [pod("big", cpu="2")], [PluginConfig("predicates")]
    )
    task = task_of(session, "big")
    fit = session.fit(task)
    assert not fit.any
    assert session.select_node(task, fit) is None
    assert not session.fits_on(task, "n1")
    assert fit.explain() == "0/1 nodes are available: 1 Insufficient cpu."


def test_cluster_capacity_counts_ready_schedulable_nodes() -> None:
    snapshot = snapshot_of(
        [
            node("a", cpu="2", memory="1Gi", pods=10),
            node("b", cpu="3", memory="1Gi", pods=10),
            node("c", cpu="5", ready=False),
            node("d", cpu="7", unschedulable=True),
        ],
        [],
    )
    config = SchedulerConfiguration(actions=(), tiers=(TierConfig((PluginConfig("gang"),)),))
    session = open_session(snapshot, default_registry().resolve(config))
    capacity = dict(zip(session.table.columns, cluster_capacity(session), strict=True))
    assert capacity == {"cpu": 5000, "memory": 2 * 2**30, "pods": 20}


def test_session_owns_the_snapshot_and_reasons_are_recorded() -> None:
    session = session_of()
    job = a_job(session)
    task = next(iter(job.tasks.values()))
    why, because = reasons.nodes_unavailable("why"), reasons.gang_not_ready("because")
    session.record_task_reason(task, why)
    session.record_job_reason(job, because)
    assert session.task_reasons == {task.uid: why}
    assert session.job_reasons == {job.uid: because}
    assert session.bind_annotations(task, "n1") == {}
    assert not session.is_gated(job)
    session.close()


def test_select_node_samples_from_a_moving_start_on_large_clusters() -> None:
    snapshot = snapshot_of([node(f"n{i:03}") for i in range(200)], [pod("p")])
    config = SchedulerConfiguration(actions=(), tiers=(TierConfig((PluginConfig("predicates"),)),))
    session = open_session(snapshot, default_registry().resolve(config))
    task = task_of(session, "p")
    fit = session.fit(task)
    picks = [session.select_node(task, fit) for _ in range(3)]
    assert [n.name for n in picks if n is not None] == ["n000", "n100", "n000"]
