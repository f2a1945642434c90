"""The guard of ``sluice run``'s port (issue 40 item 4): a bearer token reviewed
(TokenReview), the path authorised (SubjectAccessReview, verb get), probes open, answers
kept 10 s as kube keeps them, a review that fails refused (401, 500) and never kept. Served
here over TLS with a self-made certificate, as ``sluice run`` serves it."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from scheduler.api.errors import ServerError
from scheduler.serving.guard import Guard, Identity, Verdict, bearer_token
from scheduler.serving.settings import GuardSettings
from scheduler.serving.tls import ServingCertificate, server_context

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", uid="u-1", groups=("system:authenticated",))
BOB = Identity("bob", groups=("system:authenticated",))
ROOT = Identity("root", groups=("system:masters", "system:authenticated"))


@dataclass
class FakeReviewer:
    """Tokens and the (user, verb, path) allowed; counts the reviews; may fail."""

    tokens: dict[str, Identity] = field(
        default_factory=lambda: {"a-token": ALICE, "b-token": BOB, "root-token": ROOT}
    )
    allowed: set[tuple[str, str, str]] = field(
        default_factory=lambda: {("alice", "get", "/metrics"), ("alice", "get", "/ui")}
    )
    token_reviews: int = 0
    access_reviews: int = 0
    fail_tokens: bool = False
    fail_access: bool = False

    async def review_token(self, token: str) -> Identity | None:
        self.token_reviews += 1
        if self.fail_tokens:
            raise ServerError("connection refused", kind="TokenReview")
        return self.tokens.get(token)

    async def review_access(self, identity: Identity, verb: str, path: str) -> Verdict:
        self.access_reviews += 1
        if self.fail_access:
            raise ServerError("connection refused", kind="SubjectAccessReview")
        if (identity.user, verb, path) in self.allowed:
            return Verdict(True, "RBAC: allowed")
        return Verdict(False, "")


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@asynccontextmanager
async def served(guard: Guard) -> AsyncIterator[str]:
    """An application behind ``guard`` over TLS on a free port; yields its base URL."""

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text=f"served {request.path}")

    app = web.Application(middlewares=[guard.middleware])
    for path in ("/metrics", "/healthz", "/readyz", "/livez", "/ui", "/ui/state", "/debug/x"):
        app.router.add_get(path, ok)
    context, _ = server_context(ServingCertificate())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def get(url: str, token: str | None = None, header: str | None = None) -> tuple[int, Any]:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if header is not None:
        headers["Authorization"] = header
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers, ssl=insecure) as r:
        text = await r.text()
        return r.status, (json.loads(text) if r.content_type == "application/json" else text)


@pytest.mark.parametrize(
    ("path", "token", "header", "status"),
    [
        pytest.param("/metrics", None, None, 401, id="no token"),
        pytest.param("/metrics", None, "Basic YTpi", 401, id="another scheme"),
        pytest.param("/metrics", None, "Bearer ", 401, id="an empty token"),
        pytest.param("/metrics", "nobody", None, 401, id="a token the server refuses"),
        pytest.param("/metrics", "b-token", None, 403, id="a user without the rule"),
        pytest.param("/ui", "b-token", None, 403, id="the page without the rule"),
        pytest.param("/metrics", "a-token", None, 200, id="a user with the rule"),
        pytest.param("/metrics", None, "bearer a-token", 200, id="the scheme in lower case"),
        pytest.param("/ui", "a-token", None, 200, id="the page with the rule"),
        pytest.param("/nope", "a-token", None, 403, id="a path nobody may get"),
        pytest.param("/metrics", "root-token", None, 200, id="system:masters"),
        pytest.param("/healthz", None, None, 200, id="healthz open"),
        pytest.param("/readyz", None, None, 200, id="readyz open"),
        pytest.param("/livez", None, None, 200, id="livez open"),
        pytest.param("/healthz", "nobody", None, 200, id="a probe with a bad token"),
        pytest.param("/healthz/../metrics", None, None, 401, id="dot segments are not a probe"),
    ],
)
async def test_who_gets_what(path: str, token: str | None, header: str | None, status: int) -> None:
    reviewer = FakeReviewer()
    async with served(Guard(reviewer)) as url:
        got, body = await get(url + path, token, header)
    assert got == status, body
    if status == 200 and path != "/nope":
        assert body == f"served {path}"
    if status in (401, 403):
        assert body["kind"] == "Status" and body["code"] == status
    if status == 403:
        assert body["message"].startswith(f'forbidden: User "bob" cannot get path "{path}"') or (
            path == "/nope" and 'User "alice" cannot get path "/nope"' in body["message"]
        )


async def test_system_masters_needs_no_access_review() -> None:
    reviewer = FakeReviewer()
    async with served(Guard(reviewer)) as url:
        assert (await get(url + "/metrics", "root-token"))[0] == 200
    assert (reviewer.token_reviews, reviewer.access_reviews) == (1, 0)


async def test_probes_ask_nothing() -> None:
    reviewer = FakeReviewer()
    async with served(Guard(reviewer)) as url:
        for path in ("/healthz", "/readyz", "/livez"):
            assert (await get(url + path, "a-token"))[0] == 200
    assert (reviewer.token_reviews, reviewer.access_reviews) == (0, 0)


@pytest.mark.parametrize(
    ("token", "first", "answer"),
    [
        pytest.param("a-token", 200, "allowed", id="allowed"),
        pytest.param("b-token", 403, "denied", id="denied"),
        pytest.param("nobody", 401, "unauthenticated", id="unauthenticated"),
    ],
)
async def test_answers_are_kept_ten_seconds(token: str, first: int, answer: str) -> None:
    reviewer, clock = FakeReviewer(), FakeClock()
    reviews_per_request = {"allowed": (1, 1), "denied": (1, 1), "unauthenticated": (1, 0)}[answer]
    async with served(Guard(reviewer, now=clock)) as url:
        for _ in range(3):
            assert (await get(url + "/metrics", token))[0] == first
        assert (reviewer.token_reviews, reviewer.access_reviews) == reviews_per_request
        clock.t += 9.9
        assert (await get(url + "/metrics", token))[0] == first
        assert (reviewer.token_reviews, reviewer.access_reviews) == reviews_per_request
        clock.t += 0.2  # past 10 s: asked again
        assert (await get(url + "/metrics", token))[0] == first
    assert (reviewer.token_reviews, reviewer.access_reviews) == tuple(
        2 * n for n in reviews_per_request
    )


async def test_a_rule_granted_is_seen_once_the_denial_expires() -> None:
    reviewer, clock = FakeReviewer(), FakeClock()
    settings = GuardSettings(allowed_ttl=10.0, denied_ttl=2.0)
    async with served(Guard(reviewer, settings, now=clock)) as url:
        assert (await get(url + "/metrics", "b-token"))[0] == 403
        reviewer.allowed.add(("bob", "get", "/metrics"))
        assert (await get(url + "/metrics", "b-token"))[0] == 403  # the denial is kept
        clock.t += 2.0  # --authorization-webhook-cache-unauthorized-ttl, not the allowed one
        assert (await get(url + "/metrics", "b-token"))[0] == 200


@pytest.mark.parametrize(
    ("fail_tokens", "fail_access", "status"),
    [
        pytest.param(True, False, 401, id="token review fails: 401"),
        pytest.param(False, True, 500, id="access review fails: 500"),
    ],
)
async def test_a_failed_review_refuses_and_is_not_kept(
    fail_tokens: bool, fail_access: bool, status: int
) -> None:
    reviewer = FakeReviewer(fail_tokens=fail_tokens, fail_access=fail_access)
    async with served(Guard(reviewer)) as url:
        assert (await get(url + "/metrics", "a-token"))[0] == status
        reviewer.fail_tokens = reviewer.fail_access = False
        assert (await get(url + "/metrics", "a-token"))[0] == 200


async def test_always_allowed_paths_are_exact_or_prefixes() -> None:
    settings = GuardSettings(always_allow_paths=("/healthz", "/debug/*"))
    async with served(Guard(FakeReviewer(), settings)) as url:
        assert (await get(url + "/debug/x"))[0] == 200
        assert (await get(url + "/healthz"))[0] == 200
        assert (await get(url + "/readyz"))[0] == 401  # no longer open
        assert (await get(url + "/metrics"))[0] == 401


async def test_public_paths_are_exact() -> None:
    settings = GuardSettings(public_paths=("/ui",))
    async with served(Guard(FakeReviewer(), settings)) as url:
        assert (await get(url + "/ui"))[0] == 200
        assert (await get(url + "/ui/state"))[0] == 401
        assert (await get(url + "/healthz"))[0] == 200


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param("Bearer abc", "abc", id="bearer"),
        pytest.param("BEARER  abc ", "abc", id="case and spaces"),
        pytest.param("Basic abc", None, id="basic"),
        pytest.param("Bearer", None, id="no token"),
        pytest.param("", None, id="empty"),
    ],
)
def test_bearer_token(header: str, token: str | None) -> None:
    assert bearer_token({"Authorization": header}) == token
