"""The cache's DRA objects: slices, classes, claims and templates, with claims assumed
allocated before the API shows them (layer 2).

:class:`DraStore` is part of :class:`~scheduler.cache.SchedulerCache`: the cache hands it
the watch events of ``ResourceSlice``, ``DeviceClass``, ``ResourceClaim`` and
``ResourceClaimTemplate`` and asks it for a :class:`~scheduler.api.snapshot.DraView` per
snapshot. The :class:`~scheduler.api.dra.inventory.Inventory` is rebuilt only when slices
or classes changed, so what it memoizes (compiled selectors, which devices a request
matches) lives across cycles.

Claims are assumed as pods are: when a Bind carries :class:`ClaimBinding` s, the claim is
shown allocated (and reserved for the pod) from then on, so the next cycle does not give
its devices to anyone else, until the events show it so, or the write is known not to
have landed (:meth:`DraStore.forget`). A write that landed (:meth:`DraStore.landed`) is
kept until the next event of the claim, whatever it says: an event after the write shows
it, or shows a later change (the claim controller deallocating it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler.api.dra.convert import (
    claim_from_object,
    claim_template_from_object,
    device_class_from_object,
    slice_from_object,
)
from scheduler.api.dra.inventory import Inventory
from scheduler.api.dra.model import (
    ClaimBinding,
    ClaimInfo,
    ClaimTemplateInfo,
    Consumer,
    DeviceClassInfo,
    SliceInfo,
)
from scheduler.api.dra.view import DraView
from scheduler.api.errors import InvalidInputError

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

    def holds_devices(self, uid: str) -> bool:
        """Is an allocated claim reserved for pod ``uid``, as the events show?"""
        return uid in self._holding

    # Assumptions ---------------------------------------------------------------------------

    def assume(self, binding: ClaimBinding) -> None:
        """Show the claim of ``binding`` allocated and reserved for its pod from now on."""
        self._view = None
        self._pending.setdefault(binding.key, {})[binding.pod_uid] = _Pending(binding)

    def landed(self, binding: ClaimBinding) -> None:
        """The write of ``binding`` took effect: keep it until the claim's next event."""
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
            for key, pending in self._pending.items():
                claim = claims.get(key)
                if claim is not None:
                    claims[key] = _with_writes(claim, [p.binding for p in pending.values()])
            self._view = DraView(self.inventory(), claims, dict(self.templates), dict(self.invalid))
        return self._view


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
