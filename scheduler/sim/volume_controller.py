"""The PV controller of the embedded cluster, and a provisioner (layer 4).

:class:`SimVolumeController` plays the part of the controller manager's
``persistentvolume-binder`` and ``pvc-protection``/``pv-protection`` controllers that the
scheduler depends on (``../shared/k8s/up --controller-manager`` runs the real ones), and
an external provisioner for every StorageClass whose ``provisioner`` is not
``kubernetes.io/no-provisioner``, on the :class:`~scheduler.sim.store.ObjectStore`:

* a PV without ``claimRef`` (or pre-bound by name only) is ``Available``;
* an unbound claim is bound to the PV whose ``claimRef`` names it (the scheduler wrote
  it, or a user pre-bound it), else, unless its class waits for a first consumer and no
  node was selected for it, to the smallest Available PV of its class that fits it (size,
  access modes, volume mode, selector), as kube's ``FindMatchingVolume`` without a node;
  binding writes the PV's ``claimRef`` (``bound-by-controller`` when the controller set
  it) and phase ``Bound``, then the claim's ``volumeName``, ``bind-completed`` (and
  ``bound-by-controller``), phase ``Bound``, capacity and access modes;
* a claim with no PV to bind whose class has a provisioner gets the
  ``volume.kubernetes.io/storage-provisioner`` annotation, once its class binds at once
  or a node was selected for it; the provisioner then makes a PV for it: the claim's size,
  access modes and volume mode, the class's reclaim policy, a CSI source of the
  provisioner, pre-bound to the claim, and, for a selected node, node affinity to that
  node's ``kubernetes.io/hostname`` (the volumes made are node-local, as local-path and
  local NVMe provisioners make them). The class annotation ``sim.sluice.dev/provisioning``
  delays that (a duration) or makes it fail (``fail``: the provisioner gives up and
  removes the claim's ``selected-node`` annotation, as the external provisioner does, so
  that the scheduler picks again);
* a claim that is gone leaves its PV ``Released`` (reclaim policy Retain) or deleted
  (Delete); a claim whose PV is gone is ``Lost``;
* a claim being deleted loses its ``kubernetes.io/pvc-protection`` finalizer once no pod
  bound to a node and not finished uses it; a PV being deleted its
  ``kubernetes.io/pv-protection`` finalizer once it is not Bound.

Each change is synced ``sync_delay`` seconds of clock time after the event that caused
it (0: as soon as the controller's task runs, never inside the store's callback), one
object at a time, reading the store as it is then. A write that fails is logged and the
object synced again on its next event. :meth:`SimVolumeController.pending` tells a
simulation whether the controller still has something to do.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping
from typing import Any, Final, Literal

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from scheduler.api.errors import ApiError, InvalidInputError
from scheduler.api.volumes.model import (
    BIND_COMPLETED,
    BOUND_BY_CONTROLLER,
    NO_PROVISIONER,
    PROVISIONED_BY,
    SELECTED_NODE,
    STORAGE_PROVISIONER,
    WAIT_FOR_FIRST_CONSUMER,
    PvcInfo,
    PvInfo,
)
from scheduler.api.volumes.storage_objects import claim_from_object, volume_from_object
from scheduler.ports import Clock
from scheduler.sim.durations import parse_duration
from scheduler.sim.storage import PV_PROTECTION, PVC_PROTECTION
from scheduler.sim.store import ObjectStore, WatchEvent

__all__ = ["PROVISIONING_ANNOTATION", "SimVolumeController"]

log = logging.getLogger(__name__)

PROVISIONING_ANNOTATION: Final = "sim.sluice.dev/provisioning"
"""On a StorageClass: how long its provisioner takes (a duration), or ``fail``."""
BETA_STORAGE_PROVISIONER: Final = "volume.beta.kubernetes.io/storage-provisioner"
HOSTNAME: Final = "kubernetes.io/hostname"
CLAIM: Final = "PersistentVolumeClaim"
VOLUME: Final = "PersistentVolume"
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})

_Action = Literal["claim", "volume", "provision"]


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _claims_of_pod(pod: Mapping[str, Any]) -> list[str]:
    """The keys of the claims a pod's volumes name (an ephemeral volume's included)."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or ():
        if not isinstance(v, Mapping):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, Mapping) and pvc.get("claimName"):
            out.append(f"{ns}/{pvc['claimName']}")
        elif isinstance(v.get("ephemeral"), Mapping):
            out.append(f"{ns}/{meta.get('name')}-{v.get('name')}")
    return out


def _uses(pod: Mapping[str, Any]) -> bool:
    """Does ``pod`` keep its claims in use (kube's pvc-protection: bound to a node, not
    finished)?"""
    return bool((pod.get("spec") or {}).get("nodeName")) and (
        (pod.get("status") or {}).get("phase") not in _TERMINAL
    )


