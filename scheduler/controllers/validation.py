"""What the admission webhook refuses in a PodGroup or a Queue (layer 4, no kopf).

Pure functions: an object in, a list of messages out (empty when the object is valid). Every
message starts with the field it is about, as the API server's own messages do::

    spec.minTaskMember: sum 5 exceeds spec.minMember 3
    spec.parent: queue a -> b -> a forms a cycle
    spec.capability.cpu: 2 is below spec.guarantee.cpu 4

Both functions also run the CRD schema check of :mod:`scheduler.schema`, so that the
webhook refuses what the API server would refuse on its own, and the checks here see the
object with the schema's defaults filled in (a PodGroup without ``minMember`` has 1), as a
validating webhook sees it after the API server has defaulted it. A schema message about a
field that a check here already reports is left out, so each problem is named once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeGuard

from scheduler.api.errors import FieldCause, InvalidObjectError, QuantityError
from scheduler.api.resource import Resource
from scheduler.schema import apply_defaults, load_crds

__all__ = [
    "QUEUE_RESOURCE_FIELDS",
    "parent_of",
    "validate_pod_group",
    "validate_queue",
]

#: The resource lists of a Queue's spec, in the order they are checked.
QUEUE_RESOURCE_FIELDS: Final = ("capability", "deserved", "guarantee")


class _Messages:
    """Messages in the order found, and the fields they name (to drop duplicate schema causes)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.fields: set[str] = set()

    def add(self, field: str, message: str) -> None:
        self.lines.append(f"{field}: {message}")
        self.fields.add(field)

    def add_schema_causes(self, causes: Iterable[FieldCause]) -> None:
        for cause in causes:
            if cause.field not in self.fields:
                self.lines.append(str(cause))


def _schema_check(
    kind: str, obj: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[FieldCause, ...]]:
    """The object with schema defaults, and the causes the API server would refuse it with."""
    catalog = load_crds()
    info = catalog.get(kind)
    if info is None:  # the CRD files ship with the package; this is a broken install
        raise LookupError(f"no CustomResourceDefinition for kind {kind} in the package")
    defaulted = apply_defaults(obj, info.schema)
    try:
        catalog.check(obj)
    except InvalidObjectError as exc:
        return defaulted, exc.causes
    return defaulted, ()


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_resources(
    raw: object, field: str, out: _Messages
) -> dict[str, tuple[int, object]] | None:
    """Each entry of a resource list as (canonical amount, text as written); bad ones reported.

    Entries are parsed one by one so that every malformed quantity is named, not only the
    first. Returns None when ``raw`` is absent or not a map.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        out.add(field, "must be a map of resource name to quantity")
        return None
    parsed: dict[str, tuple[int, object]] = {}
    for name, value in raw.items():
        try:
            amount = Resource.parse({name: value}, field=field)[str(name)]
        except QuantityError as exc:
            out.add(exc.field or f"{field}.{name}", exc.message)
            continue
        parsed[str(name)] = (amount, value)
    return parsed


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def parent_of(queue: Mapping[str, Any]) -> str:
    """A Queue object's ``spec.parent``, or "" for a queue at the root."""
    parent = _spec(queue).get("parent")
    return parent if isinstance(parent, str) else ""


# --------------------------------------------------------------------------------------------
# PodGroup


def validate_pod_group(obj: Mapping[str, Any]) -> list[str]:
    """Why the API server should refuse the PodGroup ``obj``; empty when it is valid.

    Refused: a negative ``spec.minMember``; a ``spec.minTaskMember`` role that is negative or
    above ``spec.minMember``, or roles whose sum is above it; a malformed or negative quantity
    in ``spec.minResources``; and whatever the CRD schema refuses.
    """
    defaulted, causes = _schema_check("PodGroup", obj)
    spec = _spec(defaulted)
    out = _Messages()

    min_member = spec.get("minMember")
    bound: int | None = None
    if _is_int(min_member):
        if min_member < 0:
            out.add("spec.minMember", f"must not be negative, got {min_member}")
        else:
            bound = min_member

    tasks = spec.get("minTaskMember")
    if isinstance(tasks, Mapping):
        total = 0
        for role, count in tasks.items():
            field = f"spec.minTaskMember.{role}"
            if not _is_int(count):
                out.add(field, f"must be an integer, got {count!r}")
                continue
            if count < 0:
                out.add(field, f"must not be negative, got {count}")
                continue
            total += count
            if bound is not None and count > bound:
                out.add(field, f"{count} exceeds spec.minMember {bound}")
        if bound is not None and total > bound:
            out.add("spec.minTaskMember", f"sum {total} exceeds spec.minMember {bound}")
    elif tasks is not None:
        out.add("spec.minTaskMember", "must be a map of role to number of pods")

    _parse_resources(spec.get("minResources"), "spec.minResources", out)

    out.add_schema_causes(causes)
    return out.lines


# --------------------------------------------------------------------------------------------
# Queue


def validate_queue(obj: Mapping[str, Any], existing_queues: Mapping[str, Any]) -> list[str]:
    """Why the API server should refuse the Queue ``obj``; empty when it is valid.

    ``existing_queues`` maps the name of each Queue in the cluster to the Queue object (only
    its ``spec.parent`` is read). ``obj`` replaces the entry of its own name, so an update is
    checked against the hierarchy it would make.

    Refused: a malformed or negative quantity in ``spec.capability``, ``spec.deserved`` or
    ``spec.guarantee``; a resource whose capability is below its guarantee (a resource the
    capability does not name is unbounded); a ``spec.parent`` that does not exist, or whose
    chain of parents comes back to a queue already on it; and whatever the CRD schema refuses.
    """
    defaulted, causes = _schema_check("Queue", obj)
    spec = _spec(defaulted)
    out = _Messages()

    lists = {
        key: _parse_resources(spec.get(key), f"spec.{key}", out) for key in QUEUE_RESOURCE_FIELDS
    }
    capability, guarantee = lists["capability"], lists["guarantee"]
    if capability and guarantee:
        for name, (wanted, wanted_text) in guarantee.items():
            if name in capability and capability[name][0] < wanted:
                out.add(
                    f"spec.capability.{name}",
                    f"{capability[name][1]} is below spec.guarantee.{name} {wanted_text}",
                )

    parent = spec.get("parent")
    if isinstance(parent, str) and parent:
        problem = _parent_problem(_name(defaulted), parent, existing_queues)
        if problem:
            out.add("spec.parent", problem)

    out.add_schema_causes(causes)
    return out.lines


def _parent_problem(name: str, parent: str, existing: Mapping[str, Any]) -> str:
    """What is wrong with making ``parent`` the parent of queue ``name``, or ""."""
    chain = [name]
    current = parent
    while current:
        if current in chain:
            path = " -> ".join([*chain, current])
            return f"queue {path} forms a cycle"
        if current not in existing:
            # Only the direct parent must exist: a missing ancestor further up is the problem
            # of the queue that names it, not of this one.
            return f"queue {current} does not exist" if len(chain) == 1 else ""
        chain.append(current)
        entry = existing[current]
        current = parent_of(entry) if isinstance(entry, Mapping) else ""
    return ""
