"""What the admission webhook refuses: scheduler.controllers.validation (no kopf involved)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.controllers.validation import parent_of, validate_pod_group, validate_queue

API_VERSION = "scheduling.sluice.dev/v1alpha1"
MALFORMED = (
    "malformed quantity {!r}; expected a number with an optional suffix such as 100m, 2Gi, 1e3"
)


def pod_group(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": "team-a"},
        "spec": spec,
    }


def queue(name: str = "a", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def hierarchy(**parents: str) -> dict[str, dict[str, Any]]:
    """Existing queues by name, each with the given parent ("" for a root)."""
    return {
        name: queue(name, parent=parent) if parent else queue(name)
        for name, parent in parents.items()
    }


# --------------------------------------------------------------------------------------------
# PodGroup


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod_group(), id="empty-spec-defaults"),
        pytest.param(pod_group(minMember=0), id="min-member-zero"),
        pytest.param(pod_group(minMember=3), id="min-member-only"),
        pytest.param(
            pod_group(minMember=4, minTaskMember={"ps": 1, "worker": 3}), id="roles-sum-equal"
        ),
        pytest.param(pod_group(minMember=8, minTaskMember={"worker": 3}), id="roles-below"),
        pytest.param(
            pod_group(
                minMember=2,
                minResources={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2, "pods": 2},
            ),
            id="min-resources",
        ),
        pytest.param(pod_group(minResources={"cpu": "500m", "memory": 1e9}), id="float-quantity"),
        pytest.param(
            pod_group(
                minMember=2,
                queue="training",
                priorityClassName="high",
                topologyConstraint={"topology": "racks", "requiredLevel": "rack"},
            ),
            id="all-fields",
        ),
    ],
)
def test_valid_pod_groups_pass(obj: dict[str, Any]) -> None:
    assert validate_pod_group(obj) == []


@pytest.mark.parametrize(
    ("obj", "messages"),
    [
        pytest.param(
            pod_group(minMember=-1),
            ["spec.minMember: must not be negative, got -1"],
            id="negative-min-member",
        ),
        pytest.param(
            pod_group(minMember=3, minTaskMember={"ps": 2, "worker": 3}),
            ["spec.minTaskMember: sum 5 exceeds spec.minMember 3"],
            id="roles-sum-above",
        ),
        pytest.param(
            pod_group(minMember=3, minTaskMember={"worker": 4}),
            [
                "spec.minTaskMember.worker: 4 exceeds spec.minMember 3",
                "spec.minTaskMember: sum 4 exceeds spec.minMember 3",
            ],
            id="one-role-above",
        ),
        pytest.param(
            pod_group(minTaskMember={"worker": 2}),
            [
                "spec.minTaskMember.worker: 2 exceeds spec.minMember 1",
                "spec.minTaskMember: sum 2 exceeds spec.minMember 1",
            ],
            id="roles-above-defaulted-min-member",
        ),
        pytest.param(
            pod_group(minMember=3, minTaskMember={"worker": -1}),
            ["spec.minTaskMember.worker: must not be negative, got -1"],
            id="negative-role",
        ),
        pytest.param(
            pod_group(minMember=3, minTaskMember={"worker": "two"}),
            ["spec.minTaskMember.worker: must be an integer, got 'two'"],
            id="role-not-integer",
        ),
        pytest.param(
            pod_group(minResources={"cpu": "12x"}),
            ["spec.minResources.cpu: " + MALFORMED.format("12x")],
            id="malformed-quantity",
        ),
        pytest.param(
            pod_group(minResources={"cpu": "1..5", "memory": "-1Gi", "pods": 2}),
            [
                "spec.minResources.cpu: " + MALFORMED.format("1..5"),
                "spec.minResources.memory: must not be negative, got '-1Gi'",
            ],
            id="every-bad-quantity-named",
        ),
        pytest.param(
            pod_group(minResources="lots"),
            ["spec.minResources: must be a map of resource name to quantity"],
            id="min-resources-not-a-map",
        ),
        pytest.param(
            pod_group(minMember=-2, minTaskMember={"a": 1}, minResources={"gpu": "x"}),
            [
                "spec.minMember: must not be negative, got -2",
                "spec.minResources.gpu: " + MALFORMED.format("x"),
            ],
            id="several-problems",
        ),
        pytest.param(
            pod_group(minMember="three"),
            [
                'spec.minMember: Invalid value: "string": spec.minMember in body must be of type '
                'integer: "string"'
            ],
            id="schema-type",
        ),
        pytest.param(
            pod_group(queue=""),
            ['spec.queue: Invalid value: "": spec.queue in body should be at least 1 chars long'],
            id="schema-min-length",
        ),
        pytest.param(
            {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": "g"}},
            ["spec: Required value"],
            id="schema-required-spec",
        ),
    ],
)
def test_invalid_pod_groups_are_refused(obj: dict[str, Any], messages: list[str]) -> None:
    assert validate_pod_group(obj) == messages


def test_pod_group_is_not_changed() -> None:
    obj = pod_group(minTaskMember={"a": 1})
    before = repr(obj)
    validate_pod_group(obj)
    assert repr(obj) == before


# --------------------------------------------------------------------------------------------
# Queue


@pytest.mark.parametrize(
    ("obj", "existing"),
    [
        pytest.param(queue(), {}, id="root"),
        pytest.param(queue(weight=3, priority=2, reclaimable=False), {}, id="scalar-fields"),
        pytest.param(queue(parent="default"), hierarchy(default=""), id="child-of-existing"),
        pytest.param(queue("c", parent="b"), hierarchy(a="", b="a"), id="grandchild"),
        pytest.param(
            queue("c", parent="b"), hierarchy(b="gone"), id="missing-grandparent-is-not-ours"
        ),
        pytest.param(
            queue("a", parent="b"), hierarchy(a="", b=""), id="update-moves-under-sibling"
        ),
        pytest.param(queue("a"), hierarchy(a="b", b="a"), id="update-breaking-a-cycle"),
        pytest.param(
            queue(capability={"cpu": "8", "memory": "16Gi"}, guarantee={"cpu": 4}),
            {},
            id="capability-above-guarantee",
        ),
        pytest.param(
            queue(capability={"cpu": "4"}, guarantee={"cpu": "4000m"}), {}, id="equal-in-units"
        ),
        pytest.param(
            queue(capability={"cpu": "4"}, guarantee={"memory": "64Gi"}),
            {},
            id="unbounded-resource",
        ),
        pytest.param(
            queue(deserved={"cpu": "2", "nvidia.com/gpu": 1}, guarantee={"cpu": "1"}),
            {},
            id="deserved",
        ),
    ],
)
def test_valid_queues_pass(obj: dict[str, Any], existing: dict[str, Any]) -> None:
    assert validate_queue(obj, existing) == []


@pytest.mark.parametrize(
    ("obj", "existing", "messages"),
    [
        pytest.param(
            queue("a", parent="b"),
            hierarchy(b="a"),
            ["spec.parent: queue a -> b -> a forms a cycle"],
            id="two-cycle",
        ),
        pytest.param(
            queue("a", parent="a"),
            {},
            ["spec.parent: queue a -> a forms a cycle"],
            id="self-parent",
        ),
        pytest.param(
            queue("a", parent="c"),
            hierarchy(b="a", c="b"),
            ["spec.parent: queue a -> c -> b -> a forms a cycle"],
            id="three-cycle",
        ),
        pytest.param(
            queue("a", parent="b"),
            hierarchy(a="", b="a"),
            ["spec.parent: queue a -> b -> a forms a cycle"],
            id="update-makes-cycle",
        ),
        pytest.param(
            queue("c", parent="x"),
            hierarchy(x="y", y="x"),
            ["spec.parent: queue c -> x -> y -> x forms a cycle"],
            id="cycle-above",
        ),
        pytest.param(
            queue("a", parent="nope"),
            hierarchy(default=""),
            ["spec.parent: queue nope does not exist"],
            id="missing-parent",
        ),
        pytest.param(
            queue(capability={"cpu": "2"}, guarantee={"cpu": 4}),
            {},
            ["spec.capability.cpu: 2 is below spec.guarantee.cpu 4"],
            id="capability-below-guarantee",
        ),
        pytest.param(
            queue(capability={"cpu": "8", "memory": "1Gi"}, guarantee={"cpu": 8, "memory": "2Gi"}),
            {},
            ["spec.capability.memory: 1Gi is below spec.guarantee.memory 2Gi"],
            id="below-in-one-resource",
        ),
        pytest.param(
            queue(capability={"cpu": "12x"}),
            {},
            ["spec.capability.cpu: " + MALFORMED.format("12x")],
            id="malformed-capability",
        ),
        pytest.param(
            queue(deserved={"cpu": "1..5"}),
            {},
            ["spec.deserved.cpu: " + MALFORMED.format("1..5")],
            id="malformed-deserved",
        ),
        pytest.param(
            queue(guarantee={"memory": "-1Gi"}),
            {},
            ["spec.guarantee.memory: must not be negative, got '-1Gi'"],
            id="negative-guarantee",
        ),
        pytest.param(
            queue("a", parent="gone", capability={"cpu": 1}, guarantee={"cpu": 2}),
            {},
            [
                "spec.capability.cpu: 1 is below spec.guarantee.cpu 2",
                "spec.parent: queue gone does not exist",
            ],
            id="several-problems",
        ),
        pytest.param(
            queue(weight=0),
            {},
            [
                "spec.weight: Invalid value: 0: "
                "spec.weight in body should be greater than or equal to 1"
            ],
            id="schema-weight",
        ),
    ],
)
def test_invalid_queues_are_refused(
    obj: dict[str, Any], existing: dict[str, Any], messages: list[str]
) -> None:
    assert validate_queue(obj, existing) == messages


@pytest.mark.parametrize(
    ("obj", "parent"),
    [
        pytest.param(queue(), "", id="root"),
        pytest.param(queue(parent="x"), "x", id="parent"),
        pytest.param({"spec": {"parent": 3}}, "", id="not-a-string"),
        pytest.param({}, "", id="no-spec"),
    ],
)
def test_parent_of(obj: dict[str, Any], parent: str) -> None:
    assert parent_of(obj) == parent
