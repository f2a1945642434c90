"""The label and field selectors of the Kubernetes API emulator's lists and watches (layer 4).

:func:`parse_label_selector_string` parses the string form of a label selector
(``a=b,c!=d,e in (x,y),f notin (z),g,!h``, ``k>1``) into a
:class:`~scheduler.api.label_selectors.LabelSelector`; :func:`parse_filter` reads the
``labelSelector`` and ``fieldSelector`` query parameters into a :class:`Filter`, whose
field selectors compare any dotted path of the served object (``spec.nodeName``,
``metadata.name``, booleans as ``true``/``false``, a missing field as ``""``). Malformed
selectors raise :class:`~scheduler.api.errors.InvalidInputError` (400).
:func:`select` lists the matching objects of a resource in their served shape and
:func:`object_key` is the (namespace, name) identity that orders a list's pages and
tracks which objects a selective watch has sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector, Requirement
from scheduler.sim.emulator.resource_catalog import ResourceInfo
from scheduler.sim.emulator.views import view
from scheduler.sim.store import ApiObject, ObjectStore

__all__ = ["Filter", "object_key", "parse_filter", "parse_label_selector_string", "select"]

_SET_REQUIREMENT = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _checked_key(key: str, text: str) -> str:
    key = key.strip()
    if not _KEY.match(key):
        raise InvalidInputError("labelSelector", None, f"invalid label key {key!r} in {text!r}")
    return key


def parse_label_selector_string(text: str) -> LabelSelector:
    """Parse the string form of a label selector (``a=b,c!=d,e in (x,y),f notin (z),g,!h``,
    ``k>1``). Raises InvalidInputError."""
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            continue
        match = _SET_REQUIREMENT.match(part)
        if match:
            key = _checked_key(match.group(1), text)
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            operator = "In" if match.group(2) == "in" else "NotIn"
            requirements.append(Requirement(key, operator, values))
        elif part.startswith("!"):
            requirements.append(Requirement(_checked_key(part[1:], text), "DoesNotExist"))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(Requirement(_checked_key(key, text), "NotIn", (value.strip(),)))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            requirements.append(Requirement(_checked_key(key, text), "In", (value.strip(),)))
        elif ">" in part or "<" in part:
            op = ">" if ">" in part else "<"
            key, value = part.split(op, 1)
            try:
                int(value.strip())
            except ValueError as exc:
                raise InvalidInputError(
                    "labelSelector", None, f"{op} takes an integer in {text!r}"
                ) from exc
            operator = "Gt" if op == ">" else "Lt"
            requirements.append(Requirement(_checked_key(key, text), operator, (value.strip(),)))
        else:
            requirements.append(Requirement(_checked_key(part, text), "Exists"))
    return LabelSelector(tuple(requirements))


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Filter:
    """The label and field selectors of a list or a watch."""

    labels: LabelSelector | None = None
    fields: tuple[tuple[str, bool, str], ...] = ()  # (path, equal?, value)

    @property
    def everything(self) -> bool:
        return self.labels is None and not self.fields

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.labels is not None:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not self.labels.matches(labels):
                return False
        for path, equal, value in self.fields:
            if (_field_value(obj, path) == value) != equal:
                return False
        return True


def parse_filter(query: Mapping[str, str]) -> Filter:
    """The ``labelSelector`` and ``fieldSelector`` of a query. Raises InvalidInputError."""
    label_text = query.get("labelSelector", "")
    labels = parse_label_selector_string(label_text) if label_text.strip() else None
    fields: list[tuple[str, bool, str]] = []
    for raw in query.get("fieldSelector", "").split(","):
        part = raw.strip()
        if not part:
            continue
        if "!=" in part:
            path, value = part.split("!=", 1)
            equal = False
        elif "==" in part:
            path, value = part.split("==", 1)
            equal = True
        elif "=" in part:
            path, value = part.split("=", 1)
            equal = True
        else:
            raise InvalidInputError("fieldSelector", None, f"invalid selector {part!r}")
        fields.append((path.strip(), equal, value.strip()))
    return Filter(labels, tuple(fields))


def select(
    store: ObjectStore, res: ResourceInfo, namespace: str | None, flt: Filter
) -> tuple[list[ApiObject], int]:
    """The objects of ``res`` (in ``namespace``, or all) that ``flt`` selects, as served,
    and the store's resourceVersion."""
    items, rv = store.list(res.kind_in_store, namespace)
    views = [view(res, o) for o in items]
    if not flt.everything:
        views = [o for o in views if flt.matches(o)]
    return views, rv


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object, the order of a list."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
