"""The Kubernetes API emulator: the embedded cluster served over HTTP (layer 4, sim).

:class:`ApiEmulator` is an in-process aiohttp server that serves the part of the Kubernetes
REST API that Sluice uses, in JSON, on top of an :class:`~scheduler.sim.store.ObjectStore`.
The real kubernetes-asyncio client and ``kubectl`` talk to it unchanged, which is how the
``scheduler.kube`` backend is tested without a cluster and how ``sluice simulate --serve``
exposes a simulated cluster.

Served (see :data:`BUILTIN_RESOURCES` and the CRD catalog):

* discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]``, ``/version``,
  ``/healthz``, ``/readyz``, ``/livez``; ``/openapi/v3`` holds only the operations kubectl
  looks for to leave validation to the server (no schemas), ``/openapi/v2`` answers 404;
* core v1 pods (``status``, ``binding``, ``eviction``), nodes (``status``), namespaces,
  events and the legacy ``bindings``; ``events.k8s.io/v1`` events (the store keeps events in
  this shape; core v1 events are converted both ways); ``scheduling.k8s.io/v1``
  priorityclasses; ``policy/v1`` poddisruptionbudgets; ``coordination.k8s.io/v1`` leases;
  every kind of the CRD catalog (``scheduling.sluice.dev/v1alpha1`` podgroups, queues,
  topologies, with their ``status`` subresource), validated and defaulted by the CRD schemas;
* verbs: get, list (``labelSelector``, ``fieldSelector`` on any dotted path, ``limit`` and
  ``continue``), watch (``watch=true|1|True``, ``resourceVersion``,
  ``allowWatchBookmarks``, ``timeoutSeconds``; a too-old resourceVersion gives an ``ERROR``
  event carrying a 410 ``Expired`` Status, as the API server does), create, update (PUT),
  patch (merge, strategic merge, RFC 6902 JSON patch), delete (``DeleteOptions`` in the
  body or query: grace period, uid and resourceVersion preconditions), deletecollection;
* ``Table`` responses (``Accept: ...;as=Table``) so that ``kubectl get`` prints columns;
* the Priority admission of pods on creation (:mod:`.admission`): ``spec.priority`` from
  the PriorityClass, 403 Forbidden for an unknown class or a contradicting priority.

Every :class:`~scheduler.api.errors.ApiError` becomes a Kubernetes ``Status`` with the
matching HTTP code. Not served: protobuf, server-side apply, dry run, authentication and
authorization, OpenAPI schemas, watches of namespaces (which are derived from the objects'
namespaces, plus ``default`` and the ``kube-*`` ones, and those created), the
``/api/v1/watch/...`` legacy paths, logs, exec and every other resource.

Deliberate differences: strategic merge patch is the store's (merge keys by field name, see
:mod:`.patch`); a watch with a selector that resumes from a resourceVersion older than the
history knows counts an object it cannot place as having matched (a spurious DELETED
rather than a missed one); ``fieldValidation`` is ignored (custom objects are always
checked strictly). The emulator must run on the event loop that owns the store (the store
is not thread-safe), on real time (it does real network I/O).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal

import anyio
from aiohttp import web

from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidInputError,
    InvalidObjectError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.api.openapi import CrdCatalog, CrdInfo, load_crds
from scheduler.api.selectors import LabelSelector, Requirement
from scheduler.sim.admission import AdmissionError, admit_pod_priority
from scheduler.sim.patch import clone, merge_patch, strategic_merge_patch
from scheduler.sim.store import ApiObject, ObjectStore, WatchEvent, parse_rfc3339

__all__ = [
    "BUILTIN_RESOURCES",
    "ApiEmulator",
    "JsonPatchError",
    "ResourceInfo",
    "apply_json_patch",
    "event_from_core",
    "event_to_core",
    "human_duration",
    "parse_label_selector_string",
    "status_of",
]

log = logging.getLogger(__name__)

#: The Kubernetes version ``/version`` reports.
SERVER_VERSION: Final[Mapping[str, str]] = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-sluice-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_ALL_VERBS: Final = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
_STATUS_VERBS: Final = ("get", "patch", "update")
_JSON: Final = "application/json"
_MERGE: Final = "application/merge-patch+json"
_STRATEGIC: Final = "application/strategic-merge-patch+json"
_JSON_PATCH: Final = "application/json-patch+json"
_TRUE: Final = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_DEFAULT_NAMESPACES: Final = ("default", "kube-node-lease", "kube-public", "kube-system")
_NS_UUID: Final = uuid.UUID("6f1c1f7e-4b7e-4d5e-9a53-5c1c3e0d2a10")
_PDB_PREFIX: Final = "Cannot evict pod as it would violate the pod's disruption budget."
_NOT_FOUND_MESSAGE: Final = "the server could not find the requested resource"

PatchKind = Literal["merge", "strategic", "json"]
View = Literal["plain", "core-event", "namespace"]


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """One served resource (a plural name in a group/version) and how it maps to the store.

    ``store_kind`` is the kind the store keeps the objects under (``Event`` for both event
    APIs). ``view`` names a conversion between the stored and the served shape.
    ``return_deleted``: DELETE answers with the deleted object (pods and custom objects)
    rather than a success Status, as the API server does. ``crd`` is set for custom kinds,
    which are validated and defaulted by their schema on every write.
    """

    group: str
    version: str
    name: str
    singular: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = _ALL_VERBS
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    store_kind: str = ""
    view: View = "plain"
    return_deleted: bool = False
    crd: CrdInfo | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kind_in_store(self) -> str:
        return self.store_kind or self.kind


#: The built-in resources the emulator serves, besides the CRD catalog's kinds.
BUILTIN_RESOURCES: Final[tuple[ResourceInfo, ...]] = (
    ResourceInfo(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        short_names=("po",),
        categories=("all",),
        return_deleted=True,
    ),
    ResourceInfo("", "v1", "nodes", "node", "Node", False, short_names=("no",)),
    ResourceInfo(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        verbs=("create", "delete", "get", "list"),
        short_names=("ns",),
        view="namespace",
    ),
    ResourceInfo(
        "", "v1", "events", "event", "Event", True, short_names=("ev",), view="core-event"
    ),
    ResourceInfo("", "v1", "bindings", "binding", "Binding", True, verbs=("create",)),
    ResourceInfo("events.k8s.io", "v1", "events", "event", "Event", True, short_names=("ev",)),
    ResourceInfo(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        False,
        short_names=("pc",),
    ),
    ResourceInfo(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
    ),
    ResourceInfo("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
)

#: Subresources served besides ``status``: (resource, subresource) -> (group, version, kind).
_ACTION_SUBRESOURCES: Final[Mapping[tuple[str, str], tuple[str, str, str]]] = {
    ("pods", "binding"): ("", "v1", "Binding"),
    ("pods", "eviction"): ("policy", "v1", "Eviction"),
}


def _custom_resources(catalog: CrdCatalog) -> list[ResourceInfo]:
    return [
        ResourceInfo(
            info.group,
            info.version,
            info.plural,
            info.singular,
            info.kind,
            info.namespaced,
            short_names=info.short_names,
            return_deleted=True,
            crd=info,
        )
        for kind in catalog.kinds()
        if (info := catalog.get(kind)) is not None
    ]


# --------------------------------------------------------------------------- errors


class _HttpError(Exception):
    """An error that is not an ApiError of the store: bad request, unsupported media type."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class JsonPatchError(Exception):
    """An RFC 6902 patch that does not apply (a failed ``test``, a missing path): 422."""


