"""The snapshot's index of the jobs with a pod to place (``Snapshot.to_place``, made by
the cache's snapshot builder from the tasks) and the session's ``jobs_to_place``: the
only jobs the actions that place, preempt, reclaim or reserve for look at.

A table of job states says which jobs are in; the index must equal a walk of the jobs
(also checked after any sequence of events and cycles in
tests/cache/test_incremental_snapshot.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.task_states import TO_PLACE
from scheduler.app import builtin_registry
from scheduler.config import SchedulerConfiguration
from scheduler.framework.session import open_session
from tests.builders import cache_with, node, pod, pod_group, snapshot_of

Obj = dict[str, Any]
RESOLVED = builtin_registry().resolve(SchedulerConfiguration())


def walk(snap: Snapshot) -> set[str]:
    """The jobs with a task of Sluice's to place, found by visiting every job."""
    return {
        uid
        for uid, job in snap.jobs.items()
        if any(t.sluice and t.status in TO_PLACE for t in job.tasks.values())
    }


def _nominated(name: str) -> Obj:
    obj = pod(name)
    obj["status"]["nominatedNodeName"] = "n1"
    return obj


# (id, objects, the job's uid, in the index?)
CASES = [
    ("a pending pod", [pod("p")], "default/p", True),
    ("a running pod", [pod("p", node="n1")], "default/p", False),
    ("a pod that succeeded", [pod("p", node="n1", phase="Succeeded")], "default/p", False),
    ("a pod that failed", [pod("p", node="n1", phase="Failed")], "default/p", False),
    ("a gated pod", [pod("p", schedulingGates=[{"name": "kueue"}])], "default/p", True),
    ("a nominated pod", [_nominated("p")], "default/p", True),
    ("another scheduler's pending pod", [pod("p", scheduler="other")], "default/p", False),
    (
        "a gang: one running, one pending",
        [pod_group("g", min_member=2), pod("a", group="g", node="n1"), pod("b", group="g")],
        "default/g",
        True,
    ),
    (
        "a gang all running",
        [
            pod_group("g", min_member=2),
            pod("a", group="g", node="n1"),
            pod("b", group="g", node="n1"),
        ],
        "default/g",
        False,
    ),
    ("a gang without pods yet", [pod_group("g", min_member=2)], "default/g", False),
]


@pytest.mark.parametrize(
    ("objects", "job", "expected"), [pytest.param(o, j, e, id=i) for i, o, j, e in CASES]
)
def test_which_jobs_have_a_pod_to_place(objects: list[Obj], job: str, expected: bool) -> None:
    cache = cache_with(node("n1", cpu="8"), *objects)
    snap = cache.snapshot()
    assert snap.to_place is not None
    assert job in snap.jobs or not expected  # another scheduler's lone pod makes no job
    assert (job in snap.to_place) is expected
    assert snap.to_place == walk(snap)
    session = open_session(snap, RESOLVED)
    assert (job in {j.uid for j in session.jobs_to_place}) is expected


def test_a_snapshot_built_without_the_index_is_walked() -> None:
    """A snapshot not from the cache (the tests' builders, the simulator's checks) has no
    index: the session finds the same jobs by visiting them all."""
    snap = snapshot_of([node("n1")], [pod("a"), pod("b", node="n1"), pod("c")])
    assert snap.to_place is None
    session = open_session(snap, RESOLVED)
    assert [j.uid for j in session.jobs_to_place] == [
        u for u in snap.jobs if u in {"default/a", "default/c"}
    ]


def test_the_session_keeps_the_jobs_order() -> None:
    """The jobs to place come in the order of ``session.jobs`` (what walked them did)."""
    cache = cache_with(node("n1"), *(pod(f"p{i}", node="n1" if i % 2 else None) for i in range(9)))
    snap = cache.snapshot()
    session = open_session(snap, RESOLVED)
    assert [j.uid for j in session.jobs_to_place] == [u for u in snap.jobs if u in walk(snap)]
