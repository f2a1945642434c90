"""What a pod's Services and controllers select it by (layer 0): the selector of kube's
default topology spread constraints.

kube-scheduler spreads a pod that has no ``topologySpreadConstraints`` of its own by the
selector of the Services of its namespace that select it (their ``spec.selector`` maps,
merged) and, when its controller is a ReplicationController, a ReplicaSet or a
StatefulSet, that controller's selector (``DefaultSelector`` of its plugin helpers). No
such object: no selector, and no default spreading. :class:`SpreadSelectors` holds the
selectors of those objects, as the cache read them, and answers that question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.label_selectors import LabelSelector, Requirement, parse_label_selector
from scheduler.api.owners import OwnerRef

SERVICE = "Service"
REPLICATION_CONTROLLER = "ReplicationController"
REPLICA_SET = "ReplicaSet"
STATEFUL_SET = "StatefulSet"
CONTROLLERS: Mapping[str, str] = {
    REPLICATION_CONTROLLER: "v1",
    REPLICA_SET: "apps/v1",
    STATEFUL_SET: "apps/v1",
}
"""The controllers whose selector counts, by kind, with their apiVersion."""


@dataclass(frozen=True, slots=True)
class SpreadSelectors:
    """Selectors of Services (per namespace, by name) and of the controllers that count
    (by kind, namespace, name). Immutable: the cache builds a new one when one changes."""

    services: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)
    controllers: Mapping[tuple[str, str, str], LabelSelector] = field(default_factory=dict)

    def of(
        self, namespace: str, labels: Mapping[str, str], controller: OwnerRef | None
    ) -> LabelSelector | None:
        """The selector a pod of ``namespace`` with ``labels`` and ``controller`` is spread
        by, or None when nothing selects it."""
        merged: dict[str, str] = {}
        for selector in self.services.get(namespace, {}).values():
            if all(labels.get(k) == v for k, v in selector.items()):
                merged.update(selector)
        requirements = [Requirement(k, "In", (v,)) for k, v in sorted(merged.items())]
        if controller is not None and CONTROLLERS.get(controller.kind) == controller.api_version:
            found = self.controllers.get((controller.kind, namespace, controller.name))
            if found is not None and not found.match_nothing:
                requirements.extend(found.requirements)
        if not requirements:
            return None
        return LabelSelector(tuple(sorted(set(requirements), key=_order)))


EMPTY_SELECTORS = SpreadSelectors()
"""No Service or controller known."""


def _order(r: Requirement) -> tuple[str, str, tuple[str, ...]]:
    return (r.key, r.operator, r.values)


def selector_of(obj: Mapping[str, Any]) -> tuple[str, str, str, LabelSelector | None]:
    """(kind, namespace, name, selector) of a Service or counted controller object; the
    selector None for a Service without one (it selects no pod for spreading). Errors
    name the object and field."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind") or "")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    where = f"{kind} {namespace}/{name}"
    spec = obj.get("spec") or {}
    raw = spec.get("selector")
    if kind in (SERVICE, REPLICATION_CONTROLLER):
        if not raw:
            return kind, namespace, name, None
        if not isinstance(raw, Mapping):
            raise InvalidInputError(where, "spec.selector", "must be a map of strings")
        reqs = tuple(Requirement(str(k), "In", (str(v),)) for k, v in sorted(raw.items()))
        return kind, namespace, name, LabelSelector(reqs)
    selector = parse_label_selector(raw, obj=where, field="spec.selector", null_matches=False)
    return kind, namespace, name, selector
