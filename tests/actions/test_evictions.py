"""How many pods evictions make room for (scheduler.actions.evictions.needed_for_minimum):
what a gang lacks to reach its minimum, each role short of its minimum first, and only
minMember for an elastic gang."""

from __future__ import annotations

import pytest

from scheduler.actions.evictions import needed_for_minimum
from scheduler.api.core_objects import task_from_pod
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
from tests.builders import pod

P, R = TaskStatus.PENDING, TaskStatus.RUNNING


def gang(
    min_member: int, roles: dict[str, int], tasks: list[tuple[str, str, TaskStatus]]
) -> JobInfo:
    """A gang ``default/g`` of ``tasks``: (name, role, status)."""
    job = JobInfo(
        "default/g", "default", "g", "default", min_member, dict(roles), has_pod_group=True
    )
    for name, role, status in tasks:
        t: TaskInfo = task_from_pod(pod(name, group="g", role=role or None))
        t.status = status
        if status is R:
            t.node_name = "n1"
        job.add_task(t)
    return job


@pytest.mark.parametrize(
    ("job", "needed"),
    [
        (gang(3, {}, [("a", "", P), ("b", "", P), ("c", "", P), ("d", "", P)]), ["a", "b", "c"]),
        (gang(3, {}, [("a", "", R), ("b", "", P), ("c", "", P), ("d", "", P)]), ["b", "c"]),
        (
            gang(
                3,
                {"ps": 1, "w": 2},
                [("w0", "w", P), ("w1", "w", P), ("w2", "w", P), ("ps", "ps", P)],
            ),
            ["w0", "w1", "ps"],
        ),
        (gang(3, {"w": 6}, [(f"w{i}", "w", P) for i in range(6)]), ["w0", "w1", "w2"]),
        (
            gang(
                2,
                {"ps": 1, "w": 4},
                [("w0", "w", P), ("w1", "w", P), ("w2", "w", P), ("ps", "ps", P)],
            ),
            ["w0", "w1"],
        ),
    ],
    ids=[
        "min-member",
        "counts-placed",
        "role-short-first",
        "elastic-min-member-only",
        "elastic-no-role-first",
    ],
)
def test_room_is_made_for_the_minimum(job: JobInfo, needed: list[str]) -> None:
    pending = [t for t in job.tasks.values() if t.status is P]
    assert [t.name for t in needed_for_minimum(job, pending)] == needed