def _matches(pv: PvInfo, claim: PvcInfo) -> bool:
    """Could unbound ``pv`` take ``claim`` (kube's FindMatchingVolume without a node)?"""
    return (
        pv.phase == "Available"
        and pv.claim_ref is None
        and not pv.deleting
        and pv.capacity >= claim.request
        and pv.volume_mode == claim.volume_mode
        and pv.attributes_class == claim.attributes_class
        and pv.storage_class == claim.storage_class
        and claim.access_modes <= pv.access_modes
        and (claim.selector is None or claim.selector.matches(pv.labels))
    )


class SimVolumeController:
    """See the module docstring. :meth:`run` is its one task; start it with
    ``await tg.start(controller.run)`` (it returns once what the store holds is queued)."""

    def __init__(self, store: ObjectStore, clock: Clock, *, sync_delay: float = 0.0) -> None:
        if not sync_delay >= 0:
            raise ValueError(f"sync_delay must not be negative, got {sync_delay}")
        self._store = store
        self._clock = clock
        self._delay = sync_delay
        self._heap: list[tuple[float, int, _Action, str]] = []
        self._due: dict[tuple[_Action, str], float] = {}
        self._seq = 0
        self._wake = anyio.Event()
        self._by_claim: dict[str, set[str]] = {}
        """Claim key -> the PVs whose claimRef names it."""

    def pending(self) -> int:
        """Syncs and provisions not done yet."""
        return len(self._due)

    # The task -------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        unsubscribe = self._store.subscribe(
            self._on_event, kinds=(CLAIM, VOLUME, "StorageClass", "Pod")
        )
        try:
            for pv in self._store.list(VOLUME)[0]:
                self._index(pv)
                self._mark("volume", _key(pv))
            for claim in self._store.list(CLAIM)[0]:
                self._mark("claim", _key(claim))
            task_status.started()
            while True:
                if not self._heap:
                    self._wake = anyio.Event()
                    await self._wake.wait()
                    continue
                due, _, action, key = self._heap[0]
                if self._due.get((action, key)) != due:
                    heapq.heappop(self._heap)  # superseded by an earlier mark
                    continue
                now = self._clock.now()
                if due > now:
                    with anyio.move_on_after(due - now):
                        self._wake = anyio.Event()
                        await self._wake.wait()
                    continue
                heapq.heappop(self._heap)
                del self._due[(action, key)]
                try:
                    self._sync(action, key)
                except (ApiError, InvalidInputError) as exc:
                    log.info("PV controller: %s %s not synced: %s", action, key, exc)
                await anyio.lowlevel.checkpoint()
        finally:
            unsubscribe()

    def _mark(self, action: _Action, key: str, delay: float | None = None) -> None:
        due = self._clock.now() + (self._delay if delay is None else delay)
        before = self._due.get((action, key))
        if before is not None and before <= due:
            return
        self._due[(action, key)] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, action, key))
        self._wake.set()

    # Events ---------------------------------------------------------------------------

    def _index(self, pv: Mapping[str, Any], *, deleted: bool = False) -> None:
        name = _key(pv)
        for names in self._by_claim.values():
            names.discard(name)
        ref = (pv.get("spec") or {}).get("claimRef")
        if not deleted and isinstance(ref, Mapping) and ref.get("name"):
            key = f"{ref.get('namespace') or 'default'}/{ref['name']}"
            self._by_claim.setdefault(key, set()).add(name)

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.obj
        if event.kind == VOLUME:
            self._index(obj, deleted=event.type == "DELETED")
            ref = (obj.get("spec") or {}).get("claimRef")
            if isinstance(ref, Mapping) and ref.get("name"):
                self._mark("claim", f"{ref.get('namespace') or 'default'}/{ref['name']}")
            if event.type != "DELETED":
                self._mark("volume", _key(obj))
                if ref is None:
                    self._unbound_claims()  # a claim of its class may bind now
        elif event.kind == CLAIM:
            key = _key(obj)
            self._mark("claim", key)
            for name in self._by_claim.get(key, ()):
                self._mark("volume", name)
        elif event.kind == "StorageClass":
            self._unbound_claims()
        elif event.kind == "Pod" and (event.type == "DELETED" or not _uses(obj)):
            for key in _claims_of_pod(obj):
                claim = self._store.try_get(CLAIM, *key.split("/", 1))
                if claim is not None and claim["metadata"].get("deletionTimestamp"):
                    self._mark("claim", key)

    def _unbound_claims(self) -> None:
        for claim in self._store.list(CLAIM)[0]:
            if not (claim.get("spec") or {}).get("volumeName"):
                self._mark("claim", _key(claim))

    # Syncs ----------------------------------------------------------------------------

    def _sync(self, action: _Action, key: str) -> None:
        if action == "volume":
            self._sync_volume(key)
        elif action == "claim":
            self._sync_claim(key)
        else:
            self._provision(key)

    def _sync_volume(self, name: str) -> None:
        obj = self._store.try_get(VOLUME, "", name)
        if obj is None:
            return
        pv = volume_from_object(obj)
        if pv.deleting and pv.phase != "Bound":
            self._drop_finalizer(VOLUME, "", name, obj, PV_PROTECTION)
            return
        ref = pv.claim_ref
        if ref is None or not ref.uid:
            self._phase(VOLUME, "", name, obj, "Available")
            return
        claim_obj = self._store.try_get(CLAIM, ref.namespace, ref.name)
        claim = None if claim_obj is None else claim_from_object(claim_obj)
        if claim is None or claim.uid != ref.uid:
            self._release(obj, pv)
            return
        if claim.volume_name == name:
            self._phase(VOLUME, "", name, obj, "Bound")
        elif claim.volume_name and BOUND_BY_CONTROLLER in pv.annotations:
            # the claim went to another PV: this one is given back (kube's unbind)
            self._store.patch(VOLUME, "", name, {"spec": {"claimRef": None}})

    def _release(self, obj: Mapping[str, Any], pv: PvInfo) -> None:
        """The claim ``pv`` was bound to is gone: Released, or deleted with policy Delete."""
        policy = (obj.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain"
        if policy == "Delete" and PROVISIONED_BY in pv.annotations:
            self._phase(VOLUME, "", pv.name, obj, "Released")
            self._store.delete(VOLUME, "", pv.name)
            return
        self._phase(VOLUME, "", pv.name, obj, "Released")

    def _sync_claim(self, key: str) -> None:
        ns, name = key.split("/", 1)
        obj = self._store.try_get(CLAIM, ns, name)
        if obj is None:
            for volume in sorted(self._by_claim.get(key, ())):
                self._mark("volume", volume)
            return
        claim = claim_from_object(obj)
        if claim.deleting:
            in_use = any(
                key in _claims_of_pod(p) and _uses(p) for p in self._store.list("Pod", ns)[0]
            )
            if not in_use:
                self._drop_finalizer(CLAIM, ns, name, obj, PVC_PROTECTION)
                return
        if BIND_COMPLETED in claim.annotations and claim.volume_name:
            pv_obj = self._store.try_get(VOLUME, "", claim.volume_name)
            if pv_obj is None:
                self._phase(CLAIM, ns, name, obj, "Lost")
            elif claim.phase != "Bound":
                self._claim_bound(obj, volume_from_object(pv_obj))
            return
        found = self._volume_for(claim)
        if found is not None:
            self._bind(found, claim)
            return
        if claim.volume_name:
            return  # pre-bound by a user to a PV that is missing or taken: it waits
        cls = self._store.try_get("StorageClass", "", claim.storage_class)
        if cls is None or not claim.storage_class:
            return
        delayed = cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
        provisioner = str(cls.get("provisioner") or "")
        if (delayed and not claim.provisioning) or provisioner in ("", NO_PROVISIONER):
            return
        if claim.annotations.get(STORAGE_PROVISIONER) != provisioner:
            annotations = {STORAGE_PROVISIONER: provisioner, BETA_STORAGE_PROVISIONER: provisioner}
            self._store.patch(CLAIM, ns, name, {"metadata": {"annotations": annotations}})
            return  # its event syncs it again
        setting = str((cls["metadata"].get("annotations") or {}).get(PROVISIONING_ANNOTATION, ""))
        if setting == "fail":
            delay = 0.0
        else:
            delay = parse_duration(setting) if setting else 0.0
        self._mark("provision", key, delay)

    def _volume_for(self, claim: PvcInfo) -> PvInfo | None:
        """The PV kube's PV controller binds ``claim`` to now, or None (module docstring)."""
        if claim.volume_name:
            obj = self._store.try_get(VOLUME, "", claim.volume_name)
            if obj is None:
                return None
            pv = volume_from_object(obj)
            return pv if pv.claim_ref is None or pv.bound_to(claim) else None
        named = sorted(self._by_claim.get(claim.key, ()))
        for name in named:
            obj = self._store.try_get(VOLUME, "", name)
            if obj is None:
                continue
            pv = volume_from_object(obj)
            if pv.bound_to(claim) and not pv.deleting and pv.capacity >= claim.request:
                return pv
        cls = self._store.try_get("StorageClass", "", claim.storage_class)
        delayed = cls is not None and cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
        if delayed and not claim.provisioning:
            return None
        best: PvInfo | None = None
        for obj in self._store.list(VOLUME)[0]:
            pv = volume_from_object(obj)
            if _matches(pv, claim) and (
                best is None or (pv.capacity, pv.name) < (best.capacity, best.name)
            ):
                best = pv
        return best

    def _bind(self, pv: PvInfo, claim: PvcInfo) -> None:
        """kube's bind: the PV to the claim, then the claim to the PV."""
        obj = self._store.get(VOLUME, "", pv.name)
        if pv.claim_ref is None or not pv.claim_ref.uid:
            patch: dict[str, Any] = {
                "spec": {
                    "claimRef": {
                        "apiVersion": "v1",
                        "kind": CLAIM,
                        "namespace": claim.namespace,
                        "name": claim.name,
                        "uid": claim.uid,
                    }
                }
            }
            if pv.claim_ref is None:
                patch["metadata"] = {"annotations": {BOUND_BY_CONTROLLER: "yes"}}
            obj = self._store.patch(VOLUME, "", pv.name, patch)
        self._phase(VOLUME, "", pv.name, obj, "Bound")
        annotations = {BIND_COMPLETED: "yes"}
        if not claim.volume_name:
            annotations[BOUND_BY_CONTROLLER] = "yes"
        claim_obj = self._store.patch(
            CLAIM,
            claim.namespace,
            claim.name,
            {"metadata": {"annotations": annotations}, "spec": {"volumeName": pv.name}},
        )
        self._claim_bound(claim_obj, pv)

    def _claim_bound(self, obj: Mapping[str, Any], pv: PvInfo) -> None:
        raw_pv = self._store.get(VOLUME, "", pv.name)
        spec = raw_pv.get("spec") or {}
        meta = obj["metadata"]
        status = {
            "phase": "Bound",
            "accessModes": list(spec.get("accessModes") or []),
            "capacity": dict(spec.get("capacity") or {}),
        }
        if {k: (obj.get("status") or {}).get(k) for k in status} != status:
            self._store.patch(
                CLAIM, meta["namespace"], meta["name"], {"status": status}, subresource="status"
            )

    def _provision(self, key: str) -> None:
        """The external provisioner's turn for claim ``key`` (module docstring)."""
        ns, name = key.split("/", 1)
        obj = self._store.try_get(CLAIM, ns, name)
        if obj is None:
            return
        claim = claim_from_object(obj)
        cls = self._store.try_get("StorageClass", "", claim.storage_class)
        if claim.volume_name or cls is None or claim.deleting:
            return
        provisioner = str(cls.get("provisioner") or "")
        if claim.annotations.get(STORAGE_PROVISIONER) != provisioner:
            return
        delayed = cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER
        if delayed and not claim.provisioning:
            return
        setting = (cls["metadata"].get("annotations") or {}).get(PROVISIONING_ANNOTATION)
        if setting == "fail":
            if claim.provisioning:
                self._store.patch(
                    CLAIM, ns, name, {"metadata": {"annotations": {SELECTED_NODE: None}}}
                )
            return
        pv_name = f"pvc-{claim.uid}"
        if self._store.try_get(VOLUME, "", pv_name) is not None:
            return
        spec: dict[str, Any] = {
            "capacity": {"storage": str(claim.request)},
            "accessModes": sorted(claim.access_modes),
            "volumeMode": claim.volume_mode,
            "storageClassName": claim.storage_class,
            "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
            "csi": {"driver": provisioner, "volumeHandle": pv_name},
            "claimRef": {
                "apiVersion": "v1",
                "kind": CLAIM,
                "namespace": ns,
                "name": name,
                "uid": claim.uid,
            },
        }
        if claim.provisioning:
            node = self._store.try_get("Node", "", claim.selected_node)
            host = claim.selected_node
            if node is not None:
                host = (node["metadata"].get("labels") or {}).get(HOSTNAME, host)
            spec["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": HOSTNAME, "operator": "In", "values": [host]}
                            ]
                        }
                    ]
                }
            }
        self._store.create(
            {
                "apiVersion": "v1",
                "kind": VOLUME,
                "metadata": {"name": pv_name, "annotations": {PROVISIONED_BY: provisioner}},
                "spec": spec,
            }
        )

    # Writes ---------------------------------------------------------------------------

    def _phase(self, kind: str, ns: str, name: str, obj: Mapping[str, Any], phase: str) -> None:
        if (obj.get("status") or {}).get("phase") != phase:
            self._store.patch(kind, ns, name, {"status": {"phase": phase}}, subresource="status")

    def _drop_finalizer(
        self, kind: str, ns: str, name: str, obj: Mapping[str, Any], finalizer: str
    ) -> None:
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if finalizer in finalizers:
            finalizers.remove(finalizer)
            self._store.patch(kind, ns, name, {"metadata": {"finalizers": finalizers or None}})
