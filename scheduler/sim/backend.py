"""The scheduler's ports implemented over the embedded cluster (layer 4).

:class:`SimBackend` is to the embedded cluster what ``scheduler.kube`` is to a real API
server: it implements ``Binder``, ``Evictor``, ``StatusWriter``, ``EventRecorder``, ``ClaimWriter``
and ``VolumeWriter`` of
:mod:`scheduler.ports` on an :class:`~scheduler.sim.store.ObjectStore`. Every call but
``record`` first goes through the :class:`~scheduler.sim.faults.FaultInjector` for its
kind (latency on the simulation clock, then maybe an injected ServerError), then applies
to the store (after which an injected lost reply may still raise AmbiguousError).
Observers see every call as an :class:`ApiCall` once it has finished, which is how a
simulation builds its timeline.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, TypeVar

from scheduler.api.dra.codec import (
    deallocate_patch,
    drop_finalizer_patch,
    extended_claim_object,
    finalizer_patch,
    reserve_patch,
    reserved_uids,
    unreserve_patch,
)
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import ApiError
from scheduler.api.volumes.prebind import ClaimTarget
from scheduler.api.volumes.volume_patches import (
    VolumeState,
    claim_ref_patch,
    selected_node_patch,
    volume_state,
)
from scheduler.ports import ClaimState, Clock, Event, EvictionMode, ObjectRef, PodState
from scheduler.sim.api_conventions import rfc3339_micro
from scheduler.sim.faults import FaultInjector, LostReply
from scheduler.sim.store import ApiObject, ObjectStore

__all__ = ["ApiCall", "EvictionMode", "SimBackend"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_EVENT_CACHE_SIZE: Final[int] = 4096


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One finished call to the embedded cluster, as observers see it.

    ``kind`` is the call kind (``bind``, ``delete``, ``evict``, ``patch``, ``create``, or
    ``event`` for recorded events); ``ref`` the object; ``node`` the node bound to (bind),
    the node the pod was on (delete, evict), or the node a claim is annotated with (the
    patch of a claim's selected node); ``ok`` and ``error`` (the message of the
    ApiError raised) the outcome as the caller saw it; ``applied`` whether the call took
    effect in the store (it differs from ``ok`` when an injected lost reply hid a
    success); ``at`` the clock time the call finished.
    """

    kind: str
    ref: ObjectRef
    node: str | None
    ok: bool
    error: str | None
    at: float
    applied: bool = False


