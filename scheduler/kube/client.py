"""The connection to a real API server (layer 4, kube): one rate-limited client.

Job: build one rate-limited kubernetes-asyncio ``ApiClient`` for the whole process and
offer the rest of ``scheduler.kube`` a raw-JSON way to use it. Contracts:

* **Configuration**: :func:`scheduler.kube.client_config.load_configuration`.
* **Every request** made through :attr:`KubeClient.api` (this module's :meth:`request`,
  the watch streams, and any generated ``CoreV1Api(client.api)`` call) first takes a
  token from the client's :class:`~scheduler.kube.ratelimit.TokenBucket`
  (kube-scheduler's ``--kube-api-qps`` 50 and ``--kube-api-burst`` 100 by default) and
  gets a ``_request_timeout`` (the client's default unless the call gives one): the
  library's default is none at all.
* **Errors**: every failure leaves this module as a
  :class:`scheduler.api.errors.ApiError` subclass (:mod:`scheduler.kube.api_errors`).
* **Raw JSON**: :meth:`KubeClient.request` and :meth:`KubeClient.stream` never build the
  client's model objects, which are several times slower and fail on some replies (a
  binding's ``Status``).
* **The hot path**: :meth:`request` and :meth:`stream` do not go through the library's
  ``call_api`` either: they take the token, ask the library for the credentials of the
  moment (``update_params_for_auth``, so rotated tokens are followed) and send on an
  aiohttp session of their own over the library's connector (same TLS context, same
  connection pool). That session does not ``trust_env``: the library's does, and then
  aiohttp looks up ``~/.netrc`` and the proxy variables in a worker thread on every
  request (two thread hops per call, about a third of the client's CPU per bind).
  Instead the proxy of the configuration, or else of the environment (``HTTPS_PROXY``,
  ``NO_PROXY``...), is resolved once for the API server's address; ``.netrc`` is not
  read (kubeconfig credentials are the only ones a Kubernetes client uses).

One :class:`KubeClient` per process, used from one event loop. Close it (``async with``).
:meth:`KubeClient.sibling` gives a second client on the same configuration with a
limiter of its own (the event writer's, so that events never take a bind's token).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import ApiClient, Configuration
from yarl import URL

from scheduler.api.errors import ServerError
from scheduler.kube.api_errors import api_errors, error_from_status
from scheduler.kube.client_config import load_configuration
from scheduler.kube.ratelimit import LimitedApiClient, TokenBucket
from scheduler.kube.resource_paths import JSON
from scheduler.ports import Clock

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "DEFAULT_TIMEOUT", "JsonLineReader", "KubeClient"]

#: kube-scheduler's ``--kube-api-qps`` and ``--kube-api-burst`` defaults.
DEFAULT_QPS: Final[float] = 50.0
DEFAULT_BURST: Final[int] = 100
#: The ``_request_timeout`` (seconds) of a request that does not give its own.
DEFAULT_TIMEOUT: Final[float] = 30.0


class JsonLineReader:
    """Reads newline-delimited JSON objects (a watch stream) from an aiohttp response.

    :meth:`read` returns the next object, or None at the end of the stream. Read errors
    and malformed lines raise ServerError (chained). Lines may be of any length.
    ``decode`` turns one line into its object (default: ``json.loads``, checked to be an
    object); it raises ServerError on a malformed line.
    """

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        *,
        kind: str = "",
        decode: Callable[[bytes], dict[str, Any]] | None = None,
    ) -> None:
        self._response = response
        self._kind = kind
        self._decode_line = decode
        self._buffer = bytearray()
        self._eof = False

    async def read(self) -> dict[str, Any] | None:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if line.strip():
                    return self._decode(line)
                continue
            if self._eof:
                rest = bytes(self._buffer)
                self._buffer.clear()
                return self._decode(rest) if rest.strip() else None
            with api_errors(self._kind):
                chunk = await self._response.content.readany()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True

    def _decode(self, line: bytes) -> dict[str, Any]:
        if self._decode_line is not None:
            return self._decode_line(line)
        with api_errors(self._kind):
            value = json.loads(line)
        if not isinstance(value, dict):
            raise ServerError(f"a watch line is not a JSON object: {line[:200]!r}", kind=self._kind)
        return value


class KubeClient:
    """The process' connection to the API server: a rate-limited ApiClient plus raw-JSON
    helpers. ``api`` can be handed to generated API classes (``CoreV1Api(client.api)``);
    their calls go through the same limiter and get the same default timeout.

    ``qps``/``burst`` size the token bucket; ``timeout`` is the default
    ``_request_timeout`` in seconds; ``clock`` drives the limiter (tests use a fake).
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.configuration = configuration
        self.limiter = TokenBucket(qps, burst, clock=clock)
        self.timeout = timeout
        self.api: ApiClient = LimitedApiClient(configuration, self.limiter, timeout)
        self._session: aiohttp.ClientSession | None = None
        self._proxy: tuple[str | None, Any] | None = None

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> KubeClient:
        """A client configured by :func:`load_configuration`. Raises ConfigError."""
        configuration = await load_configuration(kubeconfig, context=context, environ=environ)
        return cls(configuration, qps=qps, burst=burst, timeout=timeout, clock=clock)

    def sibling(self, *, qps: float, burst: int) -> KubeClient:
        """A second client on the same configuration, timeout and clock, with a rate
        limiter and a connection pool of its own (the event writer's: its requests never
        take a token or a connection a bind is waiting for). The caller closes it."""
        return KubeClient(
            self.configuration,
            qps=qps,
            burst=burst,
            timeout=self.timeout,
            clock=self.limiter.clock,
        )

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    async def close(self) -> None:
        """Close the connection pool. Idempotent."""
        if self._session is not None:
            await self._session.close()  # not the connector: the library's, closed next
        await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _session_and_proxy(self) -> tuple[aiohttp.ClientSession, tuple[str | None, Any]]:
        """The hot path's session (made on first use, inside the event loop) and proxy."""
        if self._session is None or self._proxy is None:
            library: aiohttp.ClientSession = self.api.rest_client.pool_manager
            self._session = aiohttp.ClientSession(
                connector=library.connector,
                connector_owner=False,
                trust_env=False,
                read_bufsize=2**21,  # the library's: watch lines of large objects
            )
            proxy: str | None = self.configuration.proxy or None
            proxy_auth = None
            if proxy is None:
                with contextlib.suppress(LookupError):
                    url, proxy_auth = get_env_proxy_for_url(URL(self.host))
                    proxy = str(url)
            self._proxy = (proxy, proxy_auth)
        return self._session, self._proxy

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        timeout: float | aiohttp.ClientTimeout | None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """Take a token, then send one request on the hot path's session (see the module's
        docstring). ``body`` is encoded as JSON; ``content_type`` defaults to JSON;
        ``extra_headers`` are added (``Impersonate-User``)."""
        await self.limiter.acquire()
        session, (proxy, proxy_auth) = self._session_and_proxy()
        headers = {**self.api.default_headers, "Accept": JSON, **(extra_headers or {})}
        params = list(query)
        await self.api.update_params_for_auth(headers, params, ["BearerToken"])
        data: bytes | None = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type or JSON
        url = self.host + path
        if params:
            url += "?" + urlencode(params)
        if not isinstance(timeout, aiohttp.ClientTimeout):
            timeout = aiohttp.ClientTimeout(total=timeout or self.timeout)
        response: aiohttp.ClientResponse = await session.request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=timeout,
            proxy=proxy,
            proxy_auth=proxy_auth,
            proxy_headers=self.configuration.proxy_headers,
            server_hostname=self.configuration.tls_server_name or None,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        kind: str = "",
        name: str = "",
        decode: bool = True,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request; the reply body as JSON (an empty dict if there is none).

        A reply outside 2xx raises the ApiError for its status (``kind``/``name`` name
        the object in the error); so do timeouts and connection errors. Makes one attempt.
        ``decode=False``: the caller has no use for a successful reply (an event write),
        which is then read but not decoded, and ``{}`` is returned. ``headers`` are sent
        besides the client's own (``sluice doctor``'s ``Impersonate-User``).
        """
        data = await self.request_bytes(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout,
            kind=kind,
            name=name,
            headers=headers,
        )
        if not decode or not data.strip():
            return {}
        with api_errors(kind, name):
            value = json.loads(data)
        if not isinstance(value, dict):
            raise ServerError(f"expected a JSON object from {method} {path}", kind=kind, name=name)
        return value

    async def request_bytes(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
        kind: str = "",
        name: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """:meth:`request`, the reply's body left undecoded (the informers decode list
        pages themselves: :mod:`scheduler.kube.decode`)."""
        with api_errors(kind, name):
            response = await self._send(
                method,
                path,
                query=query,
                body=body,
                content_type=content_type,
                timeout=timeout,
                extra_headers=headers,
            )
            try:
                data = await response.read()
            finally:
                response.release()
            if not 200 <= response.status < 300:
                raise error_from_status(response.status, data, kind=kind, name=name)
        return data

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        timeout: float | aiohttp.ClientTimeout | None = None,
        kind: str = "",
        decode: Callable[[bytes], dict[str, Any]] | None = None,
    ) -> AsyncIterator[JsonLineReader]:
        """A GET whose reply is read as newline-delimited JSON (a watch), each line
        decoded by ``decode`` (see :class:`JsonLineReader`).

        A status other than 200 raises its ApiError before the block is entered. The
        connection is closed when the block is left, however it is left.
        """
        with api_errors(kind):
            response = await self._send(
                "GET", path, query=query, body=None, content_type=None, timeout=timeout
            )
        try:
            if response.status != 200:
                with api_errors(kind):
                    data = await response.read()
                raise error_from_status(response.status, data, kind=kind)
            yield JsonLineReader(response, kind=kind, decode=decode)
        finally:
            response.close()
