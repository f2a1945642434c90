"""What ``sluice snapshot --anonymize`` does to storage (layer 4, sim): a pod's claims and
inline disks kept and renamed, claims (``volumeName``, ``selected-node``), PVs (renamed
``pv-0001``..., their ``claimRef`` and node affinity renamed, their source but a CSI
driver's dropped), classes (parameters dropped), CSINodes and capacities, consistently
with :mod:`scheduler.sim.anonymize`, whose renamings (:class:`Names`) they use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from scheduler.api.volumes.model import (
    BETA_STORAGE_CLASS,
    BIND_COMPLETED,
    BOUND_BY_CONTROLLER,
    PROVISIONED_BY,
    SELECTED_NODE,
    STORAGE_PROVISIONER,
)
from scheduler.sim.renaming import HOSTNAME, node_terms, numbering

Obj = dict[str, Any]

ZONE_LABELS = frozenset(
    {
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
    }
)
"""The labels of PVs VolumeZone reads (kept, and on the nodes too)."""
STORAGE_ANNOTATIONS = frozenset(
    {
        BIND_COMPLETED,
        BOUND_BY_CONTROLLER,
        SELECTED_NODE,
        STORAGE_PROVISIONER,
        BETA_STORAGE_CLASS,
        PROVISIONED_BY,
        "volume.beta.kubernetes.io/storage-provisioner",
    }
)
"""Annotations of claims and PVs the PV controller writes and the scheduler reads."""
PV_SPEC = (
    "capacity",
    "accessModes",
    "volumeMode",
    "storageClassName",
    "claimRef",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "volumeAttributesClassName",
)
"""What of a PV's spec a snapshot anonymized keeps (with its CSI source)."""
INLINE_DISKS = {
    "gcePersistentDisk": "pdName",
    "awsElasticBlockStore": "volumeID",
    "iscsi": "iqn",
    "rbd": "image",
}
"""The inline disks VolumeRestrictions reads, and the field naming each."""


class Names(Protocol):
    """The renamings of one snapshot, as the storage fixes read them."""

    @property
    def disks(self) -> Mapping[str, str]:
        """``kind/id`` of an inline disk -> its new id."""
        ...

    def ns(self, namespace: str) -> str: ...

    def name(self, namespace: str, name: str) -> str: ...

    def node(self, name: str) -> str: ...

    def volume(self, name: str) -> str: ...


def disk_numbering(pods: Iterable[Obj]) -> dict[str, str]:
    """``kind/id`` of every inline disk the pods name -> ``disk-0001``..."""
    return numbering(
        (
            f"{kind}/{v[kind].get(field)}"
            for p in pods
            for v in (p.get("spec") or {}).get("volumes") or ()
            for kind, field in INLINE_DISKS.items()
            if isinstance(v.get(kind), Mapping)
        ),
        "disk-",
    )


def ephemeral_names(
    pods: Iterable[Obj], local: Mapping[str, Mapping[str, str]]
) -> dict[tuple[str, str], str]:
    """(namespace, claim) -> the new name of each generic ephemeral volume's claim:
    ``<pod's new name>-v<i>``, as the API names it after the renamed pod and volume."""
    out: dict[tuple[str, str], str] = {}
    for p in pods:
        meta = p["metadata"]
        for i, v in enumerate((p.get("spec") or {}).get("volumes") or ()):
            if isinstance(v.get("ephemeral"), Mapping):
                ns = meta["namespace"]
                new = f"{local[ns].get(meta['name'], meta['name'])}-v{i}"
                out[(ns, f"{meta['name']}-{v.get('name')}")] = new
    return out


def pod_volumes(pod: Obj, names: Names) -> list[Obj]:
    """The claims and inline disks of ``pod``'s volumes, renamed (the others go)."""
    ns = pod["metadata"]["namespace"]
    out: list[Obj] = []
    for i, v in enumerate((pod.get("spec") or {}).get("volumes") or ()):
        if not isinstance(v, Mapping):
            continue
        claim = v.get("persistentVolumeClaim")
        if isinstance(claim, Mapping):
            kept = {"claimName": names.name(ns, str(claim.get("claimName")))}
            if "readOnly" in claim:
                kept["readOnly"] = claim["readOnly"]
            out.append({"name": f"v{i}", "persistentVolumeClaim": kept})
            continue
        ephemeral = v.get("ephemeral")
        if isinstance(ephemeral, Mapping):
            template = ephemeral.get("volumeClaimTemplate") or {}
            out.append(
                {
                    "name": f"v{i}",
                    "ephemeral": {"volumeClaimTemplate": {"spec": template.get("spec")}},
                }
            )
            continue
        for kind, field in INLINE_DISKS.items():
            disk = v.get(kind)
            if isinstance(disk, Mapping):
                kept = {field: names.disks[f"{kind}/{disk.get(field)}"]}
                for extra in ("readOnly", "monitors", "pool"):
                    if extra in disk:
                        kept[extra] = disk[extra]
                out.append({"name": f"v{i}", kind: kept})
    return out


def volume_claim(obj: Obj, names: Names) -> None:
    spec = obj.get("spec") or {}
    if spec.get("volumeName"):
        spec["volumeName"] = names.volume(spec["volumeName"])
    spec.pop("dataSource", None)
    spec.pop("dataSourceRef", None)


def volume(obj: Obj, names: Names) -> None:
    obj["metadata"]["name"] = names.volume(obj["metadata"]["name"])
    spec = obj.get("spec") or {}
    kept = {k: spec[k] for k in PV_SPEC if k in spec}
    csi = spec.get("csi")
    if isinstance(csi, Mapping):
        kept["csi"] = {"driver": csi.get("driver"), "volumeHandle": obj["metadata"]["name"]}
    else:
        kept["hostPath"] = {"path": "/"}
    ref = kept.get("claimRef")
    if isinstance(ref, dict) and ref.get("namespace"):
        ns = str(ref["namespace"])
        kept["claimRef"] = {k: v for k, v in ref.items() if k in ("apiVersion", "kind", "uid")} | {
            "namespace": names.ns(ns),
            "name": names.name(ns, str(ref.get("name"))),
        }
    node_terms(kept.get("nodeAffinity"), names.node)
    obj["spec"] = kept


def storage_class(obj: Obj, names: Names) -> None:
    obj.pop("parameters", None)
    obj.pop("mountOptions", None)
    for term in obj.get("allowedTopologies") or ():
        for e in term.get("matchLabelExpressions") or ():
            if e.get("key") == HOSTNAME and isinstance(e.get("values"), list):
                e["values"] = [names.node(str(v)) for v in e["values"]]


def csi_node(obj: Obj, names: Names) -> None:
    obj["metadata"]["name"] = names.node(obj["metadata"]["name"])
    for d in (obj.get("spec") or {}).get("drivers") or ():
        if d.get("nodeID"):
            d["nodeID"] = obj["metadata"]["name"]


def capacity(obj: Obj, names: Names) -> None:
    topology = obj.get("nodeTopology") or {}
    labels = topology.get("matchLabels") or {}
    if HOSTNAME in labels:
        labels[HOSTNAME] = names.node(str(labels[HOSTNAME]))
    node_terms(topology, names.node)
