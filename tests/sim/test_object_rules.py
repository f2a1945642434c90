"""The API server's rules for writes, as pure functions (scheduler/sim/object_rules.py,
and the binding, deletion and eviction rules of scheduler/sim/pod_rules.py): the seam
between the store, which keeps objects and revisions, and what it stores. The same rules
seen through the store are tested in test_store.py and test_evict.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.api.errors import ConflictError, InvalidObjectError
from scheduler.sim import object_rules, pod_rules
from scheduler.sim.api_conventions import rfc3339
from tests.sim.sim_builders import pod

NOW = 1_767_225_600.0
Obj = dict[str, Any]


def stored(obj: Obj, **meta: Any) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"].update({"uid": "u1", "resourceVersion": "7", "generation": 1, **meta})
    return out


# Create ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "restore", "expected"),
    [
        (pod("a"), False, ("Pod", ("default", "a"), {})),
        (
            {"kind": "Node", "metadata": {"name": "n", "namespace": "x", "uid": "old"}},
            False,
            ("Node", ("", "n"), {}),
        ),
        (
            {"kind": "Node", "metadata": {"name": "n", "uid": "old"}},
            True,
            ("Node", ("", "n"), {"uid": "old"}),
        ),
        (
            {"kind": "PodGroup", "apiVersion": "scheduling.x-k8s.io/v1alpha1",
             "metadata": {"generateName": "g-"}},
            False,
            ("PodGroup.scheduling.x-k8s.io", ("default", "g-abcde"), {}),
        ),
    ],
    ids=["namespaced", "cluster-scoped", "restored", "generated-name"],
)  # fmt: skip
def test_what_a_create_stores(obj: Obj, restore: bool, expected: tuple[Any, ...]) -> None:
    made = object_rules.new_object(
        obj,
        cluster_scoped=object_rules.DEFAULT_CLUSTER_SCOPED,
        restore=restore,
        suffix=lambda: "abcde",
        now=rfc3339(NOW),
    )
    kind, key, new, kept = made
    assert (kind, key, dict(kept)) == expected
    assert "uid" not in new["metadata"] and new is not obj


def test_a_create_without_a_name_is_refused() -> None:
    with pytest.raises(InvalidObjectError, match=r"metadata\.name: Required value"):
        object_rules.new_object(
            {"kind": "Node", "metadata": {}},
            cluster_scoped=(),
            restore=False,
            suffix=lambda: "x",
            now="",
        )


# Update ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "generation"),
    [
        (lambda o: o["metadata"].update(labels={"a": "b"}), 1),
        (lambda o: o["spec"].update(activeDeadlineSeconds=5), 2),
        (lambda o: o.update(status={"phase": "Failed"}), None),
        (lambda o: o["metadata"].update(uid="other", generation=9), None),
        (lambda o: None, None),
    ],
    ids=["metadata-only", "spec", "status-ignored", "server-metadata-kept", "nothing"],
)
def test_what_an_update_stores(change: Any, generation: int | None) -> None:
    old = stored(pod("a"))
    new = copy.deepcopy(old)
    change(new)
    updated = object_rules.updated_object("Pod", old, new, status_subresource=True)
    if generation is None:
        assert updated is None
    else:
        assert updated is not None and updated["metadata"]["generation"] == generation
        assert updated["metadata"]["uid"] == "u1" and updated.get("status") == old.get("status")


@pytest.mark.parametrize(
    ("uid", "resource_version", "error"),
    [
        (None, None, ""),
        ("u1", "7", ""),
        ("u2", None, "UID in precondition: u2"),
        (None, "6", "the object has been modified"),
    ],
    ids=["none", "both-current", "other-uid", "stale-version"],
)
def test_update_preconditions(uid: str | None, resource_version: str | None, error: str) -> None:
    old = stored(pod("a"))
    if not error:
        object_rules.check_update_preconditions("Pod", old, uid, resource_version)
        return
    with pytest.raises(ConflictError, match=error):
        object_rules.check_update_preconditions("Pod", old, uid, resource_version)


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"finalizers": ["f"]}, rfc3339(NOW)),
        ({"finalizers": ["f"], "deletionTimestamp": "t"}, "t"),
        ({"finalizers": ["f"], "deletionTimestamp": "t", "deletionGracePeriodSeconds": 0}, None),
    ],
    ids=["held-by-a-finalizer", "terminating-already", "held-already"],
)
def test_a_deletion_held_by_finalizers(meta: Obj, expected: str | None) -> None:
    held = object_rules.held_by_finalizers(stored(pod("a"), **meta), rfc3339(NOW))
    if expected is None:
        assert held is None
    else:
        assert held is not None
        assert held["metadata"]["deletionTimestamp"] == expected
        assert held["metadata"]["deletionGracePeriodSeconds"] == 0


# Pods: binding, deletion, eviction -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_obj", "error"),
    [
        (pod("a"), ""),
        (pod("a", node="n2"), "already assigned"),
        (stored(pod("a"), deletionTimestamp="t"), "is being deleted"),
        (pod("a", gates=["g"]), "non-empty .spec.schedulingGates"),
    ],
    ids=["pending", "assigned", "deleting", "gated"],
)
def test_binding(pod_obj: Obj, error: str) -> None:
    if error:
        with pytest.raises(ConflictError, match=error):
            pod_rules.bound_pod(pod_obj, "n1", None, rfc3339(NOW))
        return
    new = pod_rules.bound_pod(pod_obj, "n1", {"k": "v"}, rfc3339(NOW))
    assert new["spec"]["nodeName"] == "n1" and new["metadata"]["annotations"]["k"] == "v"
    assert [c["type"] for c in new["status"]["conditions"]] == ["PodScheduled"]


TERMINATING = stored(
    pod("a", node="n1"),
    deletionTimestamp=rfc3339(NOW + 20),
    deletionGracePeriodSeconds=30,
)


@pytest.mark.parametrize(
    ("pod_obj", "grace", "expected"),
    [
        (pod("a"), None, "remove"),
        (pod("a", node="n1", phase="Succeeded"), None, "remove"),
        (pod("a", node="n1"), 0, "remove"),
        (pod("a", node="n1"), None, (NOW + 30, 30)),
        (pod("a", node="n1", grace=5), None, (NOW + 5, 5)),
        (pod("a", node="n1"), -3, (NOW + 1, 1)),
        (TERMINATING, None, "keep"),
        (TERMINATING, 60, "keep"),
        (TERMINATING, 10, (NOW, 10)),
    ],
    ids=[
        "unbound",
        "finished",
        "grace-0",
        "default-grace",
        "spec-grace",
        "negative-grace",
        "terminating-again",
        "longer-grace-ignored",
        "shorter-grace-from-the-first",
    ],
)
def test_deletion(pod_obj: Obj, grace: int | None, expected: Any) -> None:
    what = pod_rules.deletion(pod_obj, grace, NOW)
    if expected == "remove":
        assert what.remove
    elif expected == "keep":
        assert not what.remove and what.metadata is None
    else:
        assert what.metadata is not None
        deadline, seconds = expected
        assert what.metadata["deletionTimestamp"] == rfc3339(deadline)
        assert what.metadata["deletionGracePeriodSeconds"] == seconds


def test_an_eviction_marks_the_pod_once() -> None:
    first = pod_rules.eviction_status(pod("a", node="n1"), rfc3339(NOW))
    assert first is not None
    (mark,) = first["conditions"]
    assert (mark["type"], mark["reason"]) == ("DisruptionTarget", "EvictionByEvictionAPI")
    marked = {**pod("a", node="n1"), "status": first}
    assert pod_rules.eviction_status(marked, rfc3339(NOW)) is None
