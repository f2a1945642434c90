"""Volcano's PodGroup and Queue in, and the status Volcano writes out
(scheduler.api.group_apis.volcano)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.errors import InvalidInputError
from scheduler.api.group_apis import VOLCANO, volcano
from scheduler.api.group_apis.protocol import GroupEvent, QueueReport
from scheduler.api.job import JobInfo, PodGroupPhase, TopologyConstraint
from scheduler.api.membership import VOLCANO_TASK_SPEC
from scheduler.api.task import TaskStatus
from tests.builders import api_pod_group, gang_of, volcano_queue

CLASSES = {"high": 1000}
NOW = "2026-11-26T10:00:00Z"
EARLIER = "2026-11-26T09:00:00Z"


def _job(spec: dict[str, Any], **kw: Any) -> JobInfo:
    return volcano.job_from_pod_group(
        api_pod_group(VOLCANO, "pg", spec, ns="ml", **kw), CLASSES
    ).value


def _sub_group(role: str, size: int, groups: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": role,
        "labelSelector": {"matchLabels": {VOLCANO_TASK_SPEC: role}},
        "subGroupSize": size,
        "minSubGroups": groups,
        **extra,
    }


@pytest.mark.parametrize(
    ("spec", "kw", "field", "expected"),
    [
        ({"minMember": 3}, {}, "uid", "volcano:ml/pg"),
        ({"minMember": 3}, {}, "queue", "default"),
        ({"minMember": 3, "queue": "team"}, {}, "queue", "team"),
        ({}, {}, "min_member", 0),
        ({"minTaskMember": {"ps": 1, "worker": 2}}, {}, "min_task_member", {"ps": 1, "worker": 2}),
        (
            {"minTaskMember": {"worker": 2}, "subGroupPolicy": [_sub_group("worker", 2, 2)]},
            {},
            "min_task_member",
            {"worker": 4},
        ),
        (
            {"minTaskMember": {"worker": 8}, "subGroupPolicy": [_sub_group("worker", 2, 2)]},
            {},
            "min_task_member",
            {"worker": 8},
        ),
        ({"minResources": {"cpu": "3"}}, {}, "min_resources", {"cpu": 3000}),
        ({"priorityClassName": "high"}, {}, "priority", 1000),
        ({}, {"status": {"phase": "Inqueue"}}, "phase", PodGroupPhase.INQUEUE),
        ({}, {"status": {"phase": "Unknown"}}, "phase", PodGroupPhase.UNKNOWN),
        ({}, {"status": {"phase": "Nonsense"}}, "phase", PodGroupPhase.PENDING),
        (
            {"networkTopology": {"mode": "hard", "highestTierAllowed": 2}},
            {},
            "topology",
            TopologyConstraint("", tier=2),
        ),
        (
            {"networkTopology": {"mode": "soft", "highestTierAllowed": 1}},
            {},
            "topology",
            TopologyConstraint("", tier=1, soft=True),
        ),
        (
            {"networkTopology": {"highestTierName": "rack"}},
            {"annotations": {L.TOPOLOGY_ANNOTATION: "dc"}},
            "topology",
            TopologyConstraint("dc", tier_name="rack"),
        ),
        ({"networkTopology": {"mode": "hard"}}, {}, "topology", None),
    ],
    ids=[
        "job-id",
        "queue-default",
        "queue",
        "min-member-absent-is-zero",
        "min-task-member",
        "sub-group-raises-a-role-minimum",
        "sub-group-below-min-task-member",
        "min-resources",
        "priority-class",
        "phase-inqueue",
        "phase-unknown",
        "phase-unknown-value-is-pending",
        "network-topology-hard",
        "network-topology-soft",
        "network-topology-tier-name-and-topology-annotation",
        "network-topology-without-a-tier",
    ],
)
def test_pod_group_converts(
    spec: dict[str, Any], kw: dict[str, Any], field: str, expected: Any
) -> None:
    value = getattr(_job(spec, **kw), field)
    if field == "min_resources":
        value = dict(value.items())
    assert value == expected


@pytest.mark.parametrize(
    ("name", "counted"),
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("nvidia.com/gpu", True),
        ("hugepages-2Mi", True),
        ("example.kubernetes.io/widget", True),
        ("attachable-volumes-csi-x", True),
        ("pods", True),
        ("count/pods", False),
        ("count/jobs.batch.volcano.sh", False),
        ("requests.cpu", False),
        ("requests.memory", False),
        ("limits.cpu", False),
        ("requests.nvidia.com/gpu", False),
        ("requests.ephemeral-storage", False),
        ("widgets", False),
        ("not a/name!", False),
    ],
)
def test_min_resources_count_what_volcano_counts(name: str, counted: bool) -> None:
    assert volcano.counted_resource(name) is counted


def test_min_resources_as_volcanos_job_controller_writes_them() -> None:
    """calcPGMinResources for example/job.yaml (3 pods of 1 CPU first): quota names beside
    plain ones; only the plain ones count, as in Volcano's NewResource."""
    written = {"count/pods": "3", "cpu": "3", "pods": "3", "requests.cpu": "3"}
    assert dict(_job({"minMember": 3, "minResources": written}).min_resources) == {
        "cpu": 3000,
        "pods": 3,
    }
    gpus = {"nvidia.com/gpu": "2", "requests.nvidia.com/gpu": "2", "memory": "1Gi"}
    assert dict(_job({"minResources": gpus}).min_resources) == {
        "nvidia.com/gpu": 2,
        "memory": 1 << 30,
    }


