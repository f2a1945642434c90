"""Volumes end to end (issue 36 item 6): on a real API server the real PV controller of
the controller manager binds the claims (``up --controller-manager``); on the emulator
the embedded one does (scheduler/sim/volume_controller.py).

* local PVs on two nodes with a WaitForFirstConsumer class: a gang of four, each pod with
  a claim of its own, is bound next to its volumes, and every claim becomes Bound by the
  PV controller, to a PV on its pod's node;
* an unbound Immediate claim keeps its pod pending with kube's reason, until a PV that
  fits arrives and the controller binds the claim;
* a pod whose claim is deleted waits, saying so, and is bound once the claim is back;
* a claim to provision: the scheduler writes the node it chose into the claim, the PV
  controller asks the class's provisioner, a PV is made on that node (on the real server
  the test plays the external provisioner; on the emulator the embedded one does it), the
  controller binds the claim, and only then is the pod bound.

The scheduler runs as its ServiceAccount under the RBAC of ``manifests/`` on a real
server: its volume writes (patches of PVs and claims) are allowed by it, or fail here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest
from harness import ApiFailure, Cluster, NodeSpec, core_path, wait_for

pytestmark = pytest.mark.anyio

SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
HOSTNAME = "kubernetes.io/hostname"
STORAGE = "storage.k8s.io/v1"
MERGE_PATCH = "application/merge-patch+json"


class Storage:
    """The run's cluster-scoped storage objects (classes, PVs), deleted after the test."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.classes: list[str] = []
        self.volumes: list[str] = []

    async def create_class(
        self, suffix: str, *, mode: str, provisioner: str = "kubernetes.io/no-provisioner"
    ) -> str:
        name = self.cluster.name(suffix)
        body = {
            "apiVersion": STORAGE,
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": mode,
        }
        await self.cluster.api.request(
            "POST", core_path("storageclasses", group=STORAGE), body=body
        )
        self.classes.append(name)
        return name

    async def create_volume(
        self,
        suffix: str,
        storage_class: str,
        *,
        node: str | None = None,
        size: str = "10Gi",
        claim: Mapping[str, Any] | None = None,
        provisioner: str = "",
    ) -> str:
        """A PV of ``storage_class``: a local disk of ``node`` (node affinity on its
        hostname), else a CSI volume; ``claim``: pre-bound to it (as an external
        provisioner makes one)."""
        name = self.cluster.name(suffix)
        spec: dict[str, Any] = {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Retain",
        }
        if node is not None:
            spec["local"] = {"path": f"/mnt/{name}"}
            spec["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            }
        else:
            spec["csi"] = {"driver": provisioner or "e2e.sluice.dev", "volumeHandle": name}
        if claim is not None:
            meta = claim["metadata"]
            spec["claimRef"] = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            }
        metadata: dict[str, Any] = {"name": name}
        if provisioner:
            metadata["annotations"] = {"pv.kubernetes.io/provisioned-by": provisioner}
        body = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}
        await self.cluster.api.request("POST", core_path("persistentvolumes"), body=body)
        self.volumes.append(name)
        return name

    async def create_claim(self, name: str, storage_class: str, size: str = "1Gi") -> None:
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": self.cluster.namespace},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "resources": {"requests": {"storage": size}},
            },
        }
        await self.cluster.api.request(
            "POST", core_path("persistentvolumeclaims", self.cluster.namespace), body=body
        )

    async def claim(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.cluster.api.request(
                "GET", core_path("persistentvolumeclaims", self.cluster.namespace, name)
            )
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def volume(self, name: str) -> dict[str, Any]:
        return await self.cluster.api.request("GET", core_path("persistentvolumes", None, name))

    async def cleanup(self) -> None:
        """The claims first (the PVs are released), then the PVs and the classes; pods
        are deleted by the cluster's own clean-up."""
        api = self.cluster.api
        with contextlib.suppress(ApiFailure):
            doc = await api.request("GET", core_path("pods", self.cluster.namespace))
            for p in doc.get("items") or ():
                await api.request(
                    "DELETE",
                    core_path("pods", self.cluster.namespace, p["metadata"]["name"]),
                    body={"gracePeriodSeconds": 0},
                )
        with contextlib.suppress(ApiFailure):
            await api.request("DELETE", core_path("persistentvolumeclaims", self.cluster.namespace))
        for name in self.volumes:
            with contextlib.suppress(ApiFailure):
                await api.request("DELETE", core_path("persistentvolumes", None, name))
                # a PV held by its protection finalizer goes once it is not bound
                await api.request(
                    "PATCH",
                    core_path("persistentvolumes", None, name),
                    body={"metadata": {"finalizers": None}},
                    content_type=MERGE_PATCH,
                )
        for name in self.classes:
            with contextlib.suppress(ApiFailure):
                await api.request("DELETE", core_path("storageclasses", None, name, group=STORAGE))


@pytest.fixture
async def storage(cluster: Cluster) -> AsyncIterator[Storage]:
    made = Storage(cluster)
    try:
        yield made
    finally:
        with anyio.CancelScope(shield=True):
            await made.cleanup()


def claim_volume(claim: str) -> dict[str, Any]:
    return {"name": "data", "persistentVolumeClaim": {"claimName": claim}}


def reason(cluster: Cluster, name: str) -> str:
    pod = cluster.pod(name) or {}
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "")
    return ""


