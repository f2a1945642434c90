"""The controller's own API calls (layer 4): raw JSON on one aiohttp session.

kopf has no public client for arbitrary calls, and :mod:`scheduler.kube` (the package that owns
kubernetes-asyncio) is a sibling this package must not import. The controller needs a few
calls (get and create a Queue; read owners, create and patch PodGroups, patch pods), so they
are made here with aiohttp, authenticated with the :class:`kopf.ConnectionInfo` that the
controller's login handler produces (the same credentials kopf itself uses).

:class:`ApiClient` makes the calls on paths; :class:`QueueClient` adds the Queue calls.
Errors: a reply that is not a success (nor the 404 or 409 a method expects) raises
:class:`ApiStatusError`; the network's own (``aiohttp.ClientError``, ``TimeoutError``) pass
through. Every request has a deadline (``timeout``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final, Self
from urllib.parse import quote

import aiohttp
import kopf

from scheduler.schema import GROUP, VERSION

__all__ = ["MERGE_PATCH", "QUEUES_PATH", "ApiClient", "ApiStatusError", "QueueClient"]

QUEUES_PATH: Final = f"/apis/{GROUP}/{VERSION}/queues"
MERGE_PATCH: Final = "application/merge-patch+json"


class ApiStatusError(Exception):
    """A reply of the API server that is not a success (or an expected 404/409)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        message = body
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, Mapping) and isinstance(decoded.get("message"), str):
            message = decoded["message"]
        super().__init__(f"{method} {path}: {status} {message}".rstrip())

    @property
    def transient(self) -> bool:
        """Worth trying again later: the server's trouble (5xx), a rate limit (429), or an
        expired login (401, once logged in again), not a refusal of the request itself."""
        return self.status >= 500 or self.status in (401, 429)


class _Session:
    """One aiohttp session with the controller's credentials; an async context manager."""

    def __init__(self, info: kopf.ConnectionInfo, *, timeout: float = 10.0) -> None:
        self._server = info.server.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "sluice-controller"}
        headers.update(info.as_http_headers())
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=info.as_ssl_context()),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            trust_env=info.trust_env,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, str]:
        data = None if body is None else json.dumps(dict(body))
        headers = {} if body is None else {"Content-Type": content_type}
        async with self._session.request(
            method, self._server + path, data=data, headers=headers
        ) as resp:
            return resp.status, await resp.text()


def _object(text: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


class ApiClient(_Session):
    """Raw JSON calls on paths. Use as ``async with ApiClient(info) as client``, or keep
    one and :meth:`close` it."""

    async def _call(
        self,
        method: str,
        path: str,
        *,
        missing: int,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any] | None:
        status, text = await self._request(method, path, body, content_type)
        if status == missing:
            return None
        if not 200 <= status < 300:
            raise ApiStatusError(method, path, status, text)
        return _object(text) or {}

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None if there is none (404)."""
        return await self._call("GET", path, missing=404)

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """POST ``body`` to the collection ``path``: the object created, or None when one
        of that name exists already (409)."""
        return await self._call("POST", path, missing=409, body=body)

    async def patch(
        self, path: str, body: Mapping[str, Any], *, content_type: str = MERGE_PATCH
    ) -> dict[str, Any] | None:
        """Patch the object at ``path`` (a JSON merge patch by default): the object after
        it, or None if there is none (404)."""
        return await self._call("PATCH", path, missing=404, body=body, content_type=content_type)


class QueueClient(_Session):
    """Get and create cluster-scoped Queues. Use as ``async with QueueClient(info) as client``."""

    async def get(self, name: str) -> dict[str, Any] | None:
        """The Queue ``name``, or None if there is none."""
        path = f"{QUEUES_PATH}/{quote(name, safe='')}"
        status, text = await self._request("GET", path)
        if status == 404:
            return None
        if status != 200:
            raise ApiStatusError("GET", path, status, text)
        return _object(text)

    async def create(self, body: Mapping[str, Any]) -> bool:
        """Create a Queue. True if created, False if one of that name exists already (409)."""
        status, text = await self._request("POST", QUEUES_PATH, body)
        if status == 409:
            return False
        if status not in (200, 201, 202):
            raise ApiStatusError("POST", QUEUES_PATH, status, text)
        return True