@pytest.mark.parametrize(
    ("policy", "note"),
    [
        (
            {"name": "x", "labelSelector": {"matchLabels": {"app": "x"}}, "minSubGroups": 1},
            "spec.subGroupPolicy[0] is not honoured",
        ),
        (
            _sub_group("worker", 4, 1, matchLabelKeys=["volcano.sh/partition-id"]),
            "the partitions (matchLabelKeys) and their networkTopology are not honoured; "
            "task 'worker' needs 4 pod(s) in all",
        ),
    ],
    ids=["selector-not-a-task", "partitions"],
)
def test_sub_group_policy_not_honoured_is_told(policy: dict[str, Any], note: str) -> None:
    converted = volcano.job_from_pod_group(
        api_pod_group(VOLCANO, "pg", {"subGroupPolicy": [policy]}), CLASSES
    )
    assert len(converted.notes) == 1
    assert note in converted.notes[0]
    assert "PodGroup default/pg (scheduling.volcano.sh/v1beta1)" in converted.notes[0]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priorityClassName": "missing"}, "spec.priorityClassName"),
        ({"networkTopology": {"highestTierAllowed": 0}}, "spec.networkTopology.highestTierAllowed"),
        ({"minResources": {"cpu": "lots"}}, "spec.minResources"),
    ],
    ids=["unknown-priority-class", "tier-zero", "bad-quantity"],
)
def test_pod_group_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        _job(spec)
    assert raised.value.field is not None and raised.value.field.startswith(field)
    assert "scheduling.volcano.sh/v1beta1" in raised.value.obj


@pytest.mark.parametrize(
    ("spec", "field", "expected"),
    [
        ({}, "weight", 1),
        ({"weight": 4}, "weight", 4),
        ({"capability": {"cpu": "0"}}, "capability", {"cpu": 0}),
        ({"deserved": {"cpu": "2"}}, "deserved", {"cpu": 2000}),
        ({"guarantee": {"resource": {"cpu": "1"}}}, "guarantee", {"cpu": 1000}),
        ({}, "reclaimable", True),
        ({"reclaimable": False}, "reclaimable", False),
        ({"parent": "root"}, "parent", ""),
        ({"parent": "eng"}, "parent", "eng"),
        ({"priority": 5}, "priority", 5),
    ],
    ids=[
        "weight-default",
        "weight",
        "capability-zero-closes",
        "deserved",
        "guarantee-resource",
        "reclaimable-default",
        "not-reclaimable",
        "parent-root-is-the-root",
        "parent",
        "priority",
    ],
)
def test_queue_converts(spec: dict[str, Any], field: str, expected: Any) -> None:
    q = volcano.queue_from_queue(volcano_queue("team", spec)).value
    assert q is not None
    value = getattr(q, field)
    if field == "guarantee":
        value = dict(value.items())
    assert value == expected


def test_queue_root_is_not_a_queue_and_unhonoured_fields_are_told() -> None:
    root = volcano.queue_from_queue(volcano_queue("root"))
    assert (root.value, root.notes) == (None, ())  # the root of the tree, nothing adjusted
    team = volcano.queue_from_queue(
        volcano_queue("team", {"affinity": {"nodeGroupAffinity": {}}, "dequeueStrategy": "fifo"})
    )
    assert [n.split(": ", 1)[1] for n in team.notes] == [
        "spec.affinity is not honoured",
        "spec.dequeueStrategy fifo is not honoured (jobs are ordered by priority, then creation)",
    ]
    hdrf = volcano_queue("root-eng-dev")
    hdrf["metadata"]["annotations"] = {
        "volcano.sh/hierarchy": "root/eng/dev",
        "volcano.sh/hierarchy-weights": "100/50/50",
    }
    assert [n.split(": ", 1)[1].split(":")[0] for n in volcano.queue_from_queue(hdrf).notes] == [
        "annotation volcano.sh/hierarchy is not honoured",
        "annotation volcano.sh/hierarchy-weights is not honoured",
    ]
    closed = volcano.queue_from_queue(volcano_queue("team", state="Closed")).value
    assert closed is not None and closed.state == "Closed"


def _gang(statuses: list[TaskStatus], min_member: int, phase: PodGroupPhase) -> JobInfo:
    return gang_of(VOLCANO, statuses, min_member, phase, ns="ml")


P, B, R, S, F, X = (
    TaskStatus.PENDING,
    TaskStatus.BINDING,
    TaskStatus.RUNNING,
    TaskStatus.SUCCEEDED,
    TaskStatus.FAILED,
    TaskStatus.RELEASING,
)


