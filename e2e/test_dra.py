"""DRA devices (resource.k8s.io/v1) end to end: a fake driver publishes a ResourceSlice per
node; claims and templates are created by the test (on the real server the controller
manager makes the templates' claims, on the emulator the embedded cluster does); every
pod bound gets devices of its own, checked against the claims' status on every watch
event; a preemptor that needs a device evicts the pod holding it; a pod asking an extended
resource that a DeviceClass names gets devices of that class (KEP-5004)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from dra_driver import ClaimWatch, FakeDriver, devices_of
from harness import Cluster, NodeSpec, core_path, node_of, uid_of, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
async def driver(cluster: Cluster, request: pytest.FixtureRequest) -> AsyncIterator[FakeDriver]:
    """The fake driver; its class names the run's extended resource when the test is
    parametrized indirectly with ``True``."""
    fake = FakeDriver(cluster, devices=2, extended=getattr(request, "param", False))
    try:
        yield fake
    finally:
        with anyio.CancelScope(shield=True):
            await fake.cleanup()


@pytest.fixture
async def claims(cluster: Cluster, driver: FakeDriver) -> AsyncIterator[ClaimWatch]:
    """The namespace's claims and pods, checked on every watch event."""
    watch = ClaimWatch(cluster, driver)
    cluster.informer.listeners.append(watch.check_pod_event)
    async with anyio.create_task_group() as tg:
        await tg.start(watch.run)
        yield watch
        tg.cancel_scope.cancel()


def template_claim(template: str) -> list[dict[str, str]]:
    return [{"name": "gpu", "resourceClaimTemplateName": template}]


async def create_gpu_pod(
    cluster: Cluster, driver: FakeDriver, name: str, count: int = 1, **options: Any
) -> None:
    """A pod asking ``count`` devices: the driver's extended resource in its requests and
    limits when its class names one, else a claim from the template ``one`` (of one)."""
    if not driver.extended_resource:
        await cluster.create_pod(name, resource_claims=template_claim("one"), **options)
        return
    body = cluster.pod_manifest(name, **options)
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"][driver.extended_resource] = str(count)
    resources["limits"] = {driver.extended_resource: str(count)}
    await cluster.api.request("POST", core_path("pods", cluster.namespace), body=body)


async def test_every_bound_pod_gets_devices_of_its_own(
    cluster: Cluster, start_scheduler, driver: FakeDriver, claims: ClaimWatch
) -> None:
    nodes = await cluster.create_nodes(3, NodeSpec(cpu="4"))
    await driver.publish(nodes)
    await driver.create_template("one")
    await driver.create_claim("pair", count=2)
    await start_scheduler()
    singles = [f"single-{i}" for i in range(5)]
    await cluster.create_pods(singles, resource_claims=template_claim("one"))
    await cluster.create_pod(
        "double", resource_claims=[{"name": "gpus", "resourceClaimName": "pair"}]
    )
    everyone = [*singles, "double"]

    # 6 devices on 3 nodes, 7 asked: five pods get theirs (the five singles, or the
    # double and four singles), one waits, saying why. Settled means five bound: a
    # pod's reason may be from a cycle before its claim existed (the claim controller
    # makes it from the template), so a reason alone does not mean it will wait.
    def settled() -> list[str] | None:
        bound = cluster.bound(everyone)
        waiting = [n for n in everyone if n not in bound and _reason(cluster, n)]
        return waiting if len(bound) == len(everyone) - 1 and waiting else None

    waiting = await wait_for(
        lambda: (w := settled()) is not None and w,
        timeout=60,
        what="the pods with devices bound and one waiting",
        detail=cluster.describe_pods,
    )
    assert len(waiting) == 1, cluster.describe_pods()
    reason = _reason(cluster, waiting[0])
    assert "ResourceClaim" in reason or "claim" in reason, reason
    bound = [n for n in everyone if n not in waiting]
    pods = [p for p in (cluster.pod(n) for n in bound) if p is not None]
    await wait_for(
        lambda: not claims.check_pods(pods),
        timeout=10,
        what="the claims of every bound pod",
        detail=lambda: claims.check_pods(pods),
    )
    used = [d for c in claims.claims.values() for d in devices_of(c)]
    assert len(used) == len(set(used)), used
    assert claims.violations == [], claims.violations
    assert claims.events > 0
    assert cluster.recorder.violations == []


def _reason(cluster: Cluster, name: str) -> str:
    pod = cluster.pod(name) or {}
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


