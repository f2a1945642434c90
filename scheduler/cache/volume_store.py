"""The cache's storage objects, with the scheduler's volume writes assumed (layer 2).

:class:`VolumeStore` is part of the :class:`~scheduler.cache.SchedulerCache`: the cache
hands it the watch events of PersistentVolumeClaims, PersistentVolumes, StorageClasses,
CSINodes, CSIDrivers and CSIStorageCapacities (:data:`KINDS`) and asks it for a
:class:`~scheduler.api.volumes.view.VolumeView` per snapshot, rebuilt only when something
changed.

The writes of a bind's :class:`~scheduler.api.volumes.prebind.VolumeBindings` are assumed
as kube-scheduler's assume cache does: from the bind's assumption on, the view shows the
PV naming its claim in ``claimRef`` and the claim annotated with its node, so the next
cycle gives that PV to no other claim, until an event of the object with another
resourceVersion than the one the write was made against arrives (the write's own event,
or a newer change: the events win), or the bind fails (:meth:`VolumeStore.forget`).
Several pods of one claim assume the same write; it goes when the last one is forgotten.

What the events show, nothing assumed, is :attr:`VolumeStore.claims` and
:attr:`VolumeStore.volumes`: what the binding cycle checks while it waits for the PV
controller (kube's checkBindings reads the informers, not the assume cache), told of each
change through :attr:`VolumeStore.on_change`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.api.errors import InvalidInputError
from scheduler.api.volumes.model import (
    BOUND_BY_CONTROLLER,
    SELECTED_NODE,
    CapacityInfo,
    ClaimRef,
    CsiDriverInfo,
    CsiNodeInfo,
    PvcInfo,
    PvInfo,
    StorageClassInfo,
)
from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.api.volumes.storage_objects import (
    capacity_from_object,
    claim_from_object,
    csi_driver_from_object,
    csi_node_from_object,
    storage_class_from_object,
    volume_from_object,
)
from scheduler.api.volumes.view import VolumeView, holds_nothing

Obj = Mapping[str, Any]

CLAIM = "PersistentVolumeClaim"
VOLUME = "PersistentVolume"
KINDS = (CLAIM, VOLUME, "StorageClass", "CSINode", "CSIDriver", "CSIStorageCapacity")
"""The kinds whose events the store takes."""


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


@dataclass(slots=True)
class _Assumed:
    """One object's assumed write: made against ``version``, for the pods ``pods``."""

    version: str
    value: str
    """The claim key (``ns/name/uid``) written into a PV, or the node into a claim."""
    pods: set[str] = field(default_factory=set)


