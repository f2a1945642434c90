"""Tests of scheduler.api.pod_resources: pod-level requests (``spec.resources``) as
Kubernetes computes them, and the non-zero pads kube's scores count for containers that
ask no CPU or memory."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.errors import InvalidInputError
from scheduler.api.pod_resources import pod_requests
from scheduler.api.resource import Resource

Mi = 2**20
OBJ = "Pod default/p"
PAD_CPU = 100
PAD_MEM = 200 * Mi


def c(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def R(cpu: int = 0, memory: int = 0, pods: int = 1, **extra: int) -> Resource:
    return Resource({"cpu": cpu, "memory": memory, "pods": pods, **extra})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"containers": [c("100m", "1Mi")], "resources": {"requests": {"cpu": "2"}}},
            R(2000, Mi),
            id="pod-level-cpu-replaces-the-containers-cpu",
        ),
        pytest.param(
            {
                "containers": [c("100m", "1Mi"), c("200m")],
                "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
            },
            R(1000, 64 * Mi),
            id="pod-level-cpu-and-memory",
        ),
        pytest.param(
            {"containers": [c()], "resources": {"requests": {"memory": "1Gi"}}},
            R(0, 1024 * Mi),
            id="containers-asking-nothing",
        ),
        pytest.param(
            {
                "containers": [c("100m")],
                "initContainers": [c("3")],
                "resources": {"requests": {"cpu": "1"}},
            },
            R(1000),
            id="pod-level-beats-the-init-max",
        ),
        pytest.param(
            {"containers": [c()], "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
            R(2000, 1024 * Mi),
            id="limits-default-the-requests",
        ),
        pytest.param(
            {"containers": [c("300m")], "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
            R(300, 1024 * Mi),
            id="limits-default-to-the-containers-aggregate-where-asked",
        ),
        pytest.param(
            {
                "containers": [c("100m")],
                "resources": {"requests": {"cpu": "1"}},
                "overhead": {"cpu": "50m", "memory": "10Mi"},
            },
            R(1050, 10 * Mi),
            id="overhead-added-to-the-pod-level",
        ),
        pytest.param(
            {
                "containers": [
                    {"name": "c", "resources": {"requests": {"example.com/fpga": "1", "cpu": "1"}}}
                ],
                "resources": {"requests": {"cpu": "2"}},
            },
            R(2000, **{"example.com/fpga": 1}),
            id="extended-resources-stay-the-containers",
        ),
        pytest.param(
            {"containers": [c("1")], "resources": {}},
            R(1000),
            id="empty-pod-level",
        ),
    ],
)
def test_pod_level_requests(spec: dict[str, Any], expected: Resource) -> None:
    assert pod_requests(spec, obj=OBJ).request == expected


@pytest.mark.parametrize(
    ("spec", "node_pad", "score_pad"),
    [
        pytest.param({"containers": [c("1", "1Gi")]}, (0, 0), (0, 0), id="asks-both"),
        pytest.param(
            {"containers": [c(), c()]},
            (2 * PAD_CPU, 2 * PAD_MEM),
            (2 * PAD_CPU, 2 * PAD_MEM),
            id="per-container",
        ),
        pytest.param(
            {"containers": [c("1"), c(memory="1Mi")]},
            (PAD_CPU, PAD_MEM),
            (PAD_CPU, PAD_MEM),
            id="each-container-its-missing-names",
        ),
        pytest.param(
            {"containers": [c("0", "0")]}, (0, 0), (0, 0), id="an-explicit-zero-is-a-request"
        ),
        pytest.param(
            {"containers": [c()], "initContainers": [c()]},
            (PAD_CPU, PAD_MEM),
            (PAD_CPU, PAD_MEM),
            id="init-containers-take-the-max",
        ),
        pytest.param(
            {"containers": [c()], "initContainers": [c(restartPolicy="Always")]},
            (2 * PAD_CPU, 2 * PAD_MEM),
            (2 * PAD_CPU, 2 * PAD_MEM),
            id="sidecars-add",
        ),
        pytest.param(
            {"containers": [c(), c()], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            (0, 0),
            (0, 0),
            id="pod-level-replaces-the-pads",
        ),
        pytest.param(
            # The node's sum pads only names the pod asks nowhere; the pod being scored
            # pads every container missing one (kube's two paths).
            {
                "containers": [c(memory="1Mi"), c()],
                "resources": {"requests": {"cpu": "1"}},
            },
            (0, 0),
            (0, PAD_MEM),
            id="pod-level-cpu-some-memory",
        ),
        pytest.param(
            {"containers": [c()], "resources": {"requests": {"cpu": "1"}}},
            (0, PAD_MEM),
            (0, PAD_MEM),
            id="pod-level-cpu-no-memory",
        ),
    ],
)
def test_non_zero_pads(
    spec: dict[str, Any], node_pad: tuple[int, int], score_pad: tuple[int, int]
) -> None:
    got = pod_requests(spec, obj=OBJ)
    assert (got.nonzero_pad["cpu"], got.nonzero_pad["memory"]) == node_pad
    assert (got.score_pad["cpu"], got.score_pad["memory"]) == score_pad


def test_a_bad_pod_level_quantity_names_the_field() -> None:
    spec = {"containers": [c()], "resources": {"requests": {"cpu": "lots"}}}
    with pytest.raises(InvalidInputError) as info:
        pod_requests(spec, obj=OBJ)
    assert "spec.resources.requests.cpu" in str(info.value)
