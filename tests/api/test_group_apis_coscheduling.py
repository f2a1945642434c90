"""scheduler-plugins' PodGroup in, and the status its controller writes out
(scheduler.api.group_apis.coscheduling)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.group_apis import SCHEDULER_PLUGINS, coscheduling
from scheduler.api.job import PodGroupPhase
from scheduler.api.task import TaskStatus
from tests.builders import api_pod_group, gang_of

NOW = "2026-11-26T10:00:00Z"


@pytest.mark.parametrize(
    ("spec", "kw", "field", "expected"),
    [
        ({"minMember": 3}, {}, "uid", "scheduler-plugins:default/pg"),
        ({"minMember": 3}, {}, "min_member", 3),
        ({"minResources": {"cpu": "2"}}, {}, "min_resources", {"cpu": 2000}),
        ({"scheduleTimeoutSeconds": 10}, {}, "min_member", 0),
        ({}, {}, "queue", "default"),
        ({}, {"labels": {L.QUEUE_LABEL: "team"}}, "queue", "team"),
        ({}, {}, "phase", PodGroupPhase.PENDING),
        ({}, {"status": {"phase": "Scheduling"}}, "phase", PodGroupPhase.INQUEUE),
        ({}, {"status": {"phase": "Running"}}, "phase", PodGroupPhase.RUNNING),
        ({}, {"status": {"phase": "Finished"}}, "phase", PodGroupPhase.COMPLETED),
    ],
    ids=[
        "job-id",
        "min-member",
        "min-resources",
        "schedule-timeout-accepted",
        "queue-default",
        "queue-label",
        "no-phase-is-pending",
        "scheduling-is-admitted",
        "running",
        "finished-is-completed",
    ],
)
def test_pod_group_converts(
    spec: dict[str, Any], kw: dict[str, Any], field: str, expected: Any
) -> None:
    job = coscheduling.job_from_pod_group(
        api_pod_group(SCHEDULER_PLUGINS, "pg", spec, **kw), {}
    ).value
    value = getattr(job, field)
    if field == "min_resources":
        value = dict(value.items())
    assert value == expected


P, B, R, S, F = (
    TaskStatus.PENDING,
    TaskStatus.BINDING,
    TaskStatus.RUNNING,
    TaskStatus.SUCCEEDED,
    TaskStatus.FAILED,
)


@pytest.mark.parametrize(
    ("statuses", "before", "phase", "domain"),
    [
        ([], "", "Pending", PodGroupPhase.INQUEUE),
        ([P, P], "", "Pending", PodGroupPhase.INQUEUE),
        ([P, P, P], "Pending", "Scheduling", PodGroupPhase.INQUEUE),
        ([B, B, B], "Scheduling", "Scheduling", PodGroupPhase.INQUEUE),
        ([R, R, B], "Scheduling", "Scheduling", PodGroupPhase.INQUEUE),
        ([R, R, R], "Scheduling", "Running", PodGroupPhase.RUNNING),
        ([S, S, R], "Running", "Running", PodGroupPhase.RUNNING),
        ([S, S, S], "Running", "Finished", PodGroupPhase.COMPLETED),
        ([F, R, S], "Running", "Failed", PodGroupPhase.COMPLETED),
        ([P], "Finished", "Finished", PodGroupPhase.COMPLETED),
    ],
    ids=[
        "no-pods",
        "fewer-pods-than-min",
        "enough-pods-scheduling",
        "bound-not-running-yet",
        "two-running",
        "all-running",
        "succeeded-count",
        "finished",
        "failed",
        "finished-stays",
    ],
)
def test_status_as_the_controller_writes_it(
    statuses: list[TaskStatus], before: str, phase: str, domain: PodGroupPhase
) -> None:
    job = gang_of(SCHEDULER_PLUGINS, statuses, 3)
    previous = {"phase": before} if before else {}
    status, got = coscheduling.pod_group_status(job, NOW, previous)
    assert status["phase"] == phase
    assert got is domain
    assert (status["running"], status["succeeded"], status["failed"]) == (
        statuses.count(R),
        statuses.count(S),
        statuses.count(F),
    )
    assert ("scheduleStartTime" in status) is (phase != "Pending")
