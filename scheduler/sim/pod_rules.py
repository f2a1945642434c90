"""The API server's own rules for Pods that the embedded cluster keeps too (layer 4).

Found by running the same writes against kube-apiserver v1.36.2:

* **At creation**, a pod with ``spec.schedulingGates`` gets the condition
  ``PodScheduled=False`` with reason ``SchedulingGated`` (the server writes it, not a
  scheduler). It stays after the last gate is removed, until a scheduler writes its own.
* **On update**, a pod's spec is immutable but for a few fields (``ValidatePodUpdate``):
  container and init-container images, ``activeDeadlineSeconds``, additions to
  ``tolerations``, ``terminationGracePeriodSeconds``, and scheduling gates, which may only
  be removed. While a pod is gated (before the update), ``spec.nodeSelector`` may gain
  keys (never change or lose one) and ``spec.affinity`` may be narrowed: Kueue writes
  both when it admits a workload. The server's affinity rule (only additions of required
  node-affinity terms) is not checked here: any change of ``affinity`` of a gated pod is
  accepted.

:func:`on_create` and :func:`check_update` are called by the object store for every Pod
written through the main resource (not ``status``, not ``binding``); both are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.errors import FieldCause, InvalidObjectError

__all__ = ["GATED_CONDITION", "check_update", "on_create"]

GATED_CONDITION = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "SchedulingGated",
    "message": "Scheduling is blocked due to non-empty scheduling gates",
}
"""The condition the API server writes on a pod created with scheduling gates."""

_MUTABLE = frozenset(
    {
        "containers",
        "initContainers",
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "schedulingGates",
    }
)
_MUTABLE_WHILE_GATED = frozenset({"nodeSelector", "affinity"})
_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)

Obj = Mapping[str, Any]


def on_create(pod: dict[str, Any], now: str) -> None:
    """Add ``SchedulingGated`` to a new gated pod's conditions (``now``: RFC 3339), in
    place, unless it has a PodScheduled condition already."""
    spec = pod.get("spec") or {}
    if not spec.get("schedulingGates") or spec.get("nodeName"):
        return
    status = pod.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    if any(c.get("type") == "PodScheduled" for c in conditions):
        return
    conditions.append({**GATED_CONDITION, "lastProbeTime": None, "lastTransitionTime": now})


def check_update(old: Obj, new: Obj) -> None:
    """Refuse (InvalidObjectError, the server's wording) an update of pod ``old`` to
    ``new`` that changes what the API server does not let change."""
    name = str((old.get("metadata") or {}).get("name", ""))
    before: Obj = old.get("spec") or {}
    after: Obj = new.get("spec") or {}
    gated = bool(before.get("schedulingGates"))
    _check_gates(name, before, after)
    _check_node_selector(name, before, after, gated)
    _check_tolerations(name, before, after)
    mutable = _MUTABLE | (_MUTABLE_WHILE_GATED if gated else frozenset())
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    if changed - mutable or _containers_changed_beyond_image(before, after):
        _refuse(name, "spec", f"Forbidden: {_FORBIDDEN}")


def _check_gates(name: str, before: Obj, after: Obj) -> None:
    old = [g.get("name") for g in before.get("schedulingGates") or ()]
    for i, gate in enumerate(after.get("schedulingGates") or ()):
        if gate.get("name") not in old:
            _refuse(
                name,
                f"spec.schedulingGates[{i}].name",
                f"Forbidden: only deletion is allowed, but found new scheduling gate "
                f"'{gate.get('name')}'",
            )


def _check_node_selector(name: str, before: Obj, after: Obj, gated: bool) -> None:
    old: Obj = before.get("nodeSelector") or {}
    new: Obj = after.get("nodeSelector") or {}
    if not gated or old == new:
        return
    if any(new.get(k) != v for k, v in old.items()):
        _refuse(
            name,
            "spec.nodeSelector",
            f"Invalid value: {dict(new)}: only additions to spec.nodeSelector are allowed "
            "(no mutations or deletions)",
        )


def _check_tolerations(name: str, before: Obj, after: Obj) -> None:
    old = list(before.get("tolerations") or ())
    new = list(after.get("tolerations") or ())
    if new[: len(old)] != old:
        _refuse(name, "spec.tolerations", "Forbidden: existing toleration can not be modified")


def _containers_changed_beyond_image(before: Obj, after: Obj) -> bool:
    for key in ("containers", "initContainers"):
        old = list(before.get(key) or ())
        new = list(after.get(key) or ())
        if len(old) != len(new):
            return True
        for a, b in zip(old, new, strict=True):
            if {k: v for k, v in a.items() if k != "image"} != {
                k: v for k, v in b.items() if k != "image"
            }:
                return True
    return False


def _refuse(name: str, field: str, message: str) -> None:
    raise InvalidObjectError(
        f'Pod "{name}" is invalid: {field}: {message}',
        kind="Pod",
        name=name,
        causes=(FieldCause(field, message),),
    )
