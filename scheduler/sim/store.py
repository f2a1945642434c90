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
from typing import Any, Final, Literal

from scheduler.api.errors import (
    AlreadyExistsError,
    ConflictError,
    FieldCause,
    InvalidObjectError,
    NotFoundError,
)
from scheduler.api.group_apis import KUBERNETES, SCHEDULER_PLUGINS, VOLCANO, kind_key
from scheduler.sim import pod_rules
from scheduler.sim.budgets import check_budgets
from scheduler.sim.dra import CLAIM_KINDS, check_claim_status, default_object
from scheduler.sim.objects import parse_rfc3339, plural, rfc3339, with_condition
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

#: Kinds without a namespace, unless the store is told otherwise (by kind key:
#: :func:`~scheduler.api.group_apis.kind_key`).
DEFAULT_CLUSTER_SCOPED: Final[frozenset[str]] = frozenset(
    {
        "Node",
        "Queue",
        "Topology",
        "PriorityClass",
        VOLCANO.queue_key,
        "CustomResourceDefinition",
        "APIService",
        "ResourceSlice",
        "DeviceClass",
    }
)
#: Kinds whose status is written only through the status subresource (Volcano's
#: PodGroup has none: its status is written with the object).
DEFAULT_STATUS_SUBRESOURCE: Final[frozenset[str]] = frozenset(
    {
        "Pod",
        "Node",
        "PodGroup",
        "Queue",
        "Topology",
        VOLCANO.queue_key,
        SCHEDULER_PLUGINS.pod_group_key,
        KUBERNETES.pod_group_key,
        "CustomResourceDefinition",
        "APIService",
        "ResourceClaim",
    }
)

#: Metadata the server owns: kept from the stored object on replace and patch.
_SYSTEM_METADATA: Final[tuple[str, ...]] = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
_NOT_SPEC: Final[frozenset[str]] = frozenset({"metadata", "status", "kind", "apiVersion"})
_TERMINAL_PHASES: Final[frozenset[str]] = frozenset({"Succeeded", "Failed"})
_DEFAULT_POD_GRACE: Final[int] = 30
_NAME_ALPHABET: Final[str] = "bcdfghjklmnpqrstvwxz2456789"
_EMPTY: Final[Mapping[Any, Any]] = {}


# --------------------------------------------------------------------------- the store


