"""The differential test's own checker of kube-scheduler's filters (:mod:`kube_filters`),
on small cases whose answer kube's plugins give plainly: a checker that passes anything
would let the differential test pass anything. Pure functions: no API server used."""

from __future__ import annotations

from typing import Any

import pytest
from kube_filters import Storage, fits_somewhere, violations

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node(name: str, zone: str | None = None, cpu: str = "4", **spec: Any) -> Obj:
    labels = {HOST: name}
    if zone:
        labels[ZONE] = zone
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def pod(app: str, cpu: str = "1", **spec: Any) -> Obj:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {
        "metadata": {"name": app, "namespace": "ns", "labels": {"app": app}},
        "spec": {"containers": [container], **spec},
    }


def term(app: str, key: str) -> Obj:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
A, B, C = node("a", "z1"), node("b", "z2"), node("c", "z2")
NODES = [A, B, C]


def spread(skew: int = 1, **extra: Any) -> list[Obj]:
    return [
        {
            "maxSkew": skew,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
            **extra,
        }
    ]


CASES = [
    pytest.param(pod("web"), A, [], [], id="nothing-in-the-way"),
    pytest.param(pod("web", cpu="5"), A, [], ["insufficient cpu"], id="too-big"),
    pytest.param(pod("web", cpu="2"), A, [(pod("x", cpu="3"), A)], ["insufficient cpu"], id="full"),
    pytest.param(
        pod("web", resources={"requests": {"cpu": "500m"}}, cpu="0"),
        A,
        [(pod("x", cpu="3500m"), A)],
        [],
        id="pod-level-requests-fit",
    ),
    pytest.param(
        pod("web"),
        node("t", taints=[{"key": "k", "effect": "NoSchedule"}]),
        [],
        ["untolerated taint"],
        id="taint",
    ),
    pytest.param(
        pod("web"), node("u", unschedulable=True), [], ["node unschedulable"], id="cordoned"
    ),
    pytest.param(pod("web", nodeSelector={ZONE: "z2"}), A, [], ["node affinity"], id="selector"),
    pytest.param(
        pod("web", topologySpreadConstraints=spread()),
        B,
        [(pod("web"), C)],
        ["topology spread"],
        id="spread-skew-2",
    ),
    pytest.param(
        pod("web", topologySpreadConstraints=spread()), A, [(pod("web"), C)], [], id="spread-even"
    ),
    pytest.param(
        pod("web", topologySpreadConstraints=spread()),
        C,
        [(pod("web"), A), (pod("web"), B)],
        [],
        id="spread-minimum-1",
    ),
    pytest.param(
        pod("web", topologySpreadConstraints=spread(minDomains=3)),
        C,
        [(pod("web"), A), (pod("web"), B)],
        ["topology spread"],
        id="spread-fewer-domains-than-min-domains-minimum-0",
    ),
    pytest.param(
        pod("web", affinity={"podAffinity": {REQUIRED: [term("db", ZONE)]}}),
        A,
        [(pod("db"), B)],
        ["pod affinity"],
        id="affinity-elsewhere",
    ),
    pytest.param(
        pod("web", affinity={"podAffinity": {REQUIRED: [term("db", ZONE)]}}),
        C,
        [(pod("db"), B)],
        [],
        id="affinity-same-zone",
    ),
    pytest.param(
        pod("web", affinity={"podAffinity": {REQUIRED: [term("web", ZONE)]}}),
        A,
        [],
        [],
        id="affinity-first-of-its-series",
    ),
    pytest.param(
        pod("web", affinity={"podAntiAffinity": {REQUIRED: [term("db", ZONE)]}}),
        C,
        [(pod("db"), B)],
        ["pod anti-affinity"],
        id="anti-affinity",
    ),
    pytest.param(
        pod("web"),
        C,
        [(pod("db", affinity={"podAntiAffinity": {REQUIRED: [term("web", HOST)]}}), C)],
        ["existing pods' anti-affinity"],
        id="existing-anti-affinity",
    ),
    pytest.param(
        pod("web", containers=[{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]),
        A,
        [
            (
                pod(
                    "x", containers=[{"name": "c", "ports": [{"containerPort": 8, "hostPort": 80}]}]
                ),
                A,
            )
        ],
        ["host ports"],
        id="host-port",
    ),
]


@pytest.mark.parametrize(("incoming", "where", "placed", "expected"), CASES)
def test_the_checker_says_what_kube_filters_refuse(
    incoming: Obj, where: Obj, placed: list[tuple[Obj, Obj]], expected: list[str]
) -> None:
    assert violations(incoming, where, placed, NODES) == expected


@pytest.mark.parametrize(
    ("pending", "placed", "expected"),
    [
        pytest.param(pod("web", cpu="3"), [], ["a", "b", "c"], id="anywhere"),
        pytest.param(
            pod("web", cpu="3"),
            [(pod("x", cpu="2"), A), (pod("y", cpu="2"), B), (pod("z", cpu="2"), C)],
            [],
            id="full-everywhere",
        ),
        pytest.param(
            pod("web", affinity={"podAffinity": {REQUIRED: [term("cache", ZONE)]}}),
            [(pod("cache"), B)],
            ["b", "c"],
            id="affinity-to-a-zone",
        ),
        pytest.param(
            pod("web", affinity={"podAffinity": {REQUIRED: [term("cache", ZONE)]}}),
            [
                (pod("cache"), B),
                (
                    {
                        **pod("web"),
                        "spec": {
                            **pod("web")["spec"],
                            "affinity": {"podAntiAffinity": {REQUIRED: [term("web", ZONE)]}},
                        },
                    },
                    C,
                ),
            ],
            [],
            id="its-zone-taken-by-an-anti-affine-pod",
        ),
    ],
)
def test_where_a_pending_pod_could_still_go(
    pending: Obj, placed: list[tuple[Obj, Obj]], expected: list[str]
) -> None:
    assert fits_somewhere(pending, placed, NODES) == expected


def pv(name: str, *, host: str | None = None, zone: str | None = None, **spec: Any) -> Obj:
    """A PV of class "local" of 1Gi, pinned by its node affinity to ``host`` or ``zone``."""
    body: Obj = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local",
        **spec,
    }
    key, value = (HOST, host) if host else (ZONE, zone)
    if value:
        expr = {"key": key, "operator": "In", "values": [value]}
        body["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}
    labels = {ZONE: zone} if zone else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": body}


def pvc(name: str, cls: str = "local", **spec: Any) -> Obj:
    body = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": cls,
        "resources": {"requests": {"storage": "1Gi"}},
        **spec,
    }
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": body}


