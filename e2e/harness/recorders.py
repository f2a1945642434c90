"""What the tests see of pods: quantities, conditions, the recorder of every
watch event with its invariants, and the pod informer.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from harness.api import Api, ListWatch, core_path

_SUFFIXES: Final[Mapping[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
}
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def unix_seconds(timestamp: object) -> float | None:
    """An API timestamp (RFC 3339 or MicroTime, UTC: ``2026-11-26T10:00:00.000000Z``) in
    Unix seconds; None when absent or malformed."""
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``100m``, ``2``, ``500Mi``, ``1e3``) as a Decimal."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a pod asks of its node: the sum of its containers' requests (cpu, memory) and
    one ``pods`` slot; init containers' maximum when larger; pod-level requests in place
    of the containers' where set, as the scheduler counts."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = defaultdict(Decimal)
    for c in spec.get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] += quantity(v)
    for c in spec.get("initContainers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total[k], quantity(v))
    for k, v in ((spec.get("resources") or {}).get("requests") or {}).items():
        if k in ("cpu", "memory") or k.startswith("hugepages-"):
            total[k] = quantity(v)  # pod-level requests stand for the containers'
    total["pods"] += 1
    return dict(total)


def condition(pod: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return dict(c)
    return None


def is_running(pod: Mapping[str, Any]) -> bool:
    ready = condition(pod, "Ready")
    return (pod.get("status") or {}).get("phase") == "Running" and bool(
        ready and ready.get("status") == "True"
    )


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


@dataclass
class PodHistory:
    """What the watch showed of one pod (one uid) over its life."""

    name: str
    uid: str
    node: str = ""
    nominated: list[str] = field(default_factory=list)
    conditions: list[tuple[str, str, str]] = field(default_factory=list)
    """Every distinct (type, status, reason) seen, in order."""
    deleted: bool = False
    last: dict[str, Any] = field(default_factory=dict)

    def saw(self, kind: str, status: str = "True", reason: str | None = None) -> bool:
        return any(
            c[0] == kind and c[1] == status and (reason is None or c[2] == reason)
            for c in self.conditions
        )


class PodRecorder:
    """Keeps the history of every pod of the namespace and checks two invariants on every
    watch event: a pod's ``spec.nodeName`` never changes once set (no pod is bound twice),
    and no fake node ever holds pods asking for more than it has (counting pods that are
    terminating, as the kubelet and the scheduler do)."""

    def __init__(self, nodes: Mapping[str, Mapping[str, Decimal]]) -> None:
        self.nodes = nodes
        self.by_uid: dict[str, PodHistory] = {}
        self.current: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.events = 0

    def history(self, name: str) -> PodHistory | None:
        """The history of the latest pod of that name."""
        found = [h for h in self.by_uid.values() if h.name == name]
        return found[-1] if found else None

    def observe(self, kind: str, pod: dict[str, Any]) -> None:
        self.events += 1
        uid, name = uid_of(pod), name_of(pod)
        h = self.by_uid.get(uid)
        if h is None:
            h = self.by_uid[uid] = PodHistory(name, uid)
        node = node_of(pod)
        if h.node and node != h.node:
            self.violations.append(f"pod {name} ({uid}) was on {h.node!r}, now on {node!r}")
        if node:
            h.node = node
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and (not h.nominated or h.nominated[-1] != nominated):
            h.nominated.append(str(nominated))
        for c in (pod.get("status") or {}).get("conditions") or ():
            key = (str(c.get("type")), str(c.get("status")), str(c.get("reason") or ""))
            if key not in h.conditions:
                h.conditions.append(key)
        h.last = pod
        previous = self.current.get(name)
        if kind == "DELETED":
            h.deleted = True
            if previous is not None and uid_of(previous) == uid:
                del self.current[name]
        else:
            self.current[name] = pod
        touched = {node_of(pod), node_of(previous) if previous else ""} - {""}
        for n in touched:
            self._check_node(n)

    def sync(self, pods: Iterable[dict[str, Any]]) -> None:
        listed = {name_of(p): p for p in pods}
        for name, old in list(self.current.items()):
            if name not in listed or uid_of(listed[name]) != uid_of(old):
                self.observe("DELETED", old)
        for p in listed.values():
            self.observe("MODIFIED", p)

    def usage(self, node: str) -> dict[str, Decimal]:
        total: dict[str, Decimal] = defaultdict(Decimal)
        for p in self.current.values():
            if node_of(p) == node and (p.get("status") or {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                for k, v in pod_requests(p).items():
                    total[k] += v
        return dict(total)

    def _check_node(self, node: str) -> None:
        allocatable = self.nodes.get(node)
        if allocatable is None:
            return
        used = self.usage(node)
        for resource, amount in used.items():
            if resource in allocatable and amount > allocatable[resource]:
                self.violations.append(
                    f"node {node} over-allocated: {resource} {amount} > {allocatable[resource]}"
                )


class PodInformer:
    """A live copy of the namespace's pods, fed by one list+watch, handed on in order to
    listeners (the recorder, the fake kubelet)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self.sync_listeners: list[Callable[[list[dict[str, Any]]], None]] = []
        self.list_watch = ListWatch(api, core_path("pods", namespace), self._sync, self._event)

    def _sync(self, items: list[dict[str, Any]]) -> None:
        self.pods = {name_of(p): p for p in items}
        for listener in self.sync_listeners:
            listener(items)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        name = name_of(obj)
        if kind == "DELETED":
            current = self.pods.get(name)
            if current is not None and uid_of(current) == uid_of(obj):
                del self.pods[name]
        else:
            self.pods[name] = obj
        for listener in self.listeners:
            listener(kind, obj)
