"""Tests of scheduler.api.dra.extended (KEP-5004): which DeviceClass serves which
extended resource, and the claim a pod's containers make (requests and the pod's request
mappings), checked against what kube-scheduler v1.36.2 wrote on the real server."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dra.extended import is_extended_name, plan, resource_classes
from scheduler.api.dra.model import DeviceClassInfo
from scheduler.api.pod import parse_pod_spec

R = "example.com/gpu"
IMPLICIT = "deviceclass.resource.kubernetes.io/gpu.example.com"


def c(name: str, **requests: Any) -> dict[str, Any]:
    """A container asking ``requests`` (``gpu=2`` is example.com/gpu; ``cpu="100m"``)."""
    named = {(R if k == "gpu" else k): str(v) for k, v in requests.items()}
    return {"name": name, "image": "x", "resources": {"requests": named}}


def sidecar(name: str, **requests: Any) -> dict[str, Any]:
    return {**c(name, **requests), "restartPolicy": "Always"}


def planned(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None
) -> tuple[list[tuple[str, int]], list[tuple[str, str]]]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    view = parse_pod_spec(spec, obj="Pod default/p")
    made = plan(view.containers, {R: "gpu.example.com"})
    requests = [(r.name, r.exactly.count) for r in made.requests if r.exactly is not None]
    return requests, [(m.container, m.request) for m in made.mappings]


@pytest.mark.parametrize(
    ("containers", "init", "requests", "mappings"),
    [
        pytest.param(
            [c("main", gpu=2)],
            None,
            [("container-0-request-0", 2)],
            [("main", "container-0-request-0")],
            id="one-container",
        ),
        pytest.param(
            # the resource's place among the container's sorted requests names the request
            [c("main", cpu="1", gpu=2, memory="1Gi")],
            None,
            [("container-0-request-1", 2)],
            [("main", "container-0-request-1")],
            id="named-after-its-place-among-the-requests",
        ),
        pytest.param(
            # kube-scheduler v1.36.2 on the real server: the init container uses main's
            # devices; main and side get a request each; mappings long-lived first
            [c("main", cpu="100m", gpu=2), c("side", gpu=1)],
            [c("init", gpu=1)],
            [("container-1-request-1", 2), ("container-2-request-0", 1)],
            [
                ("main", "container-1-request-1"),
                ("side", "container-2-request-0"),
                ("init", "container-1-request-1"),
            ],
            id="real-server-init-reuses-later-devices",
        ),
        pytest.param(
            [c("main", gpu=1)],
            [c("init", gpu=3)],
            [("container-0-request-0", 2), ("container-1-request-0", 1)],
            [
                ("main", "container-1-request-0"),
                ("init", "container-1-request-0"),
                ("init", "container-0-request-0"),
            ],
            id="init-asks-for-what-later-containers-do-not-cover",
        ),
        pytest.param(
            [c("main", gpu=1)],
            [c("a", gpu=2), c("b", gpu=3)],
            [("container-1-request-0", 2), ("container-2-request-0", 1)],
            [
                ("main", "container-2-request-0"),
                ("a", "container-2-request-0"),
                ("a", "container-1-request-0"),
                ("b", "container-2-request-0"),
                ("b", "container-1-request-0"),
            ],
            id="only-the-largest-init-ask-is-made",
        ),
        pytest.param(
            [c("main", gpu=1)],
            [sidecar("side", gpu=1), c("init", gpu=1)],
            [("container-0-request-0", 1), ("container-2-request-0", 1)],
            [
                ("side", "container-0-request-0"),
                ("main", "container-2-request-0"),
                ("init", "container-2-request-0"),
            ],
            id="a-sidecar-started-before-keeps-its-devices",
        ),
        pytest.param(
            [c("main", cpu="1"), c("gpu", gpu=1)],
            None,
            [("container-1-request-0", 1)],
            [("gpu", "container-1-request-0")],
            id="only-containers-asking-it",
        ),
    ],
)
def test_plan_names_requests_and_mappings_as_kube_scheduler(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None,
    requests: list[tuple[str, int]],
    mappings: list[tuple[str, str]],
) -> None:
    assert planned(containers, init) == (requests, mappings)


def test_device_count_is_the_pods_request() -> None:
    """The devices the claim asks are what the pod's request counts of the resource."""
    spec = {
        "initContainers": [c("a", gpu=2), sidecar("s", gpu=1), c("b", gpu=4)],
        "containers": [c("main", gpu=1), c("other", gpu=2)],
    }
    view = parse_pod_spec(spec, obj="Pod default/p")
    made = plan(view.containers, {R: "gpu.example.com"})
    assert sum(r.exactly.count for r in made.requests if r.exactly) == view.request[R] == 5


def test_pods_without_domain_resources_keep_no_containers() -> None:
    view = parse_pod_spec({"containers": [c("main", cpu="1", memory="1Gi")]}, obj="Pod d/p")
    assert view.containers == ()


def cls(name: str, resource: str = "", created: float = 0.0) -> DeviceClassInfo:
    return DeviceClassInfo(name, extended_resource_name=resource, created=created)


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        pytest.param(
            [cls("gpu.example.com", R)],
            {R: "gpu.example.com", IMPLICIT: "gpu.example.com"},
            id="explicit-and-implicit",
        ),
        pytest.param(
            [cls("old", R, created=1.0), cls("new", R, created=2.0)],
            {R: "new"},
            id="the-newer-class-serves-it",
        ),
        pytest.param(
            [cls("b", R, created=1.0), cls("a", R, created=1.0)],
            {R: "a"},
            id="same-time-the-name-sorted-first",
        ),
    ],
)
def test_resource_classes(classes: list[DeviceClassInfo], expected: dict[str, str]) -> None:
    got = resource_classes({x.name: x for x in classes})
    assert {k: v for k, v in got.items() if k in expected} == expected
    assert all(got[f"deviceclass.resource.kubernetes.io/{x.name}"] == x.name for x in classes)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("example.com/gpu", True),
        ("nvidia.com/gpu", True),
        (IMPLICIT, True),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/something", False),
        ("requests.example.com/gpu", False),
    ],
)
def test_is_extended_name(name: str, expected: bool) -> None:
    assert is_extended_name(name) is expected