class SimBackend:
    """Binder, Evictor, StatusWriter and EventRecorder over the embedded cluster.

    ``eviction_mode`` chooses how :meth:`evict` removes a pod: ``delete`` (a DELETE
    guarded by the pod's uid, call kind ``delete``) or ``evict`` (the Eviction API, which
    PodDisruptionBudgets can refuse, call kind ``evict``). Each call makes one attempt
    and raises only ApiError subclasses, as the ports require. Used from one event loop.
    """

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        faults: FaultInjector,
        *,
        eviction_mode: EvictionMode = "delete",
        reporting_controller: str = "sluice",
        reporting_instance: str = "sluice-sim",
    ) -> None:
        if eviction_mode not in ("delete", "evict"):
            raise ValueError(f"eviction_mode must be 'delete' or 'evict', not {eviction_mode!r}")
        self.store = store
        self.clock = clock
        self.faults = faults
        self.eviction_mode: EvictionMode = eviction_mode
        self._controller = reporting_controller
        self._instance = reporting_instance
        self._observers: list[Callable[[ApiCall], None]] = []
        self._event_counter = 0
        self._event_names: OrderedDict[tuple[Any, ...], tuple[str, str]] = OrderedDict()

    # ----------------------------------------------------------------- observers

    def add_observer(self, fn: Callable[[ApiCall], None]) -> Callable[[], None]:
        """Call ``fn`` after every call (success or failure); returns the remover.

        Called synchronously, in the task that made the call, before the call returns or
        raises. An exception in ``fn`` is logged and otherwise ignored.
        """
        self._observers = [*self._observers, fn]

        def remove() -> None:
            self._observers = [o for o in self._observers if o is not fn]

        return remove

    def _notify(self, call: ApiCall) -> None:
        for fn in self._observers:
            try:
                fn(call)
            except Exception:
                log.exception("API call observer %r failed", fn)

    async def _call(self, kind: str, ref: ObjectRef, node: str | None, op: Callable[[], T]) -> T:
        try:
            async with self.faults.call(kind):
                result = op()
        except ApiError as exc:
            applied = isinstance(exc, LostReply) and exc.applied
            self._notify(ApiCall(kind, ref, node, False, str(exc), self.clock.now(), applied))
            raise
        self._notify(ApiCall(kind, ref, node, True, None, self.clock.now(), True))
        return result

    # ----------------------------------------------------------------- Binder

    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        """Bind ``pod`` to ``node`` (call kind ``bind``), after a metadata merge patch of
        ``annotations`` if any (call kind ``patch``; a failure there skips the bind).

        Guarded by ``pod.uid`` when set. Not idempotent: ConflictError if already bound.
        """
        ns, name, uid = pod.namespace, pod.name, pod.uid or None
        if annotations:
            meta: dict[str, Any] = {"annotations": dict(annotations)}
            if uid:
                meta["uid"] = uid
            await self._call(
                "patch", pod, None, lambda: self.store.patch("Pod", ns, name, {"metadata": meta})
            )
        await self._call("bind", pod, node, lambda: self.store.bind(ns, name, node, uid=uid))

    # ----------------------------------------------------------------- Evictor

    async def evict(self, pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        """Delete (mode ``delete``) or evict (mode ``evict``) ``pod``, guarded by its uid.

        NotFoundError: already gone. TooManyRequestsError: a PodDisruptionBudget refused
        (mode ``evict`` only). ConflictError: the uid no longer matches (a new pod).
        """
        ns, name, uid = pod.namespace, pod.name, pod.uid or None
        current = self.store.try_get("Pod", ns, name)
        node = ((current.get("spec") or {}).get("nodeName") or None) if current else None
        if self.eviction_mode == "evict":
            await self._call(
                "evict",
                pod,
                node,
                lambda: self.store.evict(
                    ns, name, uid=uid, grace_period_seconds=grace_period_seconds
                ),
            )
        else:
            await self._call(
                "delete",
                pod,
                node,
                lambda: self.store.delete(
                    "Pod", ns, name, grace_period_seconds=grace_period_seconds, uid=uid
                ),
            )

    # ----------------------------------------------------------------- StatusWriter

    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        """Strategic-merge ``patch`` into the pod's status (call kind ``patch``).

        ``patch`` is the status content (``{"conditions": [...]}``, merged by type); a
        mapping whose only key is ``status`` is taken as a whole-object patch instead.
        Guarded by ``pod.uid`` when set. Idempotent.
        """
        status = patch["status"] if set(patch) == {"status"} else patch
        body: dict[str, Any] = {"status": dict(status)}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        await self._call(
            "patch",
            pod,
            None,
            lambda: self.store.patch(
                "Pod",
                pod.namespace,
                pod.name,
                body,
                patch_type="strategic",
                subresource="status",
            ),
        )

    async def patch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], *, resource_version: str = ""
    ) -> str:
        """Merge-patch ``status`` into ``ref``'s status subresource, or into the object for
        a kind without one (call kind ``patch``); returns its new resourceVersion.

        Guarded by ``ref.uid`` when set, and by ``resource_version`` when given
        (ConflictError if the object is at another). Idempotent.
        """
        body: dict[str, Any] = {"status": dict(status)}
        meta: dict[str, Any] = {}
        if ref.uid:
            meta["uid"] = ref.uid
        if resource_version:
            meta["resourceVersion"] = resource_version
        if meta:
            body["metadata"] = meta
        kind = ref.kind_key
        # A kind without a status subresource (Volcano's PodGroup) has its status patched
        # with the object, as its own scheduler does.
        sub = "status" if self.store.has_status_subresource(kind) else None
        stored = await self._call(
            "patch",
            ref,
            None,
            lambda: self.store.patch(
                kind, ref.namespace, ref.name, body, patch_type="merge", subresource=sub
            ),
        )
        return str((stored.get("metadata") or {}).get("resourceVersion") or "")

    # ----------------------------------------------------------------- PodReader

    async def read_pod(self, pod: ObjectRef) -> PodState | None:
        """The pod as the store has it: where it is bound, whether it is being deleted;
        None when it is gone or has another uid. Reads take no latency and never fail
        (faults are injected into writes); they are not shown to observers."""
        obj = self.store.try_get("Pod", pod.namespace, pod.name)
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        if pod.uid and meta.get("uid") != pod.uid:
            return None
        spec = obj.get("spec") or {}
        return PodState(str(spec.get("nodeName") or ""), bool(meta.get("deletionTimestamp")))

    # ----------------------------------------------------------------- ClaimWriter

    async def _patch_claim(
        self,
        ref: ObjectRef,
        body: dict[str, Any],
        *,
        status: bool = True,
        patch_type: Literal["merge", "strategic"] = "strategic",
    ) -> None:
        """One patch of a ResourceClaim (its status subresource unless ``status`` is
        false), call kind ``patch``."""
        sub = "status" if status else None
        await self._call(
            "patch",
            ref,
            None,
            lambda: self.store.patch(
                "ResourceClaim",
                ref.namespace,
                ref.name,
                body,
                patch_type=patch_type,
                subresource=sub,
            ),
        )

    async def create_claim(self, binding: ClaimBinding) -> ClaimBinding:
        """Create the extended-resource claim of ``binding`` (call kind ``create``)."""
        obj = extended_claim_object(binding)
        ref = ObjectRef("ResourceClaim", binding.namespace, binding.pod_name)
        created = await self._call("create", ref, None, lambda: self.store.create(obj))
        meta = created["metadata"]
        return replace(binding, name=str(meta["name"]), uid=str(meta["uid"]))

    async def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        """Remove the claim's finalizer (call kind ``patch``), then delete it (``delete``),
        both guarded by ``uid``."""
        ref = ObjectRef("ResourceClaim", namespace, name, uid)
        await self._patch_claim(ref, drop_finalizer_patch(uid), status=False)
        await self._call(
            "delete",
            ref,
            None,
            lambda: self.store.delete("ResourceClaim", namespace, name, uid=uid),
        )

    async def reserve_claim(self, binding: ClaimBinding) -> None:
        """Write ``binding`` to its ResourceClaim (one patch for the finalizer when asked,
        one for the status): see :class:`~scheduler.ports.ClaimWriter`."""
        ref = ObjectRef("ResourceClaim", binding.namespace, binding.name, binding.uid)
        if binding.add_finalizer:
            await self._patch_claim(ref, finalizer_patch(binding), status=False)
        await self._patch_claim(ref, reserve_patch(binding))

    async def unreserve_claim(self, binding: ClaimBinding) -> None:
        """Remove ``binding``'s pod from the claim's ``reservedFor``."""
        ref = ObjectRef("ResourceClaim", binding.namespace, binding.name, binding.uid)
        await self._patch_claim(ref, unreserve_patch(binding))

    async def deallocate_claim(
        self, namespace: str, name: str, uid: str, resource_version: str
    ) -> None:
        """Clear the claim's allocation, guarded by its uid and resourceVersion."""
        ref = ObjectRef("ResourceClaim", namespace, name, uid)
        await self._patch_claim(ref, deallocate_patch(uid, resource_version), patch_type="merge")

    async def read_claim(self, namespace: str, name: str) -> ClaimState | None:
        """The claim as the store has it (no latency, no faults, as :meth:`read_pod`)."""
        obj = self.store.try_get("ResourceClaim", namespace, name)
        return None if obj is None else ClaimState(*reserved_uids(obj))

    # ----------------------------------------------------------------- VolumeWriter

    async def bind_volume(
        self, volume: str, claim: ClaimTarget, resource_version: str, *, by_controller: bool
    ) -> str:
        """Write ``claim`` into PV ``volume``'s ``claimRef`` at ``resource_version`` (call
        kind ``patch``): see :class:`~scheduler.ports.VolumeWriter`."""
        ref = ObjectRef("PersistentVolume", "", volume)
        body = claim_ref_patch(claim, resource_version, by_controller=by_controller)
        obj = await self._call(
            "patch", ref, None, lambda: self.store.patch("PersistentVolume", "", volume, body)
        )
        return volume_state(obj).resource_version

    async def select_node(self, claim: ClaimTarget, node: str, resource_version: str) -> str:
        """Annotate ``claim`` with ``node`` at ``resource_version`` (call kind ``patch``)."""
        ref = ObjectRef("PersistentVolumeClaim", claim.namespace, claim.name, claim.uid)
        body = selected_node_patch(claim, node, resource_version)
        obj = await self._call(
            "patch",
            ref,
            node,
            lambda: self.store.patch("PersistentVolumeClaim", claim.namespace, claim.name, body),
        )
        return volume_state(obj).resource_version

    async def read_volume(self, name: str) -> VolumeState | None:
        """The PV as the store has it (no latency, no faults, as :meth:`read_pod`)."""
        obj = self.store.try_get("PersistentVolume", "", name)
        return None if obj is None else volume_state(obj)

    async def read_volume_claim(self, namespace: str, name: str) -> VolumeState | None:
        """The claim as the store has it (no latency, no faults, as :meth:`read_pod`)."""
        obj = self.store.try_get("PersistentVolumeClaim", namespace, name)
        return None if obj is None else volume_state(obj)

    # ----------------------------------------------------------------- other calls

    async def create(self, obj: Mapping[str, Any]) -> ApiObject:
        """Create ``obj`` in the store (call kind ``create``); returns it as stored."""
        meta = obj.get("metadata") or {}
        ref = ObjectRef(
            str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", ""))
        )
        return await self._call("create", ref, None, lambda: self.store.create(obj))

    # ----------------------------------------------------------------- EventRecorder

    def record(self, event: Event) -> None:
        """Store ``event`` as an ``events.k8s.io/v1`` Event, at once and without faults.

        Named ``<regarding name>.<counter>`` in the regarding object's namespace
        (``default`` for cluster-scoped objects). A repeat of the same regarding object,
        type, reason and message updates the existing Event's ``series`` (count and
        lastObservedTime) instead of creating another. Never raises.
        """
        try:
            self._record(event)
        except Exception as exc:
            log.warning("dropping event %s for %s: %s", event.reason, event.regarding.key, exc)
            self._notify(ApiCall("event", event.regarding, None, False, str(exc), self.clock.now()))
        else:
            self._notify(ApiCall("event", event.regarding, None, True, None, self.clock.now()))

    def _record(self, event: Event) -> None:
        reg = event.regarding
        namespace = reg.namespace or "default"
        now = rfc3339_micro(self.clock.wall())
        key = (reg.kind, reg.namespace, reg.name, reg.uid, event.type, event.reason, event.message)
        known = self._event_names.get(key)
        if known is not None:
            existing = self.store.try_get("Event", *known)
            if existing is not None:
                count = int((existing.get("series") or {}).get("count") or 1) + 1
                self.store.patch(
                    "Event",
                    *known,
                    {"series": {"count": count, "lastObservedTime": now}},
                )
                self._event_names.move_to_end(key)
                return
        while True:
            self._event_counter += 1
            name = f"{reg.name}.{self._event_counter}"
            if self.store.try_get("Event", namespace, name) is None:
                break
        obj: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": now,
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": event.action,
            "reason": event.reason,
            "note": event.message,
            "type": event.type,
            "regarding": _ref_json(reg),
        }
        if event.related is not None:
            obj["related"] = _ref_json(event.related)
        self.store.create(obj)
        self._event_names[key] = (namespace, name)
        if len(self._event_names) > _EVENT_CACHE_SIZE:
            self._event_names.popitem(last=False)


def _ref_json(ref: ObjectRef) -> dict[str, str]:
    out = {"kind": ref.kind, "name": ref.name}
    if ref.api_version:
        out["apiVersion"] = ref.api_version
    if ref.namespace:
        out["namespace"] = ref.namespace
    if ref.uid:
        out["uid"] = ref.uid
    return out
