"""The embedded API server's storage: API objects in memory with etcd-like semantics (layer 4).

:class:`ObjectStore` keeps plain JSON dicts in Kubernetes shape, keyed by kind, namespace
and name, and applies writes with the semantics of the Kubernetes API server:

* objects kept by *kind key* (:func:`~scheduler.api.group_apis.kind_key`): the kind,
  or ``Kind.group`` for the kinds of other schedulers' APIs (four APIs have a
  ``PodGroup``), which every method taking a ``kind`` expects;
* one global integer resourceVersion (etcd's revision), bumped by every write and written
  into ``metadata.resourceVersion`` as a string; a write that changes nothing bumps nothing;
* ``create`` / ``replace`` / ``patch`` (merge and strategic) / ``delete`` with
  NotFound, AlreadyExists and Conflict (stale resourceVersion, uid precondition);
* the status subresource: status is written only through it, and only status through it;
* graceful deletion of bound pods (``deletionTimestamp``), finalizers, ``bind`` (the
  Binding subresource) and ``evict`` (the Eviction API, refused by PodDisruptionBudgets);
* watch: every write's event recorded and delivered by its :class:`~scheduler.sim.
  watch_hub.WatchHub` (synchronous fan-out to subscribers in commit order, a bounded
  history for resuming, GoneError when too old, an async iterator with bookmarks).

The store keeps the objects, the revisions and the watches; the rules by which the API
server shapes what a write stores are pure functions of their own:
:mod:`~scheduler.sim.object_rules` for every object (scopes, the metadata set on create
and kept on update, preconditions, finalizers), :mod:`~scheduler.sim.pod_rules` for pods
(immutable fields, binding, graceful deletion, the eviction's mark).

Objects are copy-on-write. The store never mutates a dict after handing it out: every
write builds new dicts along the changed path and shares the rest. Callers must treat
every object they receive (from reads, write results and watch events) as read-only.
This is what makes a 10,000-pod run cheap: a pod status patch copies a handful of small
dicts, not the pod.

Deliberate differences from a real API server: ``create`` keeps a ``status`` given in the
object (a scenario may describe pods already running); strategic merge patch works for
every kind and uses field names for merge keys (see :mod:`.patch`); the store is not
thread-safe and is used from one event loop (or no loop at all: every method except
:meth:`ObjectStore.watch` is synchronous).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from typing import Any, Final, Literal, NoReturn

from scheduler.api.errors import (
    AlreadyExistsError,
    ConflictError,
    FieldCause,
    InvalidObjectError,
    NotFoundError,
)
from scheduler.api.group_apis import kind_key
from scheduler.sim import pod_rules
from scheduler.sim.api_conventions import plural, rfc3339
from scheduler.sim.budgets import check_budgets
from scheduler.sim.dra_admission import check_claim_status, check_pod_status
from scheduler.sim.object_rules import (
    DEFAULT_CLUSTER_SCOPED,
    DEFAULT_STATUS_SUBRESOURCE,
    check_delete_preconditions,
    check_uid,
    check_update_preconditions,
    finalized,
    generated_suffix,
    held_by_finalizers,
    new_object,
    updated_object,
)
from scheduler.sim.patch import clone, merge_patch, strategic_merge_patch
from scheduler.sim.watch_hub import ApiObject, EventType, WatchEvent, WatchHub

__all__ = [
    "DEFAULT_CLUSTER_SCOPED",
    "DEFAULT_STATUS_SUBRESOURCE",
    "ApiObject",
    "EventType",
    "ObjectStore",
    "PatchType",
    "WatchEvent",
]

PatchType = Literal["merge", "strategic"]
_EMPTY: Final[Mapping[Any, Any]] = {}


class ObjectStore:
    """API objects in memory, with the API server's write semantics and watch.

    ``wall`` gives the Unix time written into timestamps (a ``Clock.wall``).
    ``validator``, if given, is called with the complete object on every create,
    replace and patch (not on status writes through :meth:`bind`, nor on deletion
    marks); it returns the (possibly defaulted) object or raises InvalidObjectError, and
    decides itself which kinds it cares about. ``history`` bounds the events kept for
    :meth:`events_since` and resumed watches. ``cluster_scoped`` and
    ``status_subresource`` name the kinds without a namespace and the kinds with a
    status subresource.

    All methods are synchronous and atomic: a write commits, then its watch event is
    delivered to every subscriber before the method returns (except for writes made
    from inside a subscriber callback, whose events are delivered right after the
    current event's fan-out, so that every subscriber sees commit order).
    """

    def __init__(
        self,
        wall: Callable[[], float],
        *,
        validator: Callable[[ApiObject], ApiObject] | None = None,
        history: int = 100_000,
        cluster_scoped: Collection[str] = DEFAULT_CLUSTER_SCOPED,
        status_subresource: Collection[str] = DEFAULT_STATUS_SUBRESOURCE,
    ) -> None:
        self._wall = wall
        self._validator = validator
        self._cluster_scoped = frozenset(cluster_scoped)
        self._status_kinds = frozenset(status_subresource)
        self._objects: dict[str, dict[tuple[str, str], ApiObject]] = {}
        self._rv = 0
        self._uids = 0
        self._names = 0
        self._watches = WatchHub(history)

    # ----------------------------------------------------------------- reads

    @property
    def resource_version(self) -> int:
        """The revision of the last write (0 before any)."""
        return self._rv

    def is_cluster_scoped(self, kind: str) -> bool:
        return kind in self._cluster_scoped

    def has_status_subresource(self, kind: str) -> bool:
        return kind in self._status_kinds

    def get(self, kind: str, namespace: str, name: str) -> ApiObject:
        """The object; NotFoundError if absent. ``namespace`` is ignored for cluster-scoped
        kinds."""
        obj = self._objects.get(kind, _EMPTY).get((self._ns(kind, namespace), name))
        if obj is None:
            raise self._not_found(kind, name)
        return obj

    def try_get(self, kind: str, namespace: str, name: str) -> ApiObject | None:
        """The object, or None if absent."""
        return self._objects.get(kind, _EMPTY).get((self._ns(kind, namespace), name))

    def list(self, kind: str, namespace: str | None = None) -> tuple[list[ApiObject], int]:
        """Objects of ``kind`` (in ``namespace``, or all) sorted by namespace then name,
        and the current resourceVersion, to start a watch from."""
        bucket = self._objects.get(kind)
        if not bucket:
            return [], self._rv
        if namespace is None or kind in self._cluster_scoped:
            keys = sorted(bucket)
        else:
            keys = sorted(k for k in bucket if k[0] == namespace)
        return [bucket[k] for k in keys], self._rv

    def count(self, kind: str) -> int:
        """How many objects of ``kind`` exist (cheap)."""
        return len(self._objects.get(kind, _EMPTY))

    def kinds(self) -> builtins.list[str]:
        """Kinds with at least one object, sorted."""
        return sorted(k for k, bucket in self._objects.items() if bucket)

    # ----------------------------------------------------------------- writes

    def create(self, obj: Mapping[str, Any], *, restore: bool = False) -> ApiObject:
        """Store a new object; returns it as stored. Not idempotent.

        Copies ``obj`` (the caller keeps its own). Sets ``metadata.uid`` (deterministic),
        ``resourceVersion``, ``creationTimestamp``, ``generation`` = 1, the namespace
        (``default`` if missing, removed for cluster-scoped kinds), a name from
        ``generateName`` if there is no name, and ``status.phase: Pending`` for a Pod
        without a phase. Raises InvalidObjectError (no kind or name, or the validator
        refuses) and AlreadyExistsError.

        ``restore``: the object comes back as it was in a cluster (a scenario, which may
        be a cluster's snapshot: ``sluice simulate``), so the ``uid``,
        ``creationTimestamp``, ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` it
        carries are kept (the scheduler orders jobs by creation, DRA claims name their
        pods by uid, a pod being deleted is still going); an API client's create never
        restores (the API server sets them itself).
        """
        kind, key, new, kept = new_object(
            obj,
            cluster_scoped=self._cluster_scoped,
            restore=restore,
            suffix=self._generated_suffix,
            now=rfc3339(self._wall()),
        )
        meta = new["metadata"]
        if self._validator is not None:
            new = dict(self._validator(new))
            meta = dict(new["metadata"])
            new["metadata"] = meta
        bucket = self._objects.setdefault(kind, {})
        if key in bucket:
            name = key[1]
            raise AlreadyExistsError(
                f'{plural(kind)} "{name}" already exists', kind=kind, name=name
            )
        self._uids += 1
        n = self._uids
        meta["uid"] = f"00000000-0000-4000-8000-{n:012x}"
        meta["creationTimestamp"] = rfc3339(self._wall())
        meta["generation"] = 1
        meta.update(kept)
        return self._commit("ADDED", kind, key, bucket, new)

    def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> ApiObject:
        """Update an object as a whole (PUT); returns it as stored.

        ``metadata.resourceVersion``, if given, must be the current one (ConflictError
        otherwise), as must ``metadata.uid``. Server-owned metadata is kept from the
        stored object. For kinds with a status subresource, ``status`` is ignored unless
        ``subresource="status"``, which applies only ``status``. A replace that changes
        nothing returns the stored object without bumping the resourceVersion.
        Raises NotFoundError, ConflictError, InvalidObjectError.
        """
        new: ApiObject = clone(obj)
        kind = new.get("kind")
        meta = new.get("metadata")
        if not isinstance(kind, str) or not isinstance(meta, dict) or not meta.get("name"):
            raise InvalidObjectError(
                "replace needs kind and metadata.name",
                causes=(FieldCause("metadata.name", "Required value"),),
            )
        kind = kind_key(str(new.get("apiVersion") or ""), kind)
        bucket, key, old = self._stored(kind, meta.get("namespace") or "default", meta["name"])
        check_update_preconditions(kind, old, meta.get("uid"), meta.get("resourceVersion"))
        if subresource == "status" and kind in self._status_kinds:
            return self._write_status(kind, key, bucket, old, new.get("status"))
        if subresource is not None:
            self._refuse_subresource(kind, meta["name"], subresource)
        return self._update(kind, key, bucket, old, new)

    def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> ApiObject:
        """Apply a merge patch (RFC 7386) or a strategic merge patch; returns the object.

        With ``subresource="status"`` only the patch's ``status`` applies (NotFoundError
        for kinds without a status subresource); without it, ``status`` changes are
        ignored for kinds that have one. ``metadata.resourceVersion`` and
        ``metadata.uid`` in the patch are preconditions (ConflictError). A patch that
        changes nothing returns the stored object and bumps nothing.
        """
        bucket = self._objects.get(kind)
        key = (self._ns(kind, namespace), name)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, name)
        if patch_type == "merge":
            apply: Callable[[Any, Any], Any] = merge_patch
        elif patch_type == "strategic":
            apply = strategic_merge_patch
        else:
            raise InvalidObjectError(f"unsupported patch type {patch_type!r}", kind=kind, name=name)
        pmeta = patch.get("metadata")
        if isinstance(pmeta, Mapping):
            check_update_preconditions(kind, old, pmeta.get("uid"), pmeta.get("resourceVersion"))
        if subresource == "status" and kind in self._status_kinds:  # the hot path
            if "status" not in patch:
                return old
            old_status = old.get("status")
            return self._write_status(kind, key, bucket, old, apply(old_status, patch["status"]))
        if subresource is not None:
            self._refuse_subresource(kind, name, subresource)
        new = apply(old, patch)
        if not isinstance(new, dict):
            raise InvalidObjectError("a patch must leave an object", kind=kind, name=name)
        return self._update(kind, key, bucket, old, new)

    def delete(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: int | str | None = None,
    ) -> ApiObject:
        """Delete an object; returns its state after the call.

        ``uid`` and ``resource_version`` are preconditions (ConflictError). A bound Pod
        that has not finished is deleted gracefully (MODIFIED: :func:`~scheduler.sim.
        pod_rules.deletion`); the kubelet removes it later with :meth:`finalize_delete`.
        Anything else is removed at once (DELETED), unless ``metadata.finalizers``
        remain: it is then marked terminating and removed when the last finalizer goes.
        Raises NotFoundError, ConflictError.
        """
        bucket = self._objects.get(kind)
        key = (self._ns(kind, namespace), name)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, name)
        if uid or resource_version not in (None, ""):
            check_delete_preconditions(kind, name, old["metadata"], uid, resource_version)
        if kind == "Pod":
            return self._delete_pod(key, bucket, old, grace_period_seconds)
        return self._remove(kind, key, bucket, old)

    def finalize_delete(self, kind: str, namespace: str, name: str) -> ApiObject:
        """Remove a terminating object (its grace period is over); returns its last state.

        Called by the kubelet. Raises NotFoundError, and ConflictError if the object is not
        terminating. With finalizers left, the object stays (grace set to 0) until they go.
        """
        bucket, key, old = self._stored(kind, namespace, name)
        if not old["metadata"].get("deletionTimestamp"):
            raise ConflictError(
                f'{plural(kind)} "{name}" is not being deleted', kind=kind, name=name
            )
        return self._remove(kind, key, bucket, old)

    def bind(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        uid: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> ApiObject:
        """The Binding subresource: set ``spec.nodeName`` and PodScheduled=True.

        ``annotations`` (those of the Binding object) are added to the pod. Not
        idempotent. Raises NotFoundError; ConflictError when the pod is already assigned
        to a node, is being deleted, still has scheduling gates, or has another uid.
        """
        bucket = self._objects.get("Pod")
        key = (namespace, name)
        pod = bucket.get(key) if bucket else None
        if bucket is None or pod is None:
            raise self._not_found("Pod", name)
        if uid:
            check_uid("Pod", name, pod["metadata"], uid)
        new = pod_rules.bound_pod(pod, node, annotations, rfc3339(self._wall()))
        return self._commit("MODIFIED", "Pod", key, bucket, new)

    def evict(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> ApiObject:
        """The Eviction API: delete a pod unless a PodDisruptionBudget forbids it.

        Pending, finished and terminating pods are evicted without looking at budgets;
        any other is refused with TooManyRequestsError (naming the budget) when its
        eviction breaks a budget of its namespace (:func:`~scheduler.sim.budgets.
        check_budgets`). Then the pod gets DisruptionTarget=True (reason
        EvictionByEvictionAPI) unless it has finished, and is deleted as by
        :meth:`delete`. Returns the pod's state after.
        """
        pod = self.get("Pod", namespace, name)
        meta = pod["metadata"]
        if uid:
            check_uid("Pod", name, meta, uid)
        phase = (pod.get("status") or _EMPTY).get("phase") or "Pending"
        terminal = phase in pod_rules.TERMINAL_PHASES
        if not (terminal or phase == "Pending" or meta.get("deletionTimestamp")):
            self._check_budgets(pod, namespace)
        if not terminal:
            status = pod_rules.eviction_status(pod, rfc3339(self._wall()))
            if status is not None:
                bucket = self._objects["Pod"]
                pod = self._commit(
                    "MODIFIED", "Pod", (namespace, name), bucket, {**pod, "status": status}
                )
        return self.delete("Pod", namespace, name, grace_period_seconds=grace_period_seconds)

    # ----------------------------------------------------------------- watch

    def subscribe(
        self, callback: Callable[[WatchEvent], None], kinds: Collection[str] | None = None
    ) -> Callable[[], None]:
        """:meth:`WatchHub.subscribe <scheduler.sim.watch_hub.WatchHub.subscribe>`."""
        return self._watches.subscribe(callback, kinds)

    def events_since(
        self, kind: str, resource_version: int, namespace: str | None = None
    ) -> builtins.list[WatchEvent]:
        """Events of ``kind`` (in ``namespace``) with a revision above ``resource_version``,
        oldest first, from the bounded history. GoneError if older events were dropped."""
        ns = None if namespace is None else self._ns(kind, namespace)
        return self._watches.events_since(kind, resource_version, ns)

    def watch(
        self,
        kind: str,
        *,
        namespace: str | None = None,
        resource_version: int | None = None,
        bookmark_interval: float | None = None,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream the changes of ``kind`` (in ``namespace``), as a watch of the API does.

        With ``resource_version``, first the events after it from history (GoneError,
        raised at the first iteration, if it is too old); without it, an ADDED event
        for every current object (a watch without resourceVersion). Then live events,
        and bookmarks (:meth:`WatchHub.stream <scheduler.sim.watch_hub.WatchHub.stream>`).
        """
        ns = None if namespace is None else self._ns(kind, namespace)

        def initial() -> builtins.list[WatchEvent]:
            if resource_version is None:
                return [
                    WatchEvent("ADDED", kind, o, int(o["metadata"]["resourceVersion"]))
                    for o in self.list(kind, ns)[0]
                ]
            return self._watches.events_since(kind, resource_version, ns)

        return self._watches.stream(
            kind, ns, initial, lambda: self._rv, bookmark_interval=bookmark_interval
        )

    # ----------------------------------------------------------------- internals

    def _ns(self, kind: str, namespace: str | None) -> str:
        return "" if kind in self._cluster_scoped else (namespace or "")

    def _stored(
        self, kind: str, namespace: str, name: str
    ) -> tuple[dict[tuple[str, str], ApiObject], tuple[str, str], ApiObject]:
        """The bucket of ``kind``, the key and the object stored there; NotFoundError."""
        bucket = self._objects.get(kind)
        key = (self._ns(kind, namespace), name)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, name)
        return bucket, key, old

    def _refuse_subresource(self, kind: str, name: str, subresource: str) -> NoReturn:
        """NotFoundError for a write to a subresource ``kind`` does not have."""
        if subresource != "status":
            raise NotFoundError(f"unknown subresource {subresource!r}", kind=kind, name=name)
        raise NotFoundError(
            f"{plural(kind)}/status: the server could not find the requested resource",
            kind=kind,
            name=name,
        )

    def _not_found(self, kind: str, name: str) -> NotFoundError:
        return NotFoundError(f'{plural(kind)} "{name}" not found', kind=kind, name=name)

    def _generated_suffix(self) -> str:
        self._names += 1
        return generated_suffix(self._names)

    def _write_status(
        self,
        kind: str,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        old: ApiObject,
        status: Any,
    ) -> ApiObject:
        """Commit ``old`` with ``status`` replaced (the hot path of status patches)."""
        if status == old.get("status"):
            return old
        new = dict(old)
        if status is None:
            new.pop("status", None)
        else:
            new["status"] = status
        if kind == "ResourceClaim":
            check_claim_status(old, new)
        elif kind == "Pod":
            check_pod_status(new)
        if self._validator is not None:
            new = dict(self._validator(new))
        return self._commit("MODIFIED", kind, key, bucket, new)

    def _update(
        self,
        kind: str,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        old: ApiObject,
        new: ApiObject,
    ) -> ApiObject:
        """Commit ``new`` in place of ``old`` for a write of the main resource."""
        updated = updated_object(kind, old, new, status_subresource=kind in self._status_kinds)
        if updated is None:
            return old
        if self._validator is not None:
            updated = dict(self._validator(updated))
        if finalized(updated):
            return self._commit("DELETED", kind, key, bucket, updated)
        return self._commit("MODIFIED", kind, key, bucket, updated)

    def _delete_pod(
        self,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        pod: ApiObject,
        grace_arg: int | None,
    ) -> ApiObject:
        what = pod_rules.deletion(pod, grace_arg, self._wall())
        if what.remove:
            return self._remove("Pod", key, bucket, pod)
        if what.metadata is None:
            return pod
        return self._commit("MODIFIED", "Pod", key, bucket, {**pod, "metadata": what.metadata})

    def _remove(
        self,
        kind: str,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        old: ApiObject,
    ) -> ApiObject:
        """Remove at once, or, with finalizers left, mark terminating with grace 0."""
        if not old["metadata"].get("finalizers"):
            return self._commit("DELETED", kind, key, bucket, dict(old))
        held = held_by_finalizers(old, rfc3339(self._wall()))
        if held is None:
            return old
        return self._commit("MODIFIED", kind, key, bucket, held)

    def _check_budgets(self, pod: ApiObject, namespace: str) -> None:
        budgets = self._objects.get("PodDisruptionBudget")
        if budgets:
            check_budgets(
                pod,
                [
                    ((ns, name), pdb)
                    for (ns, name), pdb in sorted(budgets.items())
                    if ns == namespace
                ],
                lambda: self.list("Pod", namespace)[0],
            )

    def _commit(
        self,
        type_: EventType,
        kind: str,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        obj: ApiObject,
    ) -> ApiObject:
        """Give ``obj`` (a fresh dict owned by this write) the next revision, store it (or
        remove it, for DELETED), record and deliver the event."""
        self._rv += 1
        rv = self._rv
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = str(rv)
        obj["metadata"] = meta
        if type_ == "DELETED":
            del bucket[key]
        else:
            bucket[key] = obj
        self._watches.record(WatchEvent(type_, kind, obj, rv))
        return obj