def mounting(app: str, claim: str) -> Obj:
    return pod(app, volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": claim}}])


def storage(*objects: Obj) -> Storage:
    classes = {
        "local": {"volumeBindingMode": "WaitForFirstConsumer"},
        "manual": {"volumeBindingMode": "Immediate"},
    }
    claims = {o["metadata"]["name"]: o for o in objects if "resources" in o["spec"]}
    volumes = {o["metadata"]["name"]: o for o in objects if "capacity" in o["spec"]}
    return Storage(claims=claims, volumes=volumes, classes=classes)


RWOP = ["ReadWriteOncePod"]
VOLUME_CASES = [
    pytest.param(mounting("web", "d"), [], storage(), [], id="missing-claim"),
    pytest.param(
        mounting("web", "d"),
        [],
        storage(pvc("d", volumeName="v"), pv("v", host="b")),
        ["b"],
        id="bound-to-a-local-pv",
    ),
    pytest.param(
        mounting("web", "d"),
        [],
        storage(pvc("d", volumeName="v"), pv("v", zone="z2")),
        ["b", "c"],
        id="bound-to-a-zonal-pv",
    ),
    pytest.param(
        mounting("web", "d"),
        [],
        storage(
            pvc("d", volumeName="v"), {**pv("v"), "metadata": {"name": "v", "labels": {ZONE: "z1"}}}
        ),
        ["a"],
        id="a-zone-label-only",
    ),
    pytest.param(mounting("web", "d"), [], storage(pvc("d", "manual")), [], id="unbound-immediate"),
    pytest.param(
        mounting("web", "d"),
        [],
        storage(pvc("d"), pv("v1", host="a"), pv("v2", host="c")),
        ["a", "c"],
        id="waits-for-its-consumer",
    ),
    pytest.param(
        mounting("web", "d"),
        [],
        storage(
            pvc("d", selector={"matchLabels": {"for": "d"}}),
            pv("v1", host="a"),
            {**pv("v2", host="c"), "metadata": {"name": "v2", "labels": {"for": "d"}}},
            pv("v3", host="b", capacity={"storage": "512Mi"}),
            pv("v4", host="b", claimRef={"name": "other"}),
        ),
        ["c"],
        id="selected-big-enough-and-free",
    ),
    pytest.param(
        mounting("web", "d"),
        [(mounting("x", "d"), A)],
        storage(pvc("d", "manual", volumeName="v", accessModes=RWOP), pv("v", accessModes=RWOP)),
        [],
        id="read-write-once-pod-in-use",
    ),
    pytest.param(
        mounting("web", "d"),
        [(mounting("x", "e"), A)],
        storage(pvc("d", "manual", volumeName="v", accessModes=RWOP), pv("v", accessModes=RWOP)),
        ["a", "b", "c"],
        id="read-write-once-pod-free",
    ),
]


@pytest.mark.parametrize(("pending", "placed", "objects", "expected"), VOLUME_CASES)
def test_where_a_pod_with_claims_could_go(
    pending: Obj, placed: list[tuple[Obj, Obj]], objects: Storage, expected: list[str]
) -> None:
    assert fits_somewhere(pending, placed, NODES, storage=objects) == expected
