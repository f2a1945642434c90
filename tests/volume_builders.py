"""Builders of storage objects as the API server returns them (PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSI objects), and of pods' volumes, for the volume
plugins' tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.builders import HOSTNAME

Obj = dict[str, Any]

WFFC = "WaitForFirstConsumer"
LOCAL = "kubernetes.io/no-provisioner"


def claim_volumes(*claims: str, ephemeral: Sequence[str] = ()) -> list[Obj]:
    """``spec.volumes`` naming ``claims`` (volume ``v-<claim>``) and generic ephemeral
    volumes named ``ephemeral``."""
    out: list[Obj] = [{"name": f"v-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    out += [
        {
            "name": e,
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    }
                }
            },
        }
        for e in ephemeral
    ]
    return out


def pvc(
    name: str,
    *,
    ns: str = "default",
    storage_class: str | None = "local",
    size: str = "1Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    volume: str = "",
    bound: bool = False,
    annotations: Mapping[str, str] | None = None,
    selector: Obj | None = None,
    phase: str | None = None,
    deleting: bool = False,
    owner: str = "",
    uid: str = "",
    rv: str = "1",
) -> Obj:
    """A claim; ``bound``: bound to ``volume`` by the PV controller (its annotation and
    phase)."""
    meta: Obj = {
        "name": name,
        "namespace": ns,
        "uid": uid or f"pvc-{ns}-{name}",
        "resourceVersion": rv,
    }
    ann = dict(annotations or {})
    if bound:
        ann["pv.kubernetes.io/bind-completed"] = "yes"
    if ann:
        meta["annotations"] = ann
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
        ]
    spec: Obj = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = selector
    status: Obj = {"phase": phase or ("Bound" if bound else "Pending")}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def pv(
    name: str,
    *,
    node: str | None = None,
    storage_class: str = "local",
    size: str = "1Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    claim: str = "",
    claim_uid: str | None = None,
    phase: str | None = None,
    labels: Mapping[str, str] | None = None,
    affinity: list[Obj] | None = None,
    csi: tuple[str, str] | None = None,
    rv: str = "1",
) -> Obj:
    """A PV; ``node``: a local PV there (node affinity on its hostname); ``claim``
    (``ns/name``): its claimRef (uid ``pvc-<ns>-<name>`` unless ``claim_uid``)."""
    meta: Obj = {"name": name, "uid": f"pv-{name}", "resourceVersion": rv}
    if labels:
        meta["labels"] = dict(labels)
    spec: Obj = {
        "accessModes": list(modes),
        "capacity": {"storage": size},
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
    }
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    else:
        spec["local"] = {"path": f"/mnt/{name}"}
    terms = affinity
    if node is not None:
        terms = [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]
    if terms is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    if claim:
        ns, cname = claim.split("/")
        ref: Obj = {"kind": "PersistentVolumeClaim", "namespace": ns, "name": cname}
        uid = f"pvc-{ns}-{cname}" if claim_uid is None else claim_uid
        if uid:
            ref["uid"] = uid
        spec["claimRef"] = ref
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase or ("Bound" if claim else "Available")},
    }


def storage_class(
    name: str = "local",
    *,
    mode: str = WFFC,
    provisioner: str = LOCAL,
    topologies: list[Obj] | None = None,
) -> Obj:
    out: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if topologies is not None:
        out["allowedTopologies"] = topologies
    return out


def csi_node(name: str, **limits: int | None) -> Obj:
    """A CSINode; keywords: driver name (``_`` for ``.``) -> its count (None: no limit)."""
    drivers = []
    for driver, count in limits.items():
        d: Obj = {"name": driver.replace("_", "."), "nodeID": name}
        if count is not None:
            d["allocatable"] = {"count": count}
        drivers.append(d)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": drivers},
    }


def csi_driver(name: str, *, capacity: bool = True) -> Obj:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {"storageCapacity": capacity},
    }


def capacity(
    name: str,
    storage_class: str,
    size: str,
    *,
    nodes: Mapping[str, str] | None = None,
    maximum: str | None = None,
    ns: str = "kube-system",
) -> Obj:
    """A CSIStorageCapacity of ``storage_class`` on the nodes whose labels match ``nodes``."""
    out: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": ns},
        "storageClassName": storage_class,
        "capacity": size,
        "nodeTopology": {"matchLabels": dict(nodes or {})},
    }
    if maximum is not None:
        out["maximumVolumeSize"] = maximum
    return out
