"""Merge patch (RFC 7386) and strategic merge patch over plain dicts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.sim.patch import clone, merge_patch, strategic_merge_patch

COND_A = {"type": "Ready", "status": "False", "reason": "Starting"}
COND_B = {"type": "PodScheduled", "status": "True"}


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
        ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}, {"a": {"x": 1, "z": 3}}),
        ({"a": [1, 2, 3]}, {"a": [4]}, {"a": [4]}),
        ({"a": "text"}, {"a": {"b": 1}}, {"a": {"b": 1}}),
        ({"a": {"b": 1}}, {"a": "text"}, {"a": "text"}),
        ({"a": 1}, {"missing": None}, {"a": 1}),
        (None, {"a": 1}, {"a": 1}),
        ({"a": 1}, ["not", "a", "map"], ["not", "a", "map"]),
        (
            {"status": {"conditions": [COND_A, COND_B]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        ),
    ],
    ids=[
        "add-key",
        "null-deletes",
        "nested-merge",
        "list-replaced",
        "scalar-becomes-map",
        "map-becomes-scalar",
        "delete-missing-key",
        "null-original",
        "non-map-patch-replaces",
        "conditions-replaced-wholesale",
    ],
)
def test_merge_patch(original: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(original)
    assert merge_patch(original, patch) == expected
    assert original == before


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    [
        (
            {"conditions": [COND_A, COND_B]},
            {"conditions": [{"type": "Ready", "status": "True"}]},
            {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Starting"},
                    COND_B,
                ]
            },
        ),
        (
            {"conditions": [COND_B]},
            {"conditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"conditions": [COND_B, {"type": "DisruptionTarget", "status": "True"}]},
        ),
        (
            {"conditions": [COND_A, COND_B]},
            {"conditions": [{"type": "Ready", "$patch": "delete"}]},
            {"conditions": [COND_B]},
        ),
        (
            {"conditions": [COND_A, COND_B]},
            {"conditions": [{"$patch": "replace"}, {"type": "X", "status": "True"}]},
            {"conditions": [{"type": "X", "status": "True"}]},
        ),
        (
            {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
            {"containers": [{"name": "b", "image": "2"}]},
            {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]},
        ),
        (
            {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"env": [{"name": "A", "value": None, "valueFrom": {"x": 1}}]},
            {"env": [{"name": "A", "valueFrom": {"x": 1}}, {"name": "B", "value": "2"}]},
        ),
        (
            {"ports": [{"containerPort": 80, "name": "http"}]},
            {"ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]},
            {
                "ports": [
                    {"containerPort": 80, "name": "http", "protocol": "TCP"},
                    {"containerPort": 443},
                ]
            },
        ),
        (
            {"ownerReferences": [{"uid": "u1", "name": "a"}]},
            {"ownerReferences": [{"uid": "u2", "name": "b"}]},
            {"ownerReferences": [{"uid": "u1", "name": "a"}, {"uid": "u2", "name": "b"}]},
        ),
        (
            {"volumes": [{"name": "v", "emptyDir": {}}]},
            {"volumes": [{"name": "v", "$patch": "delete"}]},
            {"volumes": []},
        ),
        (
            {"tolerations": [{"key": "a"}]},
            {"tolerations": [{"key": "b"}]},
            {"tolerations": [{"key": "b"}]},
        ),
        ({"args": ["a", "b"]}, {"args": ["c"]}, {"args": ["c"]}),
        ({"finalizers": ["a"]}, {"finalizers": ["b", "a"]}, {"finalizers": ["a", "b"]}),
        (
            {"finalizers": ["a", "b"]},
            {"$deleteFromPrimitiveList/finalizers": ["a"]},
            {"finalizers": ["b"]},
        ),
        ({"spec": {"a": 1, "b": 2}}, {"spec": {"$patch": "replace", "c": 3}}, {"spec": {"c": 3}}),
        ({"spec": {"a": 1}, "x": 1}, {"spec": {"$patch": "delete"}}, {"x": 1}),
        ({"a": 1, "b": 2}, {"b": None}, {"a": 1}),
        (
            {"conditions": [COND_A]},
            {"$setElementOrder/conditions": [{"type": "Ready"}], "conditions": [COND_A]},
            {"conditions": [COND_A]},
        ),
        ({"a": 1, "b": 2, "c": 3}, {"$retainKeys": ["a"], "c": 4}, {"a": 1, "c": 4}),
        (
            {},
            {"conditions": [{"type": "Ready", "status": "True", "message": None}]},
            {"conditions": [{"type": "Ready", "status": "True"}]},
        ),
    ],
    ids=[
        "conditions-merge-by-type",
        "conditions-append-new-type",
        "conditions-delete-directive",
        "list-replace-directive",
        "containers-by-name",
        "env-by-name-null-deletes-field",
        "ports-by-containerPort",
        "ownerReferences-by-uid",
        "volumes-delete-directive",
        "tolerations-replaced",
        "scalar-list-replaced",
        "finalizers-united",
        "delete-from-primitive-list",
        "map-replace-directive",
        "map-delete-directive",
        "null-deletes",
        "set-element-order-ignored",
        "retain-keys",
        "new-item-drops-nulls",
    ],
)
def test_strategic_merge_patch(original: Any, patch: Any, expected: Any) -> None:
    before = copy.deepcopy(original)
    patch_before = copy.deepcopy(patch)
    assert strategic_merge_patch(original, patch) == expected
    assert original == before
    assert patch == patch_before


def test_patches_share_untouched_subtrees_and_copy_patch_values() -> None:
    spec = {"containers": [{"name": "a"}]}
    original = {"spec": spec, "status": {"phase": "Pending"}}
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    for apply in (merge_patch, strategic_merge_patch):
        result = apply(original, patch)
        assert result["spec"] is spec
        patch["status"]["conditions"][0]["status"] = "False"
        assert result["status"]["conditions"][0]["status"] == "True"
        patch["status"]["conditions"][0]["status"] = "True"


def test_custom_merge_keys() -> None:
    original = {"items": [{"id": 1, "v": "a"}]}
    patch = {"items": [{"id": 1, "v": "b"}]}
    assert strategic_merge_patch(original, patch, merge_keys={"items": "id"}) == patch
    assert strategic_merge_patch(original, patch, merge_keys={}) == patch
    assert strategic_merge_patch(original, {"items": [{"id": 2}]}, merge_keys={"items": "id"}) == {
        "items": [{"id": 1, "v": "a"}, {"id": 2}]
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, {"b": (2, 3)}]}, {"a": [1, {"b": [2, 3]}]}),
        ("text", "text"),
        (None, None),
    ],
    ids=["nested-tuple-to-list", "scalar", "none"],
)
def test_clone(value: Any, expected: Any) -> None:
    result = clone(value)
    assert result == expected
    if isinstance(value, dict):
        assert result is not value
        assert result["a"] is not value["a"]
