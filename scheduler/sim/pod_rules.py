"""The API server's own rules for Pods that the embedded cluster keeps too (layer 4).

Found by running the same writes against kube-apiserver v1.36.2:

* **At creation**, a pod with ``spec.schedulingGates`` gets the condition
  ``PodScheduled=False`` with reason ``SchedulingGated`` (the server writes it, not a
  scheduler). It stays after the last gate is removed, until a scheduler writes its own.
  A pod (anti-)affinity term's ``matchLabelKeys`` and ``mismatchLabelKeys``, and a spread
  constraint's ``matchLabelKeys``, are merged into its ``labelSelector`` with the pod's
  own values (``key In (value)``, ``key NotIn (value)``; a key the pod does not have,
  or a null selector, adds nothing), as the server's MatchLabelKeysInPodAffinity and
  MatchLabelKeysInPodTopologySpreadSelectorMerge (on in v1.36) do. Pod-level requests
  (``spec.resources.requests``) of CPU or memory below the containers' aggregate request
  are refused (422 ``must be greater than or equal to aggregate container requests``).
* **On update**, a pod's spec is immutable but for a few fields (``ValidatePodUpdate``):
  container and init-container images, ``activeDeadlineSeconds``, additions to
  ``tolerations``, ``terminationGracePeriodSeconds``, and scheduling gates, which may only
  be removed. While a pod is gated (before the update), ``spec.nodeSelector`` may gain
  keys (never change or lose one) and ``spec.affinity`` may be narrowed: Kueue writes
  both when it admits a workload. The server's affinity rule (only additions of required
  node-affinity terms) is not checked here: any change of ``affinity`` of a gated pod is
  accepted.
* **Binding** (:func:`bound_pod`) sets ``spec.nodeName`` and ``PodScheduled=True``, and
  adds the Binding's annotations; it is refused (409) for a pod already assigned, being
  deleted, still gated, or of another uid.
* **Deletion** of a bound pod that has not finished is graceful (:func:`deletion`):
  ``deletionTimestamp`` = now + grace (the request's, else
  ``spec.terminationGracePeriodSeconds``, else 30) and ``deletionGracePeriodSeconds``;
  the kubelet removes it later. Deleting a terminating pod again only shortens the grace,
  counted from the first deletion. Grace 0, an unbound or a finished pod: removed at once.
* **Eviction** marks the pod ``DisruptionTarget=True`` (reason ``EvictionByEvictionAPI``)
  before it is deleted (:func:`eviction_status`); budgets are checked first
  (:mod:`~scheduler.sim.budgets`).

:func:`on_create` and :func:`check_update` are called by the object store for every Pod
written through the main resource (not ``status``, not ``binding``); :func:`bound_pod`,
:func:`deletion` and :func:`eviction_status` by its ``bind``, ``delete`` and ``evict``.
All are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from scheduler.api.errors import ConflictError, FieldCause, InvalidInputError, InvalidObjectError
from scheduler.api.pod_resources import aggregate_containers
from scheduler.api.quantity import format_bytes, format_milli
from scheduler.api.resource import canonical_amount
from scheduler.sim.api_conventions import parse_rfc3339, rfc3339, with_condition

__all__ = [
    "GATED_CONDITION",
    "Deletion",
    "bound_pod",
    "check_update",
    "deletion",
    "eviction_status",
    "on_create",
]

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

TERMINAL_PHASES: Final[frozenset[str]] = frozenset({"Succeeded", "Failed"})
DEFAULT_GRACE: Final[int] = 30
"""Seconds of a pod's graceful deletion when neither the request nor its spec says."""
_EMPTY: Final[Mapping[Any, Any]] = {}


def on_create(pod: dict[str, Any], now: str) -> None:
    """Add ``SchedulingGated`` to a new gated pod's conditions (``now``: RFC 3339), unless
    it has a PodScheduled condition already, and merge its label keys into its selectors
    (module docstring); in place."""
    spec = pod.get("spec") or {}
    name = str((pod.get("metadata") or {}).get("name") or "")
    _check_pod_level_requests(name, spec)
    _merge_label_keys(spec, (pod.get("metadata") or {}).get("labels") or {})
    if not spec.get("schedulingGates") or spec.get("nodeName"):
        return
    status = pod.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    if any(c.get("type") == "PodScheduled" for c in conditions):
        return
    conditions.append({**GATED_CONDITION, "lastProbeTime": None, "lastTransitionTime": now})


def _check_pod_level_requests(name: str, spec: Obj) -> None:
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    if not pod_level:
        return
    obj = f"Pod {name}"
    try:
        aggregate = aggregate_containers(spec, obj=obj)
    except InvalidInputError:
        return  # a malformed container: refused elsewhere
    for resource in ("cpu", "memory"):
        if resource not in pod_level:
            continue
        asked = canonical_amount(resource, pod_level[resource], obj=obj, field="spec.resources")
        total = aggregate.get(resource, 0)
        if asked < total:
            shown = format_milli(total) if resource == "cpu" else format_bytes(total)
            _refuse(
                name,
                f"spec.resources.requests[{resource}]",
                f'Invalid value: "{pod_level[resource]}": must be greater than or equal to '
                f"aggregate container requests of {shown}",
            )


