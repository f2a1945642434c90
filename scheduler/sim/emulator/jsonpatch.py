"""RFC 6902 JSON patch for the Kubernetes API emulator (layer 4).

:func:`apply_json_patch` applies the operations of an ``application/json-patch+json``
body (add, remove, replace, move, copy, test; RFC 6901 pointers with ``~0``/``~1``
escapes and ``-`` for the end of an array) to a copy of the served object and returns
it; the original is never mutated. A malformed patch (not a list, an operation without
``op``, ``path`` or ``value``, an unknown operation, a bad pointer) raises
:class:`~.emulator_http.HttpError` (400); an operation that does not apply to the
object (a failed ``test``, a missing path, an index out of bounds) raises
:class:`JsonPatchError` (422 Invalid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.sim.emulator.responses import bad_request
from scheduler.sim.patch import clone

__all__ = ["JsonPatchError", "apply_json_patch"]


class JsonPatchError(Exception):
    """An RFC 6902 patch that does not apply (a failed ``test``, a missing path): 422."""


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise bad_request(f"invalid JSON pointer {path!r}")
    if not path:
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JsonPatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise JsonPatchError(f"array index {index} out of bounds")
    return index


def _resolve(doc: Any, tokens: Sequence[str]) -> Any:
    value = doc
    for token in tokens:
        if isinstance(value, dict):
            if token not in value:
                raise JsonPatchError(f"path /{'/'.join(tokens)} does not exist")
            value = value[token]
        elif isinstance(value, list):
            value = value[_index(value, token, allow_end=False)]
        else:
            raise JsonPatchError(f"path /{'/'.join(tokens)} does not exist")
    return value


def _add(doc: Any, tokens: Sequence[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise JsonPatchError(f"cannot add to /{'/'.join(tokens[:-1])}: not a container")
    return doc


def _remove(doc: Any, tokens: Sequence[str]) -> Any:
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path /{'/'.join(tokens)} does not exist")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise JsonPatchError(f"path /{'/'.join(tokens)} does not exist")


def apply_json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test) to a copy of
    ``doc`` and return it. Raises JsonPatchError when an operation does not apply."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    result = clone(doc)
    for position, operation in enumerate(operations):
        if not isinstance(operation, Mapping) or not isinstance(operation.get("op"), str):
            raise bad_request(f"JSON patch operation {position} has no 'op'")
        op = operation["op"]
        tokens = _pointer(operation.get("path"))
        if op in ("add", "replace", "test") and "value" not in operation:
            raise bad_request(f"JSON patch operation {position} ({op}) has no 'value'")
        if op == "add":
            result = _add(result, tokens, clone(operation["value"]))
        elif op == "remove":
            _remove(result, tokens)
        elif op == "replace":
            if tokens:
                _remove(result, tokens)
            result = _add(result, tokens, clone(operation["value"]))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            if op == "move":
                if tokens[: len(source)] == source and tokens != source:
                    raise JsonPatchError("cannot move a value into one of its children")
                value = _remove(result, source)
            else:
                value = clone(_resolve(result, source))
            result = _add(result, tokens, value)
        elif op == "test":
            if _resolve(result, tokens) != operation["value"]:
                raise JsonPatchError(f"testing value {operation.get('path')} failed")
        else:
            raise bad_request(f"unknown JSON patch operation {op!r}")
    return result
