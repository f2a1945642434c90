"""Tests of scheduler.schema: the CRDs in crds/ and the schema validator behind them."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.errors import FieldCause, InvalidInputError, InvalidObjectError
from scheduler.schema import (
    API_VERSION,
    QUANTITY_PATTERN,
    CrdCatalog,
    apply_defaults,
    load_crds,
    structural_violations,
    validate,
)

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
CATALOG = load_crds()
QUANTITY_MESSAGE = f"should match '{QUANTITY_PATTERN}'"


# --------------------------------------------------------------------------------------------
# Builders


def podgroup(
    spec: Any = None, *, name: str = "gang-a", status: Any = None, omit_spec: bool = False
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "team-a"},
    }
    if not omit_spec:
        obj["spec"] = {} if spec is None else spec
    if status is not None:
        obj["status"] = status
    return obj


def queue(spec: Any = None, *, name: str = "research", status: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {} if spec is None else spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def topology(*labels: Any, name: str = "dc") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


def causes_of(obj: Mapping[str, Any]) -> tuple[FieldCause, ...]:
    """What the API server would report for ``obj`` after defaulting it."""
    schema = CATALOG.get(str(obj["kind"]))
    assert schema is not None
    return validate(apply_defaults(obj, schema.schema), schema.schema)


def schema_nodes(node: Any, path: str = "openAPIV3Schema") -> Iterator[tuple[str, Any]]:
    """Every node of a schema that holds a value: the root, properties, items, map values."""
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from schema_nodes(child, f"{path}.properties[{key}]")
    if isinstance(node.get("items"), Mapping):
        yield from schema_nodes(node["items"], f"{path}.items")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from schema_nodes(node["additionalProperties"], f"{path}.additionalProperties")


# --------------------------------------------------------------------------------------------
# Valid objects pass


VALID = [
    pytest.param(podgroup(), id="podgroup-empty-spec"),
    pytest.param(
        podgroup(
            {
                "minMember": 4,
                "minTaskMember": {"ps": 1, "worker": 3},
                "minResources": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 8},
                "queue": "research",
                "priorityClassName": "high",
                "topologyConstraint": {
                    "topology": "dc",
                    "requiredLevel": "topology.kubernetes.io/zone",
                    "preferredLevel": "example.com/rack",
                },
            },
            status={
                "phase": "Running",
                "conditions": [
                    {
                        "type": "Scheduled",
                        "status": "True",
                        "reason": "AllBound",
                        "message": "4/4 pods bound",
                        "lastTransitionTime": "2024-05-01T12:00:00Z",
                    }
                ],
                "running": 4,
                "succeeded": 0,
                "failed": 0,
            },
        ),
        id="podgroup-full",
    ),
    pytest.param(podgroup({"minMember": 0}), id="podgroup-min-member-zero"),
    pytest.param(queue(), id="queue-empty-spec"),
    pytest.param(
        queue(
            {
                "weight": 3,
                "capability": {"cpu": "100", "memory": "1Ti", "pods": 110},
                "deserved": {"cpu": "50500m", "memory": "512Gi"},
                "guarantee": {"cpu": 8, "memory": "1e9"},
                "reclaimable": False,
                "priority": -5,
                "parent": "root",
            },
            status={
                "state": "Open",
                "allocated": {"cpu": "12"},
                "pending": 1,
                "running": 2,
                "inqueue": 0,
            },
        ),
        id="queue-full",
    ),
    pytest.param(
        topology("topology.kubernetes.io/zone", "example.com/rack"), id="topology-two-levels"
    ),
    pytest.param(
        {**topology("zone"), "status": {"anything": {"goes": [1, 2]}}},
        id="topology-status-preserved",
    ),
]


@pytest.mark.parametrize("obj", VALID)
def test_valid_objects_pass(obj: dict[str, Any]) -> None:
    assert causes_of(obj) == ()
    assert CATALOG.check(obj)["spec"]


@pytest.mark.parametrize(
    "quantity",
    ["1", "500m", "1Gi", "1.5", ".5", "1e3", "+1", "2E", "1.", "-1", 4, 0],
    ids=str,
)
def test_quantities_the_api_server_accepts_pass(quantity: Any) -> None:
    assert causes_of(queue({"capability": {"cpu": quantity}})) == ()


# --------------------------------------------------------------------------------------------
# Each rule fails, naming the field as the API server does


INVALID = [
    pytest.param(
        podgroup({"minMember": -1}),
        "spec.minMember",
        "Invalid value: -1: spec.minMember in body should be greater than or equal to 0",
        id="negative-min-member",
    ),
    pytest.param(
        podgroup({"minMember": 1.5}),
        "spec.minMember",
        'Invalid value: "number": spec.minMember in body must be of type integer: "number"',
        id="fractional-min-member",
    ),
    pytest.param(podgroup(omit_spec=True), "spec", "Required value", id="podgroup-missing-spec"),
    pytest.param(
        {**queue(), "spec": None},
        "spec",
        'Invalid value: "null": spec in body must be of type object: "null"',
        id="queue-null-spec",
    ),
    pytest.param({**topology(), "spec": {}}, "spec.levels", "Required value", id="levels-missing"),
    pytest.param(
        topology(),
        "spec.levels",
        "Invalid value: 0: spec.levels in body should have at least 1 items",
        id="levels-empty",
    ),
    pytest.param(
        topology("zone", ""),
        "spec.levels[1].nodeLabel",
        'Invalid value: "": spec.levels[1].nodeLabel in body should be at least 1 chars long',
        id="node-label-empty",
    ),
    pytest.param(
        {**topology(), "spec": {"levels": [{}]}},
        "spec.levels[0].nodeLabel",
        "Required value",
        id="node-label-missing",
    ),
    pytest.param(
        {**topology(), "spec": {"levels": ["zone"]}},
        "spec.levels[0]",
        'Invalid value: "string": spec.levels[0] in body must be of type object: "string"',
        id="level-not-object",
    ),
    pytest.param(
        podgroup(status={"phase": "Foo"}),
        "status.phase",
        'Unsupported value: "Foo": supported values: "Pending", "Inqueue", "Running", '
        '"Completed", "Unknown"',
        id="bad-phase",
    ),
    pytest.param(
        podgroup(status={"conditions": [{"type": "Scheduled", "status": "Maybe"}]}),
        "status.conditions[0].status",
        'Unsupported value: "Maybe": supported values: "True", "False", "Unknown"',
        id="bad-condition-status",
    ),
    pytest.param(
        podgroup(status={"conditions": [{"type": "Ready", "status": "True"}]}),
        "status.conditions[0].type",
        'Unsupported value: "Ready": supported values: "Scheduled", "Unschedulable", "Reserved"',
        id="bad-condition-type",
    ),
    pytest.param(
        podgroup(status={"conditions": [{"status": "True"}]}),
        "status.conditions[0].type",
        "Required value",
        id="condition-type-missing",
    ),
    pytest.param(
        podgroup(
            status={
                "conditions": [
                    {"type": "Scheduled", "status": "True", "lastTransitionTime": "yesterday"}
                ]
            }
        ),
        "status.conditions[0].lastTransitionTime",
        'Invalid value: "yesterday": status.conditions[0].lastTransitionTime in body must be '
        'of type date-time: "yesterday"',
        id="bad-date-time",
    ),
    pytest.param(
        queue(status={"state": "Paused"}),
        "status.state",
        'Unsupported value: "Paused": supported values: "Open", "Closed", "Closing"',
        id="bad-queue-state",
    ),
    pytest.param(
        podgroup({"minMembr": 2}),
        "spec.minMembr",
        "field not declared in schema",
        id="unknown-spec-field",
    ),
    pytest.param(
        podgroup({"topologyConstraint": {"topology": "dc", "level": "rack"}}),
        "spec.topologyConstraint.level",
        "field not declared in schema",
        id="unknown-nested-field",
    ),
    pytest.param(
        {**queue(), "extra": True}, "extra", "field not declared in schema", id="unknown-root-field"
    ),
    pytest.param(
        queue({"weight": "string"}),
        "spec.weight",
        'Invalid value: "string": spec.weight in body must be of type integer: "string"',
        id="weight-wrong-type",
    ),
    pytest.param(
        queue({"weight": 0}),
        "spec.weight",
        "Invalid value: 0: spec.weight in body should be greater than or equal to 1",
        id="weight-zero",
    ),
    pytest.param(
        queue({"reclaimable": "yes"}),
        "spec.reclaimable",
        'Invalid value: "string": spec.reclaimable in body must be of type boolean: "string"',
        id="reclaimable-wrong-type",
    ),
    pytest.param(
        queue({"weight": True}),
        "spec.weight",
        'Invalid value: "boolean": spec.weight in body must be of type integer: "boolean"',
        id="boolean-is-not-integer",
    ),
    pytest.param(
        queue({"capability": {"cpu": "12x"}}),
        "spec.capability.cpu",
        f'Invalid value: "12x": spec.capability.cpu in body {QUANTITY_MESSAGE}',
        id="bad-quantity",
    ),
    pytest.param(
        podgroup({"minResources": {"memory": "1 Gi"}}),
        "spec.minResources.memory",
        f'Invalid value: "1 Gi": spec.minResources.memory in body {QUANTITY_MESSAGE}',
        id="bad-quantity-space",
    ),
    pytest.param(
        queue({"guarantee": {"cpu": True}}),
        "spec.guarantee.cpu",
        'Invalid value: "boolean": spec.guarantee.cpu in body must be of type integer,string: '
        '"boolean"',
        id="quantity-wrong-type",
    ),
    pytest.param(
        queue(status={"allocated": {"cpu": "--1"}}),
        "status.allocated.cpu",
        f'Invalid value: "--1": status.allocated.cpu in body {QUANTITY_MESSAGE}',
        id="bad-allocated-quantity",
    ),
    pytest.param(
        podgroup({"minTaskMember": {"worker": -2}}),
        "spec.minTaskMember.worker",
        "Invalid value: -2: spec.minTaskMember.worker in body should be greater than or equal to 0",
        id="negative-task-member",
    ),
    pytest.param(
        podgroup({"queue": ""}),
        "spec.queue",
        'Invalid value: "": spec.queue in body should be at least 1 chars long',
        id="queue-name-empty",
    ),
    pytest.param(
        podgroup({"topologyConstraint": {"requiredLevel": "rack"}}),
        "spec.topologyConstraint.topology",
        "Required value",
        id="topology-name-missing",
    ),
    pytest.param(
        podgroup(status={"running": -1}),
        "status.running",
        "Invalid value: -1: status.running in body should be greater than or equal to 0",
        id="negative-running",
    ),
]


@pytest.mark.parametrize(("obj", "field", "message"), INVALID)
def test_each_rule_fails_naming_the_field(obj: dict[str, Any], field: str, message: str) -> None:
    assert causes_of(obj) == (FieldCause(field, message),)


@pytest.mark.parametrize("quantity", ["12x", "1..5", "--1", "Gi", "", "1 Gi", "1gi", "0x10"])
def test_quantities_the_api_server_refuses_fail(quantity: str) -> None:
    (cause,) = causes_of(queue({"deserved": {"cpu": quantity}}))
    assert cause.field == "spec.deserved.cpu"
    assert cause.message.endswith(QUANTITY_MESSAGE)


def test_all_causes_are_reported_sorted_by_path() -> None:
    obj = topology(*["zone"] * 12)
    obj["spec"]["levels"][10]["nodeLabel"] = ""
    obj["spec"]["levels"][2]["nodeLabel"] = ""
    obj["spec"]["extra"] = 1
    obj["kind"] = "Topology"
    fields = [cause.field for cause in causes_of(obj)]
    assert fields == ["spec.extra", "spec.levels[2].nodeLabel", "spec.levels[10].nodeLabel"]


def test_metadata_fields_are_never_undeclared() -> None:
    obj = podgroup()
    obj["metadata"] |= {"labels": {"a": "b"}, "annotations": {}, "uid": "1", "finalizers": []}
    assert causes_of(obj) == ()


# --------------------------------------------------------------------------------------------
# The validator on small schemas: the rules no CRD of Sluice uses yet


def obj_with(value: Any) -> dict[str, Any]:
    return {"spec": {"x": value}}


def schema_with(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"x": node}}},
    }


RULES = [
    pytest.param({"type": "string", "nullable": True}, None, (), id="nullable-null"),
    pytest.param(
        {"type": "string"},
        None,
        ('Invalid value: "null": spec.x in body must be of type string: "null"',),
        id="not-nullable-null",
    ),
    pytest.param({"type": "integer"}, 2.0, (), id="integral-float-is-integer"),
    pytest.param({"type": "number"}, 2, (), id="integer-is-number"),
    pytest.param({"type": "integer", "maximum": 10}, 10, (), id="maximum-inclusive"),
    pytest.param(
        {"type": "integer", "maximum": 10, "exclusiveMaximum": True},
        10,
        ("Invalid value: 10: spec.x in body should be less than 10",),
        id="maximum-exclusive",
    ),
    pytest.param(
        {"type": "number", "minimum": 0.5, "exclusiveMinimum": True},
        0.5,
        ("Invalid value: 0.5: spec.x in body should be greater than 0.5",),
        id="minimum-exclusive",
    ),
    pytest.param(
        {"type": "integer", "maximum": 1000000},
        1000001,
        ("Invalid value: 1000001: spec.x in body should be less than or equal to 1e+06",),
        id="maximum-printed-as-go-float",
    ),
    pytest.param(
        {"type": "integer", "multipleOf": 4},
        6,
        ("Invalid value: 6: spec.x in body should be a multiple of 4",),
        id="multiple-of",
    ),
    pytest.param(
        {"type": "string", "maxLength": 3},
        "abcd",
        ("Too long: may not be more than 3 bytes",),
        id="max-length",
    ),
    pytest.param(
        {"type": "array", "items": {"type": "integer"}, "maxItems": 1},
        [1, 2],
        ("Too many: 2: must have at most 1 item",),
        id="max-items",
    ),
    pytest.param(
        {"type": "string", "pattern": "^[a-z]+$"},
        "ab1",
        ("Invalid value: \"ab1\": spec.x in body should match '^[a-z]+$'",),
        id="pattern",
    ),
    pytest.param(
        {"type": "integer", "enum": [1, 2]},
        3,
        ('Unsupported value: 3: supported values: "1", "2"',),
        id="enum-integers",
    ),
    pytest.param(
        {"type": "boolean", "enum": [False]},
        False,
        (),
        id="enum-boolean",
    ),
    pytest.param(
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        {"a": {"b": 1}},
        (),
        id="preserve-unknown-fields",
    ),
    pytest.param(
        {"type": "object", "additionalProperties": True}, {"a": 1}, (), id="additional-true"
    ),
    pytest.param(
        {"type": "object", "additionalProperties": False},
        {"a": 1},
        (),
        id="additional-false",
    ),
    pytest.param(
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"a": 1},
        ('Invalid value: "integer": spec.x.a in body must be of type string: "integer"',),
        id="additional-schema",
    ),
    pytest.param(
        {"type": "string", "format": "date-time"},
        "2024-02-30T25:00:00Z",
        (
            'Invalid value: "2024-02-30T25:00:00Z": spec.x in body must be of type date-time: '
            '"2024-02-30T25:00:00Z"',
        ),
        id="date-time-hour-25",
    ),
    pytest.param(
        {"type": "string", "format": "date-time"},
        "2024-02-03T04:05:06.123+02:00",
        (),
        id="date-time-offset",
    ),
    pytest.param(
        {"type": "string", "allOf": [{"minLength": 2}, {"pattern": "^a"}]},
        "b",
        (
            'Invalid value: "b": spec.x in body should be at least 2 chars long',
            "Invalid value: \"b\": spec.x in body should match '^a'",
        ),
        id="all-of",
    ),
    pytest.param(
        {"type": "integer", "anyOf": [{"maximum": 1}, {"minimum": 10}]},
        5,
        (
            "Invalid value: 5: spec.x in body must validate at least one schema (anyOf)",
            "Invalid value: 5: spec.x in body should be greater than or equal to 10",
            "Invalid value: 5: spec.x in body should be less than or equal to 1",
        ),
        id="any-of",
    ),
    pytest.param(
        {"type": "integer", "oneOf": [{"minimum": 1}, {"minimum": 2}]},
        5,
        ("Invalid value: 5: spec.x in body must validate one and only one schema (oneOf)",),
        id="one-of",
    ),
    pytest.param(
        {"type": "string", "not": {"enum": ["root"]}},
        "root",
        ('Invalid value: "root": spec.x in body must not validate the schema (not)',),
        id="not",
    ),
]


@pytest.mark.parametrize(("node", "value", "messages"), RULES)
def test_schema_rules(node: dict[str, Any], value: Any, messages: tuple[str, ...]) -> None:
    causes = validate(obj_with(value), schema_with(node))
    if node.get("additionalProperties") is False:
        assert causes == (FieldCause("spec.x.a", "field not declared in schema"),)
    else:
        assert tuple(cause.message for cause in causes) == messages


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=20,
    ),
    st.sampled_from(["PodGroup", "Queue", "Topology", "Pod", None]),
)
def test_bad_input_never_raises_anything_but_invalid_object(spec: Any, kind: Any) -> None:
    obj = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    for info in (CATALOG.get(name) for name in CATALOG.kinds()):
        assert info is not None
        causes = validate(apply_defaults(obj, info.schema), info.schema)
        assert all(isinstance(cause, FieldCause) for cause in causes)
    try:
        CATALOG.check(obj)
    except InvalidObjectError as error:
        assert error.causes


# --------------------------------------------------------------------------------------------
# Defaults


DEFAULTS = [
    pytest.param(podgroup(), ("spec", "queue"), "default", id="podgroup-queue"),
    pytest.param(podgroup(), ("spec", "minMember"), 1, id="podgroup-min-member"),
    pytest.param(podgroup({"minMember": 3}), ("spec", "minMember"), 3, id="podgroup-kept"),
    pytest.param(
        podgroup({"minMember": None}), ("spec", "minMember"), 1, id="podgroup-null-defaulted"
    ),
    pytest.param(queue(), ("spec", "weight"), 1, id="queue-weight"),
    pytest.param(queue(), ("spec", "reclaimable"), True, id="queue-reclaimable"),
    pytest.param(queue({"reclaimable": False}), ("spec", "reclaimable"), False, id="queue-kept"),
]


@pytest.mark.parametrize(("obj", "path", "expected"), DEFAULTS)
def test_defaults_are_applied_without_mutating_input(
    obj: dict[str, Any], path: tuple[str, ...], expected: Any
) -> None:
    before = copy.deepcopy(obj)
    info = CATALOG.get(obj["kind"])
    assert info is not None
    defaulted = apply_defaults(obj, info.schema)
    value: Any = defaulted
    for key in path:
        value = value[key]
    assert value == expected
    assert type(value) is type(expected)
    assert obj == before
    defaulted["spec"]["touched"] = True
    assert obj == before


def test_defaults_skip_absent_parents_and_copy_read_only_input() -> None:
    info = CATALOG.get("PodGroup")
    assert info is not None
    frozen = MappingProxyType({"kind": "PodGroup", "spec": MappingProxyType({})})
    assert apply_defaults(frozen, info.schema) == {
        "kind": "PodGroup",
        "spec": {"minMember": 1, "queue": "default"},
    }
    assert "spec" not in apply_defaults({"kind": "PodGroup"}, info.schema)


# --------------------------------------------------------------------------------------------
# check: what the API server answers on create


CHECK_FAILS = [
    pytest.param(
        podgroup({"minMember": -1}),
        'PodGroup.scheduling.sluice.dev "gang-a" is invalid: spec.minMember: Invalid value: -1: '
        "spec.minMember in body should be greater than or equal to 0",
        id="one-cause",
    ),
    pytest.param(
        queue({"weight": 0, "parent": 7}),
        'Queue.scheduling.sluice.dev "research" is invalid: [spec.parent: Invalid value: '
        '"integer": spec.parent in body must be of type string: "integer", spec.weight: '
        "Invalid value: 0: spec.weight in body should be greater than or equal to 1]",
        id="two-causes-in-brackets",
    ),
    pytest.param(
        {**topology("zone"), "apiVersion": "scheduling.sluice.dev/v1"},
        'Topology.scheduling.sluice.dev "dc" is invalid: apiVersion: Unsupported value: '
        '"scheduling.sluice.dev/v1": supported values: "scheduling.sluice.dev/v1alpha1"',
        id="wrong-api-version",
    ),
    pytest.param(
        {**topology("zone"), "metadata": {}},
        'Topology.scheduling.sluice.dev "" is invalid: metadata.name: Required value: '
        "name or generateName is required",
        id="name-missing",
    ),
    pytest.param(
        queue(name="Team_A"),
        'Queue.scheduling.sluice.dev "Team_A" is invalid: metadata.name: Invalid value: '
        '"Team_A": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        id="name-not-dns-subdomain",
    ),
    pytest.param(
        {**queue(), "kind": "Pod"},
        'Pod "research" is invalid: kind: Unsupported value: "Pod": supported values: '
        '"PodGroup", "Queue", "Topology", "Workload"',
        id="kind-not-custom",
    ),
]


@pytest.mark.parametrize(("obj", "message"), CHECK_FAILS)
def test_check_raises_the_api_server_message(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObjectError) as raised:
        CATALOG.check(obj)
    error = raised.value
    assert str(error) == message
    assert error.code == 422
    assert error.name == obj["metadata"].get("name", "")
    assert error.kind == obj["kind"]
    assert error.causes
    assert ", ".join(map(str, error.causes)) in message


def test_check_returns_the_defaulted_object_and_leaves_input_alone() -> None:
    obj = podgroup({"minMember": 2})
    before = copy.deepcopy(obj)
    admitted = CATALOG.check(obj)
    assert admitted["spec"] == {"minMember": 2, "queue": "default"}
    assert admitted["metadata"]["namespace"] == "team-a"
    assert obj == before


def test_check_clears_the_namespace_of_cluster_scoped_kinds() -> None:
    obj = topology("zone")
    obj["metadata"]["namespace"] = "ignored"
    assert "namespace" not in CATALOG.check(obj)["metadata"]
    assert obj["metadata"]["namespace"] == "ignored"


# --------------------------------------------------------------------------------------------
# The catalog and the CRD files


@pytest.mark.parametrize(
    ("kind", "plural", "short", "namespaced", "columns"),
    [
        ("PodGroup", "podgroups", "pg", True, ["Phase", "MinMember", "Running", "Queue", "Age"]),
        (
            "Queue",
            "queues",
            "q",
            False,
            ["Weight", "Parent", "Deserved", "Allocated", "State", "Age"],
        ),
        ("Topology", "topologies", "topo", False, ["Levels", "Age"]),
    ],
    ids=["podgroup", "queue", "topology"],
)
def test_catalog_describes_each_kind(
    kind: str, plural: str, short: str, namespaced: bool, columns: list[str]
) -> None:
    info = CATALOG.get(kind)
    assert info is not None
    assert (info.group, info.version, info.api_version) == (
        "scheduling.sluice.dev",
        "v1alpha1",
        API_VERSION,
    )
    assert (info.plural, info.singular, info.short_names) == (plural, kind.lower(), (short,))
    assert info.namespaced is namespaced
    assert info.has_status_subresource
    assert [column.name for column in info.printer_columns] == columns
    assert info.schema["required"] == ["spec"]
    assert info.schema["properties"]["metadata"] == {"type": "object"}
    assert CATALOG.by_plural(plural) is info
    assert CATALOG.resolve(short) is info
    assert CATALOG.resolve(kind.upper()) is info
    assert CATALOG.is_custom(kind)


def test_catalog_lookups_of_unknown_names() -> None:
    assert CATALOG.kinds() == (
        "PodGroup",
        "PodGroup.scheduling.k8s.io",
        "PodGroup.scheduling.volcano.sh",
        "PodGroup.scheduling.x-k8s.io",
        "Queue",
        "Queue.scheduling.volcano.sh",
        "Topology",
        "Workload.scheduling.k8s.io",
    )
    assert CATALOG.get("Pod") is None
    assert CATALOG.by_plural("pods") is None
    assert CATALOG.resolve("po") is None
    assert not CATALOG.is_custom("Pod")
    assert load_crds() is CATALOG


def test_topology_levels_column_lists_node_labels() -> None:
    info = CATALOG.get("Topology")
    assert info is not None
    assert info.printer_columns[0].json_path == ".spec.levels[*].nodeLabel"


CRD_FILES = ["podgroup.yaml", "queue.yaml", "topology.yaml"]


@pytest.mark.parametrize("filename", CRD_FILES)
def test_crd_file_is_a_structural_v1_crd(filename: str) -> None:
    (crd,) = yaml.safe_load_all((CRD_DIR / filename).read_text(encoding="utf-8"))
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["group"] == "scheduling.sluice.dev"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert "spec" in schema["required"]
    assert structural_violations(schema) == ()
    for path, node in schema_nodes(schema):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        assert node.get("type") or int_or_string or preserve, path
        if int_or_string:
            assert "type" not in node, path
            assert node["pattern"] == QUANTITY_PATTERN, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path


NOT_STRUCTURAL = [
    pytest.param(
        {"type": "object", "properties": {"spec": {}}},
        "openAPIV3Schema.properties[spec].type",
        "Required value: must not be empty for specified object fields",
        id="type-missing",
    ),
    pytest.param(
        {"type": "object", "properties": {"spec": {"type": "map"}}},
        "openAPIV3Schema.properties[spec].type",
        'Unsupported value: "map": supported values: "array", "boolean", "integer", "number", '
        '"object", "string"',
        id="type-unknown",
    ),
    pytest.param(
        {
            "type": "object",
            "properties": {"n": {"type": "string", "x-kubernetes-int-or-string": True}},
        },
        "openAPIV3Schema.properties[n].type",
        "Forbidden: must be empty with x-kubernetes-int-or-string",
        id="int-or-string-with-type",
    ),
    pytest.param(
        {"type": "object", "properties": {"l": {"type": "array"}}},
        "openAPIV3Schema.properties[l].items",
        "Required value: must be specified",
        id="array-without-items",
    ),
    pytest.param(
        {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
        "openAPIV3Schema.additionalProperties",
        "Forbidden: additionalProperties and properties are mutual exclusive",
        id="properties-and-additional-properties",
    ),
    pytest.param(
        {"type": "object", "properties": {"w": {"type": "integer", "minimum": 1, "default": 0}}},
        "openAPIV3Schema.properties[w].default",
        "Invalid value: 0: body should be greater than or equal to 1",
        id="default-invalid",
    ),
    pytest.param(
        {"type": "object", "properties": {"s": {"type": "string", "pattern": "("}}},
        "openAPIV3Schema.properties[s].pattern",
        'Invalid value: "(": must be a valid regular expression',
        id="pattern-invalid",
    ),
    pytest.param(
        {"type": "object", "properties": {"s": {"type": "string", "anyOf": [{"type": "string"}]}}},
        "openAPIV3Schema.properties[s].anyOf[0].type",
        "Forbidden: must be empty to be structural",
        id="type-in-any-of",
    ),
    pytest.param(
        {"type": "array", "items": {"type": "string"}},
        "openAPIV3Schema.type",
        'Unsupported value: must be "object" at the root',
        id="root-not-object",
    ),
]


@pytest.mark.parametrize(("schema", "field", "message"), NOT_STRUCTURAL)
def test_structural_violations(schema: dict[str, Any], field: str, message: str) -> None:
    assert FieldCause(field, message) in structural_violations(schema)


def test_metadata_may_say_no_more_than_its_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}
        },
    }
    (cause,) = structural_violations(schema)
    assert cause.field == "openAPIV3Schema.properties[metadata]"
    assert cause.message.startswith("Forbidden: must not specify anything other than name")


# --------------------------------------------------------------------------------------------
# Loading other directories


def write_crd(directory: Path, filename: str, kind: str, spec_schema: dict[str, Any]) -> Path:
    """Write a CRD of ``kind`` in group example.com whose storage version is v2; its path."""
    plural = f"{kind.lower()}s"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural},
            "versions": [
                {"name": "v1", "served": True, "storage": False},
                {
                    "name": "v2",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema},
                        }
                    },
                },
            ],
        },
    }
    path = directory / filename
    path.write_text(yaml.safe_dump(crd), encoding="utf-8")
    return path


def test_load_crds_reads_the_storage_version_of_another_directory(tmp_path: Path) -> None:
    write_crd(tmp_path, "widget.yml", "Widget", {"type": "object"})
    (tmp_path / "README.md").write_text("not a CRD", encoding="utf-8")
    catalog = load_crds(tmp_path)
    assert isinstance(catalog, CrdCatalog)
    info = catalog.get("Widget")
    assert info is not None
    assert (info.api_version, info.singular, info.short_names) == ("example.com/v2", "widget", ())
    assert not info.has_status_subresource
    assert info.printer_columns == ()


@pytest.mark.parametrize(
    ("setup", "field"),
    [
        pytest.param(
            lambda d: write_crd(d, "a.yaml", "Widget", {"properties": {}}),
            "spec.versions[1].schema.openAPIV3Schema.properties[spec].type",
            id="not-structural",
        ),
        pytest.param(
            lambda d: [
                write_crd(d, name, "Widget", {"type": "object"}) for name in ("a.yaml", "b.yaml")
            ],
            "spec.names.kind",
            id="duplicate-kind",
        ),
        pytest.param(
            lambda d: (d / "a.yaml").write_text("kind: ConfigMap\n", encoding="utf-8"),
            "kind",
            id="not-a-crd",
        ),
        pytest.param(
            lambda d: (d / "a.yaml").write_text("spec: [\n", encoding="utf-8"),
            None,
            id="not-yaml",
        ),
    ],
)
def test_load_crds_refuses_bad_definitions(tmp_path: Path, setup: Any, field: str | None) -> None:
    setup(tmp_path)
    with pytest.raises(InvalidInputError) as raised:
        load_crds(tmp_path)
    assert raised.value.field == field


def test_load_crds_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        load_crds(tmp_path / "absent")