class VolumeStore:
    """Storage objects as the events show them, and the volume writes assumed. Called from
    the cache only (one task); synchronous."""

    def __init__(self) -> None:
        self.claims: dict[str, PvcInfo] = {}
        """Claims as the events show them, by ``ns/name``."""
        self.volumes: dict[str, PvInfo] = {}
        """PVs as the events show them, by name."""
        self.classes: dict[str, StorageClassInfo] = {}
        self.csi_nodes: dict[str, CsiNodeInfo] = {}
        self.csi_drivers: dict[str, CsiDriverInfo] = {}
        self.capacities: dict[str, CapacityInfo] = {}
        self.invalid_claims: dict[str, str] = {}
        self.invalid_volumes: dict[str, str] = {}
        self._pv_writes: dict[str, _Assumed] = {}
        """PV name -> the claimRef assumed written."""
        self._claim_writes: dict[str, _Assumed] = {}
        """Claim key -> the selected node assumed written."""
        self._view: VolumeView | None = None
        self.on_change: Callable[[str], None] | None = None
        """Called with ``PersistentVolume/<name>`` or ``PersistentVolumeClaim/<ns>/<name>``
        after each event of a PV or claim (the binding cycle's waits)."""

    @property
    def empty(self) -> bool:
        return holds_nothing(self)

    def keys(self, kind: str) -> list[str]:
        """The keys of the objects of ``kind`` held (a relist replaces them)."""
        table: dict[str, Mapping[str, object]] = {
            CLAIM: {**self.claims, **self.invalid_claims},
            VOLUME: {**self.volumes, **self.invalid_volumes},
            "StorageClass": self.classes,
            "CSINode": self.csi_nodes,
            "CSIDriver": self.csi_drivers,
            "CSIStorageCapacity": self.capacities,
        }
        return list(table.get(kind, {}))

    # Events -------------------------------------------------------------------------------

    def handle(self, kind: str, event: str, obj: Obj) -> bool:
        """Apply one event; True when it may let a waiting pod be placed (the cache then
        counts a generation). Raises InvalidInputError for an object that does not
        convert (a claim or PV is then kept as unreadable: its pods say so)."""
        key = _key(obj)
        self._view = None
        deleted = event == "DELETED"
        if kind in (CLAIM, VOLUME):
            writes = self._claim_writes if kind == CLAIM else self._pv_writes
            objects: dict[str, Any] = self.claims if kind == CLAIM else self.volumes
            try:
                if kind == CLAIM:
                    self._on_object(
                        key,
                        obj,
                        deleted,
                        claim_from_object,
                        table=objects,
                        invalid=self.invalid_claims,
                    )
                else:
                    self._on_object(
                        key,
                        obj,
                        deleted,
                        volume_from_object,
                        table=objects,
                        invalid=self.invalid_volumes,
                    )
            finally:
                self._expire(writes, key, objects.get(key))
                self._tell(f"{kind}/{key}")
            return kind == VOLUME or not deleted
        found = self._tables().get(kind)
        if found is None:
            return False
        table, convert = found
        if deleted:
            table.pop(key, None)
        else:
            try:
                table[key] = convert(obj)
            except InvalidInputError:
                table.pop(key, None)
                raise
        return not deleted or kind == "CSIDriver"

    def _tables(self) -> dict[str, tuple[dict[str, Any], Callable[[Obj], Any]]]:
        """The other kinds' tables and converters."""
        return {
            "StorageClass": (self.classes, storage_class_from_object),
            "CSINode": (self.csi_nodes, csi_node_from_object),
            "CSIDriver": (self.csi_drivers, csi_driver_from_object),
            "CSIStorageCapacity": (self.capacities, capacity_from_object),
        }

    @staticmethod
    def _on_object(
        key: str,
        obj: Obj,
        deleted: bool,
        convert: Callable[[Obj], Any],
        *,
        table: dict[str, Any],
        invalid: dict[str, str],
    ) -> None:
        if deleted:
            table.pop(key, None)
            invalid.pop(key, None)
            return
        try:
            value = convert(obj)
        except InvalidInputError as exc:
            table.pop(key, None)
            invalid[key] = exc.message if exc.field is None else f"{exc.field}: {exc.message}"
            raise
        invalid.pop(key, None)
        table[key] = value

    @staticmethod
    def _expire(writes: dict[str, _Assumed], key: str, seen: PvcInfo | PvInfo | None) -> None:
        """An event of an object with an assumed write: the write is forgotten unless the
        object is still at the version it was made against (kube's assume cache)."""
        assumed = writes.get(key)
        if assumed is not None and (seen is None or seen.resource_version != assumed.version):
            del writes[key]

    def _tell(self, what: str) -> None:
        if self.on_change is not None:
            self.on_change(what)

    # Assumptions ------------------------------------------------------------------------------

    def assume(self, pod: str, bindings: VolumeBindings) -> None:
        """Show the writes of ``bindings`` (pod uid ``pod``'s bind) from now on."""
        for b in bindings.static:
            if not b.write:
                continue
            pv = self.volumes.get(b.volume)
            if pv is None or pv.resource_version != b.resource_version:
                continue  # changed since the cycle saw it: the write will meet a conflict
            value = f"{b.claim.key}/{b.claim.uid}"
            assumed = self._pv_writes.get(b.volume)
            if assumed is None or assumed.value != value:
                assumed = self._pv_writes[b.volume] = _Assumed(b.resource_version, value)
            assumed.pods.add(pod)
            self._view = None
        for p in bindings.provisions:
            if not p.write:
                continue
            claim = self.claims.get(p.claim.key)
            if claim is None or claim.resource_version != p.resource_version:
                continue
            assumed = self._claim_writes.get(p.claim.key)
            if assumed is None or assumed.value != bindings.node:
                assumed = self._claim_writes[p.claim.key] = _Assumed(
                    p.resource_version, bindings.node
                )
            assumed.pods.add(pod)
            self._view = None

    def forget(self, pod: str, bindings: VolumeBindings) -> None:
        """Pod uid ``pod``'s bind failed: undo what :meth:`assume` showed for it (a write
        other pods of the claim assumed too stays). Idempotent."""
        for writes, key in [(self._pv_writes, b.volume) for b in bindings.static] + [
            (self._claim_writes, p.claim.key) for p in bindings.provisions
        ]:
            assumed = writes.get(key)
            if assumed is None:
                continue
            assumed.pods.discard(pod)
            if not assumed.pods:
                del writes[key]
                self._view = None

    def assumed(self, kind: str, key: str) -> bool:
        """Is a write of the PV (``kind`` PersistentVolume, ``key`` its name) or claim
        (``ns/name``) assumed and not yet shown by its events?"""
        return key in (self._pv_writes if kind == VOLUME else self._claim_writes)

    # The view ---------------------------------------------------------------------------------

    def view(self) -> VolumeView | None:
        """What a snapshot sees (the assumed writes applied); None when the cluster has no
        storage object at all."""
        if self.empty:
            return None
        if self._view is None:
            volumes = dict(self.volumes)
            for name, assumed in self._pv_writes.items():
                pv = volumes.get(name)
                if pv is None:
                    continue
                ns, claim, uid = assumed.value.split("/", 2)
                volumes[name] = replace(
                    pv,
                    claim_ref=ClaimRef(ns, claim, uid),
                    annotations={**pv.annotations, BOUND_BY_CONTROLLER: "yes"},
                )
            claims = dict(self.claims)
            for key, assumed in self._claim_writes.items():
                c = claims.get(key)
                if c is not None:
                    claims[key] = replace(
                        c, annotations={**c.annotations, SELECTED_NODE: assumed.value}
                    )
            by_class: dict[str, list[str]] = {}
            for name, pv in volumes.items():
                by_class.setdefault(pv.storage_class, []).append(name)
            self._view = VolumeView(
                claims=claims,
                volumes=volumes,
                classes=dict(self.classes),
                csi_nodes=dict(self.csi_nodes),
                csi_drivers=dict(self.csi_drivers),
                capacities=dict(self.capacities),
                invalid_claims=dict(self.invalid_claims),
                invalid_volumes=dict(self.invalid_volumes),
                by_class={c: tuple(sorted(names)) for c, names in by_class.items()},
            )
        return self._view
