"""Extended resources served by DRA devices (KEP-5004) in whole runs on the embedded
cluster: the claims Sluice makes, named in the pods' status, every device used once;
refused and lost writes leave no claim behind and no pod bound without its devices; the
emulator refuses what kube-apiserver v1.36.2 refuses of what the scheduler writes."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dra.model import EXTENDED_CLAIM_ANNOTATION, FINALIZER
from scheduler.api.errors import InvalidObjectError
from scheduler.sim.runner import Simulation
from scheduler.sim.store import ObjectStore, WatchEvent
from tests.builders import node, pod
from tests.dra_builders import device_class, gpus, resource_slice
from tests.simulated import simulate

Obj = dict[str, Any]
R = "example.com/gpu"


def asking(name: str, count: int, **kw: Any) -> Obj:
    requests = {"cpu": "100m", R: str(count)}
    containers = [{"name": "main", "resources": {"requests": requests, "limits": {R: str(count)}}}]
    return pod(name, containers=containers, **kw)


def cluster(*pods: Obj) -> list[Obj]:
    """n1 with 3 devices of the class naming R, n2 with 2."""
    return [
        node("n1"),
        node("n2"),
        device_class(extended_resource=R),
        resource_slice("n1-gpu", gpus(3), node="n1"),
        resource_slice("n2-gpu", gpus(2), node="n2"),
        *pods,
    ]


def simulation(**fields: Any) -> Obj:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Simulation",
        "seed": 1,
        **fields,
    }


class DeviceWatch:
    """Checks on every change of the store that no device is allocated to two claims."""

    def __init__(self) -> None:
        self.claims: dict[str, list[str]] = {}
        self.violations: list[str] = []
        self.events = 0

    def attach(self, store: ObjectStore) -> None:
        store.subscribe(self._event)

    def _event(self, event: WatchEvent) -> None:
        if event.kind != "ResourceClaim":
            return
        self.events += 1
        name = event.obj["metadata"]["name"]
        allocation = (event.obj.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or ()
        self.claims[name] = (
            [] if event.type == "DELETED" else [f"{r['pool']}/{r['device']}" for r in results]
        )
        held = [d for devices in self.claims.values() for d in devices]
        if len(held) != len(set(held)):
            self.violations.append(f"a device held twice after {event.type} of {name}: {held}")


def check_claims(sim: Simulation) -> dict[str, list[str]]:
    """Every claim is a bound pod's extended-resource claim, shaped as kube-scheduler
    makes it, on the pod's node, named in its status; no device twice. Pod -> devices."""
    claims, _ = sim.store.list("ResourceClaim")
    seen: dict[str, str] = {}
    out: dict[str, list[str]] = {}
    for c in claims:
        meta = c["metadata"]
        (owner,) = meta["ownerReferences"]
        key = f"default/{owner['name']}"
        assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
        assert meta["generateName"] == f"{owner['name']}-extended-resources-"
        assert key in sim.result.bindings, f"claim {meta['name']} of a pod not bound"
        assert FINALIZER in meta["finalizers"]
        status = c["status"]
        assert [r["name"] for r in status["reservedFor"]] == [owner["name"]]
        devices = []
        for r in status["allocation"]["devices"]["results"]:
            assert r["pool"] == sim.result.bindings[key]
            device = f"{r['pool']}/{r['device']}"
            assert device not in seen, f"{device} in {seen.get(device)} and {meta['name']}"
            seen[device] = meta["name"]
            devices.append(device)
        out[key] = devices
        pod_status = sim.store.get("Pod", "default", owner["name"])["status"]
        assert pod_status["extendedResourceClaimStatus"]["resourceClaimName"] == meta["name"]
    return out


def test_every_pod_bound_gets_its_devices_through_a_claim_of_its_own() -> None:
    sim = simulate(cluster(asking("a", 2), asking("b", 2), asking("c", 1), asking("d", 1)))
    assert sim.result.bindings == {"default/a": "n1", "default/b": "n2", "default/c": "n1"}
    assert sorted(len(d) for d in check_claims(sim).values()) == [1, 2, 2]
    assert "Insufficient example.com/gpu" in sim.result.pending["default/d"]


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param({"apiFailures": {"bind": 0.5}}, id="binds-refused"),
        pytest.param({"apiFailures": {"patch": 0.3}}, id="claim-and-status-patches-refused"),
        pytest.param({"apiLostReplies": {"create": 0.5}}, id="creates-lost"),
        pytest.param({"apiLostReplies": {"patch": 0.5, "bind": 0.5}}, id="patches-binds-lost"),
    ],
)
def test_failed_writes_leave_no_claim_behind(faults: Obj) -> None:
    """A write that fails after the claim was created deletes it again (kube-scheduler's
    Unreserve), and a claim whose creation's reply was lost is found and deleted by a
    later cycle (its PostFilter): in the end every claim is a bound pod's, every device
    used once, and every pod that fits is bound."""
    pods = [asking(f"p{i}", 1) for i in range(5)]
    watch = DeviceWatch()
    sim = simulate([*cluster(*pods), simulation(until="3m", **faults)], on_store=watch.attach)
    assert len(sim.result.bindings) == 5, sim.result.pending
    assert sorted(check_claims(sim)) == sorted(sim.result.bindings)
    assert watch.violations == [] and watch.events > 0


