"""scheduler.kube.client: configuration, the rate limiter, timeouts and error translation."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web
from kube_support import FakeClock, pod, running_cluster
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.api.errors import (
    AlreadyExistsError,
    AmbiguousError,
    ApiError,
    ConfigError,
    ConflictError,
    GoneError,
    InvalidObjectError,
    NamespaceTerminatingError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.kube import KubeClient, TokenBucket, error_from_status, load_configuration
from scheduler.kube.api_errors import api_errors, translate_error
from scheduler.kube.resource_paths import NODES, POD_GROUPS, PODS, Resource
from scheduler.sim.kubeconfig import write_kubeconfig

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- configuration


async def test_explicit_kubeconfig_wins_over_the_environment(tmp_path: Path) -> None:
    mine = write_kubeconfig(tmp_path / "mine", "http://127.0.0.1:1111")
    other = write_kubeconfig(tmp_path / "other", "http://127.0.0.1:2222")
    cfg = await load_configuration(mine, environ={"KUBECONFIG": str(other)})
    assert cfg.host == "http://127.0.0.1:1111"


async def test_kubeconfig_from_the_environment_is_read_at_call_time(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "env", "http://127.0.0.1:3333")
    cfg = await load_configuration(environ={"KUBECONFIG": str(path)})
    assert cfg.host == "http://127.0.0.1:3333"


async def test_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        await load_configuration(tmp_path / "absent", environ={})


async def test_no_configuration_at_all_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="not in a cluster"):
        await load_configuration(environ={})


async def test_in_cluster_without_a_service_account_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError) as caught:
        await load_configuration(environ=env)
    assert caught.value.__cause__ is not None


async def test_a_broken_kubeconfig_is_a_config_error_chained(tmp_path: Path) -> None:
    path = tmp_path / "broken"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(ConfigError) as caught:
        await load_configuration(path, environ={})
    assert caught.value.__cause__ is not None


# --------------------------------------------------------------------------- resources


@pytest.mark.parametrize(
    ("resource", "args", "expected"),
    [
        (PODS, (), "/api/v1/pods"),
        (PODS, ("ns", "p"), "/api/v1/namespaces/ns/pods/p"),
        (PODS, ("ns", "p", "binding"), "/api/v1/namespaces/ns/pods/p/binding"),
        (NODES, ("ignored", "n1"), "/api/v1/nodes/n1"),
        (POD_GROUPS, ("ns",), "/apis/scheduling.sluice.dev/v1alpha1/namespaces/ns/podgroups"),
        (
            Resource("Queue", "scheduling.sluice.dev", "v1alpha1", "queues", False),
            (None, "q", "status"),
            "/apis/scheduling.sluice.dev/v1alpha1/queues/q/status",
        ),
    ],
    ids=["all-pods", "one-pod", "binding", "cluster-scoped", "crd-collection", "crd-status"],
)
def test_resource_paths(resource: Resource, args: tuple[Any, ...], expected: str) -> None:
    assert resource.path(*args) == expected


# --------------------------------------------------------------------------- errors


def _status(code: int, reason: str, **details: Any) -> bytes:
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason}
    body["message"] = f"{reason} happened"
    if details:
        body["details"] = details
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, _status(404, "NotFound", name="p", kind="pods"), NotFoundError),
        (409, _status(409, "AlreadyExists"), AlreadyExistsError),
        (409, _status(409, "Conflict"), ConflictError),
        (410, _status(410, "Expired"), GoneError),
        (422, _status(422, "Invalid"), InvalidObjectError),
        (429, _status(429, "TooManyRequests"), TooManyRequestsError),
        (500, _status(500, "InternalError"), AmbiguousError),
        (503, b"upstream unavailable", AmbiguousError),
        (504, _status(504, "Timeout"), AmbiguousError),
        (403, _status(403, "Forbidden"), ServerError),
        (
            403,
            _status(403, "Forbidden", causes=[{"reason": "NamespaceTerminating"}]),
            NamespaceTerminatingError,
        ),
        (0, None, ServerError),
    ],
    ids=[
        "404",
        "409-exists",
        "409-conflict",
        "410",
        "422",
        "429",
        "500",
        "503-text",
        "504",
        "403",
        "403-namespace-terminating",
        "no-reply",
    ],
)
def test_error_from_status(status: int, body: bytes | None, expected: type[ApiError]) -> None:
    error = error_from_status(status, body, kind="Pod")
    assert type(error) is expected
    assert error.kind == "Pod"


def test_error_from_status_keeps_name_message_and_field_causes() -> None:
    body = _status(
        422,
        "Invalid",
        name="pg",
        kind="PodGroup",
        causes=[{"field": "spec.minMember", "message": "must be >= 0"}],
    )
    error = error_from_status(422, body)
    assert isinstance(error, InvalidObjectError)
    assert (error.kind, error.name) == ("PodGroup", "pg")
    assert [str(c) for c in error.causes] == ["spec.minMember: must be >= 0"]
    assert "Invalid happened" in str(error)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ApiException(status=404, reason="Not Found"), NotFoundError),
        (ApiException(status=502, reason="Bad Gateway"), AmbiguousError),
        (ConnectionRefusedError(), ServerError),
        (aiohttp.ConnectionTimeoutError(), ServerError),
        (aiohttp.ClientConnectionError("lost"), AmbiguousError),
        (aiohttp.ServerDisconnectedError(), AmbiguousError),
        (aiohttp.ClientPayloadError("cut"), AmbiguousError),
        (aiohttp.SocketTimeoutError(), AmbiguousError),
        (TimeoutError(), AmbiguousError),
        (ConnectionResetError(), AmbiguousError),
        (json.JSONDecodeError("bad", "x", 0), AmbiguousError),
    ],
    ids=[
        "api-exception",
        "api-exception-502",
        "refused",
        "connect-timeout",
        "connection-lost",
        "disconnected",
        "payload-cut",
        "read-timeout",
        "timeout",
        "reset",
        "bad-json",
    ],
)
def test_library_errors_are_translated_and_chained(
    exc: BaseException, expected: type[ApiError]
) -> None:
    assert type(translate_error(exc)) is expected
    with pytest.raises(expected) as caught, api_errors("Pod", "p"):
        raise exc
    assert caught.value.__cause__ is exc
    assert caught.value.name == "p"


def test_api_errors_leave_api_errors_alone() -> None:
    original = ConflictError("mine")
    with pytest.raises(ConflictError) as caught, api_errors("Pod"):
        raise original
    assert caught.value is original


# --------------------------------------------------------------------------- rate limit


async def test_token_bucket_spends_the_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(5, 2, clock=clock)
    start = clock.now()
    for _ in range(12):
        await bucket.acquire()
    # 2 from the burst, then 10 at 5 a second
    assert clock.now() - start == pytest.approx(2.0)
    assert clock.slept[:1] == [pytest.approx(0.2)]
    assert bucket.taken == 12 and bucket.waited == pytest.approx(2.0)


async def test_token_bucket_refills_up_to_the_burst_only() -> None:
    clock = FakeClock()
    bucket = TokenBucket(5, 2, clock=clock)
    assert bucket.try_acquire() and bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.advance(100.0)  # a long pause saves at most `burst` tokens
    assert bucket.try_acquire() and bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.advance(0.2)
    assert bucket.try_acquire()


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    bucket = TokenBucket(10, 1)
    await bucket.acquire()
    with anyio.move_on_after(0.01):
        await bucket.acquire()  # would wait 100 ms
    assert bucket.taken == 1
    start = time.monotonic()
    await bucket.acquire()
    assert time.monotonic() - start < 0.2


def test_token_bucket_without_limit_never_waits() -> None:
    bucket = TokenBucket(0, 1)
    assert all(bucket.try_acquire() for _ in range(1000))


def test_token_bucket_refuses_an_empty_burst() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(5, 0)


async def test_every_request_goes_through_the_limiter(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, qps=20, burst=2) as cluster:
        api = cluster.client
        start = time.monotonic()
        for _ in range(4):
            await api.request("GET", NODES.path())
        # generated API classes share the same door
        await k8s.CoreV1Api(api.api).list_node(_preload_content=False)
        await k8s.CoreV1Api(api.api).list_namespaced_pod("default", _preload_content=False)
        elapsed = time.monotonic() - start
        assert api.limiter.taken == 6
        assert elapsed >= (6 - 2) / 20 - 0.01


async def test_concurrent_callers_are_paced_too(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, qps=50, burst=1) as cluster:
        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(cluster.client.request, "GET", NODES.path())
        assert time.monotonic() - start >= 5 / 50 - 0.01


# --------------------------------------------------------------------------- requests


async def test_request_returns_raw_json_and_translates_replies(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        created = await cluster.client.request(
            "POST", PODS.path("default"), body=pod("a"), kind="Pod", name="a"
        )
        assert isinstance(created, dict) and created["metadata"]["uid"]
        with pytest.raises(AlreadyExistsError):
            await cluster.client.request("POST", PODS.path("default"), body=pod("a"))
        with pytest.raises(NotFoundError) as caught:
            await cluster.client.request("GET", PODS.path("default", "b"), kind="Pod", name="b")
        assert caught.value.name == "b"


async def test_connection_refused_is_a_server_error(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        await cluster.cut()
        with pytest.raises(ServerError) as caught:
            await cluster.client.request("GET", NODES.path())
        assert isinstance(caught.value.__cause__, aiohttp.ClientError | OSError)


async def test_every_request_has_a_timeout(tmp_path: Path) -> None:
    """A server that accepts and never answers: the default timeout ends the call."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def silent(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await anyio.sleep(30)

    path = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        async with await KubeClient.connect(path, timeout=0.3, qps=0) as api:
            start = time.monotonic()
            with pytest.raises(ServerError, match="timed out"):
                await api.request("GET", NODES.path())
            with pytest.raises(TimeoutError):  # generated calls get the timeout too
                await k8s.CoreV1Api(api.api).list_node()
            assert time.monotonic() - start < 2.0
        tg.cancel_scope.cancel()


