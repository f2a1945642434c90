"""ObjectStore: reads and writes with the API server's semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sim_builders import ManualWall, condition, new_store, node, obj, pod

from scheduler.api.errors import (
    AlreadyExistsError,
    ConflictError,
    InvalidObjectError,
    NotFoundError,
)
from scheduler.sim.api_conventions import parse_rfc3339, plural, rfc3339, rfc3339_micro
from scheduler.sim.store import ObjectStore

# ----------------------------------------------------------------------------- create


@pytest.mark.parametrize(
    ("given", "namespace"),
    [
        (pod("a", ns="team"), "team"),
        ({"kind": "Pod", "metadata": {"name": "a"}, "spec": {}}, "default"),
        (node("a"), None),
        ({"kind": "Queue", "metadata": {"name": "a", "namespace": "ignored"}}, None),
        (obj("PodGroup", "a", ns=None), "default"),
        (obj("Widget", "a", ns="x"), "x"),
    ],
    ids=["pod-in-ns", "pod-default-ns", "node", "queue-drops-ns", "podgroup-default", "any-kind"],
)
def test_create_sets_server_metadata(given: dict[str, Any], namespace: str | None) -> None:
    store, _ = new_store()
    created = store.create(given)
    meta = created["metadata"]
    assert meta["name"] == "a"
    assert meta.get("namespace") == namespace
    assert meta["resourceVersion"] == "1"
    assert meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert meta["generation"] == 1
    assert len(meta["uid"]) == 36
    assert meta["uid"].count("-") == 4
    assert store.get(given["kind"], namespace or "", "a") is created


def test_create_defaults_pod_phase_and_keeps_given_status() -> None:
    store, _ = new_store()
    assert store.create(pod("a"))["status"] == {"phase": "Pending"}
    running = store.create(pod("b", node="n1", phase="Running", ready=True))
    assert running["status"]["phase"] == "Running"
    assert condition(running, "Ready") == {"type": "Ready", "status": "True"}


def test_create_copies_its_input_and_ignores_client_system_fields() -> None:
    store, _ = new_store()
    given = pod("a", labels={"app": "x"})
    given["metadata"]["uid"] = "mine"
    given["metadata"]["resourceVersion"] = "99"
    created = store.create(given)
    given["metadata"]["labels"]["app"] = "changed"
    assert created["metadata"]["labels"] == {"app": "x"}
    assert created["metadata"]["uid"] != "mine"
    assert created["metadata"]["resourceVersion"] == "1"


def test_uids_are_deterministic_and_unique() -> None:
    uids = []
    for _ in range(2):
        store, _ = new_store()
        uids.append([store.create(pod(f"p{i}"))["metadata"]["uid"] for i in range(3)])
    assert uids[0] == uids[1]
    assert len(set(uids[0])) == 3


def test_generate_name() -> None:
    store, _ = new_store()
    names = {
        store.create({"kind": "Pod", "metadata": {"generateName": "job-"}})["metadata"]["name"]
        for _ in range(3)
    }
    assert len(names) == 3
    assert all(n.startswith("job-") and len(n) == 9 for n in names)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"metadata": {"name": "a"}}, InvalidObjectError),
        ({"kind": "Pod", "metadata": {}}, InvalidObjectError),
        ({"kind": "Pod"}, InvalidObjectError),
        ({"kind": "Pod", "metadata": {"name": 5}}, InvalidObjectError),
    ],
    ids=["no-kind", "no-name", "no-metadata", "name-not-string"],
)
def test_create_refuses_invalid(given: dict[str, Any], error: type[Exception]) -> None:
    store, _ = new_store()
    with pytest.raises(error):
        store.create(given)
    assert store.resource_version == 0


def test_create_twice_already_exists() -> None:
    store, _ = new_store()
    store.create(pod("a"))
    with pytest.raises(AlreadyExistsError, match='pods "a" already exists'):
        store.create(pod("a"))
    store.create(pod("a", ns="other"))
    assert store.resource_version == 2


# ----------------------------------------------------------------------------- reads


def test_get_list_try_get() -> None:
    store, _ = new_store()
    for ns, name in [("b", "x"), ("a", "z"), ("a", "y")]:
        store.create(pod(name, ns=ns))
    store.create(node("n2"))
    store.create(node("n1"))
    items, rv = store.list("Pod")
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items] == [
        ("a", "y"),
        ("a", "z"),
        ("b", "x"),
    ]
    assert rv == 5
    assert [o["metadata"]["name"] for o in store.list("Pod", "a")[0]] == ["y", "z"]
    assert [o["metadata"]["name"] for o in store.list("Node")[0]] == ["n1", "n2"]
    assert [o["metadata"]["name"] for o in store.list("Node", "any")[0]] == ["n1", "n2"]
    assert store.list("Widget") == ([], 5)
    assert store.try_get("Pod", "a", "nope") is None
    assert store.get("Node", "", "n1")["metadata"]["name"] == "n1"
    assert store.count("Pod") == 3
    assert store.kinds() == ["Node", "Pod"]
    with pytest.raises(NotFoundError, match='pods "nope" not found'):
        store.get("Pod", "a", "nope")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("Pod", "pods"),
        ("PriorityClass", "priorityclasses"),
        ("Topology", "topologies"),
        ("PodDisruptionBudget", "poddisruptionbudgets"),
        ("Gateway", "gateways"),
    ],
    ids=["pod", "class", "topology", "pdb", "vowel-y"],
)
def test_plural(kind: str, expected: str) -> None:
    assert plural(kind) == expected


@pytest.mark.parametrize(
    ("wall", "seconds", "micro"),
    [
        (1_767_225_600.0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00.000000Z"),
        (1_767_225_661.75, "2026-01-01T00:01:01Z", "2026-01-01T00:01:01.750000Z"),
        (1_767_225_600.9999996, "2026-01-01T00:00:00Z", "2026-01-01T00:00:01.000000Z"),
    ],
    ids=["epoch", "fraction", "micro-rounds-up"],
)
def test_timestamps(wall: float, seconds: str, micro: str) -> None:
    assert rfc3339(wall) == seconds
    assert rfc3339_micro(wall) == micro
    assert parse_rfc3339(seconds) == float(int(wall))


# ----------------------------------------------------------------------------- resourceVersion


def _bound(store: ObjectStore) -> None:
    store.create(pod("a", node="n1", phase="Running"))


def _patch_a(body: dict[str, Any], **kwargs: Any) -> Callable[[ObjectStore], Any]:
    return lambda s: s.patch("Pod", "default", "a", body, **kwargs)


def _delete_a(**kwargs: Any) -> Callable[[ObjectStore], Any]:
    return lambda s: s.delete("Pod", "default", "a", **kwargs)


def _bound_and_deleted(store: ObjectStore) -> None:
    _bound(store)
    store.delete("Pod", "default", "a")


def _bind_again(store: ObjectStore) -> None:
    with pytest.raises(ConflictError):
        store.bind("default", "a", "n2")


LABEL = {"metadata": {"labels": {"x": "1"}}}
FAILED = {"status": {"phase": "Failed"}}
RUNNING = {"status": {"phase": "Running"}}

RV_CASES: list[tuple[str, Callable[[ObjectStore], Any], Callable[[ObjectStore], Any], int]] = [
    ("create", lambda s: None, lambda s: s.create(pod("b")), 1),
    ("replace-change", _bound, lambda s: s.replace(pod("a", node="n1", labels={"x": "1"})), 1),
    ("replace-noop", _bound, lambda s: s.replace(s.get("Pod", "default", "a")), 0),
    ("merge-patch", _bound, _patch_a(LABEL), 1),
    ("merge-patch-noop", _bound, _patch_a({"spec": {"nodeName": "n1"}}), 0),
    ("status-ignored-noop", _bound, _patch_a(FAILED), 0),
    ("status-patch", _bound, _patch_a(FAILED, subresource="status"), 1),
    ("status-patch-noop", _bound, _patch_a(RUNNING, subresource="status"), 0),
    ("graceful-delete", _bound, _delete_a(), 1),
    ("delete-again-noop", _bound_and_deleted, _delete_a(), 0),
    ("immediate-delete", _bound, _delete_a(grace_period_seconds=0), 1),
    ("bind", lambda s: s.create(pod("a")), lambda s: s.bind("default", "a", "n1"), 1),
    ("failed-bind", _bound, _bind_again, 0),
]


@pytest.mark.parametrize(
    ("setup", "op", "delta"), [c[1:] for c in RV_CASES], ids=[c[0] for c in RV_CASES]
)
def test_resource_version_bumps(
    setup: Callable[[ObjectStore], None], op: Callable[[ObjectStore], Any], delta: int
) -> None:
    store, _ = new_store()
    setup(store)
    before = store.resource_version
    op(store)
    assert store.resource_version == before + delta
    for o in store.list("Pod")[0]:
        assert int(o["metadata"]["resourceVersion"]) <= store.resource_version


def test_resource_version_is_global_across_kinds() -> None:
    store, _ = new_store()
    a = store.create(pod("a"))
    n = store.create(node("n"))
    b = store.patch("Pod", "default", "a", {"metadata": {"labels": {"x": "y"}}})
    assert [a["metadata"]["resourceVersion"], n["metadata"]["resourceVersion"]] == ["1", "2"]
    assert b["metadata"]["resourceVersion"] == "3"
    assert a["metadata"]["resourceVersion"] == "1"  # the old object was not mutated


# ----------------------------------------------------------------------------- replace


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"resourceVersion": "1"}, ConflictError),
        ({"uid": "someone-else"}, ConflictError),
        ({"name": "missing"}, NotFoundError),
    ],
    ids=["stale-rv", "other-uid", "not-found"],
)
def test_replace_errors(change: dict[str, str], error: type[Exception]) -> None:
    store, _ = new_store()
    store.create(pod("a"))
    store.patch("Pod", "default", "a", {"metadata": {"labels": {"v": "2"}}})
    body = pod("a", labels={"v": "3"})
    body["metadata"].update(change)
    with pytest.raises(error):
        store.replace(body)


def test_replace_with_current_rv_succeeds_and_keeps_server_fields() -> None:
    store, wall = new_store()
    created = store.create(pod("a"))
    wall.advance(100)
    body = pod("a", labels={"v": "2"})
    body["metadata"]["resourceVersion"] = "1"
    body["metadata"]["creationTimestamp"] = "1999-01-01T00:00:00Z"
    replaced = store.replace(body)
    assert replaced["metadata"]["labels"] == {"v": "2"}
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert replaced["metadata"]["resourceVersion"] == "2"


@pytest.mark.parametrize(
    ("kind", "subresource", "status_applied", "spec_applied"),
    [
        ("Pod", None, False, True),
        ("Pod", "status", True, False),
        ("PodGroup", None, False, True),
        ("PodGroup", "status", True, False),
        ("PodDisruptionBudget", None, True, True),
    ],
    ids=["pod-main", "pod-status", "podgroup-main", "podgroup-status", "no-subresource-kind"],
)
def test_replace_status_subresource_rules(
    kind: str, subresource: str | None, status_applied: bool, spec_applied: bool
) -> None:
    store, _ = new_store()
    # activeDeadlineSeconds: a spec field the API server lets an update change on a Pod
    store.create(obj(kind, "a", spec={"activeDeadlineSeconds": 1}, status={"s": 1}))
    store.replace(
        obj(kind, "a", spec={"activeDeadlineSeconds": 2}, status={"s": 2}), subresource=subresource
    )
    got = store.get(kind, "default", "a")
    assert got["status"]["s"] == (2 if status_applied else 1)
    assert got["spec"]["activeDeadlineSeconds"] == (2 if spec_applied else 1)


@pytest.mark.parametrize(
    ("patch", "generation"),
    [
        ({"spec": {"minMember": 3}}, 2),
        ({"metadata": {"labels": {"a": "b"}}}, 1),
        ({"metadata": {"annotations": {"a": "b"}}, "spec": {"minMember": 2}}, 1),
    ],
    ids=["spec-change-bumps", "label-change-does-not", "same-spec-does-not"],
)
def test_generation(patch: dict[str, Any], generation: int) -> None:
    store, _ = new_store()
    store.create(obj("PodGroup", "g", spec={"minMember": 2}))
    assert store.patch("PodGroup", "default", "g", patch)["metadata"]["generation"] == generation


# ----------------------------------------------------------------------------- patch


def _pod_with_conditions(store: ObjectStore) -> None:
    p = pod("a", node="n1", phase="Running")
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "Starting"},
    ]
    store.create(p)


@pytest.mark.parametrize(
    ("patch_type", "expected"),
    [
        (
            "strategic",
            [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True", "reason": "Starting"},
            ],
        ),
        ("merge", [{"type": "Ready", "status": "True"}]),
    ],
    ids=["strategic-merges-by-type", "merge-replaces-list"],
)
def test_patch_conditions(patch_type: Any, expected: list[dict[str, str]]) -> None:
    store, _ = new_store()
    _pod_with_conditions(store)
    patched = store.patch(
        "Pod",
        "default",
        "a",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        patch_type=patch_type,
        subresource="status",
    )
    assert patched["status"]["conditions"] == expected


@pytest.mark.parametrize(
    ("kind", "subresource", "status_applied", "labels_applied"),
    [
        ("Pod", None, False, True),
        ("Pod", "status", True, False),
        ("Node", None, False, True),
        ("Node", "status", True, False),
        ("Queue", "status", True, False),
        ("Topology", None, False, True),
        ("Lease", None, True, True),
    ],
    ids=[
        "pod-main-ignores-status",
        "pod-status-only-status",
        "node-main",
        "node-status",
        "queue-status",
        "topology-main",
        "lease-has-no-subresource",
    ],
)
def test_patch_status_subresource_rules(
    kind: str, subresource: str | None, status_applied: bool, labels_applied: bool
) -> None:
    store, _ = new_store()
    store.create(obj(kind, "a", status={"phase": "Old"}))
    store.patch(
        kind,
        "default",
        "a",
        {"metadata": {"labels": {"x": "1"}}, "status": {"phase": "New"}},
        subresource=subresource,
    )
    got = store.get(kind, "default", "a")
    assert got["status"]["phase"] == ("New" if status_applied else "Old")
    assert (got["metadata"].get("labels") == {"x": "1"}) is labels_applied


@pytest.mark.parametrize(
    ("kind", "name", "patch", "subresource", "error"),
    [
        ("Pod", "missing", {"metadata": {"labels": {"a": "b"}}}, None, NotFoundError),
        ("Lease", "a", {"status": {"x": 1}}, "status", NotFoundError),
        ("Pod", "a", {"metadata": {"resourceVersion": "0"}}, None, ConflictError),
        ("Pod", "a", {"metadata": {"uid": "other"}}, None, ConflictError),
        ("Pod", "a", {"metadata": {"uid": "other"}, "status": {}}, "status", ConflictError),
        ("Pod", "a", {"spec": {}}, "scale", NotFoundError),
    ],
    ids=[
        "not-found",
        "status-of-kind-without-subresource",
        "stale-rv",
        "other-uid",
        "other-uid-status",
        "unknown-subresource",
    ],
)
def test_patch_errors(
    kind: str, name: str, patch: dict[str, Any], subresource: str | None, error: type[Exception]
) -> None:
    store, _ = new_store()
    store.create(obj(kind, "a"))
    with pytest.raises(error):
        store.patch(kind, "default", name, patch, subresource=subresource)


def test_patch_cannot_change_server_fields() -> None:
    store, _ = new_store()
    created = store.create(pod("a"))
    patched = store.patch(
        "Pod",
        "default",
        "a",
        {"kind": "Node", "metadata": {"name": "b", "creationTimestamp": "x", "labels": {"k": "v"}}},
    )
    assert patched["kind"] == "Pod"
    assert patched["metadata"]["name"] == "a"
    assert patched["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"]
    assert patched["metadata"]["labels"] == {"k": "v"}


def test_patch_with_current_rv_and_uid_succeeds() -> None:
    store, _ = new_store()
    created = store.create(pod("a"))
    meta = {"uid": created["metadata"]["uid"], "resourceVersion": "1", "labels": {"a": "b"}}
    assert store.patch("Pod", "default", "a", {"metadata": meta})["metadata"]["labels"] == {
        "a": "b"
    }


def test_status_patch_shares_spec_and_leaves_old_object_alone() -> None:
    store, _ = new_store()
    before = store.create(pod("a", node="n1"))
    after = store.patch(
        "Pod", "default", "a", {"status": {"phase": "Running"}}, subresource="status"
    )
    assert after["spec"] is before["spec"]
    assert before["status"] == {"phase": "Pending"}
    assert after["status"] == {"phase": "Running"}


# ----------------------------------------------------------------------------- validator


def test_validator_defaults_and_refuses_on_every_write() -> None:
    seen: list[str] = []

    def validator(o: dict[str, Any]) -> dict[str, Any]:
        seen.append(o["kind"])
        if o["kind"] != "PodGroup":
            return o
        if o.get("spec", {}).get("minMember", 1) < 1:
            raise InvalidObjectError("spec.minMember: must be at least 1")
        return {**o, "spec": {"queue": "default", **o.get("spec", {})}}

    store, _ = new_store(validator=validator)
    created = store.create(obj("PodGroup", "g", spec={"minMember": 2}))
    assert created["spec"] == {"queue": "default", "minMember": 2}
    assert created["metadata"]["uid"]
    with pytest.raises(InvalidObjectError):
        store.patch("PodGroup", "default", "g", {"spec": {"minMember": 0}})
    with pytest.raises(InvalidObjectError):
        store.replace(obj("PodGroup", "g", spec={"minMember": 0}))
    with pytest.raises(InvalidObjectError):
        store.create(obj("PodGroup", "h", spec={"minMember": 0}))
    assert store.try_get("PodGroup", "default", "h") is None
    assert store.get("PodGroup", "default", "g")["spec"]["minMember"] == 2
    store.create(pod("p"))
    assert seen == ["PodGroup", "PodGroup", "PodGroup", "PodGroup", "Pod"]


# ----------------------------------------------------------------------------- delete


DELETE_CASES = [
    # id, pod kwargs, delete grace, expect removed, expected grace
    ("unbound-pod-at-once", {}, None, True, None),
    ("bound-pod-default-30s", {"node": "n1", "phase": "Running"}, None, False, 30),
    ("bound-pod-spec-grace", {"node": "n1", "phase": "Running", "grace": 5}, None, False, 5),
    ("bound-pod-explicit-grace", {"node": "n1", "phase": "Running", "grace": 5}, 12, False, 12),
    ("bound-pod-grace-0", {"node": "n1", "phase": "Running"}, 0, True, None),
    ("bound-pod-spec-grace-0", {"node": "n1", "phase": "Running", "grace": 0}, None, True, None),
    ("bound-pending-pod", {"node": "n1"}, None, False, 30),
    ("succeeded-pod-at-once", {"node": "n1", "phase": "Succeeded"}, None, True, None),
    ("failed-pod-at-once", {"node": "n1", "phase": "Failed"}, None, True, None),
    ("negative-grace-is-1", {"node": "n1", "phase": "Running"}, -5, False, 1),
]


@pytest.mark.parametrize(
    ("pod_kwargs", "grace", "removed", "expected_grace"),
    [c[1:] for c in DELETE_CASES],
    ids=[c[0] for c in DELETE_CASES],
)
def test_delete_pod(
    pod_kwargs: dict[str, Any], grace: int | None, removed: bool, expected_grace: int | None
) -> None:
    store, wall = new_store()
    store.create(pod("a", **pod_kwargs))
    wall.advance(10)
    events: list[str] = []
    store.subscribe(lambda ev: events.append(ev.type))
    result = store.delete("Pod", "default", "a", grace_period_seconds=grace)
    if removed:
        assert store.try_get("Pod", "default", "a") is None
        assert events == ["DELETED"]
        assert result["metadata"]["resourceVersion"] == "2"
        return
    assert events == ["MODIFIED"]
    meta = store.get("Pod", "default", "a")["metadata"]
    assert meta["deletionGracePeriodSeconds"] == expected_grace
    assert parse_rfc3339(meta["deletionTimestamp"]) == wall() + (expected_grace or 0)


@pytest.mark.parametrize(
    "kind_obj",
    [node("n"), obj("PodGroup", "n"), obj("Queue", "n", ns=None), obj("Lease", "n")],
    ids=["node", "podgroup", "queue", "lease"],
)
def test_delete_other_kinds_at_once(kind_obj: dict[str, Any]) -> None:
    store, _ = new_store()
    store.create(kind_obj)
    store.delete(kind_obj["kind"], "default", "n")
    assert store.count(kind_obj["kind"]) == 0


SECOND_DELETE_CASES = [
    # id, second grace, advance between, expected grace, expected deadline offset (from t0)
    ("no-grace-is-noop", None, 5, 30, 30),
    ("longer-is-noop", 60, 5, 30, 30),
    ("same-is-noop", 30, 5, 30, 30),
    ("shorter-counts-from-first-delete", 10, 5, 10, 10),
    ("zero-removes", 0, 5, None, None),
]


@pytest.mark.parametrize(
    ("grace", "advance", "expected_grace", "deadline"),
    [c[1:] for c in SECOND_DELETE_CASES],
    ids=[c[0] for c in SECOND_DELETE_CASES],
)
def test_second_delete_only_shortens(
    grace: int | None, advance: float, expected_grace: int | None, deadline: float | None
) -> None:
    store, wall = new_store()
    store.create(pod("a", node="n1", phase="Running"))
    t0 = wall()
    first = store.delete("Pod", "default", "a")
    wall.advance(advance)
    second = store.delete("Pod", "default", "a", grace_period_seconds=grace)
    current = store.try_get("Pod", "default", "a")
    if expected_grace is None:
        assert current is None
        return
    assert current is not None
    meta = current["metadata"]
    assert meta["deletionGracePeriodSeconds"] == expected_grace
    assert parse_rfc3339(meta["deletionTimestamp"]) == t0 + (deadline or 0)
    if expected_grace == 30:
        assert second is first


@pytest.mark.parametrize(
    ("uid", "rv", "error"),
    [
        ("wrong", None, ConflictError),
        (None, 7, ConflictError),
        (None, "7", ConflictError),
        ("right", 1, None),
        (None, "1", None),
    ],
    ids=["uid-mismatch", "rv-mismatch-int", "rv-mismatch-str", "both-match", "rv-match"],
)
def test_delete_preconditions(
    uid: str | None, rv: int | str | None, error: type[Exception] | None
) -> None:
    store, _ = new_store()
    created = store.create(obj("Lease", "l"))
    if uid == "right":
        uid = created["metadata"]["uid"]
    if error is None:
        store.delete("Lease", "default", "l", uid=uid, resource_version=rv)
        assert store.count("Lease") == 0
    else:
        with pytest.raises(error, match="Precondition failed"):
            store.delete("Lease", "default", "l", uid=uid, resource_version=rv)
        assert store.count("Lease") == 1


def test_delete_missing_is_not_found() -> None:
    store, _ = new_store()
    with pytest.raises(NotFoundError):
        store.delete("Pod", "default", "a")


def test_finalize_delete() -> None:
    store, _ = new_store()
    store.create(pod("a", node="n1", phase="Running"))
    with pytest.raises(ConflictError, match="not being deleted"):
        store.finalize_delete("Pod", "default", "a")
    store.delete("Pod", "default", "a")
    last = store.finalize_delete("Pod", "default", "a")
    assert last["metadata"]["resourceVersion"] == "3"
    assert last["metadata"]["deletionTimestamp"]
    assert store.try_get("Pod", "default", "a") is None
    with pytest.raises(NotFoundError):
        store.finalize_delete("Pod", "default", "a")


def test_finalizers_hold_deletion_until_removed() -> None:
    store, _ = new_store()
    store.create(obj("PodGroup", "g", metadata={"name": "g", "finalizers": ["sluice/x", "y"]}))
    marked = store.delete("PodGroup", "default", "g")
    assert marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    assert store.delete("PodGroup", "default", "g") is marked
    store.patch(
        "PodGroup",
        "default",
        "g",
        {"$deleteFromPrimitiveList/finalizers": ["y"]},
        patch_type="strategic",
    )
    assert store.try_get("PodGroup", "default", "g") is not None
    events: list[str] = []
    store.subscribe(lambda ev: events.append(ev.type))
    store.patch("PodGroup", "default", "g", {"metadata": {"finalizers": None}})
    assert store.try_get("PodGroup", "default", "g") is None
    assert events == ["DELETED"]


def test_graceful_pod_with_finalizer_waits_for_both() -> None:
    store, _ = new_store()
    p = pod("a", node="n1", phase="Running")
    p["metadata"]["finalizers"] = ["f"]
    store.create(p)
    store.delete("Pod", "default", "a")
    store.finalize_delete("Pod", "default", "a")
    held = store.get("Pod", "default", "a")
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    store.patch("Pod", "default", "a", {"metadata": {"finalizers": []}})
    assert store.try_get("Pod", "default", "a") is None


# ----------------------------------------------------------------------------- bind


def test_bind_sets_node_and_pod_scheduled() -> None:
    store, wall = new_store()
    created = store.create(pod("a"))
    wall.advance(3)
    bound = store.bind("default", "a", "n1", uid=created["metadata"]["uid"])
    assert bound["spec"]["nodeName"] == "n1"
    assert condition(bound, "PodScheduled") == {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:00:03Z",
    }
    assert bound["status"]["phase"] == "Pending"
    assert created["spec"].get("nodeName") is None


def test_bind_copies_binding_annotations() -> None:
    store, _ = new_store()
    store.create(pod("a", annotations={"keep": "1"}))
    bound = store.bind("default", "a", "n1", annotations={"sluice.dev/x": "y"})
    assert bound["metadata"]["annotations"] == {"keep": "1", "sluice.dev/x": "y"}


def _terminating(store: ObjectStore) -> None:
    p = pod("a")
    p["metadata"]["finalizers"] = ["f"]
    store.create(p)
    store.delete("Pod", "default", "a")


BindCase = tuple[str, Callable[[ObjectStore], Any], dict[str, Any], type[Exception], str]
BIND_ERRORS: list[BindCase] = [
    ("twice", lambda s: (s.create(pod("a")), s.bind("default", "a", "n1")), {}, ConflictError,
     'pod default/a is already assigned to node "n1"'),
    ("already-bound-at-create", lambda s: s.create(pod("a", node="n9")), {}, ConflictError,
     'already assigned to node "n9"'),
    ("terminating", _terminating, {}, ConflictError, "is being deleted"),
    ("other-uid", lambda s: s.create(pod("a")), {"uid": "x"}, ConflictError, "UID in precondition"),
    ("gated", lambda s: s.create(pod("a", gates=["wait"])), {}, ConflictError, "schedulingGates"),
    ("missing", lambda s: None, {}, NotFoundError, 'pods "a" not found'),
]  # fmt: skip


@pytest.mark.parametrize(
    ("setup", "kwargs", "error", "message"),
    [c[1:] for c in BIND_ERRORS],
    ids=[c[0] for c in BIND_ERRORS],
)
def test_bind_errors(
    setup: Callable[[ObjectStore], Any],
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    store, _ = new_store()
    setup(store)
    rv = store.resource_version
    with pytest.raises(error, match=message):
        store.bind("default", "a", "n2", **kwargs)
    assert store.resource_version == rv


def test_manual_wall_is_used_for_timestamps() -> None:
    wall = ManualWall(0.0)
    store = ObjectStore(wall)
    wall.advance(86_400 * 365)
    assert store.create(pod("a"))["metadata"]["creationTimestamp"] == "1971-01-01T00:00:00Z"
