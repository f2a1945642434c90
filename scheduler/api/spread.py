"""A pod's ``topologySpreadConstraints`` as kube-scheduler reads them (layer 0).

:func:`parse_spread` turns ``spec.topologySpreadConstraints`` into frozen
:class:`SpreadConstraint` values, with kube's defaults: ``minDomains`` 1,
``nodeAffinityPolicy`` Honor, ``nodeTaintsPolicy`` Ignore. A null ``labelSelector``
selects nothing. :meth:`SpreadConstraint.selector_for` merges ``matchLabelKeys`` with the
pod's labels into the selector, as kube-scheduler does (and the API server too, at
creation, since v1.34: merging twice changes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector, Requirement, parse_label_selector

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topology spread constraint."""

    max_skew: int
    topology_key: str
    hard: bool
    """``whenUnsatisfiable: DoNotSchedule`` (a filter); else ScheduleAnyway (a score)."""
    selector: LabelSelector
    min_domains: int = 1
    honor_affinity: bool = True
    """``nodeAffinityPolicy: Honor``: only nodes matching the pod's node selector and
    required node affinity count as domains."""
    honor_taints: bool = False
    """``nodeTaintsPolicy: Honor``: nodes with a NoSchedule or NoExecute taint the pod does
    not tolerate are left out of the domains."""
    match_label_keys: tuple[str, ...] = ()

    def selector_for(self, labels: Mapping[str, str]) -> LabelSelector:
        """The selector the pod with ``labels`` spreads by: ``labelSelector`` and, for each
        of ``matchLabelKeys`` the pod has, that key equal to its value (a null selector
        stays null)."""
        if not self.match_label_keys or self.selector.match_nothing:
            return self.selector
        merged = tuple(
            Requirement(key, "In", (labels[key],)) for key in self.match_label_keys if key in labels
        )
        if not merged:
            return self.selector
        return LabelSelector(merged + self.selector.requirements)


def _policy(raw: object, default: str, *, obj: str, field: str) -> bool:
    value = default if raw is None else raw
    if value not in (HONOR, IGNORE):
        raise InvalidInputError(obj, field, f"must be Honor or Ignore, got {value!r}")
    return value == HONOR


def _positive(raw: object, *, obj: str, field: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise InvalidInputError(obj, field, f"must be an integer of at least 1, got {raw!r}")
    return raw


def parse_spread(
    raw: object, *, obj: str, field: str = "spec.topologySpreadConstraints"
) -> tuple[SpreadConstraint, ...]:
    """``spec.topologySpreadConstraints`` (None: none), or the list at ``field``. Errors
    name ``obj`` and the field."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidInputError(obj, field, "must be a list")
    return tuple(_constraint(c, obj=obj, field=f"{field}[{i}]") for i, c in enumerate(raw))


def _constraint(raw: object, *, obj: str, field: str) -> SpreadConstraint:
    if not isinstance(raw, Mapping):
        raise InvalidInputError(obj, field, "must be an object")
    c: Mapping[str, Any] = raw
    key = c.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise InvalidInputError(obj, f"{field}.topologyKey", "a non-empty string is required")
    when = c.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise InvalidInputError(
            obj,
            f"{field}.whenUnsatisfiable",
            f"must be DoNotSchedule or ScheduleAnyway, got {when!r}",
        )
    min_domains = c.get("minDomains")
    keys = c.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise InvalidInputError(obj, f"{field}.matchLabelKeys", "must be a list of strings")
    return SpreadConstraint(
        max_skew=_positive(c.get("maxSkew"), obj=obj, field=f"{field}.maxSkew"),
        topology_key=key,
        hard=when == DO_NOT_SCHEDULE,
        selector=parse_label_selector(
            c.get("labelSelector"), obj=obj, field=f"{field}.labelSelector", null_matches=False
        ),
        min_domains=1
        if min_domains is None
        else _positive(min_domains, obj=obj, field=f"{field}.minDomains"),
        honor_affinity=_policy(
            c.get("nodeAffinityPolicy"), HONOR, obj=obj, field=f"{field}.nodeAffinityPolicy"
        ),
        honor_taints=_policy(
            c.get("nodeTaintsPolicy"), IGNORE, obj=obj, field=f"{field}.nodeTaintsPolicy"
        ),
        match_label_keys=tuple(keys),
    )
