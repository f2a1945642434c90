"""DRA on the embedded cluster: the claim controller's part (claims made from templates,
reservations of pods that are gone removed, allocations released), the API server's
checks of claim status, and whole runs where every bound pod gets devices of its own."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dra.model import FINALIZER
from scheduler.api.errors import InvalidObjectError
from scheduler.sim.claim_controller import SimClaimController, generate_name
from scheduler.sim.runner import Simulation
from scheduler.sim.store import ObjectStore
from tests.builders import node, pod
from tests.dra_builders import (
    claim,
    claim_template,
    claims_spec,
    device_class,
    gpus,
    request,
    resource_slice,
)
from tests.simulated import simulate

Obj = dict[str, Any]


def store_with_controller(*objects: Obj) -> ObjectStore:
    store = ObjectStore(lambda: 1.0e9)
    for obj in objects:
        store.create(obj)
    SimClaimController(store).attach()
    return store


def claims_of(store: ObjectStore) -> list[dict[str, Any]]:
    items, _ = store.list("ResourceClaim")
    return items


def test_a_claim_is_made_from_the_template_and_named_in_the_pod_status() -> None:
    store = store_with_controller(
        claim_template("t"), pod("p", resourceClaims=claims_spec(templates=["t"]))
    )
    (made,) = claims_of(store)
    meta = made["metadata"]
    assert meta["name"].startswith("p-t-")
    assert meta["ownerReferences"][0]["uid"] == store.get("Pod", "default", "p")["metadata"]["uid"]
    assert meta["annotations"]["resource.kubernetes.io/pod-claim-name"] == "t"
    assert made["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1  # defaulted
    status = store.get("Pod", "default", "p")["status"]
    assert status["resourceClaimStatuses"] == [{"name": "t", "resourceClaimName": meta["name"]}]


def test_a_template_that_comes_later_makes_the_claim_then() -> None:
    store = store_with_controller(pod("p", resourceClaims=claims_spec(templates=["t"])))
    assert claims_of(store) == []
    store.create(claim_template("t"))
    assert len(claims_of(store)) == 1


def allocated_claim(store: ObjectStore, pod_name: str, *, finalizer: bool = True) -> None:
    uid = store.get("Pod", "default", pod_name)["metadata"]["uid"]
    if finalizer:
        store.patch("ResourceClaim", "default", "c", {"metadata": {"finalizers": [FINALIZER]}})
    store.patch(
        "ResourceClaim",
        "default",
        "c",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": pod_name, "uid": uid}],
            }
        },
        subresource="status",
    )


@pytest.mark.parametrize("finalizer", [True, False], ids=["with-finalizer", "without"])
def test_a_deleted_pod_leaves_its_claim_released(finalizer: bool) -> None:
    store = store_with_controller(claim("c"), pod("p", resourceClaims=claims_spec("c")))
    allocated_claim(store, "p", finalizer=finalizer)
    store.delete("Pod", "default", "p")
    status = store.get("ResourceClaim", "default", "c").get("status") or {}
    assert "reservedFor" not in status
    # As the real controller: only a claim with the finalizer is deallocated.
    assert ("allocation" in status) is not finalizer
    assert (
        store.get("ResourceClaim", "default", "c")["metadata"].get("finalizers") is None
        or not finalizer
    )


def test_the_claim_of_a_template_goes_with_its_pod() -> None:
    store = store_with_controller(
        claim_template("t"), pod("p", resourceClaims=claims_spec(templates=["t"]))
    )
    store.delete("Pod", "default", "p")
    assert claims_of(store) == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}, "may not be specified"),
        (
            {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "d", "pool": "p", "device": "other"}
                        ]
                    }
                }
            },
            "field is immutable",
        ),
    ],
    ids=["reserved-without-allocation", "allocation-changed"],
)
def test_the_api_refuses_what_the_real_server_refuses(status: Obj, message: str) -> None:
    store = store_with_controller(claim("c"), pod("p", resourceClaims=claims_spec("c")))
    if "allocation" in status:
        allocated_claim(store, "p")
    with pytest.raises(InvalidObjectError, match=message):
        store.patch("ResourceClaim", "default", "c", {"status": status}, subresource="status")


def test_generate_name_is_shortened_as_the_controller_does() -> None:
    assert generate_name("p", "gpu") == "p-gpu-"
    assert len(generate_name("a" * 60, "b" * 30)) <= 58


def distinct_devices(sim: Simulation) -> dict[str, tuple[str, ...]]:
    """Devices per claim; asserts no device is in two claims."""
    seen: dict[str, str] = {}
    out = {}
    for c in claims_of(sim.store):
        allocation = (c.get("status") or {}).get("allocation")
        if not allocation:
            continue
        devices = tuple(f"{r['pool']}/{r['device']}" for r in allocation["devices"]["results"])
        for d in devices:
            assert d not in seen, f"{d} in {seen.get(d)} and {c['metadata']['name']}"
            seen[d] = c["metadata"]["name"]
        out[c["metadata"]["name"]] = devices
    return out


def test_every_bound_pod_gets_devices_of_its_own() -> None:
    objects: list[Obj] = [
        node("n1"),
        node("n2"),
        device_class(),
        resource_slice("n1-gpu", gpus(4), node="n1"),
        resource_slice("n2-gpu", gpus(4), node="n2"),
        claim_template("one", request(count=1)),
        claim_template("two", request(count=2)),
    ]
    for i in range(6):
        objects.append(
            pod(
                f"p{i}",
                cpu="100m",
                resourceClaims=claims_spec(templates=["two" if i % 2 else "one"]),
            )
        )
    sim = simulate(objects)
    assert len(sim.result.bindings) == 5  # 1+2+1+2+1 = 7 of 8 devices; the last asks 2
    devices = distinct_devices(sim)
    assert sum(len(d) for d in devices.values()) == 7
    for c in claims_of(sim.store):
        status = c.get("status") or {}
        if status.get("allocation"):
            assert FINALIZER in c["metadata"]["finalizers"]
            (consumer,) = status["reservedFor"]
            assert (
                sim.result.bindings[f"default/{consumer['name']}"]
                == status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
                    "values"
                ][0]
            )


def test_a_shared_claim_is_allocated_once_for_all_its_pods() -> None:
    objects = [
        node("n1"),
        node("n2"),
        device_class(),
        resource_slice("n2-gpu", gpus(1), node="n2"),
        claim("shared"),
        pod("a", resourceClaims=claims_spec("shared")),
        pod("b", resourceClaims=claims_spec("shared")),
    ]
    sim = simulate(objects)
    assert sim.result.bindings == {"default/a": "n2", "default/b": "n2"}
    status = sim.store.get("ResourceClaim", "default", "shared")["status"]
    assert len(status["allocation"]["devices"]["results"]) == 1
    assert sorted(r["name"] for r in status["reservedFor"]) == ["a", "b"]


def small_cluster() -> list[Obj]:
    return [
        node("n1"),
        device_class(),
        resource_slice("n1-gpu", gpus(2), node="n1"),
        claim("a"),
        claim("b"),
        pod("p", resourceClaims=claims_spec("a")),
        pod("q", resourceClaims=claims_spec("b")),
    ]


def simulation(**fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Simulation",
        "seed": 1,
        **fields,
    }


def test_claim_writes_whose_replies_are_lost_are_read_back_and_the_pods_bound() -> None:
    sim = simulate([*small_cluster(), simulation(apiLostReplies={"patch": 1.0}, until="2m")])
    assert sim.result.bindings == {"default/p": "n1", "default/q": "n1"}
    assert sorted(distinct_devices(sim).values()) == [("n1/gpu-0",), ("n1/gpu-1",)]


def test_a_refused_claim_write_binds_nothing() -> None:
    sim = simulate([*small_cluster(), simulation(apiFailures={"patch": 1.0}, until="10s")])
    assert sim.result.bindings == {}
    assert distinct_devices(sim) == {}


def test_a_claim_allocated_where_its_pod_cannot_go_and_reserved_for_nobody_is_reallocated() -> None:
    """kube-scheduler's PostFilter: the claim was left allocated on n1 (a bind that failed
    after the claim was written), n1 has no room for the pod any more; the scheduler
    clears the allocation, and the pod is then placed on n2 with a device there."""
    objects = [
        node("n1", cpu="1"),
        node("n2"),
        device_class(),
        resource_slice("n1-gpu", gpus(1), node="n1"),
        resource_slice("n2-gpu", gpus(1), node="n2"),
        claim("c", allocated=[("gpu", "gpu-0")], node="n1"),
        pod("filler", cpu="1", node="n1"),
        pod("p", cpu="500m", resourceClaims=claims_spec("c")),
    ]
    sim = simulate(objects)
    assert sim.result.bindings == {"default/p": "n2"}
    assert distinct_devices(sim) == {"c": ("n2/gpu-0",)}


def test_a_claim_allocated_where_its_pod_fits_is_kept() -> None:
    objects = [
        node("n1"),
        node("n2"),
        device_class(),
        resource_slice("n1-gpu", gpus(1), node="n1"),
        resource_slice("n2-gpu", gpus(1), node="n2"),
        claim("c", allocated=[("gpu", "gpu-0")], node="n1"),
        pod("p", resourceClaims=claims_spec("c")),
    ]
    sim = simulate(objects)
    assert sim.result.bindings == {"default/p": "n1"}
    assert distinct_devices(sim) == {"c": ("n1/gpu-0",)}
