"""The connection to a real API server (layer 4, kube): configuration, rate limit, errors.

Job: build one rate-limited kubernetes-asyncio ``ApiClient`` for the whole process and
offer the rest of ``scheduler.kube`` a raw-JSON way to use it. Contracts:

* **Configuration** (:func:`load_configuration`) comes from, in this order: an explicit
  ``--kubeconfig`` path, the ``KUBECONFIG`` environment variable (read at call time, a
  ``:``-separated list is merged as kubectl does), the in-cluster service account (when
  ``KUBERNETES_SERVICE_HOST`` is set), ``~/.kube/config``. The file is always passed as
  ``config_file=``: the library reads ``KUBECONFIG`` once, at import. Nothing is ever
  written back to a kubeconfig.
* **Every request** made through :attr:`KubeClient.api` (this module's :meth:`request`,
  the watch streams, and any generated ``CoreV1Api(client.api)`` call) first takes a
  token from the client's :class:`TokenBucket` (kube-scheduler's ``--kube-api-qps`` 50
  and ``--kube-api-burst`` 100 by default) and gets a ``_request_timeout`` (the client's
  default unless the call gives one): the library's default is none at all.
* **Errors**: every failure leaves this module as a :class:`scheduler.api.errors.ApiError`
  subclass, chained to the library's exception with ``raise ... from``: 404 NotFound,
  409 AlreadyExists (reason ``AlreadyExists``) or Conflict, 410 Gone, 422 InvalidObject
  (with the field causes of the ``Status``), 429 TooManyRequests, anything else, timeouts
  and connection errors ServerError. :func:`api_errors` and :func:`error_from_status` are
  the two helpers; nothing else in the package catches library exceptions.
* **Raw JSON**: :meth:`KubeClient.request` and :meth:`KubeClient.stream` never build the
  client's model objects (``_preload_content=False``, ``json.loads``), which are several
  times slower and fail on some replies (a binding's ``Status``).

One :class:`KubeClient` per process, used from one event loop. Close it (``async with``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from scheduler.api import labels as L
from scheduler.api.errors import (
    AlreadyExistsError,
    ApiError,
    ConfigError,
    ConflictError,
    FieldCause,
    GoneError,
    InvalidObjectError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.loop.clock import SystemClock
from scheduler.ports import Clock

__all__ = [
    "CRD_GROUP",
    "CRD_VERSION",
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "EVENTS",
    "JSON",
    "LEASES",
    "MERGE_PATCH",
    "NODES",
    "PODS",
    "POD_DISRUPTION_BUDGETS",
    "POD_GROUPS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "STRATEGIC_MERGE_PATCH",
    "TOPOLOGIES",
    "JsonLineReader",
    "KubeClient",
    "Resource",
    "SystemClock",
    "TokenBucket",
    "api_errors",
    "error_from_status",
    "load_configuration",
    "translate_error",
]

#: kube-scheduler's ``--kube-api-qps`` and ``--kube-api-burst`` defaults.
DEFAULT_QPS: Final[float] = 50.0
DEFAULT_BURST: Final[int] = 100
#: The ``_request_timeout`` (seconds) of a request that does not give its own.
DEFAULT_TIMEOUT: Final[float] = 30.0

JSON: Final[str] = "application/json"
MERGE_PATCH: Final[str] = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final[str] = "application/strategic-merge-patch+json"

_IN_CLUSTER_ENV: Final[str] = "KUBERNETES_SERVICE_HOST"
_DEFAULT_KUBECONFIG: Final[Path] = Path("~/.kube/config")


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: where its objects live on the API server.

    ``group`` is empty for the core group. ``path`` builds the URL path of the
    collection (all namespaces when ``namespace`` is None), of one object (``name``), or
    of one of its subresources (``subresource``).
    """

    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return base


CRD_GROUP: Final[str] = L.GROUP
CRD_VERSION: Final[str] = L.VERSION

PODS: Final = Resource("Pod", "", "v1", "pods", True)
NODES: Final = Resource("Node", "", "v1", "nodes", False)
POD_GROUPS: Final = Resource("PodGroup", CRD_GROUP, CRD_VERSION, "podgroups", True)
QUEUES: Final = Resource("Queue", CRD_GROUP, CRD_VERSION, "queues", False)
TOPOLOGIES: Final = Resource("Topology", CRD_GROUP, CRD_VERSION, "topologies", False)
PRIORITY_CLASSES: Final = Resource(
    "PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False
)
POD_DISRUPTION_BUDGETS: Final = Resource(
    "PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True
)
EVENTS: Final = Resource("Event", "events.k8s.io", "v1", "events", True)
LEASES: Final = Resource("Lease", "coordination.k8s.io", "v1", "leases", True)


# --------------------------------------------------------------------------- errors


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
    label = f"HTTP {status} {reason}".rstrip() if status else "request failed"
    return ServerError(f"{label}: {message}", kind=kind, name=name)


