"""The volume shapes of ``python -m bench real`` (issue 36 item 8): their storage objects,
made in a run's setup, and what a run's claims show afterwards.

Two shapes, after scheduler_perf's volume tests:

* ``bound-pvs`` (SchedulingCSIPVs): every measured pod has a claim already bound to a CSI
  PV of its own (the PV's ``claimRef`` with the claim's uid, the claim's ``volumeName``
  and ``bind-completed``, both Bound, as the PV controller leaves them: the claims are
  made first, then their PVs, then the claims bound, by the bench's ``bind_claims``), and
  every node a CSINode with an attach limit of 39 for the driver: the filters read the
  claims and count volumes; nothing is written before a bind;
* ``local-pvs`` (WaitForFirstConsumer local volumes): every node has as many local PVs
  (node affinity on its hostname) as the measured pods per node, of a class that waits
  for its first consumer; every measured pod has an unbound claim: the scheduler picks a
  PV, writes its ``claimRef``, and binds the pod once the PV controller of the controller
  manager (``up --controller-manager``, started for these shapes) has bound the claim.

Both runners (Sluice, kube-scheduler) see the same objects; ``raw`` only binds the pods
(no claim is bound for it). Cleaned up with the run (claims first, then PVs, classes and
CSINodes by the run's label).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from scheduler.kube.client import KubeClient

RUN_LABEL: Final = "bench.sluice.dev/run"
CSI_DRIVER: Final = "csi.bench.sluice.dev"
ATTACH_LIMIT: Final = 39
"""scheduler_perf's attach limit of its CSI shapes."""
BOUND: Final = "bound-pvs"
LOCAL: Final = "local-pvs"
VOLUME_SHAPES: Final = frozenset({BOUND, LOCAL})


def class_name(run: str) -> str:
    return f"{run}-local"


def storage_objects(
    kind: str, run: str, nodes: int, pods: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(collection path, object) of a volume shape's setup, in the order to create them
    (classes and CSINodes first, claims last); the bound shape's PVs are not among them:
    they are made once the claims' uids are known (:func:`bound_volume`)."""
    labels = {RUN_LABEL: run}
    if kind == LOCAL:
        yield (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": class_name(run), "labels": labels},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
        per_node = -(-pods // nodes)
        for i in range(nodes):
            node = f"{run}-node-{i}"
            for d in range(per_node):
                yield "/api/v1/persistentvolumes", local_volume(run, node, d)
    else:
        for i in range(nodes):
            yield "/apis/storage.k8s.io/v1/csinodes", csi_node(run, f"{run}-node-{i}")
    for i in range(pods):
        yield f"/api/v1/namespaces/{run}/persistentvolumeclaims", claim(kind, run, i)


def local_volume(run: str, node: str, d: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{node}-disk-{d}", "labels": {RUN_LABEL: run}},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class_name(run),
            "local": {"path": f"/mnt/disk-{d}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def bound_volume(run: str, i: int, claim_uid: str) -> dict[str, Any]:
    """The CSI PV of claim ``pod-<i>`` (uid ``claim_uid``), bound to it."""
    name = f"{run}-pv-{i}"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "labels": {RUN_LABEL: run},
            "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
        },
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": CSI_DRIVER, "volumeHandle": name},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": run,
                "name": f"pod-{i}",
                "uid": claim_uid,
            },
        },
    }


def claim(kind: str, run: str, i: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    meta: dict[str, Any] = {"name": f"pod-{i}", "namespace": run, "labels": {RUN_LABEL: run}}
    spec["storageClassName"] = class_name(run) if kind == LOCAL else ""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def bind_claim(run: str, i: int) -> dict[str, Any]:
    """The merge patch binding claim ``pod-<i>`` to its PV, as the PV controller does."""
    return {
        "metadata": {
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
            }
        },
        "spec": {"volumeName": f"{run}-pv-{i}"},
    }


def csi_node(run: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node, "labels": {RUN_LABEL: run}},
        "spec": {
            "drivers": [
                {"name": CSI_DRIVER, "nodeID": node, "allocatable": {"count": ATTACH_LIMIT}}
            ]
        },
    }


def pod_volumes(name: str) -> list[dict[str, Any]]:
    """The volume of a measured pod: its claim, named like it."""
    return [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]


async def volume_figures(api: KubeClient, run: str) -> dict[str, int]:
    """What the run's claims show: how many are Bound, how many PVs two claims name, and
    how many bound pods are on a node their local PV does not admit."""
    claims = await api.request("GET", f"/api/v1/namespaces/{run}/persistentvolumeclaims")
    pods = await api.request("GET", f"/api/v1/namespaces/{run}/pods")
    node_of = {
        p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName")
        for p in pods.get("items") or ()
    }
    bound = 0
    volumes: dict[str, int] = {}
    misplaced = 0
    for c in claims.get("items") or ():
        name = (c.get("spec") or {}).get("volumeName")
        if (c.get("status") or {}).get("phase") == "Bound" and name:
            bound += 1
            volumes[name] = volumes.get(name, 0) + 1
            node = node_of.get(c["metadata"]["name"])
            if node and name.startswith(f"{run}-node-") and not name.startswith(f"{node}-disk-"):
                misplaced += 1
    return {
        "claims_bound": bound,
        "volumes_claimed_twice": sum(1 for n in volumes.values() if n > 1),
        "pods_away_from_their_volume": misplaced,
    }


async def cleanup_volumes(api: KubeClient, run: str) -> None:
    """The run's claims, then its PVs (their protection finalizers removed: no kubelet
    or controller may be there to release them), classes and CSINodes."""
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    selector = [("labelSelector", f"{RUN_LABEL}={run}")]
    await api.request(
        "DELETE", f"/api/v1/namespaces/{run}/persistentvolumeclaims", body=now, timeout=600
    )
    volumes = await api.request("GET", "/api/v1/persistentvolumes", query=selector)
    for pv in volumes.get("items") or ():
        if (pv["metadata"].get("finalizers") or []) != []:
            await api.request(
                "PATCH",
                f"/api/v1/persistentvolumes/{pv['metadata']['name']}",
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )
    for path in (
        "/api/v1/persistentvolumes",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/storage.k8s.io/v1/csinodes",
    ):
        await api.request("DELETE", path, query=selector, body=now, timeout=600)
