"""Tests of extended resources served by DRA devices (KEP-5004) in a session: which nodes
serve a pod asking ``example.com/gpu`` (devices of the class naming it, the node's own
allocatable, both), what the bind writes, rollback, and a victim's devices released."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dra.model import EXTENDED_CLAIM_ANNOTATION, FINALIZER
from scheduler.config import PluginConfig
from scheduler.framework.effects import Bind
from scheduler.framework.session import Session
from scheduler.plugins.dra import DraPlugin
from tests.builders import cached_session, node, pod, task_of
from tests.dra_builders import claim, claims_spec, device_class, gpus, resource_slice

Obj = dict[str, Any]
R = "example.com/gpu"
PLUGINS = [PluginConfig("predicates"), PluginConfig("gpushare"), PluginConfig("dra")]


def asking(name: str, count: int, resource: str = R, **kw: Any) -> Obj:
    """A pod whose one container asks ``count`` of ``resource`` (requests and limits)."""
    requests = {"cpu": "100m", resource: str(count)}
    containers = [{"name": "main", "resources": {"requests": requests, "limits": requests}}]
    return pod(name, containers=containers, **kw)


def extended_node(name: str, allocatable: int | None) -> Obj:
    """A node offering ``allocatable`` of R itself (None: not at all)."""
    out = node(name)
    if allocatable is not None:
        out["status"]["allocatable"][R] = str(allocatable)
    return out


def cluster(*extra: Obj, devices: int = 2) -> list[Obj]:
    """dra: ``devices`` GPUs of the class naming R, R not in allocatable; plugin: R 2 in
    allocatable, no devices; both: R 2 in allocatable and devices; none: neither."""
    return [
        extended_node("dra", None),
        extended_node("plugin", 2),
        extended_node("both", 2),
        extended_node("none", None),
        device_class(extended_resource=R),
        resource_slice("dra-gpu", gpus(devices), node="dra"),
        resource_slice("both-gpu", gpus(devices), node="both"),
        *extra,
    ]


def open_(objects: list[Obj]) -> Session:
    return cached_session(objects, PLUGINS)


def plugin(session: Session) -> DraPlugin:
    return next(p for _, p in session.plugins if isinstance(p, DraPlugin))


def feasible(session: Session, name: str, releasing: bool = False) -> set[str]:
    fit = session.fit(task_of(session, name), releasing=releasing)
    return {session.table.nodes[i].name for i, ok in enumerate(fit.feasible) if ok}


def bind_on(session: Session, name: str, node_name: str) -> Bind:
    with session.statement() as stmt:
        stmt.allocate(task_of(session, name), node_name)
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind)
    return effect


@pytest.mark.parametrize(
    ("count", "nodes", "reason"),
    [
        pytest.param(
            2, {"dra", "plugin", "both"}, "3/4 nodes are available: 1 Insufficient", id="two"
        ),
        pytest.param(3, set(), "0/4 nodes are available: 4 Insufficient", id="more-than-there-are"),
    ],
)
def test_which_nodes_serve_an_extended_resource(count: int, nodes: set[str], reason: str) -> None:
    session = open_(cluster(asking("p", count)))
    assert feasible(session, "p") == nodes
    fit = session.fit(task_of(session, "p"))
    assert fit.explain() == f"{reason} example.com/gpu."
    # no device of the class on "none": preemption cannot help there
    candidates = {session.table.nodes[i].name for i, ok in enumerate(fit.candidates()) if ok}
    assert "none" not in candidates


def test_a_node_serving_it_through_devices_counts_them_as_its_allocatable() -> None:
    session = open_(cluster(asking("p", 1)))
    allocatable = {n: session.nodes[n].allocatable.get(R, 0) for n in session.nodes}
    assert allocatable == {"dra": 2, "plugin": 2, "both": 2, "none": 0}
    assert session.snapshot.dra is not None
    assert set(session.snapshot.dra.extended) == {"dra", "none"}


@pytest.mark.parametrize(
    ("node_name", "claimed"),
    [
        pytest.param("dra", True, id="devices-of-the-class"),
        pytest.param("plugin", False, id="the-nodes-own-allocatable"),
        pytest.param("both", False, id="both-the-allocatable-serves-it"),
    ],
)
def test_the_bind_makes_a_claim_only_where_devices_serve_it(node_name: str, claimed: bool) -> None:
    session = open_(cluster(asking("p", 2)))
    effect = bind_on(session, "p", node_name)
    if not claimed:
        assert effect.claims == ()
        return
    (binding,) = effect.claims
    assert (binding.name, binding.key) == ("", "default/<extended-resources>/default/p")
    assert binding.extended is not None and binding.add_finalizer
    (req,) = binding.extended.requests
    assert req.name == "container-0-request-1" and req.exactly is not None
    assert (req.exactly.device_class, req.exactly.count) == ("gpu.example.com", 2)
    assert binding.allocation is not None and binding.allocation.node_name == "dra"
    devices = [str(d) for d in binding.allocation.devices]
    assert devices == ["gpu.example.com/dra/gpu-0", "gpu.example.com/dra/gpu-1"]
    assert [(m.container, m.resource, m.request) for m in binding.extended.mappings] == [
        ("main", R, "container-0-request-1")
    ]


def test_the_implicit_name_of_a_class_is_served_too() -> None:
    implicit = "deviceclass.resource.kubernetes.io/gpu.example.com"
    session = open_(cluster(asking("p", 1, implicit)))
    assert feasible(session, "p") == {"dra", "both"}
    (binding,) = bind_on(session, "p", "both").claims
    assert binding.extended is not None


def test_a_claim_of_the_pod_and_its_extended_resource_get_distinct_devices() -> None:
    raw = asking("p", 1)
    raw["spec"]["resourceClaims"] = claims_spec("c")
    session = open_(cluster(claim("c"), raw))
    assert feasible(session, "p") == {"dra", "both"}
    effect = bind_on(session, "p", "dra")
    got = [str(d) for b in effect.claims if b.allocation for d in b.allocation.devices]
    assert sorted(got) == ["gpu.example.com/dra/gpu-0", "gpu.example.com/dra/gpu-1"]


def test_rollback_frees_the_devices_and_a_second_pod_waits_meanwhile() -> None:
    session = open_(cluster(asking("p", 2), asking("q", 2), devices=2))
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "dra")
        assert "dra" not in feasible(session, "q")
        stmt.discard()
    assert plugin(session).extended_key(task_of(session, "p")) == ""
    assert "dra" in feasible(session, "q")


def running_holder(name: str, devices: list[str], priority: int = 0) -> list[Obj]:
    """A pod Running on node dra with its extended-resource claim allocated in the API."""
    holder = asking(name, len(devices), node="dra", priority=priority)
    made = claim(
        f"{name}-extended-resources-abcde",
        ns="default",
        allocated=[("container-0-request-1", d) for d in devices],
        node="dra",
        reserved_for=[name],
        owner_pod=name,
    )
    made["metadata"]["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
    return [holder, made]


def test_a_victims_extended_devices_count_as_released_for_the_preemptor() -> None:
    objects = [
        extended_node("dra", None),
        device_class(extended_resource=R),
        resource_slice("dra-gpu", gpus(2), node="dra"),
        *running_holder("victim", ["gpu-0", "gpu-1"]),
        asking("p", 2, priority=100),
    ]
    session = open_(objects)
    dra = plugin(session)
    assert dra.extended_key(task_of(session, "victim")) == (
        "default/victim-extended-resources-abcde"
    )
    assert dra.holders("default/victim-extended-resources-abcde") == {"default/victim"}
    assert feasible(session, "p") == set()
    with session.statement() as stmt:
        stmt.evict(task_of(session, "victim"), "preempted")
        assert feasible(session, "p") == set()
        assert feasible(session, "p", releasing=True) == {"dra"}
        stmt.pipeline(task_of(session, "p"), "dra")
        key = dra.extended_key(task_of(session, "p"))
        alloc = dra.allocation(key)
        assert alloc is not None
        assert [r.id.device for r in alloc.results] == ["gpu-0", "gpu-1"]


def test_a_claim_left_by_an_earlier_attempt_makes_the_pod_wait_for_its_deletion() -> None:
    left = claim("p-extended-resources-xyz12", owner_pod="p")
    left["metadata"]["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
    session = open_(cluster(left, asking("p", 1)))
    text = session.fit(task_of(session, "p")).explain()
    assert "0/4 nodes are available" in text
    assert "ResourceClaim default/p-extended-resources-xyz12 made for its extended" in text


def test_gpushare_leaves_nvidia_gpu_served_by_devices_to_dra() -> None:
    """A DeviceClass naming nvidia.com/gpu (NVIDIA's DRA driver): the node serving it
    through devices is not indexed by gpushare, and no gpu-index annotation is written."""
    gpu = "nvidia.com/gpu"
    objects = [
        node("dra"),
        device_class(extended_resource=gpu),
        resource_slice("dra-gpu", gpus(2), node="dra"),
        asking("p", 2, gpu),
    ]
    session = open_(objects)
    assert feasible(session, "p") == {"dra"}
    effect = bind_on(session, "p", "dra")
    assert effect.annotations == {}
    (binding,) = effect.claims
    assert binding.extended is not None and FINALIZER
