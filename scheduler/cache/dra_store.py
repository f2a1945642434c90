"""The cache's DRA objects: slices, classes, claims and templates, with claims assumed
allocated before the API shows them (layer 2).

:class:`DraStore` is part of :class:`~scheduler.cache.SchedulerCache`: the cache hands it
the watch events of ``ResourceSlice``, ``DeviceClass``, ``ResourceClaim`` and
``ResourceClaimTemplate`` and asks it for a :class:`~scheduler.api.cluster_snapshot.DraView` per
snapshot. The :class:`~scheduler.api.dra.inventory.Inventory` is rebuilt only when slices
or classes changed, so what it memoizes (compiled selectors, which devices a request
matches) lives across cycles.

Claims are assumed as pods are: when a Bind carries :class:`ClaimBinding` s, the claim is
shown allocated (and reserved for the pod) from then on, so the next cycle does not give
its devices to anyone else, until the events show it so, or the write is known not to
have landed (:meth:`DraStore.forget`). A write that landed (:meth:`DraStore.landed`) is
kept until the next event of the claim, whatever it says: an event after the write shows
it, or shows a later change (the claim controller deallocating it).

The claim of a pod's extended resources (KEP-5004) does not exist when its write is
assumed: the view shows it under ``ns/<extended-resources>/<pod uid>``, allocated and
reserved for the pod, until an event shows the claim made for the pod allocated and
reserved for it, or the claim created is deleted, or the write is known not to have
landed. :meth:`DraStore.extend_nodes` gives each snapshot's nodes the devices that serve
an extended resource as their allocatable of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.dra.codec import (
    claim_from_object,
    claim_template_from_object,
    device_class_from_object,
    slice_from_object,
)
from scheduler.api.dra.inventory import Inventory
from scheduler.api.dra.model import (
    EXTENDED_SESSION_NAME,
    FINALIZER,
    ClaimBinding,
    ClaimInfo,
    ClaimTemplateInfo,
    Consumer,
    DeviceClassInfo,
    SliceInfo,
)
from scheduler.api.dra.view import DraView
from scheduler.api.errors import InvalidInputError
from scheduler.api.node import NodeInfo
from scheduler.api.resource import Resource
from scheduler.api.task import TaskInfo

Obj = Mapping[str, Any]

KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim", "ResourceClaimTemplate")


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


@dataclass(slots=True)
class _Pending:
    binding: ClaimBinding
    landed: bool = False
    created: str = ""
    """For a pod's extended-resource claim: the key of the claim created for it."""


