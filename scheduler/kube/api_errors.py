"""Errors of the Kubernetes client (layer 4, kube): library failures translated into the
tree of :mod:`scheduler.api.errors`.

Every failure of a request leaves ``scheduler.kube`` as an
:class:`~scheduler.api.errors.ApiError` subclass, chained to the library's exception with
``raise ... from``: 404 NotFoundError, 409 AlreadyExistsError (reason ``AlreadyExists``) or
ConflictError, 410 GoneError, 422 InvalidObjectError (with the field causes of the
``Status``), 429 TooManyRequestsError; a 403 naming the cause ``NamespaceTerminating`` (a
create in a namespace being deleted) is a NamespaceTerminatingError. What leaves the
outcome of a write unknown is an :class:`~scheduler.api.errors.AmbiguousError`: a 5xx, a
timeout once connected, the connection reset or closed before the reply, a reply that
cannot be read. What shows the request was never applied is a plain ServerError: no
connection could be made (refused, DNS, a connect timeout), another status (400, 401, 403,
...).
:func:`api_errors` and :func:`error_from_status` are the two helpers; nothing
else in the package catches library exceptions. Pure functions, no I/O.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.api.errors import (
    AlreadyExistsError,
    AmbiguousError,
    ApiError,
    ConflictError,
    FieldCause,
    GoneError,
    InvalidObjectError,
    NamespaceTerminatingError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)

__all__ = ["api_errors", "error_from_status", "translate_error"]


def _status_document(body: object) -> Mapping[str, Any]:
    """The ``Status`` object of an error reply, or an empty mapping if there is none."""
    if isinstance(body, Mapping):
        return body
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", "replace")
    if isinstance(body, str) and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            return {"message": body.strip()[:500]}
        if isinstance(parsed, Mapping):
            return parsed
    return {}


def error_from_status(
    status: int, body: object = None, *, kind: str = "", name: str = ""
) -> ApiError:
    """The ApiError for an HTTP reply with ``status`` (not 2xx) and ``body`` (a Status
    object as bytes, text or a mapping, or nothing). ``kind`` and ``name`` name the
    object for the error; when empty they are taken from the Status' details."""
    doc = _status_document(body)
    details = doc.get("details") if isinstance(doc.get("details"), Mapping) else {}
    assert isinstance(details, Mapping)
    reason = str(doc.get("reason") or "")
    message = str(doc.get("message") or reason or f"HTTP {status}")
    kind = kind or str(details.get("kind") or "")
    name = name or str(details.get("name") or "")
    if status == 404:
        return NotFoundError(message, kind=kind, name=name)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExistsError(message, kind=kind, name=name)
        return ConflictError(message, kind=kind, name=name)
    if status == 410:
        return GoneError(message, kind=kind, name=name)
    if status == 422:
        causes = tuple(
            FieldCause(str(c.get("field") or ""), str(c.get("message") or ""))
            for c in details.get("causes") or ()
            if isinstance(c, Mapping)
        )
        return InvalidObjectError(message, kind=kind, name=name, causes=causes)
    if status == 429:
        return TooManyRequestsError(message, kind=kind, name=name)
    if status == 403 and _NAMESPACE_TERMINATING in _cause_reasons(details):
        return NamespaceTerminatingError(f"HTTP 403 {reason}: {message}", kind=kind, name=name)
    label = f"HTTP {status} {reason}".rstrip() if status else "request failed"
    if status >= 500:
        return AmbiguousError(f"{label}: {message}", kind=kind, name=name)
    refused = ServerError(f"{label}: {message}", kind=kind, name=name)
    if status:
        refused.code = status  # a 400, 401, 403...: retrying will not help
    return refused


#: The cause a 403 of the NamespaceLifecycle admission names (``v1.NamespaceTerminatingCause``).
_NAMESPACE_TERMINATING: Final = "NamespaceTerminating"


def _cause_reasons(details: Mapping[str, Any]) -> set[str]:
    """The ``reason`` of each cause in a Status' ``details``."""
    return {
        str(c.get("reason") or "") for c in details.get("causes") or () if isinstance(c, Mapping)
    }


def translate_error(exc: BaseException, *, kind: str = "", name: str = "") -> ApiError:
    """The ApiError for an exception raised by kubernetes-asyncio or aiohttp.

    An ApiError is returned unchanged. The caller raises the result ``from exc``. Failures
    to connect are refusals (ServerError); failures once the request may have been sent are
    ambiguous (AmbiguousError); see the module docstring.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        return error_from_status(int(exc.status or 0), exc.body, kind=kind, name=name)
    if isinstance(exc, aiohttp.ClientResponseError):
        return error_from_status(exc.status, exc.message, kind=kind, name=name)
    if isinstance(exc, _NOT_SENT):
        return ServerError(f"cannot reach the API server: {exc!r}", kind=kind, name=name)
    if isinstance(exc, TimeoutError):
        return AmbiguousError("the request to the API server timed out", kind=kind, name=name)
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | OSError):
        return AmbiguousError(
            f"the connection to the API server was lost before the reply: {exc!r}",
            kind=kind,
            name=name,
        )
    if isinstance(exc, ValueError):
        return AmbiguousError(f"malformed reply from the API server: {exc}", kind=kind, name=name)
    return ServerError(f"API request failed: {exc!r}", kind=kind, name=name)


#: Failures that show the request never reached the API server: a refusal, not ambiguous.
_NOT_SENT: Final = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
    ConnectionRefusedError,
    aiohttp.InvalidURL,
)


_LIBRARY_ERRORS: Final = (ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError)


@contextlib.contextmanager
def api_errors(kind: str = "", name: str = "") -> Iterator[None]:
    """Translate the library errors raised inside the block (see :func:`translate_error`).

    ApiErrors and cancellation pass through untouched. Wrap only library calls and
    decoding: a ValueError of our own code would become a ServerError.
    """
    try:
        yield
    except ApiError:
        raise
    except _LIBRARY_ERRORS as exc:
        raise translate_error(exc, kind=kind, name=name) from exc
