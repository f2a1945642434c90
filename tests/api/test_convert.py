"""Tests of scheduler.api.core_objects: Kubernetes JSON to domain objects, and its refusals."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.core_objects import (
    job_for_lone_pod,
    job_id_of_pod,
    node_from_object,
    parse_time,
    pod_group_name,
    pod_status,
    ref,
    task_from_pod,
    topology_from_object,
)
from scheduler.api.errors import InvalidInputError, QuantityError
from scheduler.api.group_apis.sluice import job_from_pod_group, queue_from_object
from scheduler.api.job import PodGroupPhase, TopologyConstraint
from scheduler.api.pod import Taint
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from tests.builders import node, pod

Gi = 2**30


def pod_group(name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": spec,
    }


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": L.API_VERSION, "kind": "Queue", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        ({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}, "Pod ns/p"),
        ({"kind": "Node", "metadata": {"name": "n1"}}, "Node n1"),
        ({"metadata": {}}, "Object ?"),
    ],
    ids=["namespaced", "cluster-scoped", "nothing"],
)
def test_ref(obj: dict[str, Any], text: str) -> None:
    assert ref(obj) == text


@pytest.mark.parametrize(
    ("value", "epoch"),
    [
        ("2026-01-01T00:00:00Z", 1_767_225_600.0),
        ("2026-01-01T00:00:01+00:00", 1_767_225_601.0),
        ("not a time", 0.0),
        (None, 0.0),
        ("", 0.0),
        (12, 0.0),
    ],
    ids=["zulu", "offset", "malformed", "none", "empty", "number"],
)
def test_parse_time(value: object, epoch: float) -> None:
    assert parse_time(value) == epoch


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (pod("p"), TaskStatus.PENDING),
        (pod("p", node="n1"), TaskStatus.RUNNING),
        (pod("p", node="n1", phase="Pending"), TaskStatus.BOUND),
        (pod("p", node="n1", phase="Succeeded"), TaskStatus.SUCCEEDED),
        (pod("p", phase="Failed"), TaskStatus.FAILED),
        (
            {**pod("p", node="n1"), "metadata": {"name": "p", "deletionTimestamp": "x"}},
            TaskStatus.RELEASING,
        ),
        ({"metadata": {"name": "p"}}, TaskStatus.PENDING),
        ({**pod("p"), "spec": {"schedulingGates": [{"name": "g"}]}}, TaskStatus.GATED),
        ({**pod("p"), "spec": {"schedulingGates": []}}, TaskStatus.PENDING),
        (
            {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": "g"}]},
             "status": {"phase": "Failed"}},
            TaskStatus.FAILED,
        ),
    ],
    ids=[
        "pending", "running", "bound-not-started", "succeeded", "failed", "terminating", "bare",
        "gated", "gates-empty", "gated-but-failed",
    ],
)  # fmt: skip
def test_pod_status(raw: dict[str, Any], status: TaskStatus) -> None:
    assert pod_status(raw) is status


@pytest.mark.parametrize(
    ("raw", "group", "job_id"),
    [
        (pod("p", ns="ns"), "", "ns/p"),
        (pod("p", ns="ns", group="g"), "g", "ns/g"),
        (
            {
                "metadata": {
                    "name": "p",
                    "namespace": "ns",
                    "annotations": {L.POD_GROUP_ANNOTATION: "g2"},
                }
            },
            "g2",
            "volcano:ns/g2",
        ),
        (
            {
                "metadata": {
                    "name": "p",
                    "labels": {L.POD_GROUP_LABEL: "a"},
                    "annotations": {L.POD_GROUP_ANNOTATION: "b"},
                }
            },
            "a",
            "default/a",
        ),
    ],
    ids=["lone", "label", "annotation", "label-wins"],
)
def test_pod_group_membership(raw: dict[str, Any], group: str, job_id: str) -> None:
    assert pod_group_name(raw) == group
    assert job_id_of_pod(raw) == job_id


def test_task_from_pod_fields() -> None:
    raw = pod(
        "w-0",
        ns="ml",
        cpu="1",
        memory="1Gi",
        group="g",
        role="ps",
        priority=7,
        labels={L.PREEMPTABLE_LABEL: "False"},
        priorityClassName="high",
        preemptionPolicy="Never",
    )
    raw["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    raw["status"]["nominatedNodeName"] = "n3"
    task = task_from_pod(raw)
    assert (task.uid, task.namespace, task.name, task.key) == ("ml/w-0", "ml", "w-0", "ml/w-0")
    assert task.job_id == "ml/g"
    assert task.role == "ps"
    assert task.priority == 7
    assert task.creation == 1_767_225_600.0
    assert task.request == Resource({"cpu": 1000, "memory": Gi, "pods": 1})
    assert task.status is TaskStatus.PENDING
    assert task.node_name == ""
    assert task.nominated_node == "n3"
    assert task.preemptable is False
    assert task.preemption_policy == "Never"
    assert task.priority_class == "high"
    assert task.sluice is True
    clone = task.clone()
    assert clone == task and clone is not task


@pytest.mark.parametrize(
    ("raw", "scheduler", "sluice"),
    [
        (pod("p"), L.SCHEDULER_NAME, True),
        (pod("p", scheduler="default-scheduler"), L.SCHEDULER_NAME, False),
        ({"metadata": {"name": "p"}, "spec": {"containers": []}}, L.SCHEDULER_NAME, False),
        (pod("p", scheduler="other"), "other", True),
    ],
    ids=["ours", "theirs", "no-schedulerName", "renamed-scheduler"],
)
def test_task_scheduled_by_us(raw: dict[str, Any], scheduler: str, sluice: bool) -> None:
    assert task_from_pod(raw, scheduler_name=scheduler).sluice is sluice


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        (
            pod("p", priority="high"),
            InvalidInputError,
            "Pod default/p: spec.priority: must be an integer, got 'high'",
        ),
        (
            pod("p", priority=True),
            InvalidInputError,
            "Pod default/p: spec.priority: must be an integer, got True",
        ),
        (
            pod("p", cpu="lots"),
            QuantityError,
            "Pod default/p: spec.containers[0].resources.requests.cpu: malformed quantity 'lots'",
        ),
    ],
    ids=["string-priority", "bool-priority", "bad-cpu"],
)
def test_task_from_pod_refuses(raw: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        task_from_pod(raw)
    assert str(info.value).startswith(message)


def test_node_from_object() -> None:
    raw = node(
        "n1",
        cpu="8",
        memory="16Gi",
        pods=20,
        gpus=2,
        labels={"zone": "a"},
        taints=["dedicated=gpu:NoSchedule", {"key": "x"}],
        unschedulable=True,
        ready=False,
    )
    info = node_from_object(raw)
    assert info.name == "n1"
    assert info.allocatable == Resource(
        {"cpu": 8000, "memory": 16 * Gi, "pods": 20, "nvidia.com/gpu": 2}
    )
    assert info.labels == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert info.taints == (Taint("dedicated", "gpu", "NoSchedule"), Taint("x", "", "NoSchedule"))
    assert info.unschedulable is True
    assert info.ready is False
    assert info.used == Resource() and info.tasks == {}


@pytest.mark.parametrize(
    ("status", "allocatable", "ready"),
    [
        ({"capacity": {"cpu": "2"}}, Resource({"cpu": 2000}), True),
        ({"allocatable": {"cpu": "1"}, "capacity": {"cpu": "2"}}, Resource({"cpu": 1000}), True),
        ({}, Resource(), True),
        ({"conditions": [{"type": "Ready", "status": "Unknown"}]}, Resource(), False),
        ({"conditions": [{"type": "MemoryPressure", "status": "False"}]}, Resource(), True),
    ],
    ids=["capacity-fallback", "allocatable-wins", "empty", "ready-unknown", "other-condition"],
)
def test_node_status(status: dict[str, Any], allocatable: Resource, ready: bool) -> None:
    info = node_from_object({"kind": "Node", "metadata": {"name": "n"}, "status": status})
    assert info.allocatable == allocatable
    assert info.ready is ready


def test_node_malformed_quantity_names_node_and_field() -> None:
    raw = node("n1")
    raw["status"]["allocatable"]["memory"] = "32GB"
    with pytest.raises(QuantityError) as info:
        node_from_object(raw)
    assert str(info.value).startswith("Node n1: status.allocatable.memory: malformed quantity")


def test_job_from_pod_group() -> None:
    raw = pod_group(
        "g",
        ns="ml",
        minMember=3,
        minTaskMember={"ps": 1, "worker": 2},
        queue="research",
        minResources={"cpu": "3", "memory": "1Gi"},
        priorityClassName="high",
        topologyConstraint={"topology": "t", "requiredLevel": "zone"},
    )
    raw["status"] = {
        "phase": "Inqueue",
        "conditions": [
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": "m",
            }
        ],
    }
    job = job_from_pod_group(raw, {"high": 1000})
    assert (job.uid, job.namespace, job.name, job.queue) == ("ml/g", "ml", "g", "research")
    assert job.min_member == 3
    assert job.min_task_member == {"ps": 1, "worker": 2}
    assert job.min_resources == Resource({"cpu": 3000, "memory": Gi})
    assert (job.priority, job.priority_class) == (1000, "high")
    assert job.phase is PodGroupPhase.INQUEUE
    assert job.has_pod_group is True
    assert job.topology == TopologyConstraint("t", "zone", "")
    assert job.pod_group_uid == "uid-g"
    assert job.conditions == (("Unschedulable", "True", "NotEnoughResources", "m"),)


@pytest.mark.parametrize(
    ("spec", "status", "queue_", "min_member", "phase"),
    [
        ({}, {}, "default", 1, PodGroupPhase.PENDING),
        ({"queue": ""}, {"phase": "Running"}, "default", 1, PodGroupPhase.RUNNING),
        ({"minMember": 0}, {"phase": "Nonsense"}, "default", 0, PodGroupPhase.PENDING),
    ],
    ids=["defaults", "empty-queue", "unknown-phase"],
)
def test_pod_group_defaults(
    spec: dict[str, Any], status: dict[str, Any], queue_: str, min_member: int, phase: PodGroupPhase
) -> None:
    raw = {**pod_group("g", **spec), "status": status}
    job = job_from_pod_group(raw, {})
    assert (job.queue, job.min_member, job.phase) == (queue_, min_member, phase)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"priorityClassName": "gold"},
            "PodGroup default/g: spec.priorityClassName: no PriorityClass named 'gold'",
        ),
        (
            {"minResources": {"cpu": "-1"}},
            "PodGroup default/g: spec.minResources.cpu: must not be negative",
        ),
    ],
    ids=["unknown-priority-class", "negative-min-resources"],
)
def test_pod_group_refusals(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        job_from_pod_group(pod_group("g", **spec), {})
    assert str(info.value).startswith(message)


def test_lone_pod_job() -> None:
    task = task_from_pod(pod("p", ns="ns", priority=5))
    job = job_for_lone_pod(task, "q")
    assert (job.uid, job.queue, job.min_member, job.priority) == ("ns/p", "q", 1, 5)
    assert job.phase is PodGroupPhase.INQUEUE
    assert job.has_pod_group is False


def test_queue_from_object() -> None:
    info = queue_from_object(
        queue(
            "q",
            weight=3,
            capability={"cpu": "4"},
            deserved={"cpu": "2"},
            guarantee={"cpu": "1"},
            reclaimable=False,
            priority=2,
            parent="root",
        )
    )
    assert (info.name, info.weight, info.priority, info.parent) == ("q", 3, 2, "root")
    assert info.capability == {"cpu": 4000}
    assert info.deserved == {"cpu": 2000}
    assert info.guarantee == Resource({"cpu": 1000})
    assert info.reclaimable is False
    assert info.state == "Open"
    closed = queue_from_object(queue("z", capability={"cpu": "0", "memory": "1Gi"}))
    assert closed.capability == {"cpu": 0, "memory": 1 << 30}, "an explicit 0 is kept"
    bare = queue_from_object(queue("b"))
    assert (bare.weight, bare.capability, bare.deserved, bare.guarantee) == (
        1,
        None,
        None,
        Resource(),
    )


def test_queue_malformed_capability() -> None:
    with pytest.raises(QuantityError) as info:
        queue_from_object(queue("q", capability={"cpu": "many"}))
    assert str(info.value).startswith("Queue q: spec.capability.cpu: malformed quantity 'many'")


def test_topology_levels() -> None:
    topo = topology_from_object(
        {
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "zone"}, {"nodeLabel": "rack"}]},
        }
    )
    assert (topo.name, topo.levels) == ("t", ("zone", "rack"))