class DraStore:
    """DRA objects as the events show them, and the claim writes assumed. Called from the
    cache only (one task); synchronous."""

    def __init__(self) -> None:
        self.slices: dict[str, SliceInfo] = {}
        self.classes: dict[str, DeviceClassInfo] = {}
        self.claims: dict[str, ClaimInfo] = {}
        """Claims as the events show them, by ``ns/name``."""
        self.templates: dict[str, ClaimTemplateInfo] = {}
        self.invalid: dict[str, str] = {}
        """Claims that exist but do not convert, by ``ns/name``: why."""
        self._pending: dict[str, dict[str, _Pending]] = {}
        """Claim writes assumed, by claim key then pod uid."""
        self._inventory: Inventory | None = None
        self._view: DraView | None = None
        self._holding: dict[str, set[str]] = {}
        """Pod uid -> keys of the allocated claims reserved for it (as the events show)."""
        self.on_released: Callable[[str], None] | None = None
        """Called with a pod's uid when no allocated claim is reserved for it any more
        (the claim controller released its devices; the preemption gate waits for it)."""
        self._class_counts: dict[str, tuple[Mapping[str, str], dict[str, int]]] = {}
        """Node name -> (its labels, devices per class it reaches), for the inventory
        of the moment (cleared with it)."""
        self._extended_ever = False
        """Has a snapshot's node been given devices as allocatable (so later snapshots
        must check that their copies lost them)?"""

    @property
    def empty(self) -> bool:
        return not (self.slices or self.classes or self.claims or self.templates or self.invalid)

    def keys(self, kind: str) -> list[str]:
        table: dict[str, Mapping[str, object]] = {
            "ResourceSlice": self.slices,
            "DeviceClass": self.classes,
            "ResourceClaim": self.claims,
            "ResourceClaimTemplate": self.templates,
        }
        return list(table.get(kind, {}))

    # Events ------------------------------------------------------------------------------

    def handle(self, kind: str, event: str, obj: Obj) -> bool:
        """Apply one event; True when it may let a waiting pod be placed (the cache then
        counts a generation). Raises InvalidInputError for an object that does not convert."""
        key = _key(obj)
        self._view = None
        if kind == "ResourceClaim":
            return self._on_claim(key, event, obj)
        if kind == "ResourceClaimTemplate":
            if event == "DELETED":
                self.templates.pop(key, None)
            else:
                self.templates[key] = claim_template_from_object(obj)
            return False
        self._inventory = None
        self._class_counts.clear()
        if kind == "ResourceSlice":
            if event == "DELETED":
                self.slices.pop(key, None)
            else:
                self.slices[key] = slice_from_object(obj)
        elif event == "DELETED":
            self.classes.pop(key, None)
        else:
            self.classes[key] = device_class_from_object(obj)
        return True

    def _on_claim(self, key: str, event: str, obj: Obj) -> bool:
        old = self.claims.get(key)
        if event == "DELETED":
            self.claims.pop(key, None)
            self.invalid.pop(key, None)
            self._pending.pop(key, None)
            self._drop_extended(lambda p: p.created == key)
            self._track(key, old, None)
            return True
        try:
            claim = claim_from_object(obj)
        except InvalidInputError as exc:
            self.claims.pop(key, None)
            self._track(key, old, None)
            self.invalid[key] = exc.message if exc.field is None else f"{exc.field}: {exc.message}"
            raise
        self.invalid.pop(key, None)
        self.claims[key] = claim
        self._track(key, old, claim)
        if claim.extended and claim.allocation is not None:
            uid = claim.owner_pod
            self._drop_extended(lambda p: p.binding.pod_uid == uid and claim.reserved_for_pod(uid))
        pending = self._pending.get(key)
        if pending:
            for uid, p in list(pending.items()):
                shown = claim.allocation is not None and claim.reserved_for_pod(uid)
                if p.landed or shown or claim.uid != p.binding.uid:
                    del pending[uid]
            if not pending:
                del self._pending[key]
        # A new claim, or devices released, may let a pod be placed; an allocation or a
        # reservation (mostly the scheduler's own writes) does not.
        if old is None:
            return True
        released = old.allocation is not None and claim.allocation is None
        return released or len(claim.reserved_for) < len(old.reserved_for)

    def _track(self, key: str, old: ClaimInfo | None, new: ClaimInfo | None) -> None:
        """Keep :attr:`_holding` in step and tell :attr:`on_released` of pods that no
        longer hold any device."""
        before = _holders(old)
        after = _holders(new)
        for uid in after - before:
            self._holding.setdefault(uid, set()).add(key)
        for uid in before - after:
            keys = self._holding.get(uid)
            if keys is None:
                continue
            keys.discard(key)
            if not keys:
                del self._holding[uid]
                if self.on_released is not None:
                    self.on_released(uid)

    def _drop_extended(self, which: Callable[[_Pending], bool]) -> None:
        """Forget the assumed extended-resource claims ``which`` picks (shown by events,
        or their claim deleted)."""
        for key in [k for k, ps in self._pending.items() if _extended_key(k)]:
            pending = self._pending[key]
            for uid in [u for u, p in pending.items() if which(p)]:
                del pending[uid]
                self._view = None
            if not pending:
                del self._pending[key]

    def holds_devices(self, uid: str) -> bool:
        """Is an allocated claim reserved for pod ``uid``, as the events show?"""
        return uid in self._holding

    # Assumptions ---------------------------------------------------------------------------

    def assume(self, binding: ClaimBinding) -> None:
        """Show the claim of ``binding`` allocated and reserved for its pod from now on."""
        self._view = None
        self._pending.setdefault(binding.key, {})[binding.pod_uid] = _Pending(binding)

    def landed(self, binding: ClaimBinding) -> None:
        """The write of ``binding`` took effect: keep it until the claim's next event (an
        extended-resource claim, ``binding`` naming the claim created: until an event
        shows it allocated and reserved for the pod, or its deletion)."""
        if binding.extended is not None and binding.name:
            assumed = replace(binding, name="", uid="")
            p = self._pending.get(assumed.key, {}).get(binding.pod_uid)
            if p is not None:
                p.landed, p.created = True, binding.key
            return
        p = self._pending.get(binding.key, {}).get(binding.pod_uid)
        if p is not None:
            p.landed = True

    def forget(self, binding: ClaimBinding) -> None:
        """The write of ``binding`` did not take effect (or will not be made): undo
        :meth:`assume`, unless it is known to have landed. Idempotent."""
        pending = self._pending.get(binding.key)
        if pending is None:
            return
        p = pending.get(binding.pod_uid)
        if p is not None and not p.landed:
            self._view = None
            del pending[binding.pod_uid]
            if not pending:
                del self._pending[binding.key]

    def assumed(self, key: str) -> bool:
        """Is a write of claim ``key`` assumed and not yet shown by its events?"""
        return key in self._pending

    # Snapshot --------------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        if self._inventory is None:
            self._inventory = Inventory(self.slices, self.classes)
        return self._inventory

    def view(self) -> DraView | None:
        """What a snapshot sees: the inventory, the claims with the assumed writes
        applied, the templates; None when the cluster has no DRA object at all."""
        if self.empty:
            return None
        if self._view is None:
            claims = dict(self.claims)
            extended = {c.owner_pod: k for k, c in claims.items() if c.extended and c.owner_pod}
            for key, pending in self._pending.items():
                claim = claims.get(key)
                if claim is not None:
                    claims[key] = _with_writes(claim, [p.binding for p in pending.values()])
                elif _extended_key(key):
                    for p in pending.values():
                        claims[key] = _assumed_extended(p.binding)
                        extended[p.binding.pod_uid] = key
            self._view = DraView(
                self.inventory(), claims, dict(self.templates), dict(self.invalid), extended
            )
        return self._view

    def extend_nodes(
        self, snap: Snapshot, nodes: Mapping[str, NodeInfo], tasks: Iterable[TaskInfo]
    ) -> None:
        """Give ``snap`` (just taken, its :attr:`~Snapshot.dra` set) the extended resources
        served by DRA (KEP-5004): for each resource that a pod of ``tasks`` asks and a
        DeviceClass serves, each node whose own allocatable (``nodes``, the cache's) does
        not offer it serves it through DRA (:attr:`DraView.extended`), and its copy in
        ``snap`` counts the devices of the class it reaches as its allocatable of it, as
        kube-scheduler's scoring counts them. So predicates, scores and queue shares
        weigh such a resource as any other; the ``dra`` plugin allocates the devices.
        Copies reused from the last snapshot get back the node's own allocatable where
        they no longer serve anything."""
        view = snap.dra
        served_by: dict[str, dict[str, str]] = {}
        extra_by: dict[str, Resource] = {}
        if view is not None:
            inventory = view.inventory
            classes = inventory.resource_classes()
            asked = {n for t in tasks if t.spec.containers for n in t.request if n in classes}
            for name in snap.nodes if asked else ():
                own = nodes[name].allocatable
                served = {r: classes[r] for r in sorted(asked) if not own.get(r, 0)}
                if not served:
                    continue
                served_by[name] = served
                counts = self._counts(inventory, name, snap.nodes[name].labels)
                extra = {r: counts.get(cls, 0) for r, cls in served.items()}
                if any(extra.values()):
                    extra_by[name] = own + Resource(extra)
            snap.dra = replace(view, extended=served_by)
        if not extra_by and not self._extended_ever:
            return
        self._extended_ever = True
        for name, copy in snap.nodes.items():
            want = extra_by.get(name) or nodes[name].allocatable
            if copy.allocatable is not want and copy.allocatable != want:
                copy.allocatable = want

    def _counts(self, inventory: Inventory, node: str, labels: Mapping[str, str]) -> dict[str, int]:
        """Devices per class that ``node`` reaches (memoized while the inventory and the
        node's labels stay)."""
        hit = self._class_counts.get(node)
        if hit is not None and hit[0] is labels:
            return hit[1]
        devices = inventory.node_devices(node, labels)
        counts = {c: inventory.class_count(c, devices) for c in inventory.classes}
        self._class_counts[node] = (labels, counts)
        return counts