def affinity_node(pv: Mapping[str, Any]) -> str:
    """The one hostname a local PV's node affinity names."""
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    [value] = terms[0]["matchExpressions"][0]["values"]
    return str(value)


async def test_a_gang_is_bound_beside_its_local_volumes(
    cluster: Cluster, start_scheduler: Any, storage: Storage
) -> None:
    nodes = await cluster.create_nodes(2, NodeSpec(cpu="4"))
    local = await storage.create_class("local", mode="WaitForFirstConsumer")
    for i, node in enumerate(nodes):
        for disk in ("a", "b"):
            await storage.create_volume(f"pv-{i}-{disk}", local, node=node)
    names = [f"w-{i}" for i in range(4)]
    for name in names:
        await storage.create_claim(f"data-{name}", local)
    await cluster.create_pod_group("train", min_member=4)
    await start_scheduler()
    for name in names:
        await cluster.create_pod(name, group="train", volumes=[claim_volume(f"data-{name}")])

    await wait_for(
        lambda: cluster.all_bound(names),
        timeout=60,
        what="the gang bound",
        detail=cluster.describe_pods,
    )

    async def claims_bound() -> list[dict[str, Any]] | None:
        found = [await storage.claim(f"data-{n}") for n in names]
        done = [c for c in found if c and (c.get("status") or {}).get("phase") == "Bound"]
        return done if len(done) == len(names) else None

    claims = await wait_for(claims_bound, timeout=60, what="every claim Bound by the PV controller")
    bound = cluster.bound(names)
    volumes = {c["spec"]["volumeName"] for c in claims}
    assert len(volumes) == len(names), volumes
    for name, claim in zip(names, claims, strict=True):
        pv = await storage.volume(claim["spec"]["volumeName"])
        assert affinity_node(pv) == bound[name], (name, bound[name], pv["metadata"]["name"])
        assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
        assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert sorted(bound.values()).count(nodes[0]) == 2, bound
    assert cluster.recorder.violations == []


async def test_an_unbound_immediate_claim_keeps_its_pod_pending(
    cluster: Cluster, start_scheduler: Any, storage: Storage
) -> None:
    [node] = await cluster.create_nodes(1, NodeSpec(cpu="4"))
    manual = await storage.create_class("manual", mode="Immediate")
    await storage.create_claim("data", manual, size="5Gi")
    await start_scheduler()
    await cluster.create_pod("p", volumes=[claim_volume("data")])

    said = await wait_for(
        lambda: reason(cluster, "p"),
        timeout=30,
        what="the pod's reason",
        detail=cluster.describe_pods,
    )
    assert "pod has unbound immediate PersistentVolumeClaims" in said, said
    await anyio.sleep(2)
    assert not cluster.bound(["p"])

    await storage.create_volume("fits", manual, size="10Gi")  # the controller binds it
    await wait_for(
        lambda: cluster.all_bound(["p"]),
        timeout=60,
        what="the pod bound once its claim is",
        detail=cluster.describe_pods,
    )
    claim = await storage.claim("data")
    assert claim is not None and claim["status"]["phase"] == "Bound", claim
    assert cluster.bound(["p"]) == {"p": node}


