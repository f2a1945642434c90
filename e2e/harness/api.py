"""Raw JSON requests and list+watch against the API server (no client models).

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import anyio
import anyio.abc
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from harness.constants import API_VERSION, HARNESS_USER_AGENT, JSON


class ApiFailure(Exception):
    """A non-2xx reply (``status``; the ``Status`` object in ``body``), or ``status`` 0
    when the server could not be reached or did not answer in time."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = str(self.body.get("reason") or "")
        super().__init__(f"{what}: HTTP {status} {self.reason}: {self.body.get('message', '')}")


class Api:
    """Raw JSON over one kubernetes-asyncio ``ApiClient`` (authentication, TLS and the
    server address come from the kubeconfig). Every request has a timeout."""

    def __init__(self, client: ApiClient, *, timeout: float = 30.0) -> None:
        self.client = client
        self.timeout = timeout

    @classmethod
    async def connect(cls, kubeconfig: str | None, *, timeout: float = 30.0) -> Api:
        configuration = Configuration()
        await kube_config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration
        )
        client = ApiClient(configuration)
        client.user_agent = HARNESS_USER_AGENT
        return cls(client, timeout=timeout)

    async def close(self) -> None:
        await self.client.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str,
        timeout: float | aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            return await self.client.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiFailure(0, {"message": repr(exc)}, f"{method} {path}") from exc

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One request; the decoded JSON reply. Raises :class:`ApiFailure`."""
        resp = await self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout or self.timeout,
        )
        try:
            raw = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiFailure(0, {"message": repr(exc)}, f"{method} {path}") from exc
        finally:
            resp.release()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"message": raw[:300].decode("utf-8", "replace")}
        if not 200 <= resp.status < 300:
            raise ApiFailure(resp.status, doc, f"{method} {path}")
        return doc if isinstance(doc, dict) else {"value": doc}

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 60
    ) -> AsyncIterator[dict[str, Any]]:
        """The lines of one watch from ``resource_version`` until the server ends it.
        ``ERROR`` lines are yielded as they come (the caller decides)."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        limit = aiohttp.ClientTimeout(total=timeout_seconds + 15, sock_connect=10)
        resp = await self._send(
            "GET", path, query=query, body=None, content_type=JSON, timeout=limit
        )
        try:
            if resp.status != 200:
                raw = await resp.read()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"message": raw[:300].decode("utf-8", "replace")}
                raise ApiFailure(resp.status, body, f"watch {path}")
            while True:
                try:
                    line = await resp.content.readline()
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise ApiFailure(0, {"message": repr(exc)}, f"watch {path}") from exc
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release()


def core_path(
    plural: str, namespace: str | None = None, name: str = "", sub: str = "", *, group: str = ""
) -> str:
    """The URL path of a collection, an object or a subresource (``group`` ``g/v``;
    core v1 when empty)."""
    base = f"/apis/{group}" if group else "/api/v1"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
        if sub:
            base += f"/{sub}"
    return base


def custom_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    return core_path(plural, namespace, name, sub, group=API_VERSION)


class ListWatch:
    """List, then watch, forever, for one collection: ``on_sync(items)`` after every
    (re)list, ``on_event(type, obj)`` for every ADDED/MODIFIED/DELETED. Relists on 410,
    reconnects on any other failure (the API server restarting, a cut watch)."""

    def __init__(
        self,
        api: Api,
        path: str,
        on_sync: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.api = api
        self.path = path
        self.on_sync = on_sync
        self.on_event = on_event
        self.resource_version = ""
        self.synced = anyio.Event()
        self.relists = 0
        self.reconnects = 0

    async def _list(self) -> None:
        doc = await self.api.request("GET", self.path, timeout=60)
        self.resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        self.on_sync([i for i in doc.get("items") or () if isinstance(i, dict)])
        self.synced.set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                    if not started:
                        started = True
                        task_status.started()
                async for line in self.api.watch(self.path, resource_version=self.resource_version):
                    kind, obj = line.get("type"), line.get("object") or {}
                    if kind == "ERROR":
                        code = int(obj.get("code") or 500)
                        raise ApiFailure(code, obj, f"watch {self.path}")
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(kind, obj)
                    if rv:
                        self.resource_version = rv
            except ApiFailure as exc:
                if exc.status == 410:
                    must_list = True
                    self.relists += 1
                else:
                    self.reconnects += 1
                    await anyio.sleep(0.2)
