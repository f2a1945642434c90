"""Tests of scheduler.api.pod: the effective request as Kubernetes computes it, and the parse
of placement constraints with every refusal naming the pod and the field."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.errors import InvalidInputError, QuantityError
from scheduler.api.pod import HostPort, Taint, Toleration, parse_pod_spec, pod_request
from scheduler.api.resource import Resource

Mi = 2**20
OBJ = "Pod default/p"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def c(
    cpu: str | None = None,
    memory: str | None = None,
    *,
    limits: dict[str, Any] | None = None,
    always: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A container requesting ``cpu``/``memory``; ``always`` makes an init container a sidecar."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    out: dict[str, Any] = {"name": "c", "resources": resources, **extra}
    if always:
        out["restartPolicy"] = "Always"
    return out


def R(cpu: int = 0, memory: int = 0, pods: int = 1, **extra: int) -> Resource:
    return Resource({"cpu": cpu, "memory": memory, "pods": pods, **extra})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [c("100m", "100Mi")]}, R(100, 100 * Mi)),
        ({"containers": [c("100m", "100Mi"), c("200m"), c(memory="1Mi")]}, R(300, 101 * Mi)),
        ({"containers": [c()]}, R()),
        ({"containers": []}, R()),
        ({}, R()),
        ({"containers": [c("500m")], "initContainers": [c("1")]}, R(1000)),
        ({"containers": [c("500m", "1Mi")], "initContainers": [c("1"), c("2", "0")]}, R(2000, Mi)),
        ({"containers": [c("2")], "initContainers": [c("1", "8Mi")]}, R(2000, 8 * Mi)),
        # sidecars run beside the containers: added
        ({"containers": [c("500m")], "initContainers": [c("200m", always=True)]}, R(700)),
        # an init container started after a sidecar runs beside it
        ({"containers": [c("500m")], "initContainers": [c("200m", always=True), c("1")]}, R(1200)),
        # an init container started before the sidecar does not
        ({"containers": [c("500m")], "initContainers": [c("1"), c("200m", always=True)]}, R(1000)),
        (
            {
                "containers": [c("100m")],
                "initContainers": [c("100m", always=True), c("100m", always=True), c("250m")],
            },
            R(450),
        ),
        ({"containers": [c("100m")], "initContainers": [c("1", always=False)]}, R(1000)),
        (
            {"containers": [c("100m")], "overhead": {"cpu": "50m", "memory": "10Mi"}},
            R(150, 10 * Mi),
        ),
        (
            {"containers": [c("100m")], "initContainers": [c("1")], "overhead": {"cpu": "50m"}},
            R(1050),
        ),
        ({"containers": [c(limits={"cpu": "2", "memory": "1Mi"})]}, R(2000, Mi)),
        ({"containers": [c("1", limits={"cpu": "2"})]}, R(1000)),
        ({"containers": [c("1", limits={"memory": "3Mi"})]}, R(1000, 3 * Mi)),
        ({"containers": [c(limits={"nvidia.com/gpu": 2})]}, R(**{"nvidia.com/gpu": 2})),
    ],
    ids=[
        "one-container",
        "containers-sum",
        "no-request",
        "no-containers",
        "empty-spec",
        "init-max-wins",
        "init-max-of-inits",
        "containers-win",
        "sidecar-added",
        "init-after-sidecar",
        "init-before-sidecar",
        "two-sidecars-then-init",
        "restartPolicy-not-always",
        "overhead",
        "overhead-after-init-max",
        "limits-default-requests",
        "request-beats-limit",
        "limit-fills-missing-name",
        "extended-from-limit",
    ],
)
def test_pod_request(spec: dict[str, Any], expected: Resource) -> None:
    assert pod_request(spec, obj=OBJ) == expected
    assert parse_pod_spec(spec, obj=OBJ).request == expected


@pytest.mark.parametrize(
    ("spec", "best_effort"),
    [
        ({"containers": [c()]}, True),
        ({"containers": [c("1m")]}, False),
        ({"containers": [c()], "overhead": {"memory": "1"}}, False),
    ],
    ids=["nothing", "cpu", "overhead"],
)
def test_best_effort(spec: dict[str, Any], best_effort: bool) -> None:
    assert parse_pod_spec(spec, obj=OBJ).best_effort is best_effort


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"containers": [c("1..5")]},
            "spec.containers[0].resources.requests.cpu",
            "malformed quantity '1..5'",
        ),
        (
            {"containers": [c(), c(memory="12x")]},
            "spec.containers[1].resources.requests.memory",
            "malformed quantity '12x'",
        ),
        (
            {"containers": [c()], "initContainers": [c("-1")]},
            "spec.initContainers[0].resources.requests.cpu",
            "must not be negative",
        ),
        (
            {"containers": [c()], "overhead": {"cpu": "x"}},
            "spec.overhead.cpu",
            "malformed quantity 'x'",
        ),
    ],
    ids=["container-cpu", "second-container-memory", "init-negative", "overhead"],
)
def test_request_refusals_name_the_field(spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_pod_spec(spec, obj=OBJ)
    assert str(info.value).startswith(f"{OBJ}: {field}: {message}")


def test_malformed_limit_names_the_limits_field() -> None:
    with pytest.raises(QuantityError) as info:
        parse_pod_spec({"containers": [c(limits={"memory": "1..5"})]}, obj=OBJ)
    assert "spec.containers[0].resources.limits.memory" in str(info.value)


def _aff(kind: str, term: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [c()], "affinity": {kind: {REQUIRED: [term]}}}


def _node_term(expr: dict[str, Any]) -> dict[str, Any]:
    return {
        "containers": [c()],
        "affinity": {
            "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}
        },
    }


NODE_TERM = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            _aff("podAffinity", {"labelSelector": {}}),
            f"spec.affinity.podAffinity.{REQUIRED}[0].topologyKey",
            "a non-empty string is required",
        ),
        (
            _aff(
                "podAntiAffinity",
                {
                    "topologyKey": "z",
                    "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]},
                },
            ),
            f"spec.affinity.podAntiAffinity.{REQUIRED}[0].labelSelector.matchExpressions[0].operator",
            "unsupported operator 'Foo'",
        ),
        (
            _node_term({"key": "a", "operator": "In"}),
            f"{NODE_TERM}.values",
            "must be non-empty for In",
        ),
        (
            _node_term({"key": "a", "operator": "Exists", "values": ["x"]}),
            f"{NODE_TERM}.values",
            "must be empty for Exists",
        ),
        (
            _node_term({"key": "a", "operator": "Gt", "values": ["x"]}),
            f"{NODE_TERM}.values",
            "Gt takes an integer, got 'x'",
        ),
        (
            _node_term({"key": "a", "operator": "Lt", "values": ["1", "2"]}),
            f"{NODE_TERM}.values",
            "Lt takes exactly one value",
        ),
        (_node_term({"operator": "Exists"}), f"{NODE_TERM}.key", "a non-empty string is required"),
    ],
    ids=[
        "affinity-topologyKey",
        "anti-affinity-operator",
        "in-without-values",
        "exists-with-values",
        "gt-not-integer",
        "lt-two-values",
        "missing-key",
    ],
)
def test_constraint_refusals_name_the_field(spec: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_pod_spec(spec, obj=OBJ)
    assert str(info.value).startswith(f"{OBJ}: {field}: {message}")


def test_constraints_parsed() -> None:
    spec = {
        "containers": [
            c("1", ports=[{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]),
        ],
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]}
                            ]
                        }
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 5,
                        "preference": {"matchExpressions": [{"key": "fast", "operator": "Exists"}]},
                    }
                ],
            },
            "podAntiAffinity": {
                REQUIRED: [
                    {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
    }
    view = parse_pod_spec(spec, obj=OBJ)
    assert view.node_selector == {"disk": "ssd"}
    assert view.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"),)
    assert view.host_ports == (HostPort("TCP", "", 8080),)
    assert view.required_terms is not None and len(view.required_terms) == 1
    assert view.required_terms[0].matches({"zone": "b"}, "n1")
    assert not view.required_terms[0].matches({"zone": "c"}, "n1")
    assert [p.weight for p in view.preferred_terms] == [5]
    assert view.pod_affinity == ()
    assert [t.topology_key for t in view.pod_anti_affinity] == ["kubernetes.io/hostname"]
    same = parse_pod_spec(spec, obj="Pod default/q")
    assert same.shape == view.shape and hash(same.shape) == hash(view.shape)
    other = parse_pod_spec({**spec, "nodeSelector": {"disk": "hdd"}}, obj=OBJ)
    assert other.shape != view.shape


def test_no_required_affinity_is_none_and_empty_term_matches_nothing() -> None:
    assert parse_pod_spec({"containers": [c()]}, obj=OBJ).required_terms is None
    spec = {
        "containers": [c()],
        "affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}]}}},
    }
    terms = parse_pod_spec(spec, obj=OBJ).required_terms
    assert terms is not None
    assert not terms[0].matches({"any": "thing"}, "n1")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v", ""), Taint("k", "v", "NoExecute"), True),
        (Toleration("k", "Equal", "w", "NoSchedule"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Exists", "", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("", "Exists", "", ""), Taint("any", "v", "NoSchedule"), True),
        (Toleration("", "Equal", "", ""), Taint("any", "", "NoSchedule"), False),
        (Toleration("j", "Exists", "", ""), Taint("k", "", "NoSchedule"), False),
        (Toleration("k", "Equal", "", "NoSchedule"), Taint("k", "", "NoSchedule"), True),
    ],
    ids=[
        "equal",
        "any-effect",
        "value-differs",
        "exists",
        "effect-differs",
        "wildcard",
        "empty-key-equal",
        "key-differs",
        "empty-value",
    ],
)
def test_toleration(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("a", "b", "conflict"),
    [
        (HostPort("TCP", "", 80), HostPort("TCP", "", 80), True),
        (HostPort("TCP", "", 80), HostPort("UDP", "", 80), False),
        (HostPort("TCP", "10.0.0.1", 80), HostPort("TCP", "10.0.0.2", 80), False),
        (HostPort("TCP", "0.0.0.0", 80), HostPort("TCP", "10.0.0.2", 80), True),
        (HostPort("TCP", "", 80), HostPort("TCP", "", 81), False),
    ],
    ids=["same", "protocol", "distinct-ips", "wildcard-ip", "port"],
)
def test_host_port_conflicts(a: HostPort, b: HostPort, conflict: bool) -> None:
    assert a.conflicts(b) is conflict
    assert b.conflicts(a) is conflict


MALFORMED_SHAPES = [
    {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": "abc"}]}]},
    {"containers": [{"name": "c", "resources": {"requests": "1"}}]},
    {
        "containers": [c()],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": "x",
                        "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    }
                ]
            }
        },
    },
    {"containers": [c()], "tolerations": ["a"]},
    {"containers": [c()], "nodeSelector": ["a"]},
    {"containers": ["c"]},
]
MALFORMED_IDS = [
    "hostPort-not-int",
    "requests-not-map",
    "preferred-weight-not-int",
    "toleration-not-map",
    "nodeSelector-not-map",
    "container-not-map",
]


@pytest.mark.parametrize("spec", MALFORMED_SHAPES, ids=MALFORMED_IDS)
def test_malformed_shapes_are_invalid_input(spec: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_pod_spec(spec, obj=OBJ)
    assert str(info.value).startswith(f"{OBJ}: spec")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("spec", "field"),
    list(
        zip(
            MALFORMED_SHAPES,
            [
                "spec.containers[0].ports[0].hostPort",
                "spec.containers[0].resources.requests",
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
                ".weight",
                "spec.tolerations[0]",
                "spec.nodeSelector",
                "spec.containers[0]",
            ],
            strict=True,
        )
    ),
    ids=MALFORMED_IDS,
)
def test_malformed_shapes_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_pod_spec(spec, obj=OBJ)
    assert info.value.field == field