def translate_error(exc: BaseException, *, kind: str = "", name: str = "") -> ApiError:
    """The ApiError for an exception raised by kubernetes-asyncio or aiohttp.

    An ApiError is returned unchanged. The caller raises the result ``from exc``.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        return error_from_status(int(exc.status or 0), exc.body, kind=kind, name=name)
    if isinstance(exc, aiohttp.ClientResponseError):
        return error_from_status(exc.status, exc.message, kind=kind, name=name)
    if isinstance(exc, TimeoutError):
        return ServerError("the request to the API server timed out", kind=kind, name=name)
    if isinstance(exc, aiohttp.ClientError | OSError):
        return ServerError(f"cannot reach the API server: {exc!r}", kind=kind, name=name)
    if isinstance(exc, ValueError):
        return ServerError(f"malformed reply from the API server: {exc}", kind=kind, name=name)
    return ServerError(f"API request failed: {exc!r}", kind=kind, name=name)


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


# --------------------------------------------------------------------------- rate limit


class TokenBucket:
    """A token bucket: ``qps`` tokens a second, at most ``burst`` saved up (client-go's
    ``flowcontrol.NewTokenBucketRateLimiter``).

    :meth:`acquire` reserves a token and sleeps (on ``clock``) until it is due, so
    waiting callers are served in the order they arrived; a caller cancelled while
    waiting gives its token back. ``qps <= 0`` means no limit. Used from one event loop.
    ``waited`` is the total time callers were made to wait, ``taken`` the tokens given.
    """

    def __init__(self, qps: float, burst: int, *, clock: Clock | None = None) -> None:
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self.clock: Clock = clock or SystemClock()
        self._tokens = float(burst)
        self._last = self.clock.now()
        self.waited = 0.0
        self.taken = 0

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0 or math.isinf(self.qps)

    def _refill(self) -> None:
        now = self.clock.now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is available now; never waits."""
        if self.unlimited:
            self.taken += 1
            return True
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            self.taken += 1
            return True
        return False

    async def acquire(self) -> None:
        """Take a token, waiting until one is due."""
        self.taken += 1
        if self.unlimited:
            return
        self._refill()
        self._tokens -= 1.0
        if self._tokens >= 0.0:
            return
        delay = -self._tokens / self.qps
        try:
            await self.clock.sleep(delay)
        except BaseException:
            self._tokens += 1.0  # not used: the next caller may have it
            self.taken -= 1
            raise
        self.waited += delay


class _LimitedApiClient(ApiClient):
    """An ApiClient whose every HTTP request waits for a token and has a timeout."""

    def __init__(self, configuration: Configuration, limiter: TokenBucket, timeout: float):
        super().__init__(configuration)
        self.limiter = limiter
        self.default_timeout = timeout
        self.user_agent = "sluice/0.1 (kubernetes-asyncio)"

    async def request(self, method: str, url: str, **options: Any) -> Any:  # type: ignore[override]
        """The one door of every request the library makes (``call_api`` calls it)."""
        await self.limiter.acquire()
        options["_request_timeout"] = options.get("_request_timeout") or self.default_timeout
        return await super().request(method, url, **options)


# --------------------------------------------------------------------------- configuration


async def load_configuration(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Configuration:
    """The client configuration: ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster,
    else ``~/.kube/config``. Raises ConfigError (naming the source) when none works."""
    env = os.environ if environ is None else environ
    cfg = Configuration()
    path = os.fspath(kubeconfig) if kubeconfig else env.get("KUBECONFIG", "")
    source = path or "in-cluster configuration"
    try:
        if not path and env.get(_IN_CLUSTER_ENV):
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg, environ=dict(env)
            )
            return cfg
        if not path:
            default = _DEFAULT_KUBECONFIG.expanduser()
            if not default.exists():
                raise ConfigError(
                    "kubeconfig",
                    None,
                    "no --kubeconfig, no KUBECONFIG, not in a cluster and no ~/.kube/config",
                )
            path = source = str(default)
        files = [Path(p).expanduser() for p in path.split(os.pathsep) if p]
        if not any(f.exists() for f in files):
            raise ConfigError(source, None, "no such file")
        await kube_config.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    except ConfigError:
        raise
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(source, None, f"cannot load the client configuration: {exc}") from exc
    return cfg


# --------------------------------------------------------------------------- the client


class JsonLineReader:
    """Reads newline-delimited JSON objects (a watch stream) from an aiohttp response.

    :meth:`read` returns the next object, or None at the end of the stream. Read errors
    and malformed lines raise ServerError (chained). Lines may be of any length.
    """

    def __init__(self, response: aiohttp.ClientResponse, *, kind: str = "") -> None:
        self._response = response
        self._kind = kind
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
        self.api: ApiClient = _LimitedApiClient(configuration, self.limiter, timeout)

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

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    async def close(self) -> None:
        """Close the connection pool. Idempotent."""
        await self.api.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        timeout: float | aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON}
        if content_type is not None:
            headers["Content-Type"] = content_type
        response: aiohttp.ClientResponse = await self.api.call_api(
            path,
            method,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout or self.timeout,
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
    ) -> dict[str, Any]:
        """One request; the reply body as JSON (an empty dict if there is none).

        A reply outside 2xx raises the ApiError for its status (``kind``/``name`` name
        the object in the error); so do timeouts and connection errors. Makes one attempt.
        """
        with api_errors(kind, name):
            response = await self._send(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
            try:
                data = await response.read()
            finally:
                response.release()
            if not 200 <= response.status < 300:
                raise error_from_status(response.status, data, kind=kind, name=name)
            if not data.strip():
                return {}
            value = json.loads(data)
        if not isinstance(value, dict):
            raise ServerError(f"expected a JSON object from {method} {path}", kind=kind, name=name)
        return value

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        timeout: float | aiohttp.ClientTimeout | None = None,
        kind: str = "",
    ) -> AsyncIterator[JsonLineReader]:
        """A GET whose reply is read as newline-delimited JSON (a watch).

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
            yield JsonLineReader(response, kind=kind)
        finally:
            response.close()
