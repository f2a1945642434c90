"""Tests of scheduler.plugins.gang: valid, ready, pipelined and starving, with minTaskMember."""

from __future__ import annotations

import pytest

from scheduler.api.core_objects import task_from_pod
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskStatus
from scheduler.plugins.gang import job_key, job_pipelined, job_ready, job_starving, job_valid
from tests.builders import pod

S = TaskStatus
P, A, PL, R, F, B = S.PENDING, S.ALLOCATED, S.PIPELINED, S.RUNNING, S.FAILED, S.BINDING
G = S.GATED


def job(
    min_member: int,
    tasks: list[tuple[str, TaskStatus]],
    min_task_member: dict[str, int] | None = None,
) -> JobInfo:
    """A gang ``default/g`` with one task per (role, status)."""
    j = JobInfo(
        uid="default/g",
        namespace="default",
        name="g",
        queue="default",
        min_member=min_member,
        min_task_member=dict(min_task_member or {}),
        has_pod_group=True,
    )
    for i, (role, status) in enumerate(tasks):
        t = task_from_pod(pod(f"t{i}", group="g", role=role or None))
        t.status = status
        if status is G:
            t.scheduling_gates = ("kueue.x-k8s.io/admission",)
        j.add_task(t)
    return j


HELD_2 = (
    "pod group default/g has 1 pod(s) ready to schedule and 2 held by scheduling gates "
    "(kueue.x-k8s.io/admission), fewer than its minMember 2"
)


@pytest.mark.parametrize(
    ("gang", "reason"),
    [
        (job(2, [("", P), ("", P)]), None),
        (
            job(3, [("", P), ("", P)]),
            "pod group default/g has 2 pod(s), fewer than its minMember 3",
        ),
        (
            job(2, [("", R), ("", F)]),
            "pod group default/g has 1 pod(s), fewer than its minMember 2",
        ),
        (job(0, []), None),
        (job(3, [("ps", P), ("worker", P), ("worker", P)], {"ps": 1, "worker": 2}), None),
        (
            job(3, [("worker", P), ("worker", P), ("worker", P)], {"ps": 1, "worker": 2}),
            "pod group default/g has 0 pod(s) of role 'ps', fewer than its minTaskMember 1",
        ),
        (
            job(2, [("ps", F), ("worker", P), ("worker", P)], {"ps": 1}),
            "pod group default/g has 0 pod(s) of role 'ps', fewer than its minTaskMember 1",
        ),
        (
            job(3, [("a", P), ("c", P), ("c", P)], {"b": 1, "a": 2}),
            "pod group default/g has 1 pod(s) of role 'a', fewer than its minTaskMember 2",
        ),
        (job(3, [("w", P), ("w", P), ("w", P)], {"w": 6}), None),
        (
            job(3, [("w", P), ("w", P)], {"w": 6}),
            "pod group default/g has 2 pod(s), fewer than its minMember 3",
        ),
        (job(2, [("", P), ("", G), ("", G)]), HELD_2),
        (job(2, [("", P), ("", P), ("", G)]), None),
        (job(1, [("", R), ("", G)]), None),
        (
            job(2, [("ps", G), ("worker", P), ("worker", P)], {"ps": 1}),
            "pod group default/g has 0 pod(s) of role 'ps' ready to schedule and 1 held by "
            "scheduling gates (kueue.x-k8s.io/admission), fewer than its minTaskMember 1",
        ),
    ],
    ids=[
        "enough",
        "too-few",
        "failed-do-not-count",
        "empty-gang-of-zero",
        "roles-met",
        "role-missing",
        "failed-role-member",
        "roles-checked-in-name-order",
        "elastic-counts-min-member-only",
        "elastic-still-needs-min-member",
        "waits-for-gated-members",
        "enough-without-the-gated-one",
        "running-member-counts",
        "gated-role",
    ],
)
def test_job_valid(gang: JobInfo, reason: str | None) -> None:
    status = job_valid(gang)
    assert (None if status.ok else status.message) == reason
    assert status.plugin == ("" if status.ok else "gang")


@pytest.mark.parametrize(
    ("gang", "ready", "pipelined", "starving"),
    [
        (job(2, [("", P), ("", P)]), False, False, True),
        (job(2, [("", A), ("", P)]), False, False, True),
        (job(2, [("", A), ("", A)]), True, True, False),
        (job(2, [("", A), ("", B), ("", P)]), True, True, False),  # more than minMember pending
        (job(2, [("", R), ("", S.SUCCEEDED)]), True, True, False),
        (job(2, [("", A), ("", PL)]), False, True, False),
        (job(2, [("", S.RELEASING), ("", A)]), False, False, False),
        (
            job(
                3, [("ps", A), ("worker", A), ("worker", A), ("worker", P)], {"ps": 1, "worker": 2}
            ),
            True,
            True,
            False,
        ),
        # enough tasks placed, but the ps role is short: not ready
        (
            job(
                3, [("ps", P), ("worker", A), ("worker", A), ("worker", A)], {"ps": 1, "worker": 2}
            ),
            False,
            False,
            True,
        ),
        (
            job(3, [("ps", PL), ("worker", A), ("worker", A)], {"ps": 1, "worker": 2}),
            False,
            True,
            False,
        ),
        (job(1, [("worker", A), ("ps", P)], {"ps": 1}), False, False, True),
        (job(3, [("w", A)] * 3 + [("w", P)] * 3, {"w": 6}), True, True, False),
        (job(3, [("w", A), ("w", A), ("w", PL)] + [("w", P)] * 3, {"w": 6}), False, True, False),
    ],
    ids=[
        "all-pending",
        "partly-placed",
        "placed",
        "placed-with-extra-pending",
        "running-and-succeeded",
        "pipelined-completes",
        "releasing-does-not-count",
        "roles-met",
        "ps-short",
        "ps-pipelined",
        "min-member-met-role-short",
        "elastic-ready-at-min-member",
        "elastic-pipelined-at-min-member",
    ],
)
def test_ready_pipelined_starving(
    gang: JobInfo, ready: bool, pipelined: bool, starving: bool
) -> None:
    assert bool(job_ready(gang)) is ready
    assert bool(job_pipelined(gang)) is pipelined
    assert job_starving(gang) is starving
    assert job_key(gang) == ((1 if ready else 0),)


def test_not_ready_jobs_order_first() -> None:
    ready, waiting = job(1, [("", A)]), job(1, [("", P)])
    assert sorted([ready, waiting], key=job_key) == [waiting, ready]


def test_other_schedulers_pods_are_not_pending_tasks() -> None:
    gang = job(1, [("", P)])
    next(iter(gang.tasks.values())).sluice = False
    assert job_starving(gang) is False


@pytest.mark.parametrize(
    ("gang", "message"),
    [
        (job(2, [("", A), ("", P)]), "1/2 tasks of gang default/g can be placed, minMember is 2"),
        (
            job(3, [("ps", P), ("worker", A), ("worker", A), ("worker", A)], {"ps": 1}),
            "0 tasks of role 'ps' of gang default/g can be placed, minTaskMember is 1",
        ),
        (job(1, [("", A)]), ""),
    ],
    ids=["too-few-placed", "role-short", "ready"],
)
def test_not_ready_says_how_many_can_be_placed(gang: JobInfo, message: str) -> None:
    """The status actions show users (pod reason, PodGroup condition) comes from the plugin."""
    assert job_ready(gang).message == message