def _extended_key(key: str) -> bool:
    """Is ``key`` that of an extended-resource claim assumed before it exists?"""
    return f"/{EXTENDED_SESSION_NAME}/" in key


def _assumed_extended(binding: ClaimBinding) -> ClaimInfo:
    """The extended-resource claim of ``binding`` as it stands once written."""
    assert binding.extended is not None
    return ClaimInfo(
        namespace=binding.namespace,
        name=binding.key.split("/", 1)[1],
        uid="",
        requests=binding.extended.requests,
        allocation=binding.allocation,
        reserved_for=(Consumer("pods", binding.pod_name, binding.pod_uid),),
        owner_pod=binding.pod_uid,
        finalizers=(FINALIZER,),
        extended=True,
    )


def _holders(claim: ClaimInfo | None) -> set[str]:
    if claim is None or claim.allocation is None:
        return set()
    return {c.uid for c in claim.reserved_for if c.resource == "pods"}


def _with_writes(claim: ClaimInfo, bindings: list[ClaimBinding]) -> ClaimInfo:
    """``claim`` as it stands once ``bindings`` are written (allocation, reservations)."""
    allocation = claim.allocation
    reserved = list(claim.reserved_for)
    for b in bindings:
        if b.uid != claim.uid:
            continue
        if allocation is None and b.allocation is not None:
            allocation = b.allocation
        if not claim.reserved_for_pod(b.pod_uid):
            reserved.append(Consumer("pods", b.pod_name, b.pod_uid))
    return replace(claim, allocation=allocation, reserved_for=tuple(reserved))
