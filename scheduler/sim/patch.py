"""JSON merge patch and strategic merge patch over plain dicts (layer 4).

Used by the embedded API server (:mod:`.store`) for ``PATCH`` with
``application/merge-patch+json`` and ``application/strategic-merge-patch+json``.

Both functions are pure and copy-on-write: they never mutate ``original`` or ``patch``,
they return new dicts and lists only along the paths the patch changes and share every
untouched subtree with ``original``, and values taken from the patch are copied so the
caller may reuse its patch. This is what keeps a status patch of a pod cheap.

Strategic merge patch here is driven by field names, not by the Go schema: a list is
replaced, unless its field name has a merge key in :data:`MERGE_KEYS` (then items are
merged by that key) or is in :data:`MERGE_PRIMITIVE_LISTS` (then values are united).
Directives: ``$patch: delete`` / ``$patch: replace`` in a map or in a list item,
``{"$patch": "replace"}`` as a list item, ``$deleteFromPrimitiveList/<field>``,
``$retainKeys``; ``$setElementOrder/<field>`` is accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "MERGE_KEYS",
    "MERGE_PRIMITIVE_LISTS",
    "clone",
    "merge_patch",
    "strategic_merge_patch",
]

#: Field name -> the key its list items are merged by, as in the Kubernetes core types.
MERGE_KEYS: Final[Mapping[str, str]] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
    "hostAliases": "ip",
    "addresses": "type",
    "reservedFor": "uid",
    "resourceClaimStatuses": "name",
}

#: Lists of scalars whose strategy is "merge" (values are united, not replaced).
MERGE_PRIMITIVE_LISTS: Final[frozenset[str]] = frozenset({"finalizers"})

_DELETE_FROM = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"
_NONE_TYPE = type(None)
_SCALARS = (str, int, float, bool, _NONE_TYPE)


def clone(value: Any) -> Any:
    """A deep copy of a JSON-like value (dicts, lists, scalars); tuples become lists.

    Faster than :func:`copy.deepcopy` for API objects. Other mappings become dicts; any
    other object is shared, not copied.
    """
    t = type(value)
    if t is dict:
        return {k: clone(v) for k, v in value.items()}
    if t is list:
        return [clone(v) for v in value]
    if t in _SCALARS:
        return value
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clone(v) for v in value]
    return value


_NOT_MAPS = frozenset({str, int, float, bool, _NONE_TYPE, list})


def _is_map(value: Any) -> bool:
    t = type(value)
    if t is dict:
        return True
    if t in _NOT_MAPS:
        return False
    return isinstance(value, Mapping)


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, ``null`` deletes, anything else
    (lists included) replaces."""
    if not _is_map(patch):
        return clone(patch)
    result: dict[str, Any] = dict(original) if _is_map(original) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif _is_map(value):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = clone(value)
    return result


def strategic_merge_patch(
    original: Any,
    patch: Any,
    *,
    merge_keys: Mapping[str, str] = MERGE_KEYS,
    merge_primitive_lists: frozenset[str] = MERGE_PRIMITIVE_LISTS,
) -> Any:
    """Kubernetes strategic merge patch of ``patch`` onto ``original``.

    Returns the patched value (``None`` when a top-level ``$patch: delete`` deletes it).
    """
    if not _is_map(patch):
        return clone(patch)
    return _merge_map(original, patch, merge_keys, merge_primitive_lists)


def _merge_map(
    original: Any,
    patch: Mapping[str, Any],
    keys: Mapping[str, str],
    prims: frozenset[str],
) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        patch = {k: v for k, v in patch.items() if k != "$patch"}
        original = None
    result: dict[str, Any] = dict(original) if _is_map(original) else {}
    retain: Any = None
    for key, value in patch.items():
        if key.startswith("$"):
            if key.startswith(_DELETE_FROM):
                field = key[len(_DELETE_FROM) :]
                current = result.get(field)
                if isinstance(current, list) and isinstance(value, list):
                    drop = {_hashable(v) for v in value}
                    result[field] = [v for v in current if _hashable(v) not in drop]
            elif key == "$retainKeys":
                retain = value
            # $patch was handled above; $setElementOrder/... and unknown directives: ignored
            continue
        if value is None:
            result.pop(key, None)
        elif _is_map(value):
            merged = _merge_map(result.get(key), value, keys, prims)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            if key in keys:
                result[key] = _merge_keyed_list(result.get(key), value, keys[key], keys, prims)
            elif key in prims:
                result[key] = _merge_primitive_list(result.get(key), value)
            else:
                result[key] = clone(value)
        else:
            result[key] = clone(value)
    if isinstance(retain, list):
        keep = set(retain) | {k for k in patch if not k.startswith("$")}
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, _NONE_TYPE)) else repr(value)


def _merge_primitive_list(original: Any, patch: list[Any]) -> list[Any]:
    base = list(original) if isinstance(original, list) else []
    seen = {_hashable(v) for v in base}
    for value in patch:
        h = _hashable(value)
        if h not in seen:
            seen.add(h)
            base.append(clone(value))
    return base


def _merge_keyed_list(
    original: Any,
    patch: list[Any],
    merge_key: str,
    keys: Mapping[str, str],
    prims: frozenset[str],
) -> list[Any]:
    if any(_is_map(item) and item.get("$patch") == "replace" for item in patch):
        return [
            _merge_map(None, item, keys, prims) if _is_map(item) else clone(item)
            for item in patch
            if not (_is_map(item) and item.get("$patch") == "replace")
        ]
    result: list[Any] = list(original) if isinstance(original, list) else []
    index: dict[Any, int] = {}
    for i, item in enumerate(result):
        if _is_map(item) and merge_key in item:
            index.setdefault(_hashable(item[merge_key]), i)
    deleted: set[int] = set()
    for item in patch:
        if not _is_map(item) or merge_key not in item:
            result.append(clone(item))
            continue
        k = _hashable(item[merge_key])
        pos = index.get(k)
        if item.get("$patch") == "delete":
            if pos is not None:
                deleted.add(pos)
                del index[k]
            continue
        if pos is None:
            index[k] = len(result)
            result.append(_merge_map(None, item, keys, prims))
        else:
            merged = _merge_map(result[pos], item, keys, prims)
            result[pos] = merged if merged is not None else result[pos]
    if deleted:
        result = [item for i, item in enumerate(result) if i not in deleted]
    return result