RESTORED = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
"""Metadata a restored object keeps (:meth:`ObjectStore.create` with ``restore``)."""


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
        new: ApiObject = clone(obj)
        kind = new.get("kind")
        if not isinstance(kind, str) or not kind:
            raise InvalidObjectError(
                "Object 'Kind' is missing", causes=(FieldCause("kind", "Required value"),)
            )
        kind = kind_key(str(new.get("apiVersion") or ""), kind)
        raw_meta = new.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix or not isinstance(prefix, str):
                raise InvalidObjectError(
                    f"{kind}: metadata.name: Required value",
                    kind=kind,
                    causes=(FieldCause("metadata.name", "Required value"),),
                )
            name = prefix + self._generated_suffix()
        if not isinstance(name, str):
            raise InvalidObjectError(
                f"{kind}: metadata.name: must be a string",
                kind=kind,
                causes=(FieldCause("metadata.name", "must be a string"),),
            )
        meta["name"] = name
        if kind in self._cluster_scoped:
            namespace = ""
            meta.pop("namespace", None)
        else:
            namespace = meta.get("namespace") or "default"
            meta["namespace"] = namespace
        kept = {f: meta[f] for f in RESTORED if restore and meta.get(f)}
        for f in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(f, None)
        new["metadata"] = meta
        if kind == "Pod":
            status = new.get("status")
            if not isinstance(status, dict):
                new["status"] = {"phase": "Pending"}
            elif not status.get("phase"):
                status["phase"] = "Pending"
            pod_rules.on_create(new, rfc3339(self._wall()))
        elif kind in CLAIM_KINDS:
            new = default_object(new)
        if self._validator is not None:
            new = dict(self._validator(new))
            meta = dict(new["metadata"])
            new["metadata"] = meta
        bucket = self._objects.setdefault(kind, {})
        key = (namespace, name)
        if key in bucket:
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
        namespace = self._ns(kind, meta.get("namespace") or "default")
        key = (namespace, meta["name"])
        bucket = self._objects.get(kind)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, meta["name"])
        self._check_update_preconditions(kind, old, meta.get("uid"), meta.get("resourceVersion"))
        if subresource == "status":
            if kind not in self._status_kinds:
                raise NotFoundError(
                    f"{plural(kind)}/status: the server could not find the requested resource",
                    kind=kind,
                    name=meta["name"],
                )
            return self._write_status(kind, key, bucket, old, new.get("status"))
        if subresource is not None:
            raise NotFoundError(f"unknown subresource {subresource!r}", kind=kind)
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
            self._check_update_preconditions(
                kind, old, pmeta.get("uid"), pmeta.get("resourceVersion")
            )
        if subresource == "status":
            if kind not in self._status_kinds:
                raise NotFoundError(
                    f"{plural(kind)}/status: the server could not find the requested resource",
                    kind=kind,
                    name=name,
                )
            if "status" not in patch:
                return old
            old_status = old.get("status")
            return self._write_status(kind, key, bucket, old, apply(old_status, patch["status"]))
        if subresource is not None:
            raise NotFoundError(f"unknown subresource {subresource!r}", kind=kind, name=name)
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
        that has not finished is deleted gracefully: ``deletionTimestamp`` = now + grace
        (the argument, else ``spec.terminationGracePeriodSeconds``, else 30) and
        ``deletionGracePeriodSeconds`` are set (MODIFIED); the kubelet removes it later
        with :meth:`finalize_delete`. Deleting a terminating pod again only shortens the
        grace (counted from the first deletion) and is otherwise a no-op. Grace 0, an
        unbound or finished pod, or any other kind: removed at once (DELETED), unless
        ``metadata.finalizers`` remain, in which case it is marked terminating and
        removed when the last finalizer goes. Raises NotFoundError, ConflictError.
        """
        bucket = self._objects.get(kind)
        key = (self._ns(kind, namespace), name)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, name)
        meta = old["metadata"]
        if uid and uid != meta.get("uid"):
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta.get('uid')}",
                kind=kind,
                name=name,
            )
        if resource_version not in (None, "") and str(resource_version) != meta.get(
            "resourceVersion"
        ):
            raise ConflictError(
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                kind=kind,
                name=name,
            )
        if kind == "Pod":
            return self._delete_pod(key, bucket, old, grace_period_seconds)
        return self._remove(kind, key, bucket, old)

    def finalize_delete(self, kind: str, namespace: str, name: str) -> ApiObject:
        """Remove a terminating object (its grace period is over); returns its last state.

        Called by the kubelet. Raises NotFoundError, and ConflictError if the object is not
        terminating. With finalizers left, the object stays (grace set to 0) until they go.
        """
        bucket = self._objects.get(kind)
        key = (self._ns(kind, namespace), name)
        old = bucket.get(key) if bucket else None
        if bucket is None or old is None:
            raise self._not_found(kind, name)
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
        meta = pod["metadata"]
        if uid and uid != meta.get("uid"):
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta.get('uid')}",
                kind="Pod",
                name=name,
            )
        spec = pod.get("spec") or _EMPTY
        if spec.get("nodeName"):
            raise ConflictError(
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {namespace}/{name} '
                f'is already assigned to node "{spec["nodeName"]}"',
                kind="Pod",
                name=name,
            )
        if meta.get("deletionTimestamp"):
            raise ConflictError(
                f"pod {namespace}/{name} is being deleted, cannot be assigned to a host",
                kind="Pod",
                name=name,
            )
        if spec.get("schedulingGates"):
            raise ConflictError(
                f"pod {namespace}/{name} has non-empty .spec.schedulingGates",
                kind="Pod",
                name=name,
            )
        status = pod.get("status") or _EMPTY
        now = rfc3339(self._wall())
        new = {
            **pod,
            "spec": {**spec, "nodeName": node},
            "status": {
                **status,
                "conditions": with_condition(
                    status.get("conditions"), {"type": "PodScheduled", "status": "True"}, now
                ),
            },
        }
        if annotations:
            new["metadata"] = {
                **meta,
                "annotations": {**(meta.get("annotations") or _EMPTY), **annotations},
            }
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

        Pending, finished and terminating pods are evicted without looking at budgets.
        Otherwise, for every PodDisruptionBudget of the pod's namespace whose selector
        matches the pod (a null selector matches nothing): expected = matching pods,
        healthy = those Running, Ready=True and not terminating, desired = minAvailable
        (an int or a percentage of expected, rounded up) or expected - maxUnavailable
        (ditto); allowed = healthy - desired. A healthy pod is refused with
        TooManyRequestsError (naming the budget) when allowed <= 0. An unhealthy pod is
        let go when the budget's ``unhealthyPodEvictionPolicy`` is AlwaysAllow, or (the
        default IfHealthyBudget) when healthy >= desired > 0; otherwise the same rule.
        Then the pod gets DisruptionTarget=True (reason EvictionByEvictionAPI) unless it
        has finished, and is deleted as by :meth:`delete`. Returns the pod's state after.
        """
        pod = self.get("Pod", namespace, name)
        meta = pod["metadata"]
        if uid and uid != meta.get("uid"):
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta.get('uid')}",
                kind="Pod",
                name=name,
            )
        phase = (pod.get("status") or _EMPTY).get("phase") or "Pending"
        terminal = phase in _TERMINAL_PHASES
        if not (terminal or phase == "Pending" or meta.get("deletionTimestamp")):
            self._check_budgets(pod, namespace)
        if not terminal:
            bucket = self._objects["Pod"]
            key = (namespace, name)
            status = pod.get("status") or _EMPTY
            conditions = with_condition(
                status.get("conditions"),
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                },
                rfc3339(self._wall()),
            )
            if conditions != status.get("conditions"):
                pod = self._commit(
                    "MODIFIED",
                    "Pod",
                    key,
                    bucket,
                    {**pod, "status": {**status, "conditions": conditions}},
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

    def _not_found(self, kind: str, name: str) -> NotFoundError:
        return NotFoundError(f'{plural(kind)} "{name}" not found', kind=kind, name=name)

    def _generated_suffix(self) -> str:
        self._names += 1
        n = self._names
        chars = []
        for _ in range(5):
            n, r = divmod(n, len(_NAME_ALPHABET))
            chars.append(_NAME_ALPHABET[r])
        return "".join(chars)

    def _check_update_preconditions(
        self, kind: str, old: ApiObject, uid: Any, resource_version: Any
    ) -> None:
        meta = old["metadata"]
        if uid and uid != meta.get("uid"):
            raise ConflictError(
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta.get('uid')}",
                kind=kind,
                name=meta["name"],
            )
        if resource_version not in (None, "") and str(resource_version) != meta.get(
            "resourceVersion"
        ):
            raise ConflictError(
                f'Operation cannot be fulfilled on {plural(kind)} "{meta["name"]}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                kind=kind,
                name=meta["name"],
            )

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
        old_meta = old["metadata"]
        raw_meta = new.get("metadata")
        meta = dict(raw_meta) if isinstance(raw_meta, Mapping) else {}
        for f in _SYSTEM_METADATA:
            if f in old_meta:
                meta[f] = old_meta[f]
            else:
                meta.pop(f, None)
        new["metadata"] = meta
        new["kind"] = old["kind"]
        if "apiVersion" in old:
            new["apiVersion"] = old["apiVersion"]
        if kind in self._status_kinds:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if new == old:
            return old
        if kind == "Pod":
            pod_rules.check_update(old, new)
        if any(new.get(k) != old.get(k) for k in (new.keys() | old.keys()) - _NOT_SPEC):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if self._validator is not None:
            new = dict(self._validator(new))
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and not new["metadata"].get("deletionGracePeriodSeconds")
        ):
            # the last finalizer of an object whose deletion was waiting on it went away
            return self._commit("DELETED", kind, key, bucket, new)
        return self._commit("MODIFIED", kind, key, bucket, new)

    def _delete_pod(
        self,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        pod: ApiObject,
        grace_arg: int | None,
    ) -> ApiObject:
        meta = pod["metadata"]
        spec = pod.get("spec") or _EMPTY
        phase = (pod.get("status") or _EMPTY).get("phase")
        if not spec.get("nodeName") or phase in _TERMINAL_PHASES:
            return self._remove("Pod", key, bucket, pod)
        terminating = bool(meta.get("deletionTimestamp"))
        if grace_arg is not None:
            grace = int(grace_arg)
        elif terminating:
            return pod  # graceful deletion already pending; nothing to shorten
        else:
            value = spec.get("terminationGracePeriodSeconds")
            grace = _DEFAULT_POD_GRACE if value is None else int(value)
        if grace < 0:
            grace = 1  # as the API server does with a negative grace period
        if grace == 0:
            return self._remove("Pod", key, bucket, pod)
        if terminating:
            current = meta.get("deletionGracePeriodSeconds")
            if current is None or grace >= current:
                return pod
            # the grace period counts from the first deletion, as in the API server
            started = parse_rfc3339(meta["deletionTimestamp"]) - current
            deadline = started + grace
        else:
            deadline = self._wall() + grace
        new_meta = {
            **meta,
            "deletionTimestamp": rfc3339(deadline),
            "deletionGracePeriodSeconds": grace,
        }
        return self._commit("MODIFIED", "Pod", key, bucket, {**pod, "metadata": new_meta})

    def _remove(
        self,
        kind: str,
        key: tuple[str, str],
        bucket: dict[tuple[str, str], ApiObject],
        old: ApiObject,
    ) -> ApiObject:
        """Remove at once, or, with finalizers left, mark terminating with grace 0."""
        meta = old["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
                return old
            new_meta = {
                **meta,
                "deletionTimestamp": meta.get("deletionTimestamp") or rfc3339(self._wall()),
                "deletionGracePeriodSeconds": 0,
            }
            return self._commit("MODIFIED", kind, key, bucket, {**old, "metadata": new_meta})
        return self._commit("DELETED", kind, key, bucket, dict(old))

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
