"""Server-side ``Table`` printing for the Kubernetes API emulator (layer 4).

A request with ``Accept: ...;as=Table`` (what ``kubectl get`` sends) gets its objects as
a ``meta.k8s.io/v1`` Table: :class:`TablePrinter` gives each resource the columns the API
server prints for it (pods, nodes, events, namespaces, PriorityClasses,
PodDisruptionBudgets, leases; a custom kind's ``additionalPrinterColumns``; otherwise
Name and Age) and builds the Table, each row carrying the object, its metadata only
(``includeObject=Metadata``, the default) or nothing, as the query asks. Ages are
computed against the printer's wall clock and written as :func:`human_duration` does,
like ``kubectl``. Pure apart from reading that clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.sim.api_conventions import parse_rfc3339
from scheduler.sim.emulator.resource_catalog import ResourceInfo

__all__ = ["Cell", "TablePrinter", "human_duration"]


def human_duration(seconds: float) -> str:
    """An age as ``kubectl get`` prints it: ``45s``, ``3m20s``, ``5h``, ``12d``, ``2y30d``."""
    if seconds < -1:
        return "<invalid>"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        years = hours // (24 * 365)
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{hours // (24 * 365)}y"


Cell = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    cell: Cell
    type: str = "string"
    priority: int = 0
    format: str = ""


def _path(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _or_none(value: Any) -> Any:
    return "<none>" if value in (None, "") else value


def _at(path: str) -> Cell:
    return lambda o: _path(o, path)


def _or_na(value: Any) -> Any:
    return "N/A" if value is None else value


def _pod_status(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    if spec.get("schedulingGates") and not spec.get("nodeName"):
        reason = "SchedulingGated"
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        terminated = (state.get("terminated") or {}).get("reason")
        if waiting and waiting != "ContainerCreating":
            reason = waiting
        elif terminated:
            reason = terminated
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_ready(pod: Mapping[str, Any]) -> str:
    total = len((pod.get("spec") or {}).get("containers") or ())
    ready = sum(
        1 for c in (pod.get("status") or {}).get("containerStatuses") or () if c.get("ready")
    )
    return f"{ready}/{total}"


def _pod_restarts(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return str(sum(int(c.get("restartCount") or 0) for c in statuses))


def _node_status(node: Mapping[str, Any]) -> str:
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    text = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = {
        key.split("/", 1)[1]
        for key in labels
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]
    }
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(roles)) or "<none>"


def _event_object(event: Mapping[str, Any]) -> str:
    ref = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_last_seen(event: Mapping[str, Any]) -> Any:
    series = event.get("series") or {}
    return (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("deprecatedLastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _name_column() -> _Column:
    return _Column("Name", lambda o: (o.get("metadata") or {}).get("name", ""), format="name")


class TablePrinter:
    """The ``Table`` of a resource's objects; ages are computed against ``wall()`` (Unix
    time)."""

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall

    def _age(self, timestamp: Any) -> str:
        if not isinstance(timestamp, str) or not timestamp:
            return "<unknown>"
        try:
            return human_duration(self._wall() - parse_rfc3339(timestamp))
        except ValueError:
            return "<invalid>"

    def _age_at(self, path: str) -> Cell:
        return lambda o: self._age(_path(o, path))

    def _columns(self, res: ResourceInfo) -> list[_Column]:
        def age(o: Mapping[str, Any]) -> str:
            return self._age((o.get("metadata") or {}).get("creationTimestamp"))

        name = _name_column()
        if res.kind == "Pod":
            return [
                name,
                _Column("Ready", _pod_ready),
                _Column("Status", _pod_status),
                _Column("Restarts", _pod_restarts),
                _Column("Age", age),
                _Column("IP", lambda o: _or_none(_path(o, "status.podIP")), priority=1),
                _Column("Node", lambda o: _or_none(_path(o, "spec.nodeName")), priority=1),
                _Column(
                    "Nominated Node",
                    lambda o: _or_none(_path(o, "status.nominatedNodeName")),
                    priority=1,
                ),
            ]
        if res.kind == "Node":
            return [
                name,
                _Column("Status", _node_status),
                _Column("Roles", _node_roles),
                _Column("Age", age),
                _Column("Version", lambda o: _path(o, "status.nodeInfo.kubeletVersion") or ""),
            ]
        if res.kind == "Event":
            return [
                _Column("Last Seen", lambda o: self._age(_event_last_seen(o))),
                _Column("Type", lambda o: o.get("type", "")),
                _Column("Reason", lambda o: o.get("reason", "")),
                _Column("Object", _event_object),
                _Column("Message", lambda o: o.get("message", o.get("note", ""))),
                _Column(name.name, name.cell, priority=1, format="name"),
            ]
        if res.kind == "Namespace":
            return [
                name,
                _Column("Status", lambda o: _path(o, "status.phase")),
                _Column("Age", age),
            ]
        if res.kind == "PriorityClass":
            return [
                name,
                _Column("Value", lambda o: o.get("value", 0), type="integer"),
                _Column("Global-Default", lambda o: bool(o.get("globalDefault")), type="boolean"),
                _Column("Age", age),
            ]
        if res.kind == "PodDisruptionBudget":
            return [
                name,
                _Column("Min Available", lambda o: _or_na(_path(o, "spec.minAvailable"))),
                _Column("Max Unavailable", lambda o: _or_na(_path(o, "spec.maxUnavailable"))),
                _Column("Age", age),
            ]
        if res.kind == "Lease":
            return [
                name,
                _Column("Holder", lambda o: _path(o, "spec.holderIdentity") or ""),
                _Column("Age", age),
            ]
        if res.crd is not None and res.crd.printer_columns:
            columns = [name]
            for pc in res.crd.printer_columns:
                if pc.type == "date":
                    columns.append(
                        _Column(pc.name, self._age_at(pc.json_path), "date", pc.priority)
                    )
                else:
                    columns.append(
                        _Column(pc.name, _at(pc.json_path), pc.type, pc.priority, pc.format)
                    )
            return columns
        return [name, _Column("Age", age)]

    def table(
        self,
        res: ResourceInfo,
        objects: Iterable[Mapping[str, Any]],
        meta: Mapping[str, Any] | None,
        query: Mapping[str, str],
    ) -> dict[str, Any]:
        columns = self._columns(res)
        include = query.get("includeObject", "Metadata")
        rows: list[dict[str, Any]] = []
        for obj in objects:
            row: dict[str, Any] = {"cells": [c.cell(obj) for c in columns]}
            if include == "Object":
                row["object"] = obj
            elif include != "None":
                row["object"] = {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata") or {},
                }
            rows.append(row)
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": dict(meta) if meta else {},
            "columnDefinitions": [
                {
                    "name": c.name,
                    "type": c.type,
                    "format": c.format,
                    "description": c.name,
                    "priority": c.priority,
                }
                for c in columns
            ],
            "rows": rows,
        }