async def test_stream_of_a_missing_resource_raises_before_reading(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        missing = Resource("Widget", "example.com", "v1", "widgets", False)
        with pytest.raises(NotFoundError):
            async with cluster.client.stream(missing.path(), query=[("watch", "true")]):
                pass


# --------------------------------------------------------------------------- the hot path


@contextlib.asynccontextmanager
async def _recording_server() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An HTTP server that records what each request carried and answers ``{}``."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": list(request.query.items()),
                "content_type": request.headers.get("Content-Type"),
                "authorization": request.headers.get("Authorization"),
                "user_agent": request.headers.get("User-Agent"),
                "body": await request.read(),
            }
        )
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            {"method": "GET", "path": "/api/v1/pods", "query": [("limit", "5"), ("a", "b c")]},
            {"query": [("limit", "5"), ("a", "b c")], "content_type": None, "body": b""},
        ),
        (
            {"method": "POST", "path": "/api/v1/namespaces/n/pods/p/binding", "body": {"k": 1}},
            {"query": [], "content_type": "application/json", "body": b'{"k":1}'},
        ),
        (
            {
                "method": "PATCH",
                "path": "/api/v1/namespaces/n/pods/p/status",
                "body": {"status": {"x": "ü"}},
                "content_type": "application/strategic-merge-patch+json",
            },
            {
                "query": [],
                "content_type": "application/strategic-merge-patch+json",
                "body": json.dumps({"status": {"x": "ü"}}, separators=(",", ":")).encode(),
            },
        ),
        (
            {"method": "DELETE", "path": "/api/v1/namespaces/n/pods/p", "body": {}},
            {"query": [], "content_type": "application/json", "body": b"{}"},
        ),
    ],
    ids=["get-with-query", "post-json", "patch-content-type", "delete-empty-options"],
)
async def test_the_hot_path_sends_what_the_library_would(
    tmp_path: Path, call: dict[str, Any], expected: dict[str, Any]
) -> None:
    async with _recording_server() as (url, seen):
        config = await load_configuration(write_kubeconfig(tmp_path / "kc", url), environ={})
        config.api_key = {"BearerToken": "first"}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        async with KubeClient(config, qps=0) as api:
            assert await api.request(**call) == {}
            assert api.limiter.taken == 1
    (got,) = seen
    assert {k: got[k] for k in expected} == expected
    assert (got["method"], got["path"]) == (call["method"], call["path"])
    assert got["authorization"] == "Bearer first"
    assert got["user_agent"].startswith("sluice/")


