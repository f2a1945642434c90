"""The controller's own API calls: get and create a Queue (layer 4).

kopf has no public client for arbitrary calls, and :mod:`scheduler.kube` (the package that owns
kubernetes-asyncio) is a sibling this package must not import. The controller needs two
calls, so they are made here with aiohttp, authenticated with the :class:`kopf.ConnectionInfo`
that the controller's login handler produces (the same credentials kopf itself uses).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import kopf

from scheduler.schema import GROUP, VERSION

__all__ = ["QUEUES_PATH", "ApiStatusError", "QueueClient"]

QUEUES_PATH: Final = f"/apis/{GROUP}/{VERSION}/queues"


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


class QueueClient:
    """Get and create cluster-scoped Queues. Use as ``async with QueueClient(info) as client``."""

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

    async def __aenter__(self) -> QueueClient:
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

    async def get(self, name: str) -> dict[str, Any] | None:
        """The Queue ``name``, or None if there is none."""
        path = f"{QUEUES_PATH}/{quote(name, safe='')}"
        async with self._session.get(self._server + path) as resp:
            text = await resp.text()
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise ApiStatusError("GET", path, resp.status, text)
        obj = json.loads(text)
        return obj if isinstance(obj, dict) else None

    async def create(self, body: Mapping[str, Any]) -> bool:
        """Create a Queue. True if created, False if one of that name exists already (409)."""
        async with self._session.post(self._server + QUEUES_PATH, json=dict(body)) as resp:
            text = await resp.text()
            if resp.status == 409:
                return False
            if resp.status not in (200, 201, 202):
                raise ApiStatusError("POST", QUEUES_PATH, resp.status, text)
        return True
