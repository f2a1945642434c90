"""PodDisruptionBudgets at the Eviction API of the embedded cluster (layer 4, sim).

An eviction is refused (429) when it would break a budget, by the one rule of
:mod:`scheduler.api.disruption`, which the scheduler's cache ranks preemption victims by
too: the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from scheduler.api.disruption import desired_healthy, is_healthy, pod_ready, unhealthy_evictable
from scheduler.api.errors import InvalidInputError, InvalidObjectError, TooManyRequestsError
from scheduler.api.label_selectors import parse_label_selector

__all__ = ["check_budgets", "is_healthy_pod"]

PDB_MESSAGE: Final[str] = "Cannot evict pod as it would violate the pod's disruption budget."
_EMPTY: Final[Mapping[Any, Any]] = {}


def is_healthy_pod(pod: Mapping[str, Any]) -> bool:
    """Running, Ready and not terminating: what a PodDisruptionBudget counts."""
    status = pod.get("status") or _EMPTY
    return is_healthy(
        running=status.get("phase") == "Running",
        ready=pod_ready(status),
        terminating=bool(pod["metadata"].get("deletionTimestamp")),
    )


def check_budgets(
    pod: Mapping[str, Any],
    budgets: Sequence[tuple[tuple[str, str], Mapping[str, Any]]],
    pods_of_namespace: Callable[[], Sequence[Mapping[str, Any]]],
) -> None:
    """Raise TooManyRequestsError (naming the budget) if evicting ``pod`` breaks one of
    ``budgets`` (those of its namespace, by (namespace, name), in order);
    InvalidObjectError for a budget that does not parse. ``pods_of_namespace`` is asked
    once, when a budget selects the pod.

    For every budget whose selector matches the pod (a null selector matches nothing):
    expected = matching pods, healthy = those Running, Ready=True and not terminating,
    desired = minAvailable (an int or a percentage of expected, rounded up) or expected -
    maxUnavailable (ditto); allowed = healthy - desired. A healthy pod is refused when
    allowed <= 0. An unhealthy pod is let go when the budget's
    ``unhealthyPodEvictionPolicy`` is AlwaysAllow, or (the default IfHealthyBudget) when
    healthy >= desired > 0; otherwise the same rule."""
    labels = pod["metadata"].get("labels") or _EMPTY
    pods: Sequence[Mapping[str, Any]] | None = None
    for (ns, name), pdb in budgets:
        spec = pdb.get("spec") or _EMPTY
        where = f"PodDisruptionBudget {ns}/{name}"
        try:
            selector = parse_label_selector(
                spec.get("selector"), obj=where, field="spec.selector", null_matches=False
            )
            if not selector.matches(labels):
                continue
            if pods is None:
                pods = pods_of_namespace()
            matching = [p for p in pods if selector.matches(p["metadata"].get("labels") or _EMPTY)]
            expected = len(matching)
            healthy = sum(1 for p in matching if is_healthy_pod(p))
            desired = desired_healthy(spec, expected, obj=where)
            evictable = unhealthy_evictable(spec, expected, healthy, obj=where)
        except InvalidInputError as exc:
            raise InvalidObjectError(str(exc), kind="PodDisruptionBudget", name=name) from exc
        if desired is None or (not is_healthy_pod(pod) and evictable):
            continue
        if healthy - desired <= 0:
            raise TooManyRequestsError(
                f"{PDB_MESSAGE} The disruption budget {name} needs {desired} healthy "
                f"pods and has {healthy} currently",
                kind="PodDisruptionBudget",
                name=name,
            )