async def test_a_pod_whose_claim_is_deleted_waits(
    cluster: Cluster, start_scheduler: Any, storage: Storage
) -> None:
    [node] = await cluster.create_nodes(1, NodeSpec(cpu="4"))
    local = await storage.create_class("local", mode="WaitForFirstConsumer")
    await storage.create_volume("disk", local, node=node)
    await storage.create_claim("data", local)
    await cluster.api.request(
        "DELETE", core_path("persistentvolumeclaims", cluster.namespace, "data")
    )
    await wait_for(
        lambda: _gone(storage, "data"), timeout=30, what="the claim deleted (no pod uses it)"
    )
    await start_scheduler()
    await cluster.create_pod("p", volumes=[claim_volume("data")])
    said = await wait_for(
        lambda: reason(cluster, "p"),
        timeout=30,
        what="the pod's reason",
        detail=cluster.describe_pods,
    )
    assert 'persistentvolumeclaim "data" not found' in said, said
    await anyio.sleep(2)
    assert not cluster.bound(["p"])

    await storage.create_claim("data", local)
    await wait_for(
        lambda: cluster.all_bound(["p"]),
        timeout=60,
        what="the pod bound once its claim is back",
        detail=cluster.describe_pods,
    )
    assert cluster.bound(["p"]) == {"p": node}


async def _gone(storage: Storage, name: str) -> bool:
    return await storage.claim(name) is None


async def test_a_claim_is_provisioned_on_the_node_chosen(
    cluster: Cluster, start_scheduler: Any, storage: Storage
) -> None:
    nodes = await cluster.create_nodes(2, NodeSpec(cpu="4"))
    provisioner = f"{cluster.run_id}.e2e.sluice.dev"
    nvme = await storage.create_class("nvme", mode="WaitForFirstConsumer", provisioner=provisioner)
    await storage.create_claim("scratch", nvme)
    await start_scheduler()
    await cluster.create_pod("p", volumes=[claim_volume("scratch")])

    async def asked() -> dict[str, Any] | None:
        claim = await storage.claim("scratch")
        annotations = (claim or {}).get("metadata", {}).get("annotations") or {}
        if annotations.get(SELECTED_NODE) and annotations.get(STORAGE_PROVISIONER) == provisioner:
            return claim
        if claim is not None and claim.get("spec", {}).get("volumeName"):
            return claim  # the embedded provisioner was quicker than this look
        return None

    claim = await wait_for(
        asked,
        timeout=60,
        what="the node chosen and the provisioner asked",
        detail=cluster.describe_pods,
    )
    chosen = claim["metadata"]["annotations"][SELECTED_NODE]
    assert chosen in nodes
    if not cluster.emulated:
        # no PV exists before the test makes it, so the pod must still wait; on the
        # emulator the embedded provisioner may have bound the claim, and the scheduler
        # the pod, before this look (the order there: tests/loop/test_volume_binds.py)
        assert not cluster.bound(["p"]), "bound before its claim was"
        # the external provisioner's part: a PV on the chosen node
        await storage.create_volume("made", nvme, node=chosen, claim=claim, provisioner=provisioner)
    await wait_for(
        lambda: cluster.all_bound(["p"]),
        timeout=60,
        what="the pod bound once its claim is",
        detail=cluster.describe_pods,
    )
    assert cluster.bound(["p"]) == {"p": chosen}
    bound = await storage.claim("scratch")
    assert bound is not None and bound["status"]["phase"] == "Bound", bound
