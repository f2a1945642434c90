"""Namespaces and the selectors of Services and controllers, as their events bring them
(layer 2): what the placement plugins read besides pods and nodes.

- **Namespaces**: the labels of each, which pod affinity terms' ``namespaceSelector``
  match (kube-scheduler's InterPodAffinity reads them the same way).
- **Services, ReplicaSets, StatefulSets, ReplicationControllers**: their selectors, by
  which a pod without spread constraints of its own is spread (kube's default topology
  spread constraints: :mod:`scheduler.api.spread_selectors`).

:class:`PlacementObjects` keeps them for the cache (which routes their events here) and
gives a snapshot immutable views, rebuilt only after a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.spread_selectors import (
    EMPTY_SELECTORS,
    REPLICA_SET,
    REPLICATION_CONTROLLER,
    SERVICE,
    STATEFUL_SET,
    SpreadSelectors,
    selector_of,
)

NAMESPACE = "Namespace"
SELECTOR_KINDS = (SERVICE, REPLICA_SET, STATEFUL_SET, REPLICATION_CONTROLLER)
KINDS = (NAMESPACE, *SELECTOR_KINDS)
"""The kinds :class:`PlacementObjects` handles."""

Obj = Mapping[str, Any]


class PlacementObjects:
    """Namespaces' labels and Services' and controllers' selectors. Synchronous; called
    by the cache on the event loop's thread."""

    def __init__(self) -> None:
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._services: dict[str, dict[str, Mapping[str, str]]] = {}
        self._controllers: dict[tuple[str, str, str], LabelSelector] = {}
        self._namespace_view: Mapping[str, Mapping[str, str]] = MappingProxyType({})
        self._selector_view = EMPTY_SELECTORS
        self._stale = False

    def handle(self, kind: str, event: str, obj: Obj) -> bool:
        """Apply one event of ``kind`` (one of :data:`KINDS`). True when it may let a
        pending pod be placed (a namespace's labels changed: affinity terms select by
        them); a selector only changes scores. Raises InvalidInputError for a malformed
        object (the cache sets it aside)."""
        meta = obj.get("metadata") or {}
        if kind == NAMESPACE:
            name = str(meta.get("name") or "")
            labels = meta.get("labels") or {}
            if not isinstance(labels, Mapping):
                raise InvalidInputError(f"Namespace {name}", "metadata.labels", "must be a map")
            before = self._namespaces.get(name)
            if event == "DELETED":
                self._namespaces.pop(name, None)
            else:
                self._namespaces[name] = {str(k): str(v) for k, v in labels.items()}
            changed = before != self._namespaces.get(name)
            if changed:
                self._namespace_view = MappingProxyType(dict(self._namespaces))
            return changed
        if event == "DELETED":
            namespace = str(meta.get("namespace") or "default")
            name = str(meta.get("name") or "")
            if kind == SERVICE:
                self._services.get(namespace, {}).pop(name, None)
            else:
                self._controllers.pop((kind, namespace, name), None)
            self._stale = True
            return False
        _, namespace, name, selector = selector_of({**obj, "kind": kind})
        if kind == SERVICE:
            services = self._services.setdefault(namespace, {})
            if selector is None:
                services.pop(name, None)
            else:
                services[name] = {r.key: r.values[0] for r in selector.requirements}
        elif selector is None:
            self._controllers.pop((kind, namespace, name), None)
        else:
            self._controllers[(kind, namespace, name)] = selector
        self._stale = True
        return False

    def keys(self, kind: str) -> list[str]:
        """``namespace/name`` (a namespace: its name) of every object of ``kind`` held."""
        if kind == NAMESPACE:
            return list(self._namespaces)
        if kind == SERVICE:
            return [f"{ns}/{name}" for ns, by_name in self._services.items() for name in by_name]
        return [f"{ns}/{name}" for (k, ns, name) in self._controllers if k == kind]

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        """Each namespace's labels, by name (read-only; replaced on change)."""
        return self._namespace_view

    @property
    def selectors(self) -> SpreadSelectors:
        """The Services' and controllers' selectors (immutable; rebuilt after a change)."""
        if self._stale:
            self._selector_view = SpreadSelectors(
                {ns: dict(by_name) for ns, by_name in self._services.items()},
                dict(self._controllers),
            )
            self._stale = False
        return self._selector_view
