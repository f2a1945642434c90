"""One rule for PodDisruptionBudgets (layer 0).

Used by the cache (which ranks preemption victims by the budgets their eviction would
break, :func:`~scheduler.actions.victims.pdb_violations`) and by the embedded API server
(which refuses an eviction that would break one, 429), so that the two never disagree, as
the disruption controller and the Eviction API of Kubernetes agree:

* a pod is *healthy* when it is Running, its ``Ready`` condition is True, and it is not
  terminating (:func:`is_healthy`);
* a budget wants ``minAvailable`` healthy pods, or all its pods but ``maxUnavailable``;
  an int or a percentage of the pods it selects, rounded up (:func:`desired_healthy`);
  with neither, it restricts nothing;
* it allows ``healthy - desired`` disruptions (never fewer than 0);
* an unhealthy pod may be evicted anyway when the budget says
  ``unhealthyPodEvictionPolicy: AlwaysAllow``, or when the budget is satisfied without it
  (``healthy >= desired > 0``, the default ``IfHealthyBudget``, as the Eviction API says
  it): evicting it costs the budget nothing (:func:`unhealthy_evictable`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scheduler.api.errors import InvalidInputError

ALWAYS_ALLOW = "AlwaysAllow"


def pod_ready(status: Mapping[str, Any]) -> bool:
    """Is the pod's ``Ready`` condition True (``status``: the pod's status)?"""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )


def is_healthy(*, running: bool, ready: bool, terminating: bool) -> bool:
    """What a PodDisruptionBudget counts as healthy."""
    return running and ready and not terminating


def scaled(value: Any, total: int, *, obj: str, field: str) -> int:
    """An int-or-percent of ``total``, percentages rounded up. InvalidInputError naming
    ``obj`` and ``field`` when it is neither."""
    if isinstance(value, bool):
        raise InvalidInputError(obj, field, f"must be an integer or a percentage, not {value!r}")
    if isinstance(value, int):
        return value
    text = str(value)
    try:
        if text.endswith("%"):
            return math.ceil(total * int(text[:-1]) / 100)
        return int(text)
    except ValueError:
        raise InvalidInputError(
            obj, field, f"must be an integer or a percentage, not {value!r}"
        ) from None


def desired_healthy(spec: Mapping[str, Any], expected: int, *, obj: str) -> int | None:
    """How many of the ``expected`` pods a budget with ``spec`` wants healthy; None when
    it restricts nothing (neither minAvailable nor maxUnavailable)."""
    if spec.get("minAvailable") is not None:
        return scaled(spec["minAvailable"], expected, obj=obj, field="spec.minAvailable")
    if spec.get("maxUnavailable") is not None:
        unavailable = scaled(spec["maxUnavailable"], expected, obj=obj, field="spec.maxUnavailable")
        return max(0, expected - unavailable)
    return None


def disruptions_allowed(spec: Mapping[str, Any], expected: int, healthy: int, *, obj: str) -> int:
    """How many healthy pods may go now (all of them when the budget restricts nothing)."""
    desired = desired_healthy(spec, expected, obj=obj)
    if desired is None:
        return max(0, healthy)
    return max(0, healthy - desired)


def unhealthy_evictable(spec: Mapping[str, Any], expected: int, healthy: int, *, obj: str) -> bool:
    """May an unhealthy pod of the budget be evicted without costing it a disruption?"""
    if spec.get("unhealthyPodEvictionPolicy") == ALWAYS_ALLOW:
        return True
    desired = desired_healthy(spec, expected, obj=obj)
    return desired is None or healthy >= desired > 0
