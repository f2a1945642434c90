"""JobInfo: when a running gang is below its minimum (what the ``dissolve`` action acts on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from scheduler.api.group_apis import VOLCANO
from scheduler.api.task import TaskStatus as S
from tests.builders import gang_of

R, B, P, L, A, SUCC, F, PIPE = (
    S.RUNNING,
    S.BOUND,
    S.PENDING,
    S.RELEASING,
    S.ALLOCATED,
    S.SUCCEEDED,
    S.FAILED,
    S.PIPELINED,
)
LF = "releasing, the eviction call in flight"
"""A member the scheduler assumed evicted whose deletion the API has not shown yet (in
the other rows, a releasing member has its ``deletionTimestamp``)."""


@pytest.mark.parametrize(
    ("statuses", "min_member", "expected"),
    [
        pytest.param([R, R, R], 3, False, id="whole"),
        pytest.param([R, R, L], 3, True, id="one-being-evicted"),
        pytest.param([R, R, LF], 3, False, id="one-eviction-call-in-flight"),
        pytest.param([R, L, LF], 3, False, id="one-gone-one-call-in-flight"),
        pytest.param([R, L, L], 3, True, id="the-batch-gang-of-the-soak"),
        pytest.param([R, R], 3, True, id="one-deleted"),
        pytest.param([R, R, P], 3, True, id="replacement-pending"),
        pytest.param([R, R, F], 3, True, id="one-failed"),
        pytest.param([R, R, A], 3, False, id="replacement-placed"),
        pytest.param([B, R, PIPE], 3, False, id="replacement-nominated"),
        pytest.param([L, L, L], 3, False, id="all-being-evicted"),
        pytest.param([P, P, P], 3, False, id="never-started"),
        pytest.param([A, A, P], 3, False, id="being-placed-nothing-running"),
        pytest.param([R, SUCC, R], 4, False, id="finishing"),
        pytest.param([R, R, R, P], 3, False, id="elastic-spare-pending"),
        pytest.param([R], 1, False, id="min-one"),
    ],
)
def test_runs_below_minimum(statuses: Sequence[S | str], min_member: int, expected: bool) -> None:
    """A gang is broken only on what is settled: a member whose eviction call may still
    fail leaves it undecided (the scheduler must not dissolve a gang that its own
    preemption, failing, would leave whole)."""
    job = gang_of(VOLCANO, [L if s == LF else S(s) for s in statuses], min_member)
    for task, status in zip(job.tasks.values(), statuses, strict=True):
        task.terminating = status == L
    assert job.runs_below_minimum() is expected


@pytest.mark.parametrize(
    ("roles", "min_task_member", "min_member", "expected"),
    [
        pytest.param({"ps": R, "w1": R, "w2": R}, {"ps": 1, "worker": 2}, 3, False, id="whole"),
        pytest.param(
            {"ps": F, "w1": R, "w2": R, "w3": R}, {"ps": 1, "worker": 2}, 3, True, id="role-short"
        ),
        pytest.param({"ps": R, "w1": R, "w2": P}, {"ps": 1, "worker": 1}, 2, False, id="roles-met"),
        pytest.param(
            {"ps": L, "w1": R, "w2": R}, {"ps": 1, "worker": 2}, 3, True, id="role-being-evicted"
        ),
        pytest.param(
            {"ps": L, "w1": R, "w2": R}, {"ps": 1, "worker": 2}, 2, False, id="elastic-by-count"
        ),
    ],
)
def test_runs_below_minimum_by_role(
    roles: Mapping[str, S], min_task_member: Mapping[str, int], min_member: int, expected: bool
) -> None:
    """A role below its minTaskMember breaks the gang, unless the gang is elastic (its
    minMember below the sum of the roles' minimums: only the count binds)."""
    job = gang_of(VOLCANO, list(roles.values()), min_member)
    job.min_task_member = dict(min_task_member)
    for task, name in zip(job.tasks.values(), roles, strict=True):
        task.role = "ps" if name == "ps" else "worker"
        task.terminating = task.status is L
    assert job.runs_below_minimum() is expected


def test_a_lone_pod_never_runs_below_its_minimum() -> None:
    job = gang_of(VOLCANO, [R], 2)
    job.has_pod_group = False
    assert not job.runs_below_minimum()
