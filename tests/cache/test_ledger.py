"""scheduler/cache/ledger.py: the seam between ingest and the ledger. A pod's event makes
a new task; :meth:`Ledger.keep_assumptions` writes onto it what is assumed and the event
does not show yet, and ends what the event shows; :meth:`Ledger.pod_gone` ends all."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.api.core_objects import task_from_pod
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from tests.builders import cache_with, node, pod

Obj = dict[str, Any]
UID = "default/p"


def pending(**kw: Any) -> Obj:
    return pod("p", **kw)


def running(**kw: Any) -> Obj:
    return pod("p", node="n1", **kw)


def terminating(raw: Obj) -> Obj:
    out = copy.deepcopy(raw)
    out["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return out


def assume(cache: SchedulerCache, what: str) -> None:
    """Assume ``what`` of pod p: ``bind`` (to n1, with an annotation), ``evict``,
    ``nominate`` (to n1), or ``""`` (nothing)."""
    if what == "bind":
        cache.ledger.assume_bind(UID, "n1", {"device": "0"})
    elif what == "evict":
        cache.ledger.assume_evict(UID)
    elif what == "nominate":
        cache.ledger.assume_nomination(UID, "n1")


def event_task(cache: SchedulerCache, raw: Obj) -> TaskInfo:
    """The task ingest makes from ``raw`` before asking the ledger (a pod of ours)."""
    task = task_from_pod(raw, job_id=UID)
    task.sluice = True
    return task


CASES = [
    # (before, assumed, the event, (status after, node after, the annotation kept))
    (pending(), "bind", pending(), (TaskStatus.BINDING, "n1", True)),
    (pending(), "bind", running(phase="Pending"), (TaskStatus.BOUND, "n1", False)),
    (running(), "evict", running(), (TaskStatus.RELEASING, "n1", False)),
    (running(), "evict", terminating(running()), (TaskStatus.RELEASING, "n1", False)),
    (pending(), "nominate", pending(), (TaskStatus.PIPELINED, "n1", False)),
    (pending(), "nominate", running(phase="Pending"), (TaskStatus.BOUND, "n1", False)),
    (pending(), "", pending(), (TaskStatus.PENDING, "", False)),
    (running(), "", running(), (TaskStatus.RUNNING, "n1", False)),
]
IDS = [
    "bind-older-event-keeps-it",
    "bind-shown-by-the-event",
    "evict-older-event-keeps-it",
    "evict-shown-terminating",
    "nomination-older-event-keeps-it",
    "nomination-overtaken-by-a-bind",
    "nothing-assumed",
    "nothing-assumed-running",
]


@pytest.mark.parametrize(("before", "assumed", "event", "expected"), CASES, ids=IDS)
def test_an_event_keeps_what_is_assumed_and_not_shown(
    before: Obj, assumed: str, event: Obj, expected: tuple[TaskStatus, str, bool]
) -> None:
    cache = cache_with(node("n1"), before)
    assume(cache, assumed)
    old = cache.tasks[UID]
    task = event_task(cache, event)
    cache.ledger.keep_assumptions(old, task)
    kept = "device" in (task.annotations or {})
    assert (task.status, task.node_name, kept) == expected


@pytest.mark.parametrize(
    ("before", "assumed", "event"),
    [
        (pending(), "bind", running(phase="Pending")),
        (running(), "evict", terminating(running())),
        (pending(), "nominate", running(phase="Pending")),
    ],
    ids=["bind", "evict", "nomination"],
)
def test_what_an_event_shows_is_no_longer_in_flight(before: Obj, assumed: str, event: Obj) -> None:
    """Once an event showed it, a later event that does not (a stale relist) undoes it."""
    cache = cache_with(node("n1"), before)
    assume(cache, assumed)
    cache.ledger.keep_assumptions(cache.tasks[UID], event_task(cache, event))
    stale = event_task(cache, before)
    cache.ledger.keep_assumptions(None, stale)
    assert stale.status is event_task(cache, before).status


@pytest.mark.parametrize("assumed", ["evict", "nominate"], ids=["evict", "nomination"])
def test_a_pod_gone_ends_what_was_in_flight(assumed: str) -> None:
    before = running() if assumed == "evict" else pending()
    cache = cache_with(node("n1"), before)
    assume(cache, assumed)
    cache.ledger.pod_gone(UID)
    again = event_task(cache, before)  # the same name and uid made anew
    cache.ledger.keep_assumptions(None, again)
    assert again.status is event_task(cache, before).status
