"""Which group a pod names, of which API, and the job it joins (scheduler.api.membership)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api import membership
from scheduler.api.group_apis import (
    KUBERNETES,
    SCHEDULER_PLUGINS,
    SLUICE,
    VOLCANO,
    GroupApi,
    PodField,
    api_of_job,
    kind_key,
)
from scheduler.api.membership import (
    COSCHEDULING_POD_GROUP_LABEL,
    VOLCANO_PREEMPTABLE,
    VOLCANO_QUEUE_ANNOTATION,
    VOLCANO_TASK_SPEC,
    pod_group_ref,
    pod_preemptable,
    pod_queue,
    pod_role,
    resolve_job_id,
)

SLUICE_LABEL = {L.POD_GROUP_LABEL: "s"}
XK8S_LABEL = {COSCHEDULING_POD_GROUP_LABEL: "x"}
VOLCANO_ANNOTATION = {L.POD_GROUP_ANNOTATION: "v"}
UPSTREAM = {"schedulingGroup": {"podGroupName": "k"}}


def _pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec or {}}


@pytest.mark.parametrize(
    ("pod", "api", "name"),
    [
        (_pod(), None, ""),
        (_pod(labels=SLUICE_LABEL), SLUICE, "s"),
        (_pod(spec=UPSTREAM), KUBERNETES, "k"),
        (_pod(labels=XK8S_LABEL), SCHEDULER_PLUGINS, "x"),
        (_pod(annotations=VOLCANO_ANNOTATION), VOLCANO, "v"),
        (
            _pod(
                labels={**SLUICE_LABEL, **XK8S_LABEL}, annotations=VOLCANO_ANNOTATION, spec=UPSTREAM
            ),
            SLUICE,
            "s",
        ),
        (_pod(labels=XK8S_LABEL, annotations=VOLCANO_ANNOTATION, spec=UPSTREAM), KUBERNETES, "k"),
        (_pod(labels=XK8S_LABEL, annotations=VOLCANO_ANNOTATION), SCHEDULER_PLUGINS, "x"),
        (_pod(labels={L.POD_GROUP_LABEL: ""}, annotations=VOLCANO_ANNOTATION), VOLCANO, "v"),
        (_pod(spec={"schedulingGroup": {}}), None, ""),
    ],
    ids=[
        "none",
        "sluice-label",
        "scheduling-group",
        "x-k8s-label",
        "volcano-annotation",
        "sluice-wins-over-all",
        "scheduling-group-wins-over-x-k8s-and-volcano",
        "x-k8s-wins-over-volcano",
        "empty-label-is-no-reference",
        "empty-scheduling-group",
    ],
)
def test_pod_group_ref_order(pod: dict[str, Any], api: Any, name: str) -> None:
    ref = pod_group_ref(pod)
    if api is None:
        assert ref is None
    else:
        assert ref is not None
        assert (ref.api, ref.name) == (api, name)


class _Groups:
    def __init__(self, groups: set[str], basic: frozenset[str] | set[str] = frozenset()) -> None:
        self.groups = groups
        self.basic = basic

    def has_group(self, job_id: str) -> bool:
        return job_id in self.groups or job_id in self.basic

    def is_basic(self, job_id: str) -> bool:
        return job_id in self.basic


@pytest.mark.parametrize(
    ("pod", "groups", "job_id"),
    [
        (_pod(), _Groups(set()), "ns/p"),
        (_pod(labels=SLUICE_LABEL), _Groups(set()), "ns/s"),
        (_pod(annotations=VOLCANO_ANNOTATION), _Groups({"volcano:ns/v"}), "volcano:ns/v"),
        (_pod(annotations=VOLCANO_ANNOTATION), _Groups({"ns/v"}), "ns/v"),
        (_pod(annotations=VOLCANO_ANNOTATION), _Groups({"ns/v", "volcano:ns/v"}), "volcano:ns/v"),
        (_pod(annotations=VOLCANO_ANNOTATION), _Groups(set()), "volcano:ns/v"),
        (_pod(spec=UPSTREAM), _Groups({"kubernetes:ns/k"}), "kubernetes:ns/k"),
        (_pod(spec=UPSTREAM), _Groups(set(), {"kubernetes:ns/k"}), "ns/p"),
        (_pod(labels=XK8S_LABEL), _Groups({"ns/x"}), "scheduler-plugins:ns/x"),
        (_pod(labels=SLUICE_LABEL), None, "ns/s"),
    ],
    ids=[
        "lone",
        "sluice",
        "volcano",
        "volcano-annotation-falls-back-to-sluice",
        "volcano-first-when-both",
        "volcano-missing-waits-for-it",
        "kubernetes-gang",
        "kubernetes-basic-alone",
        "x-k8s-never-falls-back",
        "nothing-known",
    ],
)
def test_resolve_job_id(pod: dict[str, Any], groups: _Groups | None, job_id: str) -> None:
    assert resolve_job_id(pod_group_ref(pod), "ns", "p", groups) == job_id


@pytest.mark.parametrize(
    ("labels", "annotations", "role"),
    [
        ({}, {}, ""),
        ({L.TASK_ROLE_LABEL: "ps"}, {VOLCANO_TASK_SPEC: "worker"}, "ps"),
        ({}, {VOLCANO_TASK_SPEC: "worker"}, "worker"),
        ({VOLCANO_TASK_SPEC: "chief"}, {}, "chief"),
        ({VOLCANO_TASK_SPEC: "chief"}, {VOLCANO_TASK_SPEC: "worker"}, "worker"),
    ],
    ids=["none", "sluice-first", "volcano-annotation", "volcano-label", "annotation-first"],
)
def test_pod_role(labels: dict[str, str], annotations: dict[str, str], role: str) -> None:
    assert pod_role(labels, annotations) == role


@pytest.mark.parametrize(
    ("labels", "annotations", "queue"),
    [
        ({}, {}, "default"),
        ({L.QUEUE_LABEL: "a"}, {VOLCANO_QUEUE_ANNOTATION: "b"}, "a"),
        ({}, {VOLCANO_QUEUE_ANNOTATION: "b"}, "b"),
    ],
    ids=["default", "sluice-first", "volcano"],
)
def test_pod_queue(labels: dict[str, str], annotations: dict[str, str], queue: str) -> None:
    assert pod_queue(labels, annotations) == queue


@pytest.mark.parametrize(
    ("labels", "annotations", "preemptable"),
    [
        ({}, {}, True),
        ({L.PREEMPTABLE_LABEL: "false"}, {}, False),
        ({}, {VOLCANO_PREEMPTABLE: "false"}, False),
        ({VOLCANO_PREEMPTABLE: "false"}, {}, False),
        ({VOLCANO_PREEMPTABLE: "false"}, {VOLCANO_PREEMPTABLE: "true"}, True),
        ({}, {VOLCANO_PREEMPTABLE: "maybe"}, False),
        ({}, {VOLCANO_PREEMPTABLE: ""}, False),
        ({L.PREEMPTABLE_LABEL: "true"}, {VOLCANO_PREEMPTABLE: "false"}, False),
        ({L.PREEMPTABLE_LABEL: "False"}, {VOLCANO_PREEMPTABLE: "true"}, False),
    ],
    ids=[
        "default",
        "sluice-label",
        "volcano-annotation",
        "volcano-label",
        "volcano-annotation-first",
        "not-a-boolean-is-false",
        "empty-is-not-true",
        "either-api-says-no",
        "sluice-says-no",
    ],
)
def test_pod_preemptable(
    labels: dict[str, str], annotations: dict[str, str], preemptable: bool
) -> None:
    assert pod_preemptable(labels, annotations) is preemptable


@pytest.mark.parametrize(
    ("api_version", "kind", "key"),
    [
        ("scheduling.sluice.dev/v1alpha1", "PodGroup", "PodGroup"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup", "PodGroup.scheduling.volcano.sh"),
        ("scheduling.volcano.sh/v1beta1", "Queue", "Queue.scheduling.volcano.sh"),
        ("scheduling.x-k8s.io/v1alpha1", "PodGroup", "PodGroup.scheduling.x-k8s.io"),
        ("scheduling.k8s.io/v1alpha2", "PodGroup", "PodGroup.scheduling.k8s.io"),
        ("scheduling.k8s.io/v1", "PriorityClass", "PriorityClass"),
        ("v1", "Pod", "Pod"),
    ],
    ids=["sluice", "volcano-pg", "volcano-queue", "x-k8s", "kubernetes", "priorityclass", "pod"],
)
def test_kind_key(api_version: str, kind: str, key: str) -> None:
    assert kind_key(api_version, kind) == key


@pytest.mark.parametrize(
    ("job_id", "api"),
    [
        ("ns/a", SLUICE),
        ("volcano:ns/a", VOLCANO),
        ("scheduler-plugins:ns/a", SCHEDULER_PLUGINS),
        ("kubernetes:ns/a", KUBERNETES),
    ],
    ids=["sluice", "volcano", "scheduler-plugins", "kubernetes"],
)
def test_job_ids_do_not_collide(job_id: str, api: Any) -> None:
    assert api_of_job(job_id) is api
    assert api.job_id("ns", "a") == job_id


def test_a_fifth_apis_pod_conventions_are_its_row_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's role, queue and preemptability are read from every API's row: a fifth API
    is heard by adding its row, nothing in membership changing."""
    fifth = GroupApi(
        "fifth",
        "Fifth",
        "fifth.example",
        "v1",
        PodField("label", "fifth.example/group"),
        precedence=4,
        role_fields=(PodField("label", "fifth.example/role"),),
        queue_fields=(PodField("annotation", "fifth.example/queue"),),
        preemptable_fields=(PodField("label", "fifth.example/keep"),),
        preemptable_if=lambda value: value != "yes",
    )
    monkeypatch.setattr(membership, "APIS", (SLUICE, VOLCANO, fifth))
    labels = {"fifth.example/role": "driver", "fifth.example/keep": "yes"}
    annotations = {"fifth.example/queue": "q5"}
    assert pod_role(labels, annotations) == "driver"
    assert pod_queue(labels, annotations) == "q5"
    assert pod_preemptable(labels, annotations) is False
    assert pod_role({L.TASK_ROLE_LABEL: "ps", **labels}, {}) == "ps"  # Sluice's first
