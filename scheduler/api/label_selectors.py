"""Kubernetes label selectors (layer 0): ``matchLabels`` and ``matchExpressions``.

Used by pod (anti-)affinity, node affinity, PodDisruptionBudgets and the embedded
cluster. A selector is parsed once into a frozen :class:`LabelSelector`, which is
hashable so it can key caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One expression: ``key operator values``. ``Gt``/``Lt`` take one integer value."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values
        if op == "NotIn":
            return labels.get(self.key) not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must match. An empty selector matches everything.

    ``match_nothing`` is the selector Kubernetes builds from a null selector in places
    where null means "select nothing" (a PodDisruptionBudget without a selector).
    """

    requirements: tuple[Requirement, ...] = ()
    match_nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.match_nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(match_nothing=True)


def parse_requirement(raw: Mapping[str, Any], *, obj: str, field: str) -> Requirement:
    """Parse one ``{key, operator, values}`` expression; errors name ``obj`` and ``field``."""
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise InvalidInputError(obj, f"{field}.key", "a non-empty string is required")
    op = raw.get("operator")
    if op not in _OPERATORS:
        raise InvalidInputError(
            obj, f"{field}.operator", f"unsupported operator {op!r}; one of {sorted(_OPERATORS)}"
        )
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise InvalidInputError(obj, f"{field}.values", "must be a list of strings")
    vals = tuple(str(v) for v in values)
    if op in ("In", "NotIn") and not vals:
        raise InvalidInputError(obj, f"{field}.values", f"must be non-empty for {op}")
    if op in ("Exists", "DoesNotExist") and vals:
        raise InvalidInputError(obj, f"{field}.values", f"must be empty for {op}")
    if op in ("Gt", "Lt"):
        if len(vals) != 1:
            raise InvalidInputError(obj, f"{field}.values", f"{op} takes exactly one value")
        try:
            int(vals[0])
        except ValueError as exc:
            raise InvalidInputError(
                obj, f"{field}.values", f"{op} takes an integer, got {vals[0]!r}"
            ) from exc
    return Requirement(key, op, vals)


def parse_label_selector(
    raw: Mapping[str, Any] | None, *, obj: str, field: str, null_matches: bool = True
) -> LabelSelector:
    """Parse a metav1.LabelSelector. ``None`` gives EVERYTHING or NOTHING per ``null_matches``."""
    if raw is None:
        return EVERYTHING if null_matches else NOTHING
    if not isinstance(raw, Mapping):
        raise InvalidInputError(obj, field, "must be a label selector object")
    reqs: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise InvalidInputError(obj, f"{field}.matchLabels", "must be a map of strings")
    for key in sorted(match_labels):
        reqs.append(Requirement(str(key), "In", (str(match_labels[key]),)))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise InvalidInputError(obj, f"{field}.matchExpressions", "must be a list")
    for i, expr in enumerate(exprs):
        if not isinstance(expr, Mapping):
            raise InvalidInputError(obj, f"{field}.matchExpressions[{i}]", "must be an object")
        reqs.append(parse_requirement(expr, obj=obj, field=f"{field}.matchExpressions[{i}]"))
    return LabelSelector(tuple(reqs))