def test_a_preemptor_asking_the_resource_evicts_the_pod_holding_the_devices() -> None:
    """One node, two devices, both held by low-priority pods asking the resource (bound
    first, through claims Sluice made), beside a low-priority pod with none; the
    high-priority pod evicts a device holder, waits for the claim controller to release
    its devices, and is bound with them."""
    objects = [
        node("n1"),
        device_class(extended_resource=R),
        resource_slice("n1-gpu", gpus(2), node="n1"),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        },
        asking("low-0", 1, priority=1),
        asking("low-1", 1, priority=5),
        pod("plain", cpu="100m", priority=1),
    ]
    urgent = asking("urgent", 1, priority=1000, priorityClassName="high")
    urgent["metadata"]["annotations"] = {"sim.sluice.dev/arrival": "5s"}
    watch = DeviceWatch()
    sim = simulate([*objects, urgent, simulation(until="2m")], on_store=watch.attach)
    assert watch.violations == [] and watch.events > 0
    assert sim.result.bindings["default/urgent"] == "n1"
    assert sim.result.evictions == ["default/low-0"]
    assert "default/plain" in sim.result.bindings
    assert sorted(check_claims(sim)) == ["default/low-1", "default/urgent"]


# What the emulator refuses, as kube-apiserver v1.36.2 does ----------------------------------


def store_with_pod() -> ObjectStore:
    """A store holding pod p, asking one example.com/gpu."""
    store = ObjectStore(lambda: 1.0e9)
    store.create(asking("p", 1))
    return store


def write_status(store: ObjectStore, status: Obj) -> None:
    """Patch pod p's ``status.extendedResourceClaimStatus`` as the scheduler does."""
    store.patch(
        "Pod",
        "default",
        "p",
        {"status": {"extendedResourceClaimStatus": status}},
        patch_type="strategic",
        subresource="status",
    )


def mapping(container: str = "main", resource: str = R, request: str = "r") -> Obj:
    return {"containerName": container, "resourceName": resource, "requestName": request}


def claim_status(*mappings: Obj, claim: str | None = "x") -> Obj:
    out: Obj = {"requestMappings": list(mappings)}
    if claim is not None:
        out["resourceClaimName"] = claim
    return out


@pytest.mark.parametrize(
    ("status", "message"),
    [
        pytest.param(
            claim_status(),
            "requestMappings: Required value: at least one request mapping is required",
            id="no-mapping",
        ),
        pytest.param(
            claim_status(mapping(container="nope")),
            'requestMappings[0].containerName: Invalid value: "nope": must match the name',
            id="unknown-container",
        ),
        pytest.param(
            claim_status(mapping(resource="example.com/bar")),
            'requestMappings[0].resourceName: Invalid value: "example.com/bar": must match',
            id="resource-not-requested",
        ),
        pytest.param(
            claim_status(mapping(request="Bad_Name")),
            'status.extendedResourceClaimStatus.requestName: Invalid value: "Bad_Name": a '
            "lowercase RFC 1123 label",
            id="request-name-not-a-label",
        ),
        pytest.param(
            claim_status(mapping(), mapping()),
            'requestMappings[1].requestName: Duplicate value: "r"',
            id="mapping-twice",
        ),
        pytest.param(
            claim_status(mapping(), claim=None),
            "resourceClaimName: Required value",
            id="no-claim-name",
        ),
        pytest.param(
            claim_status(mapping(), claim="Bad"),
            'resourceClaimName: Invalid value: "Bad": a lowercase RFC 1123 subdomain',
            id="claim-name-not-a-subdomain",
        ),
    ],
)
def test_the_emulator_refuses_a_pod_status_the_real_server_refuses(
    status: Obj, message: str
) -> None:
    with pytest.raises(InvalidObjectError, match="is invalid") as err:
        write_status(store_with_pod(), status)
    assert message in str(err.value)


def test_the_emulator_accepts_the_status_the_real_server_accepts() -> None:
    store = store_with_pod()
    status = claim_status(mapping(), claim="does-not-exist-yet")
    write_status(store, status)
    assert store.get("Pod", "default", "p")["status"]["extendedResourceClaimStatus"] == status


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        pytest.param(
            {
                "spec": {
                    "devices": {
                        "requests": [{"name": "Bad_Name", "exactly": {"deviceClassName": "c"}}]
                    }
                }
            },
            'spec.devices.requests[0].name: Invalid value: "Bad_Name"',
            id="request-name-not-a-label",
        ),
        pytest.param(
            {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "a", "exactly": {"deviceClassName": "c"}},
                            {"name": "a", "exactly": {"deviceClassName": "c"}},
                        ]
                    }
                }
            },
            'spec.devices.requests[1]: Duplicate value: "a"',
            id="request-twice",
        ),
        pytest.param(
            {
                "metadata": {
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": ""}]
                },
                "spec": {
                    "devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c"}}]}
                },
            },
            'metadata.ownerReferences.uid: Invalid value: "": must not be empty',
            id="owner-without-uid",
        ),
    ],
)
def test_the_emulator_refuses_a_claim_the_real_server_refuses(claim: Obj, message: str) -> None:
    obj: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        **claim,
        "metadata": {"generateName": "x-", "namespace": "default", **claim.get("metadata", {})},
    }
    with pytest.raises(InvalidObjectError, match="is invalid") as err:
        ObjectStore(lambda: 1.0e9).create(obj)
    assert message in str(err.value)


def test_generate_name_is_cut_to_58_characters_as_the_api_server_does() -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"generateName": "a" * 70 + "-", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "c"}}]}},
    }
    name = ObjectStore(lambda: 1.0e9).create(obj)["metadata"]["name"]
    assert name.startswith("a" * 58) and len(name) == 63