def _merge_label_keys(spec: Obj, labels: Obj) -> None:
    def merge(term: Any, keys: object, operator: str) -> None:
        selector = term.get("labelSelector") if isinstance(term, dict) else None
        if not isinstance(selector, dict) or not isinstance(keys, list):
            return
        for key in keys:
            if isinstance(key, str) and key in labels:
                expressions = selector.setdefault("matchExpressions", [])
                expressions.append({"key": key, "operator": operator, "values": [labels[key]]})

    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        terms = list(section.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        terms += [
            w.get("podAffinityTerm")
            for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
            if isinstance(w, dict)
        ]
        for term in terms:
            if isinstance(term, dict):
                merge(term, term.get("matchLabelKeys"), "In")
                merge(term, term.get("mismatchLabelKeys"), "NotIn")
    for constraint in spec.get("topologySpreadConstraints") or ():
        if isinstance(constraint, dict):
            merge(constraint, constraint.get("matchLabelKeys"), "In")


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


# Binding, deletion and eviction ------------------------------------------------------------


def bound_pod(
    pod: Obj, node: str, annotations: Mapping[str, str] | None, now: str
) -> dict[str, Any]:
    """Pod ``pod`` bound to ``node`` (the Binding subresource), ``now`` RFC 3339: a new
    object sharing what did not change. Raises ConflictError (the server's wording) when
    the pod is already assigned, being deleted or still gated."""
    meta = pod["metadata"]
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    spec = pod.get("spec") or _EMPTY
    if spec.get("nodeName"):
        raise ConflictError(
            f'Operation cannot be fulfilled on pods/binding "{name}": pod {namespace}/{name} '
            f'is already assigned to node "{spec["nodeName"]}"',
            kind="Pod",
            name=name,
        )
    if meta.get("deletionTimestamp"):
        raise ConflictError(
            f"pod {namespace}/{name} is being deleted, cannot be assigned to a host",
            kind="Pod",
            name=name,
        )
    if spec.get("schedulingGates"):
        raise ConflictError(
            f"pod {namespace}/{name} has non-empty .spec.schedulingGates",
            kind="Pod",
            name=name,
        )
    status = pod.get("status") or _EMPTY
    new = {
        **pod,
        "spec": {**spec, "nodeName": node},
        "status": {
            **status,
            "conditions": with_condition(
                status.get("conditions"), {"type": "PodScheduled", "status": "True"}, now
            ),
        },
    }
    if annotations:
        new["metadata"] = {
            **meta,
            "annotations": {**(meta.get("annotations") or _EMPTY), **annotations},
        }
    return new


class Deletion(NamedTuple):
    """What a delete does to a pod: ``remove`` it at once, or mark it terminating with
    ``metadata`` (None: nothing to do, its graceful deletion goes on as it was). A tuple:
    one is made per delete."""

    remove: bool = False
    metadata: Mapping[str, Any] | None = None


_REMOVE: Final = Deletion(remove=True)
_KEEP: Final = Deletion()


def deletion(pod: Obj, grace: int | None, now: float) -> Deletion:
    """What deleting ``pod`` with the request's ``grace`` (seconds, None: not given) does
    at Unix time ``now`` (see the module docstring)."""
    meta = pod["metadata"]
    spec = pod.get("spec") or _EMPTY
    phase = (pod.get("status") or _EMPTY).get("phase")
    if not spec.get("nodeName") or phase in TERMINAL_PHASES:
        return _REMOVE
    terminating = bool(meta.get("deletionTimestamp"))
    if grace is not None:
        grace = int(grace)
    elif terminating:
        return _KEEP  # graceful deletion already pending; nothing to shorten
    else:
        value = spec.get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE if value is None else int(value)
    if grace < 0:
        grace = 1  # as the API server does with a negative grace period
    if grace == 0:
        return _REMOVE
    if terminating:
        current = meta.get("deletionGracePeriodSeconds")
        if current is None or grace >= current:
            return _KEEP
        # the grace period counts from the first deletion, as in the API server
        deadline = parse_rfc3339(meta["deletionTimestamp"]) - current + grace
    else:
        deadline = now + grace
    return Deletion(
        metadata={
            **meta,
            "deletionTimestamp": rfc3339(deadline),
            "deletionGracePeriodSeconds": grace,
        }
    )


def eviction_status(pod: Obj, now: str) -> dict[str, Any] | None:
    """The status of ``pod`` marked for its eviction (``DisruptionTarget=True``), or None
    when it is marked already."""
    status = pod.get("status") or _EMPTY
    conditions = with_condition(
        status.get("conditions"),
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        },
        now,
    )
    if conditions == status.get("conditions"):
        return None
    return {**status, "conditions": conditions}
