"""The scheduling.k8s.io/v1alpha2 PodGroup in, and the PodGroupScheduled condition as
kube-scheduler writes it out (scheduler.api.group_apis.kubernetes)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.core_objects import task_from_pod
from scheduler.api.errors import InvalidInputError
from scheduler.api.group_apis import KUBERNETES, kubernetes
from scheduler.api.job import JobInfo, PodGroupPhase, TopologyConstraint
from scheduler.api.task import TaskStatus
from tests.builders import api_pod_group, gang_of, pod

NOW = "2026-11-26T10:00:00Z"
GANG = {"schedulingPolicy": {"gang": {"minCount": 3}}}


def _convert(spec: dict[str, Any]) -> Any:
    return kubernetes.job_from_pod_group(api_pod_group(KUBERNETES, "pg", spec), {"hi": 7})


@pytest.mark.parametrize(
    ("spec", "field", "expected"),
    [
        (GANG, "uid", "kubernetes:default/pg"),
        (GANG, "min_member", 3),
        (GANG, "phase", PodGroupPhase.INQUEUE),
        ({**GANG, "priority": 50, "priorityClassName": "hi"}, "priority", 50),
        ({**GANG, "priorityClassName": "hi"}, "priority", 7),
        (
            {**GANG, "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]}},
            "topology",
            TopologyConstraint("", required_level="example.com/rack"),
        ),
    ],
    ids=["job-id", "min-count", "admitted", "priority", "priority-class", "topology-key"],
)
def test_gang_converts(spec: dict[str, Any], field: str, expected: Any) -> None:
    assert getattr(_convert(spec).value, field) == expected


def test_basic_is_not_a_gang() -> None:
    assert _convert({"schedulingPolicy": {"basic": {}}}).value is None


@pytest.mark.parametrize(
    ("spec", "note"),
    [
        ({**GANG, "disruptionMode": "PodGroup"}, "spec.disruptionMode PodGroup is not honoured"),
        ({**GANG, "resourceClaims": [{"name": "c"}]}, "spec.resourceClaims are not honoured"),
        (
            {**GANG, "schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}},
            "only the first of spec.schedulingConstraints.topology is honoured",
        ),
    ],
    ids=["disruption-mode", "resource-claims", "two-topology-keys"],
)
def test_unhonoured_fields_are_told(spec: dict[str, Any], note: str) -> None:
    notes = _convert(spec).notes
    assert len(notes) == 1 and note in notes[0]


def test_unknown_priority_class_is_refused() -> None:
    with pytest.raises(InvalidInputError) as raised:
        _convert({**GANG, "priorityClassName": "missing"})
    assert raised.value.field == "spec.priorityClassName"


def _gang(statuses: list[TaskStatus], min_count: int = 2) -> JobInfo:
    return gang_of(KUBERNETES, statuses, min_count)


P, B, F = TaskStatus.PENDING, TaskStatus.BINDING, TaskStatus.FAILED
TRUE = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": ""}


@pytest.mark.parametrize(
    ("statuses", "reason", "previous", "conditions", "phase"),
    [
        ([P], "why", {}, [], PodGroupPhase.INQUEUE),
        (
            [P, P],
            "why",
            {},
            [
                {
                    "type": "PodGroupScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "why",
                    "lastTransitionTime": NOW,
                }
            ],
            PodGroupPhase.INQUEUE,
        ),
        ([B, B], None, {}, [{**TRUE, "lastTransitionTime": NOW}], PodGroupPhase.RUNNING),
        (
            [P, F, P],
            "why",
            {"conditions": [{**TRUE, "lastTransitionTime": "then"}]},
            [{**TRUE, "lastTransitionTime": "then"}],
            PodGroupPhase.INQUEUE,
        ),
    ],
    ids=[
        "lacks-members-says-nothing",
        "unschedulable",
        "scheduled",
        "first-decision-stands",
    ],
)
def test_gang_status(
    statuses: list[TaskStatus],
    reason: str | None,
    previous: dict[str, Any],
    conditions: list[dict[str, Any]],
    phase: PodGroupPhase,
) -> None:
    status, got = kubernetes.gang_status(_gang(statuses), reason, NOW, previous)
    assert status.get("conditions", []) == conditions
    assert got is phase


def test_basic_status_true_once_one_pod_is_placed() -> None:
    pending = task_from_pod(pod("a"))
    placed = task_from_pod(pod("b"))
    placed.status = TaskStatus.BINDING
    waiting = kubernetes.basic_status([pending], {pending.uid: "no room"}, NOW, {})
    assert waiting["conditions"][0]["status"] == "False"
    assert waiting["conditions"][0]["message"] == "no room"
    done = kubernetes.basic_status([pending, placed], {pending.uid: "no room"}, NOW, waiting)
    assert done["conditions"] == [{**TRUE, "lastTransitionTime": NOW}]
