"""The scheduling queue (issue 24 point 1): every hold on a job, how each enters and
leaves, which one a cycle sees when a job has several, when the loop must wake, and one
backoff policy for every failure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from scheduler.api import reasons
from scheduler.api.holds import Hold, HoldKind, QueueView
from scheduler.api.job import JobInfo
from scheduler.framework.session import Session
from scheduler.loop.queue import JobQueue
from scheduler.loop.queue.job_backoff import BackoffPolicy
from scheduler.metrics import Metrics
from tests.builders import cache_with, cached_session, node, pod, pod_group
from tests.fakes import FakeCluster


@dataclass
class Clock:
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the queue never sleeps")


@dataclass
class Rig:
    clock: Clock = field(default_factory=Clock)
    wakes: list[float] = field(default_factory=list)
    queue: JobQueue = field(init=False)

    def __post_init__(self) -> None:
        self.queue = JobQueue(
            self.clock,
            FakeCluster(),
            Metrics(),
            wake=lambda: self.wakes.append(self.clock.t),
            gate_timeout=60.0,
        )

    def view(
        self,
        generation: int = 0,
        fresh: frozenset[str] = frozenset(),
        jobs: Mapping[str, JobInfo] | None = None,
    ) -> QueueView:
        return self.queue.view(self.clock.t, generation, set(fresh), jobs or {})

    def hold(self, job: str = "default/a") -> Hold | None:
        return self.view().holds.get(job)

    def at(self, t: float) -> Rig:
        self.clock.t = t
        return self


def session_failing(*jobs: str) -> Session:
    """A cycle's session in which the lone pods ``jobs`` (``default/NAME``) raised."""
    objects = [node("n1", cpu="1"), *(pod(j.split("/")[1], cpu="4") for j in jobs)]
    session = cached_session(objects)
    for uid in jobs:
        session.record_job_error(session.jobs[uid], ValueError("boom"))
    return session


def test_a_gate_holds_the_job_until_calls_are_done_and_victims_gone() -> None:
    r = Rig()
    ticket = r.queue.close_gate("default/a", ["v1", "v2"])
    hold = r.hold()
    assert hold is not None and hold.kind is HoldKind.EVICTIONS
    assert (hold.victims, hold.calls_left, hold.until) == (frozenset({"v1", "v2"}), 1, math.inf)
    r.queue.victim_gone("v1")
    r.at(1.0).queue.calls_done(ticket)
    hold = r.hold()
    assert hold is not None and (hold.victims, hold.calls_left) == (frozenset({"v2"}), 0)
    assert hold.until == 61.0, "it opens anyway 60 s after the calls"
    assert r.queue.next_deadline(1.0) == 61.0
    assert r.wakes == []
    r.at(2.0).queue.victim_gone("v2")
    assert r.hold() is None
    assert r.wakes == [2.0], "a gate opened by an event wakes the loop at once"
    assert r.queue.in_flight == 0


def test_a_gate_whose_victims_are_never_seen_gone_opens_at_its_deadline() -> None:
    r = Rig()
    r.queue.calls_done(r.queue.close_gate("default/a", ["v1"]))
    assert r.at(59.9).hold() is not None
    assert r.queue.in_flight == 1, "something will change: the gate's timeout"
    assert r.at(60.0).hold() is None
    assert r.queue.in_flight == 0


def test_a_gangs_preemptions_share_one_gate_and_a_stale_ticket_changes_nothing() -> None:
    r = Rig()
    first = r.queue.close_gate("default/g", ["v1"])
    second = r.queue.close_gate("default/g", ["v2"])
    r.queue.calls_done(first, "the last preemption failed: boom")
    assert r.hold("default/g") is not None
    assert r.hold("default/g").kind is HoldKind.NO_PREEMPTION  # type: ignore[union-attr]
    again = r.queue.close_gate("default/g", ["v3"])
    r.queue.calls_done(second)  # the first gate's, opened already: not the new one's
    hold = r.hold("default/g")
    assert hold is not None and hold.kind is HoldKind.EVICTIONS and hold.calls_left == 1
    r.queue.calls_done(again)
    r.queue.victim_gone("v3")
    assert r.hold("default/g") is not None
    assert r.hold("default/g").kind is HoldKind.NO_PREEMPTION  # type: ignore[union-attr]


def test_failed_preemptions_back_off_doubling_and_a_success_resets_the_run() -> None:
    r = Rig()
    delays = []
    for t in (0.0, 10.0, 20.0):
        r.at(t).queue.calls_done(r.queue.close_gate("default/a", ["v"]), "refused")
        hold = r.hold()
        assert hold is not None and hold.kind is HoldKind.NO_PREEMPTION
        assert hold.reason == "refused" and hold.until == t + hold.delay
        delays.append(hold.delay)
    assert delays == [1.0, 2.0, 4.0]
    assert r.queue.next_deadline(20.0) == 24.0
    assert r.at(24.0).hold() is None
    r.at(30.0).queue.calls_done(r.queue.close_gate("default/a", ["v"]))
    r.queue.victim_gone("v")
    r.at(40.0).queue.calls_done(r.queue.close_gate("default/a", ["v"]), "refused")
    hold = r.hold()
    assert hold is not None and hold.delay == 1.0, "a success started a new run"