def _bad_request(message: str) -> _HttpError:
    return _HttpError(400, "BadRequest", message)


def _failure(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        status["details"] = dict(details)
    status["code"] = code
    return status


def _success(code: int, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    status["status"] = "Success"
    if details:
        status["details"] = dict(details)
    status["code"] = code
    return status


def _reason_of(exc: ApiError) -> str:
    if isinstance(exc, NotFoundError):
        return "NotFound"
    if isinstance(exc, AlreadyExistsError):
        return "AlreadyExists"
    if isinstance(exc, ConflictError):
        return "Conflict"
    if isinstance(exc, InvalidObjectError):
        return "Invalid"
    if isinstance(exc, GoneError):
        return "Expired"  # what the API server says of a too-old resourceVersion
    if isinstance(exc, TooManyRequestsError):
        return "TooManyRequests"
    if isinstance(exc, ServerError):
        return "InternalError"
    return {
        400: "BadRequest",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Gone",
        422: "Invalid",
        429: "TooManyRequests",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(exc.code, "InternalError")


def _cause_reason(message: str) -> str:
    """The ``field.ErrorType`` reason of a cause message, from its leading words."""
    for prefix, reason in (
        ("Invalid value", "FieldValueInvalid"),
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Forbidden", "FieldValueForbidden"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("field not declared", "FieldValueUnknown"),
    ):
        if message.startswith(prefix):
            return reason
    return "FieldValueInvalid"


def status_of(exc: ApiError, res: ResourceInfo | None = None, name: str = "") -> dict[str, Any]:
    """The Kubernetes ``Status`` the API server answers for ``exc``."""
    reason = _reason_of(exc)
    message = str(exc)
    details: dict[str, Any] = {}
    if exc.name or name:
        details["name"] = exc.name or name
    if res is not None and res.group:
        details["group"] = res.group
    if isinstance(exc, InvalidObjectError):
        details["kind"] = res.kind if res is not None else exc.kind
        details["causes"] = [
            {"reason": _cause_reason(c.message), "message": c.message, "field": c.field}
            for c in exc.causes
        ]
    elif isinstance(exc, TooManyRequestsError) and message.startswith(_PDB_PREFIX):
        details.pop("group", None)
        details["name"] = name or exc.name
        details["kind"] = "pods"
        cause = message[len(_PDB_PREFIX) :].strip()
        message = _PDB_PREFIX
        if cause:
            details["causes"] = [{"reason": "DisruptionBudget", "message": cause}]
    elif res is not None:
        details["kind"] = res.name
    elif exc.kind:
        details["kind"] = exc.kind
    return _failure(exc.code, reason, message, details)


# --------------------------------------------------------------------------- selectors

_SET_REQUIREMENT = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _checked_key(key: str, text: str) -> str:
    key = key.strip()
    if not _KEY.match(key):
        raise InvalidInputError("labelSelector", None, f"invalid label key {key!r} in {text!r}")
    return key


def parse_label_selector_string(text: str) -> LabelSelector:
    """Parse the string form of a label selector (``a=b,c!=d,e in (x,y),f notin (z),g,!h``,
    ``k>1``). Raises InvalidInputError."""
    requirements: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            continue
        match = _SET_REQUIREMENT.match(part)
        if match:
            key = _checked_key(match.group(1), text)
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            operator = "In" if match.group(2) == "in" else "NotIn"
            requirements.append(Requirement(key, operator, values))
        elif part.startswith("!"):
            requirements.append(Requirement(_checked_key(part[1:], text), "DoesNotExist"))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(Requirement(_checked_key(key, text), "NotIn", (value.strip(),)))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            requirements.append(Requirement(_checked_key(key, text), "In", (value.strip(),)))
        elif ">" in part or "<" in part:
            op = ">" if ">" in part else "<"
            key, value = part.split(op, 1)
            try:
                int(value.strip())
            except ValueError as exc:
                raise InvalidInputError(
                    "labelSelector", None, f"{op} takes an integer in {text!r}"
                ) from exc
            operator = "Gt" if op == ">" else "Lt"
            requirements.append(Requirement(_checked_key(key, text), operator, (value.strip(),)))
        else:
            requirements.append(Requirement(_checked_key(part, text), "Exists"))
    return LabelSelector(tuple(requirements))


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class _Filter:
    """The label and field selectors of a list or a watch."""

    labels: LabelSelector | None = None
    fields: tuple[tuple[str, bool, str], ...] = ()  # (path, equal?, value)

    @property
    def everything(self) -> bool:
        return self.labels is None and not self.fields

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.labels is not None:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not self.labels.matches(labels):
                return False
        for path, equal, value in self.fields:
            if (_field_value(obj, path) == value) != equal:
                return False
        return True


def _parse_filter(query: Mapping[str, str]) -> _Filter:
    label_text = query.get("labelSelector", "")
    labels = parse_label_selector_string(label_text) if label_text.strip() else None
    fields: list[tuple[str, bool, str]] = []
    for raw in query.get("fieldSelector", "").split(","):
        part = raw.strip()
        if not part:
            continue
        if "!=" in part:
            path, value = part.split("!=", 1)
            equal = False
        elif "==" in part:
            path, value = part.split("==", 1)
            equal = True
        elif "=" in part:
            path, value = part.split("=", 1)
            equal = True
        else:
            raise InvalidInputError("fieldSelector", None, f"invalid selector {part!r}")
        fields.append((path.strip(), equal, value.strip()))
    return _Filter(labels, tuple(fields))


# --------------------------------------------------------------------------- JSON patch


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _bad_request(f"invalid JSON pointer {path!r}")
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
        raise _bad_request("a JSON patch must be a list of operations")
    result = clone(doc)
    for position, operation in enumerate(operations):
        if not isinstance(operation, Mapping) or not isinstance(operation.get("op"), str):
            raise _bad_request(f"JSON patch operation {position} has no 'op'")
        op = operation["op"]
        tokens = _pointer(operation.get("path"))
        if op in ("add", "replace", "test") and "value" not in operation:
            raise _bad_request(f"JSON patch operation {position} ({op}) has no 'value'")
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
            raise _bad_request(f"unknown JSON patch operation {op!r}")
    return result


# --------------------------------------------------------------------------- event views

_EVENT_TO_CORE: Final = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
)
_EVENT_SAME: Final = (
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
)


def event_to_core(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An ``events.k8s.io/v1`` Event in its core v1 shape."""
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Event"}
    for name in _EVENT_SAME:
        if name in obj:
            out[name] = obj[name]
    for new, old in _EVENT_TO_CORE:
        if new in obj:
            out[old] = obj[new]
    series = obj.get("series")
    if isinstance(series, Mapping):
        out["series"] = {
            "count": series.get("count"),
            "lastObservedTime": series.get("lastObservedTime"),
        }
    if "source" not in out and obj.get("reportingController"):
        out["source"] = {"component": obj["reportingController"]}
    return out


def event_from_core(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A core v1 Event in the ``events.k8s.io/v1`` shape the store keeps."""
    out: dict[str, Any] = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for name in _EVENT_SAME:
        if name in obj:
            out[name] = obj[name]
    for new, old in _EVENT_TO_CORE:
        if old in obj:
            out[new] = obj[old]
    return out


# --------------------------------------------------------------------------- tables


def human_duration(seconds: float) -> str:
    """An age as ``kubectl get`` prints it: ``45s``, ``3m20s``, ``5h``, ``12d``, ``2y30d``."""
    if seconds < -1:
        return "<invalid>"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        years = hours // (24 * 365)
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{hours // (24 * 365)}y"


Cell = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class _Column:
    name: str
    cell: Cell
    type: str = "string"
    priority: int = 0
    format: str = ""


def _path(obj: Mapping[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.strip(".").split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _or_none(value: Any) -> Any:
    return "<none>" if value in (None, "") else value


def _at(path: str) -> Cell:
    return lambda o: _path(o, path)


def _or_na(value: Any) -> Any:
    return "N/A" if value is None else value


def _pod_status(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    if spec.get("schedulingGates") and not spec.get("nodeName"):
        reason = "SchedulingGated"
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        waiting = (state.get("waiting") or {}).get("reason")
        terminated = (state.get("terminated") or {}).get("reason")
        if waiting and waiting != "ContainerCreating":
            reason = waiting
        elif terminated:
            reason = terminated
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_ready(pod: Mapping[str, Any]) -> str:
    total = len((pod.get("spec") or {}).get("containers") or ())
    ready = sum(
        1 for c in (pod.get("status") or {}).get("containerStatuses") or () if c.get("ready")
    )
    return f"{ready}/{total}"


def _pod_restarts(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return str(sum(int(c.get("restartCount") or 0) for c in statuses))


def _node_status(node: Mapping[str, Any]) -> str:
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
    text = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _node_roles(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = {
        key.split("/", 1)[1]
        for key in labels
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]
    }
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(roles)) or "<none>"


def _event_object(event: Mapping[str, Any]) -> str:
    ref = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_last_seen(event: Mapping[str, Any]) -> Any:
    series = event.get("series") or {}
    return (
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("deprecatedLastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _name_column() -> _Column:
    return _Column("Name", lambda o: (o.get("metadata") or {}).get("name", ""), format="name")


# --------------------------------------------------------------------------- the server


@dataclass(slots=True)
class _Target:
    """What a request's path names."""

    res: ResourceInfo
    namespace: str | None
    name: str = ""
    sub: str = ""


def _truthy(value: str | None) -> bool:
    return value is not None and value in _TRUE


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=_dumps(body), content_type=_JSON)


class ApiEmulator:
    """The Kubernetes REST API over an :class:`ObjectStore`, on ``http://host:port``.

    ``catalog`` gives the custom kinds served (the default CRD catalog when None); each
    must agree with the store on being cluster-scoped. ``port=0`` picks a free port.
    ``bookmark_interval`` is how often a watch that asked for bookmarks gets one while
    idle (the API server sends one about every minute); ``watch_timeout`` ends a watch
    that gave no ``timeoutSeconds``. ``wall`` is the Unix time that ``kubectl get`` ages
    are computed against (real time by default). Use ``async with`` or ``start``/``stop``
    on the event loop that owns the store.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        catalog: CrdCatalog | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval: float = 60.0,
        watch_timeout: float = 1800.0,
        wall: Callable[[], float] | None = None,
    ) -> None:
        if bookmark_interval <= 0 or watch_timeout <= 0:
            raise ValueError("bookmark_interval and watch_timeout must be positive")
        self.store = store
        self.catalog = catalog if catalog is not None else load_crds()
        self.host = host
        self.port = port
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self._wall = wall or time.time
        resources = [*BUILTIN_RESOURCES, *_custom_resources(self.catalog)]
        for res in resources:
            if res.view != "plain" or res.kind == "Binding":
                continue
            if store.is_cluster_scoped(res.kind_in_store) == res.namespaced:
                scope = "namespaced" if res.namespaced else "cluster-scoped"
                raise ValueError(f"{res.kind} is {scope} here but not in the store")
        self._resources: dict[tuple[str, str, str], ResourceInfo] = {
            (r.group, r.version, r.name): r for r in resources
        }
        self._namespaces: dict[str, ApiObject] = {}
        self._runner: web.AppRunner | None = None
        self._served_port: int | None = None
        self._watches: set[anyio.CancelScope] = set()
        self._started_at = self._wall()

    # ----------------------------------------------------------------- lifecycle

    @property
    def served_port(self) -> int:
        """The port the server listens on (after :meth:`start`)."""
        if self._served_port is None:
            raise RuntimeError("the emulator is not started")
        return self._served_port

    @property
    def url(self) -> str:
        """``http://host:port``, the base URL of the API (after :meth:`start`)."""
        return f"http://{self.host}:{self.served_port}"

    async def start(self) -> str:
        """Listen and serve; returns the base URL."""
        if self._runner is not None:
            return self.url
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._served_port = int(runner.addresses[0][1])
        self._started_at = self._wall()
        log.info("Kubernetes API emulator serving on %s", self.url)
        return self.url

    async def stop(self) -> None:
        """End every watch, close connections and stop listening. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for scope in list(self._watches):
            scope.cancel()
        await runner.cleanup()
        self._served_port = None

    async def __aenter__(self) -> ApiEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ----------------------------------------------------------------- dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        target: _Target | None = None
        try:
            parts = [p for p in request.path.split("/") if p]
            discovery = self._discovery(parts)
            if discovery is not None:
                if request.method != "GET":
                    raise _HttpError(405, "MethodNotAllowed", f"{request.method} is not allowed")
                return discovery
            target = self._target(parts)
            return await self._serve(request, target)
        except ApiError as exc:
            res = target.res if target is not None else None
            return _json_response(exc.code, status_of(exc, res, target.name if target else ""))
        except _HttpError as exc:
            return _json_response(exc.code, _failure(exc.code, exc.reason, exc.message))
        except (InvalidInputError, JsonPatchError) as exc:
            code, reason = (
                (422, "Invalid") if isinstance(exc, JsonPatchError) else (400, "BadRequest")
            )
            return _json_response(code, _failure(code, reason, str(exc)))
        except Exception as exc:
            log.exception("emulator: %s %s failed", request.method, request.path_qs)
            return _json_response(500, _failure(500, "InternalError", f"internal error: {exc}"))

    def _discovery(self, parts: list[str]) -> web.StreamResponse | None:
        if parts in ([], ["api"], ["apis"]) or parts[0] in (
            "version",
            "healthz",
            "readyz",
            "livez",
        ):
            return self._root_document(parts)
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi_v3(parts[2:])
        if parts[0] == "api" and len(parts) == 2:
            return self._resource_list("", parts[1])
        if parts[0] == "apis" and len(parts) == 2:
            group = self._group(parts[1])
            if group is None:
                raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
            return _json_response(200, {"kind": "APIGroup", "apiVersion": "v1", **group})
        if parts[0] == "apis" and len(parts) == 3:
            return self._resource_list(parts[1], parts[2])
        if parts[0] not in ("api", "apis"):
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        return None

    def _openapi_v3(self, rest: list[str]) -> web.StreamResponse:
        """Just enough OpenAPI v3 for kubectl: every resource's PATCH operation, with its
        group-version-kind and a ``fieldValidation`` parameter, so that ``kubectl create``
        and ``apply`` leave validation to the server. No schemas."""
        versions = sorted({(g, v) for g, v, _ in self._resources})
        if not rest:
            index = {
                _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=0"}
                for g, v in versions
            }
            return _json_response(200, {"paths": index})
        wanted = "/".join(rest)
        for group, version in versions:
            if _gv_path(group, version) == wanted:
                break
        else:
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        paths: dict[str, Any] = {}
        for (g, v, _), res in sorted(self._resources.items()):
            if (g, v) != (group, version):
                continue
            scope = "/namespaces/{namespace}" if res.namespaced else ""
            media = [_JSON_PATCH, _MERGE]
            paths[f"/{_gv_path(g, v)}{scope}/{res.name}/{{name}}"] = {
                "patch": {
                    "operationId": f"patch{res.kind}",
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {"group": g, "version": v, "kind": res.kind},
                    "parameters": [
                        {"name": name, "in": "query", "schema": {"type": "string"}}
                        for name in ("dryRun", "fieldManager", "fieldValidation")
                    ],
                    "requestBody": {"content": {m: {"schema": {"type": "object"}} for m in media}},
                    "responses": {"200": {"description": "OK"}},
                }
            }
        document: dict[str, Any] = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths,
            "components": {"schemas": {}},
        }
        return _json_response(200, document)

    def _root_document(self, parts: list[str]) -> web.StreamResponse:
        if not parts:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
            paths += sorted({f"/apis/{g}" for g, _, _ in self._resources if g})
            paths += sorted({f"/apis/{g}/{v}" for g, v, _ in self._resources if g})
            return _json_response(200, {"paths": paths})
        if parts[0] == "version":
            return _json_response(200, dict(SERVER_VERSION))
        if parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts == ["api"]:
            return _json_response(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {
                            "clientCIDR": "0.0.0.0/0",
                            "serverAddress": f"{self.host}:{self._served_port or self.port}",
                        }
                    ],
                },
            )
        groups = [
            g
            for name in sorted({g for g, _, _ in self._resources if g})
            if (g := self._group(name))
        ]
        return _json_response(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    def _group(self, name: str) -> dict[str, Any] | None:
        versions = sorted({v for g, v, _ in self._resources if g == name})
        if not versions:
            return None
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": entries[0]}

    def _resource_list(self, group: str, version: str) -> web.StreamResponse:
        served = [
            r for (g, v, _), r in sorted(self._resources.items()) if g == group and v == version
        ]
        if not served:
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        entries: list[dict[str, Any]] = []
        for res in served:
            entry: dict[str, Any] = {
                "name": res.name,
                "singularName": res.singular,
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": list(res.verbs),
            }
            if res.short_names:
                entry["shortNames"] = list(res.short_names)
            if res.categories:
                entry["categories"] = list(res.categories)
            entries.append(entry)
            if res.view == "plain" and self.store.has_status_subresource(res.kind_in_store):
                entries.append(
                    {
                        "name": f"{res.name}/status",
                        "singularName": "",
                        "namespaced": res.namespaced,
                        "kind": res.kind,
                        "verbs": list(_STATUS_VERBS),
                    }
                )
            for (owner, sub), (sub_group, sub_version, kind) in _ACTION_SUBRESOURCES.items():
                if owner == res.name and not res.group:
                    sub_entry: dict[str, Any] = {
                        "name": f"{owner}/{sub}",
                        "singularName": "",
                        "namespaced": res.namespaced,
                        "kind": kind,
                        "verbs": ["create"],
                    }
                    if sub_group:
                        sub_entry["group"] = sub_group
                        sub_entry["version"] = sub_version
                    entries.append(sub_entry)
        group_version = f"{group}/{version}" if group else version
        return _json_response(
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": entries,
            },
        )

    def _target(self, parts: list[str]) -> _Target:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        res = self._resources.get((group, version, rest[0]))
        if res is None or len(rest) > 3 or (namespace is not None and not res.namespaced):
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and not (
            (sub == "status" and self.store.has_status_subresource(res.kind_in_store))
            or (res.name, sub) in _ACTION_SUBRESOURCES
        ):
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        return _Target(res, namespace, name, sub)

    async def _serve(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method = request.method
        query = request.query
        if _truthy(query.get("dryRun")) or query.get("dryRun") == "All":
            raise _bad_request("dry run is not supported by the emulator")
        if t.res.namespaced and t.namespace is None and (t.name or method != "GET"):
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)  # needs .../namespaces/NS/...
        if t.sub == "status" and method not in ("GET", "PUT", "PATCH"):
            raise _HttpError(405, "MethodNotAllowed", f"{method} is not allowed on status")
        if t.res.view == "namespace":
            return await self._serve_namespace(request, t)
        if t.res.kind == "Binding":
            if method != "POST" or t.name:
                raise _HttpError(405, "MethodNotAllowed", f"{method} is not allowed on bindings")
            body = await self._body(request)
            return self._bind(t, str((body.get("metadata") or {}).get("name") or ""), body)
        if t.sub in ("binding", "eviction"):
            if method != "POST":
                raise _HttpError(405, "MethodNotAllowed", f"{method} is not allowed")
            body = await self._body(request)
            if t.sub == "binding":
                return self._bind(t, t.name, body)
            return self._evict(t, body)
        if method == "GET":
            if t.name:
                obj = self._view(
                    t.res, self.store.get(t.res.kind_in_store, t.namespace or "", t.name)
                )
                if self._wants_table(request):
                    return _json_response(200, self._table(t.res, [obj], None, query))
                return _json_response(200, obj)
            if _truthy(query.get("watch")):
                return await self._watch(request, t)
            return self._list(request, t)
        if method == "POST" and not t.name:
            return self._create(t, await self._body(request))
        if method == "PUT" and t.name:
            return self._replace(t, await self._body(request))
        if method == "PATCH" and t.name:
            return await self._patch(request, t)
        if method == "DELETE":
            text = await request.text()
            options = self._json(text) if text.strip() else {}
            if not isinstance(options, dict):
                raise _bad_request("DeleteOptions must be an object")
            if t.name:
                return self._delete(t, t.name, options, query)
            return self._delete_collection(request, t, options)
        raise _HttpError(405, "MethodNotAllowed", f"{method} is not allowed here")

    # ----------------------------------------------------------------- bodies and views

    @staticmethod
    def _json(text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise _bad_request(f"the request body is not valid JSON: {exc}") from exc

    async def _body(self, request: web.Request) -> dict[str, Any]:
        body = self._json(await request.text())
        if not isinstance(body, dict):
            raise _bad_request("the request body must be a JSON object")
        return body

    def _view(self, res: ResourceInfo, obj: ApiObject) -> ApiObject:
        """The stored object as the resource serves it."""
        if res.view == "core-event":
            return event_to_core(obj)
        if "apiVersion" not in obj or "kind" not in obj:
            return {"apiVersion": res.api_version, "kind": res.kind, **obj}
        return obj

    def _unview(self, res: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """An object sent to the resource in the shape the store keeps."""
        if res.view == "core-event":
            return event_from_core(obj)
        return obj

    def _incoming(self, t: _Target, body: dict[str, Any], name: str = "") -> dict[str, Any]:
        """Check and complete the kind, apiVersion, name and namespace of a written object."""
        res = t.res
        kind = body.setdefault("kind", res.kind)
        api_version = body.setdefault("apiVersion", res.api_version)
        if kind != res.kind or api_version != res.api_version:
            raise _bad_request(
                f"the object's kind and apiVersion ({api_version}, {kind}) do not match the "
                f"resource ({res.api_version}, {res.kind})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise _bad_request("metadata must be an object")
        if name and meta.setdefault("name", name) != name:
            raise _bad_request(
                "the name of the object does not match the name on the URL"
                f" ({meta['name']!r} != {name!r})"
            )
        if (
            res.namespaced
            and t.namespace is not None
            and meta.setdefault("namespace", t.namespace) != t.namespace
        ):
            raise _bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        return body

    def _admit(self, res: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """Validate and default a custom object with its CRD schema (422 if invalid)."""
        if res.crd is None:
            return obj
        return self.catalog.check(obj)

    # ----------------------------------------------------------------- reads

    def _selected(self, t: _Target, flt: _Filter) -> tuple[list[ApiObject], int]:
        items, rv = self.store.list(t.res.kind_in_store, t.namespace)
        views = [self._view(t.res, o) for o in items]
        if not flt.everything:
            views = [o for o in views if flt.matches(o)]
        return views, rv

    def _list(self, request: web.Request, t: _Target) -> web.StreamResponse:
        query = request.query
        items, rv = self._selected(t, _parse_filter(query))
        start = 0
        token = query.get("continue", "")
        if token:
            try:
                after = json.loads(base64.urlsafe_b64decode(token.encode()))
                key = (str(after[0]), str(after[1]))
            except (ValueError, TypeError, IndexError, binascii.Error) as exc:
                raise _bad_request("invalid continue token") from exc
            while start < len(items) and _key(items[start]) <= key:
                start += 1
        limit_text = query.get("limit", "")
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        end = len(items)
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError as exc:
                raise _bad_request(f"invalid limit {limit_text!r}") from exc
            if limit > 0 and start + limit < len(items):
                end = start + limit
                last = _key(items[end - 1])
                meta["continue"] = base64.urlsafe_b64encode(_dumps(list(last))).decode()
                meta["remainingItemCount"] = len(items) - end
        page = items[start:end]
        if self._wants_table(request):
            return _json_response(200, self._table(t.res, page, meta, query))
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": meta,
            "items": page,
        }
        return _json_response(200, body)

    def _matching_at(self, t: _Target, flt: _Filter, since: int) -> set[tuple[str, str]]:
        """The objects that matched ``flt`` at revision ``since``, from the current state and
        the history; an object whose state then is no longer known counts as matching (a
        watch then sends a spurious DELETED rather than miss one)."""
        kind, res = t.res.kind_in_store, t.res
        try:
            after = self.store.events_since(kind, since, t.namespace)
        except GoneError:
            return set()  # the watch itself answers 410
        first: dict[tuple[str, str], str] = {}
        for ev in after:
            first.setdefault(_key(ev.obj), ev.type)
        seen = {k for o in self._selected(t, flt)[0] if (k := _key(o)) not in first}
        unsure = {k for k, type_ in first.items() if type_ != "ADDED"}
        if not unsure:
            return seen
        try:
            history = self.store.events_since(kind, 0, t.namespace)
        except GoneError:
            return seen | unsure
        before: dict[tuple[str, str], WatchEvent] = {}
        for ev in history:
            if ev.resource_version > since:
                break
            before[_key(ev.obj)] = ev
        for k in unsure:
            last = before.get(k)
            if last is None or (last.type != "DELETED" and flt.matches(self._view(res, last.obj))):
                seen.add(k)
        return seen

    async def _watch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        query = request.query
        flt = _parse_filter(query)
        rv_text = query.get("resourceVersion", "")
        since: int | None = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise _bad_request(f"invalid resourceVersion {rv_text!r}") from exc
        timeout = self.watch_timeout
        if query.get("timeoutSeconds"):
            try:
                timeout = float(query["timeoutSeconds"]) or self.watch_timeout
            except ValueError as exc:
                raise _bad_request("invalid timeoutSeconds") from exc
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        table = self._wants_table(request)
        response = web.StreamResponse(status=200)
        response.content_type = _JSON
        response.enable_chunked_encoding()
        await response.prepare(request)
        shape = _WatchShape(self, t.res, flt, table, query)
        if since is not None and not flt.everything:
            shape.seen.update(self._matching_at(t, flt, since))
        with anyio.CancelScope() as scope:
            self._watches.add(scope)
            try:
                with anyio.move_on_after(timeout):
                    events = self.store.watch(
                        t.res.kind_in_store,
                        namespace=t.namespace,
                        resource_version=since,
                        bookmark_interval=self.bookmark_interval if bookmarks else None,
                    )
                    async with aclosing(events) as stream:
                        async for ev in stream:
                            line = shape.line(ev)
                            if line is not None:
                                await response.write(line)
            except GoneError as exc:
                event = {"type": "ERROR", "object": status_of(exc, t.res)}
                with contextlib.suppress(ConnectionError):
                    await response.write(_dumps(event) + b"\n")
            except ConnectionError:
                return response
            finally:
                self._watches.discard(scope)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    # ----------------------------------------------------------------- writes

    def _create(self, t: _Target, body: dict[str, Any]) -> web.StreamResponse:
        obj = self._incoming(t, body)
        if t.res.kind == "Pod" and not t.sub:
            classes, _ = self.store.list("PriorityClass")
            try:
                obj = admit_pod_priority(obj, classes)
            except AdmissionError as exc:
                name = (obj.get("metadata") or {}).get("name", "")
                raise _HttpError(403, "Forbidden", f'pods "{name}" is forbidden: {exc}') from exc
        created = self.store.create(self._unview(t.res, self._admit(t.res, obj)))
        return _json_response(201, self._view(t.res, created))

    def _replace(self, t: _Target, body: dict[str, Any]) -> web.StreamResponse:
        stored = self._unview(t.res, self._incoming(t, body, t.name))
        if t.res.crd is not None:
            old = self.store.get(t.res.kind_in_store, t.namespace or "", t.name)
            stored = self._admit_update(t, old, stored)
        updated = self.store.replace(stored, subresource=t.sub or None)
        return _json_response(200, self._view(t.res, updated))

    def _admit_update(self, t: _Target, old: ApiObject, new: dict[str, Any]) -> dict[str, Any]:
        """Validate an update of a custom object as the API server does: what the write
        cannot change (status through the main resource, the rest through ``status``) is
        taken from the stored object first. Returns the object to hand to the store."""
        if not self.store.has_status_subresource(t.res.kind_in_store):
            return self._admit(t.res, new)
        if t.sub == "status":
            candidate = {**old, "metadata": new.get("metadata"), "status": new.get("status")}
        else:
            candidate = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                candidate["status"] = old["status"]
        return self._admit(t.res, candidate)

    async def _patch(self, request: web.Request, t: _Target) -> web.StreamResponse:
        content_type = request.content_type
        kind: PatchKind
        if content_type == _MERGE:
            kind = "merge"
        elif content_type == _STRATEGIC and t.res.crd is None:
            kind = "strategic"
        elif content_type == _JSON_PATCH:
            kind = "json"
        else:
            accepted = [_JSON_PATCH, _MERGE] + ([] if t.res.crd else [_STRATEGIC])
            raise _HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )
        patch = self._json(await request.text())
        res, namespace = t.res, t.namespace or ""
        if kind != "json" and not isinstance(patch, dict):
            raise _bad_request("a merge patch must be a JSON object")
        if kind != "json" and res.crd is None and res.view == "plain":
            # the store's own copy-on-write patch: the hot path of status updates
            updated = self.store.patch(
                res.kind_in_store,
                namespace,
                t.name,
                patch,
                patch_type=kind,
                subresource=t.sub or None,
            )
            return _json_response(200, self._view(res, updated))
        stored = self.store.get(res.kind_in_store, namespace, t.name)
        old = self._view(res, stored)
        if kind == "json":
            new = apply_json_patch(old, patch)
        elif kind == "merge":
            new = merge_patch(old, patch)
        else:
            new = strategic_merge_patch(old, patch)
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise InvalidObjectError("a patch must leave an object with metadata", kind=res.kind)
        new["metadata"] = {**new["metadata"], "name": t.name}
        if res.namespaced:
            new["metadata"]["namespace"] = namespace
        new = self._unview(res, new)
        if res.crd is not None:
            new = self._admit_update(t, stored, new)
        updated = self.store.replace(new, subresource=t.sub or None)
        return _json_response(200, self._view(res, updated))

    def _delete(
        self, t: _Target, name: str, options: Mapping[str, Any], query: Mapping[str, str]
    ) -> web.StreamResponse:
        grace = options.get("gracePeriodSeconds")
        if grace is None and query.get("gracePeriodSeconds"):
            try:
                grace = int(query["gracePeriodSeconds"])
            except ValueError as exc:
                raise _bad_request("invalid gracePeriodSeconds") from exc
        pre = options.get("preconditions") or {}
        kind, namespace = t.res.kind_in_store, t.namespace or ""
        last = self.store.delete(
            kind,
            namespace,
            name,
            grace_period_seconds=None if grace is None else int(grace),
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
        )
        still = self.store.try_get(kind, namespace, name)
        if still is not None:
            return _json_response(200, self._view(t.res, still))
        if t.res.return_deleted:
            return _json_response(200, self._view(t.res, last))
        details: dict[str, Any] = {"name": name, "kind": t.res.name}
        if t.res.group:
            details["group"] = t.res.group
        if last["metadata"].get("uid"):
            details["uid"] = last["metadata"]["uid"]
        return _json_response(200, _success(200, details))

    def _delete_collection(
        self, request: web.Request, t: _Target, options: Mapping[str, Any]
    ) -> web.StreamResponse:
        items, _ = self._selected(t, _parse_filter(request.query))
        grace = options.get("gracePeriodSeconds")
        if grace is None and request.query.get("gracePeriodSeconds"):
            grace = request.query["gracePeriodSeconds"]
        deleted: list[ApiObject] = []
        for obj in items:
            meta = obj["metadata"]
            with contextlib.suppress(NotFoundError):
                deleted.append(
                    self._view(
                        t.res,
                        self.store.delete(
                            t.res.kind_in_store,
                            meta.get("namespace", ""),
                            meta["name"],
                            grace_period_seconds=None if grace is None else int(grace),
                        ),
                    )
                )
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": deleted,
        }
        return _json_response(200, body)

    def _bind(self, t: _Target, name: str, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Binding") != "Binding":
            raise _bad_request(f"expected a Binding, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        target = body.get("target") or {}
        node = target.get("name") if isinstance(target, Mapping) else None
        if not name or (meta.get("name") and meta["name"] != name):
            raise _bad_request("the Binding's metadata.name must name the pod on the URL")
        if not isinstance(node, str) or not node:
            raise InvalidObjectError(
                f'Binding "{name}" is invalid: target.name: Required value',
                kind="Binding",
                name=name,
            )
        self.store.bind(
            t.namespace or "default",
            name,
            node,
            uid=meta.get("uid") or None,
            annotations=meta.get("annotations") or None,
        )
        return _json_response(201, _success(201))

    def _evict(self, t: _Target, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Eviction") != "Eviction":
            raise _bad_request(f"expected an Eviction, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise _bad_request("the Eviction's metadata.name must name the pod on the URL")
        options = body.get("deleteOptions") or {}
        pre = options.get("preconditions") or {}
        namespace = t.namespace or "default"
        if pre.get("resourceVersion"):
            current = self.store.get("Pod", namespace, t.name)["metadata"].get("resourceVersion")
            if str(pre["resourceVersion"]) != current:
                raise ConflictError(
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: {current}",
                    kind="Pod",
                    name=t.name,
                )
        grace = options.get("gracePeriodSeconds")
        self.store.evict(
            namespace,
            t.name,
            uid=pre.get("uid") or None,
            grace_period_seconds=None if grace is None else int(grace),
        )
        return _json_response(201, _success(201))

    # ----------------------------------------------------------------- namespaces

    def _namespace_object(self, name: str) -> ApiObject:
        obj = self._namespaces.get(name)
        if obj is None:
            created = self._started_at
            obj = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid5(_NS_UUID, name)),
                    "resourceVersion": "1",
                    "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
                    "labels": {"kubernetes.io/metadata.name": name},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self._namespaces[name] = obj
        return obj

    def _namespace_names(self) -> list[str]:
        names = set(_DEFAULT_NAMESPACES) | set(self._namespaces)
        for kind in self.store.kinds():
            if not self.store.is_cluster_scoped(kind):
                names.update(o["metadata"].get("namespace", "") for o in self.store.list(kind)[0])
        names.discard("")
        return sorted(names)

    async def _serve_namespace(self, request: web.Request, t: _Target) -> web.StreamResponse:
        method = request.method
        names = self._namespace_names()
        if t.sub:
            raise _HttpError(404, "NotFound", _NOT_FOUND_MESSAGE)
        if method == "GET" and t.name:
            if t.name not in names:
                raise NotFoundError(f'namespaces "{t.name}" not found', name=t.name)
            obj = self._namespace_object(t.name)
            if self._wants_table(request):
                return _json_response(200, self._table(t.res, [obj], None, request.query))
            return _json_response(200, obj)
        if method == "GET" and not _truthy(request.query.get("watch")):
            flt = _parse_filter(request.query)
            items = [o for n in names if flt.matches(o := self._namespace_object(n))]
            meta = {"resourceVersion": str(self.store.resource_version)}
            if self._wants_table(request):
                return _json_response(200, self._table(t.res, items, meta, request.query))
            listing = {"kind": "NamespaceList", "apiVersion": "v1", "metadata": meta}
            return _json_response(200, {**listing, "items": items})
        if method == "POST" and not t.name:
            body = self._incoming(t, await self._body(request))
            name = body["metadata"].get("name")
            if not isinstance(name, str) or not name:
                raise InvalidObjectError(
                    "Namespace is invalid: metadata.name: Required value", kind="Namespace"
                )
            if name in names:
                raise AlreadyExistsError(f'namespaces "{name}" already exists', name=name)
            obj = self._namespace_object(name)
            labels = body["metadata"].get("labels") or {}
            obj["metadata"]["labels"] = {**labels, **obj["metadata"]["labels"]}
            return _json_response(201, obj)
        if method == "DELETE" and t.name:
            if t.name not in names:
                raise NotFoundError(f'namespaces "{t.name}" not found', name=t.name)
            if t.name in _DEFAULT_NAMESPACES:
                raise _HttpError(
                    403,
                    "Forbidden",
                    f'namespaces "{t.name}" is forbidden: this namespace may not be deleted',
                )
            obj = self._namespace_object(t.name)
            for kind in self.store.kinds():
                if self.store.is_cluster_scoped(kind):
                    continue
                for item in self.store.list(kind, t.name)[0]:
                    with contextlib.suppress(ApiError):
                        self.store.delete(
                            kind, t.name, item["metadata"]["name"], grace_period_seconds=0
                        )
            self._namespaces.pop(t.name, None)
            return _json_response(200, {**obj, "status": {"phase": "Terminating"}})
        raise _HttpError(405, "MethodNotAllowed", f"{method} is not allowed on namespaces")

    # ----------------------------------------------------------------- tables

    @staticmethod
    def _wants_table(request: web.Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _age(self, timestamp: Any) -> str:
        if not isinstance(timestamp, str) or not timestamp:
            return "<unknown>"
        try:
            return human_duration(self._wall() - parse_rfc3339(timestamp))
        except ValueError:
            return "<invalid>"

    def _age_at(self, path: str) -> Cell:
        return lambda o: self._age(_path(o, path))

    def _columns(self, res: ResourceInfo) -> list[_Column]:
        def age(o: Mapping[str, Any]) -> str:
            return self._age((o.get("metadata") or {}).get("creationTimestamp"))

        name = _name_column()
        if res.kind == "Pod":
            return [
                name,
                _Column("Ready", _pod_ready),
                _Column("Status", _pod_status),
                _Column("Restarts", _pod_restarts),
                _Column("Age", age),
                _Column("IP", lambda o: _or_none(_path(o, "status.podIP")), priority=1),
                _Column("Node", lambda o: _or_none(_path(o, "spec.nodeName")), priority=1),
                _Column(
                    "Nominated Node",
                    lambda o: _or_none(_path(o, "status.nominatedNodeName")),
                    priority=1,
                ),
            ]
        if res.kind == "Node":
            return [
                name,
                _Column("Status", _node_status),
                _Column("Roles", _node_roles),
                _Column("Age", age),
                _Column("Version", lambda o: _path(o, "status.nodeInfo.kubeletVersion") or ""),
            ]
        if res.kind == "Event":
            return [
                _Column("Last Seen", lambda o: self._age(_event_last_seen(o))),
                _Column("Type", lambda o: o.get("type", "")),
                _Column("Reason", lambda o: o.get("reason", "")),
                _Column("Object", _event_object),
                _Column("Message", lambda o: o.get("message", o.get("note", ""))),
                _Column(name.name, name.cell, priority=1, format="name"),
            ]
        if res.kind == "Namespace":
            return [
                name,
                _Column("Status", lambda o: _path(o, "status.phase")),
                _Column("Age", age),
            ]
        if res.kind == "PriorityClass":
            return [
                name,
                _Column("Value", lambda o: o.get("value", 0), type="integer"),
                _Column("Global-Default", lambda o: bool(o.get("globalDefault")), type="boolean"),
                _Column("Age", age),
            ]
        if res.kind == "PodDisruptionBudget":
            return [
                name,
                _Column("Min Available", lambda o: _or_na(_path(o, "spec.minAvailable"))),
                _Column("Max Unavailable", lambda o: _or_na(_path(o, "spec.maxUnavailable"))),
                _Column("Age", age),
            ]
        if res.kind == "Lease":
            return [
                name,
                _Column("Holder", lambda o: _path(o, "spec.holderIdentity") or ""),
                _Column("Age", age),
            ]
        if res.crd is not None and res.crd.printer_columns:
            columns = [name]
            for pc in res.crd.printer_columns:
                if pc.type == "date":
                    columns.append(
                        _Column(pc.name, self._age_at(pc.json_path), "date", pc.priority)
                    )
                else:
                    columns.append(
                        _Column(pc.name, _at(pc.json_path), pc.type, pc.priority, pc.format)
                    )
            return columns
        return [name, _Column("Age", age)]

    def _table(
        self,
        res: ResourceInfo,
        objects: Iterable[Mapping[str, Any]],
        meta: Mapping[str, Any] | None,
        query: Mapping[str, str],
    ) -> dict[str, Any]:
        columns = self._columns(res)
        include = query.get("includeObject", "Metadata")
        rows: list[dict[str, Any]] = []
        for obj in objects:
            row: dict[str, Any] = {"cells": [c.cell(obj) for c in columns]}
            if include == "Object":
                row["object"] = obj
            elif include != "None":
                row["object"] = {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata") or {},
                }
            rows.append(row)
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": dict(meta) if meta else {},
            "columnDefinitions": [
                {
                    "name": c.name,
                    "type": c.type,
                    "format": c.format,
                    "description": c.name,
                    "priority": c.priority,
                }
                for c in columns
            ],
            "rows": rows,
        }


class _WatchShape:
    """Turns the store's events into the lines of one watch: the served view, the
    selectors (an object leaving them is DELETED, one entering them ADDED), Tables."""

    def __init__(
        self,
        emulator: ApiEmulator,
        res: ResourceInfo,
        flt: _Filter,
        table: bool,
        query: Mapping[str, str],
    ) -> None:
        self.emulator = emulator
        self.res = res
        self.flt = flt
        self.table = table
        self.query = query
        self.seen: set[tuple[str, str]] = set()

    def line(self, ev: WatchEvent) -> bytes | None:
        res = self.res
        if ev.type == "BOOKMARK":
            if self.table:
                return None
            obj: ApiObject = {"apiVersion": res.api_version, "kind": res.kind, **ev.obj}
            return _dumps({"type": "BOOKMARK", "object": obj}) + b"\n"
        obj = self.emulator._view(res, ev.obj)
        kind = ev.type
        if not self.flt.everything:
            key = _key(obj)
            if self.flt.matches(obj):
                if kind == "DELETED":
                    self.seen.discard(key)
                else:
                    if kind == "MODIFIED" and key not in self.seen:
                        kind = "ADDED"
                    self.seen.add(key)
            elif key in self.seen:
                self.seen.discard(key)
                kind = "DELETED"
            else:
                return None
        if self.table:
            meta = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            obj = self.emulator._table(res, [obj], meta, self.query)
        return _dumps({"type": kind, "object": obj}) + b"\n"


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))
