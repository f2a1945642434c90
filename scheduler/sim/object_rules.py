"""The API server's rules for writing any object, as the embedded cluster keeps them
(layer 4, sim).

What the server does to an object's shape on each write, apart from storing it (the
:class:`~scheduler.sim.store.ObjectStore`'s job): which kinds are cluster-scoped and
which have a status subresource (:data:`DEFAULT_CLUSTER_SCOPED`,
:data:`DEFAULT_STATUS_SUBRESOURCE`); the metadata it sets on a create
(:func:`new_object`: namespace, name from ``generateName``, what a restored object
keeps) and keeps on an update (:func:`updated_object`: the server's own metadata, the
status outside the status subresource, ``generation`` bumped when more than metadata and
status changed); the ``uid`` and ``resourceVersion`` preconditions, in the server's
words; and deletion with finalizers left (:func:`held_by_finalizers`). Pods' own rules are
:mod:`~scheduler.sim.pod_rules`. Every function is pure: it reads its arguments and
returns, or raises the API error the server answers with.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from scheduler.api.errors import ConflictError, FieldCause, InvalidObjectError
from scheduler.api.group_apis import APIS, kind_key
from scheduler.sim import pod_rules
from scheduler.sim.api_conventions import plural
from scheduler.sim.dra_admission import CLAIM_KINDS, check_claim, default_object
from scheduler.sim.patch import clone
from scheduler.sim.storage import STORAGE_KINDS, check_storage_update, default_storage
from scheduler.sim.watch_hub import ApiObject

#: Kinds without a namespace, unless the store is told otherwise (by kind key:
#: :func:`~scheduler.api.group_apis.kind_key`).
DEFAULT_CLUSTER_SCOPED: Final[frozenset[str]] = frozenset(
    {
        "Node",
        "Queue",
        "Topology",
        "PriorityClass",
        *(api.queue_key for api in APIS if api.queue_kind),
        "CustomResourceDefinition",
        "APIService",
        "ResourceSlice",
        "DeviceClass",
        "PersistentVolume",
        "StorageClass",
        "CSINode",
        "CSIDriver",
        "Namespace",
    }
)
#: Kinds whose status is written only through the status subresource (Volcano's
#: PodGroup has none: its status is written with the object).
DEFAULT_STATUS_SUBRESOURCE: Final[frozenset[str]] = frozenset(
    {
        "Pod",
        "Node",
        "Topology",
        *(api.pod_group_key for api in APIS if api.status_subresource),
        *(api.queue_key for api in APIS if api.queue_kind),
        "CustomResourceDefinition",
        "APIService",
        "ResourceClaim",
        "PersistentVolumeClaim",
        "PersistentVolume",
    }
)

RESTORED: Final = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
"""Metadata a restored object keeps (:meth:`ObjectStore.create
<scheduler.sim.store.ObjectStore.create>` with ``restore``)."""

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
"""Metadata the server owns: kept from the stored object on replace and patch."""
_NOT_SPEC: Final[frozenset[str]] = frozenset({"metadata", "status", "kind", "apiVersion"})
_NAME_ALPHABET: Final[str] = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATE_NAME: Final[int] = 58
"""The API server cuts a ``generateName`` to this many characters (63 less 5 random)."""


def generated_suffix(n: int) -> str:
    """The five characters the ``n``-th generated name ends with (deterministic)."""
    chars = []
    for _ in range(5):
        n, r = divmod(n, len(_NAME_ALPHABET))
        chars.append(_NAME_ALPHABET[r])
    return "".join(chars)


NewObject = tuple[str, tuple[str, str], ApiObject, Mapping[str, Any]]
"""An object about to be created: its kind key, ``(namespace, name)``, the object (a
copy the write owns), and the metadata it keeps as restored (a plain tuple: one is made
per create, on the store's hot path)."""


def new_object(
    obj: Mapping[str, Any],
    *,
    cluster_scoped: Collection[str],
    restore: bool,
    suffix: Callable[[], str],
    now: str,
) -> NewObject:
    """What a create of ``obj`` stores, before the validator, the uid and the timestamps:
    a copy with its namespace (``default`` if missing, none for a cluster-scoped kind), a
    name from ``generateName`` (``suffix()`` gives its end) if there is no name, the
    server's own metadata dropped (but what ``restore`` keeps: :data:`RESTORED`), a
    Pod's phase ``Pending`` and its pod rules, a DRA claim or a claim, PV or class of
    storage defaulted and checked (:mod:`scheduler.sim.storage`).
    ``now``: RFC 3339. Raises InvalidObjectError."""
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
        name = prefix[:_MAX_GENERATE_NAME] + suffix()
    if not isinstance(name, str):
        raise InvalidObjectError(
            f"{kind}: metadata.name: must be a string",
            kind=kind,
            causes=(FieldCause("metadata.name", "must be a string"),),
        )
    meta["name"] = name
    if kind in cluster_scoped:
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
        pod_rules.on_create(new, now)
    elif kind in CLAIM_KINDS:
        new = default_object(new)
        if kind == "ResourceClaim":
            check_claim(new)
    elif kind in STORAGE_KINDS:
        new = default_storage(new)
    return kind, (namespace, name), new, kept


def updated_object(
    kind: str, old: ApiObject, new: ApiObject, *, status_subresource: bool
) -> ApiObject | None:
    """What a write of the main resource stores in place of ``old``: ``new`` (owned by
    the write, changed in place) with the server's metadata, kind and apiVersion of
    ``old``, and ``old``'s status when the kind has a status subresource; its
    ``generation`` bumped when more than metadata and status changed. None when it
    changes nothing. Raises what :func:`~scheduler.sim.pod_rules.check_update` and
    :func:`~scheduler.sim.storage.check_storage_update` raise."""
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
    if status_subresource:
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if new == old:
        return None
    if kind == "Pod":
        pod_rules.check_update(old, new)
    elif kind in STORAGE_KINDS:
        check_storage_update(old, new)
    if any(new.get(k) != old.get(k) for k in (new.keys() | old.keys()) - _NOT_SPEC):
        meta["generation"] = int(old_meta.get("generation") or 0) + 1
    return new


def finalized(obj: ApiObject) -> bool:
    """Did the last finalizer of ``obj``, whose deletion waited on it, just go?"""
    meta = obj["metadata"]
    return bool(
        meta.get("deletionTimestamp")
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def held_by_finalizers(old: ApiObject, now: str) -> ApiObject | None:
    """``old``, deleted while finalizers are left (``old`` has some), marked terminating
    with grace 0 at ``now`` (RFC 3339): it goes when the last finalizer does. None when
    it is marked already."""
    meta = old["metadata"]
    if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
        return None
    new_meta = {
        **meta,
        "deletionTimestamp": meta.get("deletionTimestamp") or now,
        "deletionGracePeriodSeconds": 0,
    }
    return {**old, "metadata": new_meta}


# Preconditions ---------------------------------------------------------------------------


def check_uid(kind: str, name: str, meta: Mapping[str, Any], uid: Any) -> None:
    """A ``uid`` precondition (ignored when empty) against the object's ``meta``."""
    if uid and uid != meta.get("uid"):
        raise ConflictError(
            f"Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {meta.get('uid')}",
            kind=kind,
            name=name,
        )


def _stale(meta: Mapping[str, Any], resource_version: Any) -> bool:
    return resource_version not in (None, "") and str(resource_version) != meta.get(
        "resourceVersion"
    )


def check_update_preconditions(kind: str, old: ApiObject, uid: Any, resource_version: Any) -> None:
    """The preconditions of an update (replace, patch) of ``old``, in the words of the
    API server's optimistic concurrency."""
    meta = old["metadata"]
    check_uid(kind, meta["name"], meta, uid)
    if _stale(meta, resource_version):
        raise ConflictError(
            f'Operation cannot be fulfilled on {plural(kind)} "{meta["name"]}": the object '
            "has been modified; please apply your changes to the latest version and try again",
            kind=kind,
            name=meta["name"],
        )


def check_delete_preconditions(
    kind: str, name: str, meta: Mapping[str, Any], uid: Any, resource_version: Any
) -> None:
    """The preconditions of a delete (``DeleteOptions.preconditions``)."""
    check_uid(kind, name, meta, uid)
    if _stale(meta, resource_version):
        raise ConflictError(
            f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            kind=kind,
            name=name,
        )
