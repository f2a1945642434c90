"""Helpers of the kube-scheduler volume test tables ported as unit tables (see
tests/conformance/README.md and its index): the fixtures kube's tables build, written
again as objects for Sluice, and what one plugin says of a pod on each node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.config import PluginConfig
from tests.builders import cached_session, node, pod, task_of

Obj = dict[str, Any]
NODE_KEY = "nodeKey"
"""The node label kube's binder tables pin local PVs with."""


def kpod(
    name: str = "test-pod",
    *,
    ns: str = "testns",
    claims: Sequence[str] = (),
    volumes: Sequence[Obj] = (),
    node_name: str | None = None,
    uid: str = "",
    priority: int | None = None,
) -> Obj:
    """A pod of ``claims`` (volume ``v-<claim>``) and other ``volumes``, as kube's
    ``makePod(...).withPVCVolume``."""
    spec_volumes = [{"name": f"v-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    spec_volumes += list(volumes)
    kw: dict[str, Any] = {}
    if priority is not None:
        kw["priority"] = priority
    out = pod(name, ns=ns, node=node_name, volumes=spec_volumes or None, **kw)
    if uid:
        out["metadata"]["uid"] = uid
    return out


def knode(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    return node(name, labels=dict(labels or {}))


def kclaim(
    name: str,
    *,
    ns: str = "testns",
    size: str | None = "1G",
    storage_class: str | None = None,
    volume: str = "",
    bound: bool = False,
    selected: str = "",
    modes: Sequence[str] = (),
    phase: str = "",
    uid: str = "",
    owner: str = "",
    rv: str = "1",
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A claim as kube's tables make them: no access modes unless given (it asks none),
    ``bound``: ``bind-completed`` with ``volume``; ``selected``: the selected-node
    annotation; ``owner``: the uid of the pod controlling it."""
    meta: Obj = {
        "name": name,
        "namespace": ns,
        "uid": uid or f"uid-{ns}-{name}",
        "resourceVersion": rv,
    }
    ann = dict(annotations or {})
    if bound:
        ann["pv.kubernetes.io/bind-completed"] = "yes"
    if selected:
        ann["volume.kubernetes.io/selected-node"] = selected
    if ann:
        meta["annotations"] = ann
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
        ]
    spec: Obj = {"accessModes": list(modes)}
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    status = {"phase": phase or ("Bound" if bound else "Pending")}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def kvolume(
    name: str,
    *,
    size: str = "1G",
    storage_class: str = "",
    node_value: str = "",
    node_key: str = NODE_KEY,
    claim: Obj | None = None,
    claim_uid: str | None = None,
    phase: str = "Available",
    labels: Mapping[str, str] | None = None,
    csi: tuple[str, str] | None = None,
    source: Obj | None = None,
    modes: Sequence[str] = (),
    rv: str = "1",
) -> Obj:
    """A PV as kube's tables make them: ``node_value``: affinity ``node_key In
    [node_value]``; ``claim``: its claimRef (the claim's uid unless ``claim_uid``)."""
    meta: Obj = {"name": name, "uid": f"uid-pv-{name}", "resourceVersion": rv}
    if labels:
        meta["labels"] = dict(labels)
    spec: Obj = {"capacity": {"storage": size}, "accessModes": list(modes)}
    if storage_class:
        spec["storageClassName"] = storage_class
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    elif source is not None:
        spec.update(source)
    if node_value:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": node_key, "operator": "In", "values": [node_value]}
                        ]
                    }
                ]
            }
        }
    if claim is not None:
        cmeta = claim["metadata"]
        ref: Obj = {
            "kind": "PersistentVolumeClaim",
            "namespace": cmeta["namespace"],
            "name": cmeta["name"],
        }
        uid = cmeta["uid"] if claim_uid is None else claim_uid
        if uid:
            ref["uid"] = uid
        spec["claimRef"] = ref
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def kclass(
    name: str,
    *,
    mode: str = "WaitForFirstConsumer",
    provisioner: str = "kubernetes.io/no-provisioner",
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


def verdict(
    objects: Sequence[Obj], plugin: str, pod_name: str = "test-pod", ns: str = "testns"
) -> str | dict[str, tuple[str, ...]]:
    """What ``plugin`` alone says of the pod: the reason of a refusal whatever the node
    (kube's PreFilter), else per node the reasons it refuses the node for (``()``: the
    node passes)."""
    session = cached_session(list(objects), [PluginConfig(plugin)])
    fit = session.fit(task_of(session, pod_name, ns))
    out: dict[str, list[str]] = {n.name: [] for n in session.table.nodes}
    for _, rejections in fit.groups:
        for r in rejections:
            if r.whole:
                return r.reason
            for i, n in enumerate(session.table.nodes):
                if r.nodes[i]:
                    out[n.name].append(r.reason)
    return {name: tuple(sorted(reasons)) for name, reasons in out.items()}