def test_errors_back_off_doubling_while_the_job_keeps_failing() -> None:
    r = Rig()
    delays = []
    t = 0.0
    for _ in range(4):
        r.at(t).view()
        r.queue.after_cycle(session_failing("default/a"), 0, t)
        hold = r.hold()
        assert hold is not None and hold.kind is HoldKind.ERROR
        assert hold.reason == "SchedulerError: ValueError: boom"
        delays.append(hold.delay)
        t = hold.until
    assert delays == [1.0, 2.0, 4.0, 8.0]
    r.at(t).view()
    r.queue.after_cycle(cached_session([node("n1", cpu="1"), pod("a", cpu="4")]), 0, t)
    r.at(t + 100).view()
    r.queue.after_cycle(session_failing("default/a"), 0, t + 100)
    hold = r.hold()
    assert hold is not None and hold.delay == 1.0, "tried without failing: a new run"


def test_a_job_with_two_holds_shows_the_stronger_and_then_the_other() -> None:
    r = Rig()
    r.queue.calls_done(r.queue.close_gate("default/a", ["v"]), "refused")  # 1 s, to t=1
    r.queue.calls_done(r.queue.close_gate("default/a", ["v"]), "refused")  # 2 s, to t=2
    r.at(0.5).view()
    r.queue.after_cycle(session_failing("default/a"), 0, 0.5)  # error, to t=1.5
    hold = r.at(1.0).hold()
    assert hold is not None and hold.kind is HoldKind.ERROR
    hold = r.at(1.6).hold()
    assert hold is not None and hold.kind is HoldKind.NO_PREEMPTION
    assert r.at(2.0).hold() is None
    assert not HoldKind.NO_PREEMPTION.blocks_placement
    assert all(k.blocks_placement for k in HoldKind if k is not HoldKind.NO_PREEMPTION)


@pytest.mark.parametrize(
    ("generation", "fresh", "t", "parked"),
    [
        (5, frozenset(), 10.0, True),
        (6, frozenset(), 10.0, False),
        (5, frozenset({"default/a"}), 10.0, False),
        (5, frozenset({"default/b"}), 10.0, True),
        (5, frozenset(), 305.0, False),
    ],
    ids=["nothing-changed", "the-cluster-changed", "fresh-pod", "another-jobs-pod", "5-min"],
)
def test_a_job_left_unschedulable_is_parked_until_something_could_help(
    generation: int, fresh: frozenset[str], t: float, parked: bool
) -> None:
    r = Rig()
    session = cached_session([node("n1", cpu="1"), pod("a", cpu="4")])
    job = session.jobs["default/a"]
    session.record_job_reason(job, reasons.gang_not_ready("too big"))
    for task in job.tasks.values():
        told = reasons.nodes_unavailable("0/1 nodes are available: 1 Insufficient cpu.")
        session.record_task_reason(task, told)
    r.view(5)
    r.queue.after_cycle(session, 5, 0.0)
    hold = r.at(t).view(generation, fresh).holds.get("default/a")
    assert (hold is not None) is parked
    if hold is not None:
        assert hold.kind is HoldKind.PARKED and hold.told == reasons.gang_not_ready("too big")
        assert r.queue.next_deadline(t) == math.inf, "a parked job's retry wakes nobody"


def test_one_backoff_policy() -> None:
    policy = BackoffPolicy()
    delays = [policy.after(None)]
    for _ in range(8):
        delays.append(policy.after(delays[-1]))
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    with pytest.raises(ValueError, match="first <= longest"):
        BackoffPolicy(first=5, longest=1)


# Dissolve's clock: since when each gang runs below its minimum -------------------------


def gang_jobs(running: int) -> Mapping[str, JobInfo]:
    """The jobs of a snapshot holding gang ``default/g`` (minMember 2) with ``running``
    members running."""
    members = [pod(f"g-{i}", node="n1", group="g") for i in range(running)]
    cache = cache_with(node("n1"), pod_group("g", min_member=2), *members)
    return cache.snapshot().jobs


BROKEN, WHOLE = gang_jobs(1), gang_jobs(2)


@pytest.mark.parametrize(
    ("seen", "since"),
    [
        ([(0, BROKEN)], 0.0),
        ([(0, BROKEN), (5, BROKEN), (9, BROKEN)], 0.0),
        ([(0, WHOLE), (5, BROKEN), (9, BROKEN)], 5.0),
        ([(0, BROKEN), (5, WHOLE), (9, BROKEN)], 9.0),
        ([(0, BROKEN), (5, WHOLE)], None),
        ([(0, BROKEN), (5, {})], None),
    ],
    ids=["first-seen", "counted-on", "from-the-first-broken", "a-break-restarts", "ended", "gone"],
)
def test_the_queue_counts_since_when_a_gang_runs_below_its_minimum(
    seen: list[tuple[float, Mapping[str, JobInfo]]], since: float | None
) -> None:
    """The ``dissolve`` action's clock is the queue's: each view goes on from the last
    one (a queue that forgot it would start every count afresh, and never dissolve)."""
    rig = Rig()
    for t, jobs in seen:
        view = rig.at(t).view(jobs=jobs)
    assert view.below_minimum_since.get("default/g") == since
