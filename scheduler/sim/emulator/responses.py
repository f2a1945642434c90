"""What the Kubernetes API emulator puts on the wire besides objects (layer 4).

The media types it reads and writes, its JSON encoding (compact, UTF-8), and the
Kubernetes ``Status`` bodies: :func:`status_of` turns an
:class:`~scheduler.api.errors.ApiError` of the store into the ``Status`` (reason,
details, causes, HTTP code) the API server answers for it; :class:`HttpError` is an
error of the request itself (bad request, not found, method not allowed, unsupported
media type) that the dispatcher answers with :func:`failure`; :func:`success` is the
body of a successful DELETE, binding or eviction. Pure: no I/O, nothing of aiohttp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    GoneError,
    InvalidObjectError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.sim.emulator.resource_catalog import ResourceInfo

__all__ = [
    "JSON",
    "JSON_PATCH",
    "MERGE",
    "NOT_FOUND_MESSAGE",
    "STRATEGIC",
    "HttpError",
    "bad_request",
    "dumps",
    "failure",
    "status_of",
    "success",
]

#: The media types of JSON bodies and of the three patch formats served.
JSON: Final = "application/json"
MERGE: Final = "application/merge-patch+json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
_PDB_PREFIX: Final = "Cannot evict pod as it would violate the pod's disruption budget."
#: The message of a 404 for a path that names nothing served.
NOT_FOUND_MESSAGE: Final = "the server could not find the requested resource"


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class HttpError(Exception):
    """An error that is not an ApiError of the store: bad request, unsupported media type."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def bad_request(message: str) -> HttpError:
    """A 400 BadRequest error."""
    return HttpError(400, "BadRequest", message)


def failure(
    code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A ``Status`` of failure."""
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


def success(code: int, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``Status`` of success."""
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
    return failure(exc.code, reason, message, details)