@pytest.mark.parametrize(
    "driver", [False, True], ids=["template-claims", "extended-resource"], indirect=True
)
async def test_a_preemptor_evicts_the_pod_holding_the_device_it_needs(
    cluster: Cluster, start_scheduler, driver: FakeDriver, claims: ClaimWatch
) -> None:
    """Seed 000's GPU story on DRA: one node, two devices, both held by low-priority pods,
    beside a low-priority pod with no device; the high-priority pod evicts one device
    holder (not the pod without a device), waits until the claim controller released its
    device, and is bound with it. The pods ask through claims made from a template, or
    (KEP-5004) by asking the extended resource the class names: the victim's claim, made
    by Sluice, goes with it (the garbage collector deletes it)."""
    (node,) = await cluster.create_nodes(1, NodeSpec(cpu="4"))
    await driver.publish([node])
    await driver.create_template("one")
    low = await cluster.create_priority_class("low", 100)
    high = await cluster.create_priority_class("high", 10_000)
    await start_scheduler()
    holders = ["holder-0", "holder-1"]
    for name in holders:
        await create_gpu_pod(cluster, driver, name, cpu="1", priority=low)
    await cluster.create_pod("plain", cpu="1", priority=low)
    await wait_for(
        lambda: cluster.all_running([*holders, "plain"]),
        timeout=60,
        what="the low-priority pods Running",
        detail=cluster.describe_pods,
    )
    await create_gpu_pod(cluster, driver, "urgent", cpu="1", priority=high)
    await wait_for(
        lambda: node_of(cluster.pod("urgent") or {}) == node,
        timeout=90,
        what="the preemptor bound",
        detail=cluster.describe_pods,
    )
    gone = [
        h for h in (cluster.recorder.history(v) for v in holders) if h is not None and h.deleted
    ]
    assert len(gone) == 1, cluster.describe_pods()
    assert node_of(cluster.pod("plain") or {}) == node, "the pod without a device stays"
    urgent = cluster.pod("urgent")
    assert urgent is not None
    await wait_for(
        lambda: not claims.check_pods([urgent]), timeout=10, what="the preemptor's claim"
    )
    assert claims.violations == [], claims.violations


@pytest.mark.parametrize("driver", [True], ids=["extended-resource"], indirect=True)
async def test_a_pod_asking_an_extended_resource_gets_devices_of_the_class_naming_it(
    cluster: Cluster, start_scheduler, driver: FakeDriver, claims: ClaimWatch
) -> None:
    """KEP-5004: a DeviceClass names the extended resource ``<run>.example.com/gpu``; pods
    ask it in ``resources.requests`` (no ``resourceClaims``). Each pod asking 2 is bound
    with two distinct devices of its node, through a claim Sluice makes as kube-scheduler
    does (annotated, controlled by the pod, ``container-0-request-<j>`` of the class) and
    names in the pod's ``status.extendedResourceClaimStatus`` before the bind: checked on
    every watch event of claims and pods. The pod asking what is left waits, saying so."""
    resource = driver.extended_resource
    nodes = await cluster.create_nodes(2, NodeSpec(cpu="4"))
    await driver.publish(nodes)
    await start_scheduler()
    pairs = ["two-0", "two-1"]
    for name in pairs:
        await create_gpu_pod(cluster, driver, name, 2)
    await wait_for(
        lambda: cluster.all_bound(pairs),
        timeout=60,
        what="both pods asking 2 devices bound",
        detail=cluster.describe_pods,
    )
    await create_gpu_pod(cluster, driver, "one", 1)
    await wait_for(
        lambda: _reason(cluster, "one"),
        timeout=30,
        what="the pod asking one more device waiting",
        detail=cluster.describe_pods,
    )
    assert {*cluster.bound(pairs).values()} == set(nodes), cluster.describe_pods()
    assert not cluster.bound(["one"])
    assert resource in _reason(cluster, "one"), _reason(cluster, "one")
    pods = [p for p in (cluster.pod(n) for n in pairs) if p is not None]
    await wait_for(
        lambda: not claims.check_pods(pods),
        timeout=10,
        what="the claims of both pods",
        detail=lambda: claims.check_pods(pods),
    )
    request = f"container-0-request-{sorted(['cpu', 'memory', resource]).index(resource)}"
    for pod in pods:
        status = pod["status"]["extendedResourceClaimStatus"]
        assert status["requestMappings"] == [
            {"containerName": "main", "resourceName": resource, "requestName": request}
        ]
        claim = claims.claims[status["resourceClaimName"]]
        assert claim["metadata"]["ownerReferences"][0]["uid"] == uid_of(pod)
        assert claim["spec"]["devices"]["requests"] == [
            {
                "name": request,
                "exactly": {
                    "deviceClassName": driver.class_name,
                    "allocationMode": "ExactCount",
                    "count": 2,
                },
            }
        ]
        devices = devices_of(claim)
        assert len(set(devices)) == 2, devices
        assert all(f"/{node_of(pod)}/" in d for d in devices), (devices, node_of(pod))
    assert claims.violations == [], claims.violations
    assert claims.events > 0 and claims.pod_events > 0
    assert cluster.recorder.violations == []
