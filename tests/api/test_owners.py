"""Tests of scheduler.api.owners: owner references, the opt-out, and which pods wait for the
pod grouper."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.owners import OwnerRef, controller_ref, grouper_wait, opted_out
from tests.builders import pod

Obj = dict[str, Any]


def ref(kind: str = "Job", name: str = "train", **extra: Any) -> Obj:
    api = {"Job": "batch/v1", "PyTorchJob": "kubeflow.org/v1", "ReplicaSet": "apps/v1"}
    out: Obj = {"apiVersion": api.get(kind, "example.com/v1"), "kind": kind, "name": name}
    out.update({"uid": f"uid-{name}", "controller": True, **extra})
    return out


def owned(*refs: Obj, **kw: Any) -> Obj:
    p = pod("train-0", ns="team", **kw)
    p["metadata"]["ownerReferences"] = list(refs)
    return p


def with_meta(p: Obj, **meta: Any) -> Obj:
    for key, value in meta.items():
        p["metadata"].setdefault(key, {}).update(value)
    return p


@pytest.mark.parametrize(
    ("refs", "expected"),
    [
        pytest.param([ref()], OwnerRef("batch/v1", "Job", "train", "uid-train"), id="controller"),
        pytest.param(
            [ref("ReplicaSet", "rs", controller=False), ref()],
            OwnerRef("batch/v1", "Job", "train", "uid-train"),
            id="the-controller-among-several",
        ),
        pytest.param([ref(controller=False)], None, id="not-a-controller"),
        pytest.param([{"kind": "Job", "name": "x", "controller": True}], None, id="no-apiversion"),
        pytest.param([], None, id="none"),
    ],
)
def test_controller_ref(refs: list[Obj], expected: OwnerRef | None) -> None:
    assert controller_ref(owned(*refs)) == expected


def test_owner_ref_parts() -> None:
    core = OwnerRef("v1", "Pod", "leader", "u1")
    grouped = OwnerRef("kubeflow.org/v1", "PyTorchJob", "bert", "u2")
    assert (core.group, core.version) == ("", "v1")
    assert (grouped.group, grouped.version) == ("kubeflow.org", "v1")
    assert grouped.describe("team") == "PyTorchJob team/bert"
    assert grouped.as_reference() == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "bert",
        "uid": "u2",
    }


@pytest.mark.parametrize(
    ("value", "out"),
    [("false", True), ("False", True), ("true", False), ("", False), (None, False)],
)
def test_opt_out_label(value: str | None, out: bool) -> None:
    labels = {} if value is None else {L.GROUP_BY_OWNER_LABEL: value}
    assert opted_out({"metadata": {"labels": labels}}) is out


@pytest.mark.parametrize(
    ("p", "waits_for"),
    [
        pytest.param(owned(ref()), "Job team/train", id="made-by-a-job"),
        pytest.param(
            owned(ref("PyTorchJob", "bert")), "PyTorchJob team/bert", id="made-by-a-pytorchjob"
        ),
        pytest.param(pod("bare", ns="team"), "", id="no-owner"),
        pytest.param(owned(ref(controller=False)), "", id="owner-not-controller"),
        pytest.param(owned(ref(), group="g"), "", id="names-a-sluice-group"),
        pytest.param(
            with_meta(owned(ref()), annotations={L.POD_GROUP_ANNOTATION: "g"}),
            "",
            id="names-a-group-by-annotation",
        ),
        pytest.param(owned(ref(), labels={L.GROUP_BY_OWNER_LABEL: "false"}), "", id="opted-out"),
        pytest.param(
            with_meta(owned(ref()), annotations={L.GANG_OF_ONE_ANNOTATION: "why"}),
            "",
            id="left-alone-by-the-grouper",
        ),
        pytest.param(owned(ref(), node="n1"), "", id="bound"),
        pytest.param(owned(ref(), phase="Succeeded"), "", id="finished"),
    ],
)
def test_which_pods_wait_for_the_grouper(p: Obj, waits_for: str) -> None:
    assert grouper_wait(p) == waits_for


def test_a_pod_being_deleted_does_not_wait() -> None:
    p = owned(ref())
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert grouper_wait(p) == ""
