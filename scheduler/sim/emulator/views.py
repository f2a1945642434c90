"""The served shape of stored objects in the Kubernetes API emulator (layer 4).

The store keeps every object in one shape; a resource may serve it in another, as its
:attr:`~.emulator_resources.ResourceInfo.view` says. :func:`view` turns a stored object
into the served one (``apiVersion`` and ``kind`` completed when missing) and
:func:`unview` turns a written one back. The only conversion is between the
``events.k8s.io/v1`` Event the store keeps and the core v1 Event
(:func:`event_to_core`, :func:`event_from_core`: ``regarding`` is ``involvedObject``,
``note`` is ``message``, the ``deprecated*`` fields are the core ones, ``series`` keeps
its count and last observed time). Pure: the results share their values with the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from scheduler.sim.emulator.resource_catalog import ResourceInfo
from scheduler.sim.store import ApiObject

__all__ = ["event_from_core", "event_to_core", "unview", "view"]

_EVENT_TO_CORE: Final = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
)
_EVENT_SAME: Final = (
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
)


def event_to_core(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event in its core v1 shape."""
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Event"}
    for name in _EVENT_SAME:
        if name in obj:
            out[name] = obj[name]
    for new, old in _EVENT_TO_CORE:
        if new in obj:
            out[old] = obj[new]
    series = obj.get("series")
    if isinstance(series, Mapping):
        out["series"] = {
            "count": series.get("count"),
            "lastObservedTime": series.get("lastObservedTime"),
        }
    if "source" not in out and obj.get("reportingController"):
        out["source"] = {"component": obj["reportingController"]}
    return out


def event_from_core(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A core v1 Event in the ``events.k8s.io/v1`` shape the store keeps."""
    out: dict[str, Any] = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for name in _EVENT_SAME:
        if name in obj:
            out[name] = obj[name]
    for new, old in _EVENT_TO_CORE:
        if old in obj:
            out[new] = obj[old]
    return out


def view(res: ResourceInfo, obj: ApiObject) -> ApiObject:
    """The stored object as the resource serves it."""
    if res.view == "core-event":
        return event_to_core(obj)
    if "apiVersion" not in obj or "kind" not in obj:
        return {"apiVersion": res.api_version, "kind": res.kind, **obj}
    return obj


def unview(res: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
    """An object sent to the resource in the shape the store keeps."""
    if res.view == "core-event":
        return event_from_core(obj)
    return obj