async def test_the_hot_path_follows_a_rotated_token(tmp_path: Path) -> None:
    """The credentials are asked for on every request (in-cluster tokens rotate)."""
    tokens = iter(["one", "two", "three"])

    def refresh(config: k8s.Configuration) -> None:
        config.api_key["BearerToken"] = next(tokens)

    async with _recording_server() as (url, seen):
        config = await load_configuration(write_kubeconfig(tmp_path / "kc", url), environ={})
        config.api_key = {"BearerToken": "stale"}
        config.refresh_api_key_hook = refresh
        async with KubeClient(config, qps=0) as api:
            await api.request("GET", NODES.path())
            async with api.stream(NODES.path(), query=[("watch", "true")]) as reader:
                assert await reader.read() == {}
            await api.request("GET", NODES.path())
    assert [s["authorization"] for s in seen] == ["one", "two", "three"]


async def test_the_hot_path_does_not_read_the_environment_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library's session trusts the environment, which costs two thread hops a
    request (netrc, proxies); the hot path resolves the proxy once and never netrc."""
    calls: list[str] = []
    import aiohttp.client as aiohttp_client

    def get_env_proxy(url: Any) -> Any:
        calls.append(str(url))
        raise LookupError(url)

    monkeypatch.setattr(aiohttp_client, "get_env_proxy_for_url", get_env_proxy)
    monkeypatch.setattr("scheduler.kube.client.get_env_proxy_for_url", get_env_proxy)
    async with _recording_server() as (url, seen):
        config = await load_configuration(write_kubeconfig(tmp_path / "kc", url), environ={})
        async with KubeClient(config, qps=0) as api:
            for _ in range(3):
                await api.request("GET", NODES.path())
    assert len(seen) == 3
    assert calls == [url]


async def test_a_reply_not_wanted_is_not_decoded_but_errors_still_raise(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        reply = await cluster.client.request(
            "POST", PODS.path("default"), body=pod("a"), kind="Pod", name="a", decode=False
        )
        assert reply == {}
        assert cluster.store.get("Pod", "default", "a") is not None
        with pytest.raises(AlreadyExistsError):
            await cluster.client.request("POST", PODS.path("default"), body=pod("a"), decode=False)