@pytest.mark.parametrize(
    ("statuses", "min_member", "before", "unschedulable", "phase"),
    [
        ([], 2, PodGroupPhase.PENDING, False, PodGroupPhase.PENDING),
        ([], 2, PodGroupPhase.INQUEUE, False, PodGroupPhase.INQUEUE),
        ([P, P], 2, PodGroupPhase.INQUEUE, True, PodGroupPhase.INQUEUE),
        ([B, R], 2, PodGroupPhase.INQUEUE, False, PodGroupPhase.RUNNING),
        ([R, X], 2, PodGroupPhase.RUNNING, False, PodGroupPhase.RUNNING),
        ([S, S], 2, PodGroupPhase.RUNNING, False, PodGroupPhase.COMPLETED),
        ([R, P], 2, PodGroupPhase.RUNNING, True, PodGroupPhase.UNKNOWN),
        ([R, P], 2, PodGroupPhase.RUNNING, False, PodGroupPhase.PENDING),
        ([S, F], 2, PodGroupPhase.RUNNING, False, PodGroupPhase.PENDING),
    ],
    ids=[
        "no-pods-pending",
        "no-pods-inqueue-stays",
        "pending-pods-inqueue-stays",
        "placed-is-running",
        "releasing-still-counts",
        "all-succeeded-is-completed",
        "running-but-short-and-unschedulable-is-unknown",
        "running-gang-short-goes-pending",
        "a-failed-pod-does-not-count",
    ],
)
def test_phase_as_volcano_computes_it(
    statuses: list[TaskStatus],
    min_member: int,
    before: PodGroupPhase,
    unschedulable: bool,
    phase: PodGroupPhase,
) -> None:
    assert volcano.phase_of(_gang(statuses, min_member, before), unschedulable) is phase


def test_pod_group_status_unschedulable_then_scheduled() -> None:
    job = _gang([P, P, P], 3, PodGroupPhase.INQUEUE)
    status, phase = volcano.pod_group_status(job, "0/2 nodes are available", NOW, {})
    assert phase is PodGroupPhase.INQUEUE
    assert status == {
        "phase": "Inqueue",
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": "3/3 tasks in gang unschedulable: 0/2 nodes are available",
                "transitionID": NOW,
                "lastTransitionTime": NOW,
            }
        ],
    }
    again, _ = volcano.pod_group_status(job, "0/2 nodes are available", "later", status)
    assert again == status  # unchanged: times and transition id kept
    for task in job.tasks.values():
        task.status = TaskStatus.RUNNING
    done, phase = volcano.pod_group_status(job, None, "later", status)
    assert phase is PodGroupPhase.RUNNING
    assert done["phase"] == "Running" and done["running"] == 3
    assert [c["type"] for c in done["conditions"]] == ["Unschedulable", "Scheduled"]
    scheduled = done["conditions"][1]
    assert (scheduled["reason"], scheduled["message"], scheduled["lastTransitionTime"]) == (
        "tasks in gang are ready to be scheduled",
        "",
        "later",
    )


def test_pod_group_status_without_pods_writes_no_condition() -> None:
    status, phase = volcano.pod_group_status(
        _gang([], 2, PodGroupPhase.INQUEUE), "whatever", NOW, {"conditions": []}
    )
    assert status == {"phase": "Inqueue", "running": 0, "succeeded": 0, "failed": 0}
    assert phase is PodGroupPhase.INQUEUE


def test_pod_group_status_not_admitted_says_why_without_pods() -> None:
    why = "minResources cpu 12 exceed what the cluster has idle"
    status, phase = volcano.pod_group_status(_gang([], 3, PodGroupPhase.PENDING), why, NOW, {})
    assert phase is PodGroupPhase.PENDING
    (cond,) = status["conditions"]
    assert (cond["type"], cond["reason"], cond["message"]) == (
        "Unschedulable",
        "NotEnoughResources",
        why,
    )
    assert volcano.events_of(status, {}) == (GroupEvent("Warning", "Unschedulable", why),)
    assert volcano.events_of(status, status) == ()  # said once


def test_pod_group_status_error_reason() -> None:
    status, _ = volcano.pod_group_status(
        _gang([P], 1, PodGroupPhase.INQUEUE), "plugin x failed", NOW, {}, error=True
    )
    assert status["conditions"][0]["reason"] == L.REASON_SCHEDULER_ERROR


def test_queue_status_counts_pod_groups_by_phase_and_allocation() -> None:
    running = _gang([R, R], 2, PodGroupPhase.RUNNING)
    waiting = _gang([P], 1, PodGroupPhase.INQUEUE)
    waiting.uid = "volcano:ml/other"
    report = QueueReport(
        "team", "Open", [running, waiting], {running.uid: PodGroupPhase.RUNNING}, {}
    )
    status = volcano.queue_status(report)
    assert status == {
        "state": "Open",
        "allocated": {"cpu": "200m", "memory": "200Mi", "pods": "2"},
        "pending": 0,
        "inqueue": 1,
        "running": 1,
        "unknown": 0,
        "completed": 0,
    }
