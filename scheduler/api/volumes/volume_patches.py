"""The scheduler's volume writes as JSON, for both backends (layer 0).

kube-scheduler's VolumeBinding PreBind updates a whole PV (its ``claimRef``) or claim
(its ``selected-node`` annotation) at the resourceVersion its cache had. A JSON merge
patch carrying ``metadata.resourceVersion`` does the same without sending the rest: the
API server refuses it (409) when the object changed since, so a PV the PV controller
bound to another claim meanwhile is never taken over. :func:`claim_ref_patch` and
:func:`selected_node_patch` build them; :func:`volume_state` reads back what a GET shows
of them (a lost reply is judged by it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.volumes.model import BOUND_BY_CONTROLLER, SELECTED_NODE
from scheduler.api.volumes.prebind import ClaimTarget

__all__ = ["VolumeState", "claim_ref_patch", "selected_node_patch", "volume_state"]


@dataclass(frozen=True, slots=True)
class VolumeState:
    """A PersistentVolume or PersistentVolumeClaim as one read of the API server shows
    it: its uid and resourceVersion, and what the scheduler writes there (a PV's
    ``spec.claimRef.uid``; a claim's ``volume.kubernetes.io/selected-node``)."""

    uid: str
    resource_version: str
    claim_uid: str = ""
    selected_node: str = ""


def claim_ref_patch(
    claim: ClaimTarget, resource_version: str, *, by_controller: bool
) -> dict[str, Any]:
    """The merge patch binding a PV to ``claim`` at ``resource_version`` (with the
    annotation ``pv.kubernetes.io/bound-by-controller`` when ``by_controller``: the PV was
    not pre-bound by a user, as kube's binder marks it)."""
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if by_controller:
        meta["annotations"] = {BOUND_BY_CONTROLLER: "yes"}
    return {
        "metadata": meta,
        "spec": {
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": claim.namespace,
                "name": claim.name,
                "uid": claim.uid,
            }
        },
    }


def selected_node_patch(claim: ClaimTarget, node: str, resource_version: str) -> dict[str, Any]:
    """The merge patch annotating ``claim`` with ``node`` at ``resource_version``, guarded
    by its uid."""
    return {
        "metadata": {
            "uid": claim.uid,
            "resourceVersion": resource_version,
            "annotations": {SELECTED_NODE: node},
        }
    }


def volume_state(obj: Mapping[str, Any]) -> VolumeState:
    """What a read of a PV or a claim tells about the scheduler's writes."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ref = spec.get("claimRef") or {}
    annotations = meta.get("annotations") or {}
    return VolumeState(
        str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""),
        str(ref.get("uid") or "") if isinstance(ref, Mapping) else "",
        str(annotations.get(SELECTED_NODE, "")) if isinstance(annotations, Mapping) else "",
    )
