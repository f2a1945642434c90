"""Pods, their owners, and the rule of waiting for the pod grouper (layer 0).

A pod made by a controller (a Job, a JobSet, a PyTorchJob, ...) that names no group of
any API is grouped by ``sluice controller`` from its top owner: it either joins a
PodGroup (the label ``scheduling.sluice.dev/pod-group``) or is left a gang of one (the
annotation ``scheduling.sluice.dev/gang-of-one``). Until one of the two is written, the
scheduler must not start it, or the first pods of a gang would start one by one as gangs
of one. :func:`grouper_wait` is that rule, read by both sides: the scheduler's cache (the
pod's job then has a ``problem``, its reason, see
:func:`scheduler.cache.snapshot_builder.jobs_of`) and the grouper (the pods it must handle), so
that the two can never disagree on which pods wait.

Pure functions over the pod's JSON; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api import labels as L
from scheduler.api.membership import pod_group_ref

__all__ = [
    "OwnerRef",
    "controller_ref",
    "grouper_wait",
    "grouper_wait_reason",
    "opted_out",
]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One ``metadata.ownerReferences`` entry."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def describe(self, namespace: str) -> str:
        """``Kind namespace/name``, as messages name it."""
        return f"{self.kind} {namespace}/{self.name}" if namespace else f"{self.kind} {self.name}"

    def as_reference(self) -> dict[str, str]:
        """The ownerReferences entry that makes an object this owner's dependent (for the
        garbage collector; not a controller reference, and blocking no deletion)."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def controller_ref(obj: Obj) -> OwnerRef | None:
    """The owner reference of ``obj`` marked ``controller: true`` (an object has at most
    one), or None. An entry missing its kind, name or apiVersion is not a reference."""
    for ref in _meta(obj).get("ownerReferences") or ():
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        parts = [ref.get(k) for k in ("apiVersion", "kind", "name")]
        if all(isinstance(p, str) and p for p in parts):
            return OwnerRef(str(parts[0]), str(parts[1]), str(parts[2]), str(ref.get("uid") or ""))
    return None


def opted_out(obj: Obj) -> bool:
    """Does ``obj`` (a pod or an owner) carry ``scheduling.sluice.dev/group-by-owner:
    "false"``?"""
    labels = _meta(obj).get("labels")
    if not isinstance(labels, Mapping):
        return False
    return str(labels.get(L.GROUP_BY_OWNER_LABEL, "")).lower() == "false"


def grouper_wait(pod: Obj) -> str:
    """The owner (``Job team/train``) whose pod grouper ``pod`` waits for, or "".

    A pod waits when all of these hold: it is not bound (no ``spec.nodeName``), not
    finished and not being deleted; it has a controller owner reference; it names no group
    of any API (:func:`~scheduler.api.membership.pod_group_ref`, the one rule of that); it is
    not labelled ``group-by-owner: "false"``; and the grouper has not left it alone (no
    ``gang-of-one`` annotation). Whose ``schedulerName`` it is, is the caller's question.
    """
    meta = _meta(pod)
    spec = pod.get("spec")
    status = pod.get("status")
    if isinstance(spec, Mapping) and spec.get("nodeName"):
        return ""
    if meta.get("deletionTimestamp"):
        return ""
    if isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"):
        return ""
    owner = controller_ref(pod)
    if owner is None or pod_group_ref(pod) is not None or opted_out(pod):
        return ""
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and L.GANG_OF_ONE_ANNOTATION in annotations:
        return ""
    return owner.describe(str(meta.get("namespace") or ""))


def grouper_wait_reason(owner: str) -> str:
    """What a pod waiting for the grouper says (its ``PodScheduled`` message)."""
    return (
        f"waiting for sluice controller to group this pod by its owner {owner} "
        "(no controller running? set waitForPodGrouper: false in the scheduler's "
        "configuration to schedule such pods alone)"
    )
