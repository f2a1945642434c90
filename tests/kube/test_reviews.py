"""The API server's reviews for the guarded port (scheduler/kube/reviews.py): what a
TokenReview and a SubjectAccessReview send (kube's delegated authorizer's shape: the
non-resource URL, the user's groups, uid and extra) and how their replies are read. The
real server answers them in ``e2e/test_guarded_port.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scheduler.api.errors import ApiError, ServerError
from scheduler.kube import KubeClient
from scheduler.kube.reviews import KubeAccessReviewer, access_review, identity_of
from scheduler.serving.guard import Identity, Verdict
from scheduler.sim.kubeconfig import write_kubeconfig

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    ("status", "identity"),
    [
        pytest.param({"authenticated": False, "error": "invalid"}, None, id="not authenticated"),
        pytest.param({}, None, id="no answer"),
        pytest.param(
            {
                "authenticated": True,
                "user": {
                    "username": "system:serviceaccount:m:prom",
                    "uid": "u1",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                    "extra": {"b": ["2"], "a": ["1", "0"]},
                },
            },
            Identity(
                "system:serviceaccount:m:prom",
                "u1",
                ("system:serviceaccounts", "system:authenticated"),
                (("a", ("1", "0")), ("b", ("2",))),
            ),
            id="a service account",
        ),
    ],
)
def test_identity_of(status: dict[str, Any], identity: Identity | None) -> None:
    assert identity_of({"status": status}) == identity


def test_a_review_without_status_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="TokenReview"):
        identity_of({})


def test_the_access_review_asks_for_the_non_resource_url() -> None:
    who = Identity("alice", "u1", ("g1",), (("k", ("v",)),))
    assert access_review(who, "get", "/metrics")["spec"] == {
        "user": "alice",
        "uid": "u1",
        "groups": ["g1"],
        "extra": {"k": ["v"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert "uid" not in access_review(Identity("bob"), "get", "/ui")["spec"]


@asynccontextmanager
async def api(tmp_path: Path, answers: dict[str, Any]) -> AsyncIterator[list[Any]]:
    """A scripted API server: POSTs to the review paths answered from ``answers`` (a dict
    body, or an int status); yields the bodies it was sent."""
    seen: list[Any] = []

    async def review(request: web.Request) -> web.Response:
        seen.append(await request.json())
        answer = answers[request.path]
        if isinstance(answer, int):
            return web.json_response({"kind": "Status", "code": answer}, status=answer)
        return web.json_response(answer, status=201)

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", review)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        path = write_kubeconfig(tmp_path / "kubeconfig", url)
        client = await KubeClient.connect(path)
        reviewer = KubeAccessReviewer.for_client(client)
        try:
            seen.append(reviewer)
            yield seen
        finally:
            await reviewer.close()
            await client.close()
    finally:
        await runner.cleanup()


async def test_reviews_round_trip(tmp_path: Path) -> None:
    answers = {
        "/apis/authentication.k8s.io/v1/tokenreviews": {
            "status": {"authenticated": True, "user": {"username": "alice", "groups": ["g"]}}
        },
        "/apis/authorization.k8s.io/v1/subjectaccessreviews": {
            "status": {"allowed": False, "reason": "no rule"}
        },
    }
    async with api(tmp_path, answers) as seen:
        reviewer: KubeAccessReviewer = seen.pop()
        who = await reviewer.review_token("t0k3n")
        assert who == Identity("alice", groups=("g",))
        assert await reviewer.review_access(who, "get", "/metrics") == Verdict(False, "no rule")
    token_review, access = seen
    assert token_review == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t0k3n"},
    }
    assert access["kind"] == "SubjectAccessReview"
    assert access["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        pytest.param({"allowed": True}, Verdict(True), id="allowed"),
        pytest.param({"allowed": True, "denied": True}, Verdict(False), id="denied wins"),
        pytest.param({"allowed": False}, Verdict(False), id="no opinion"),
        pytest.param(
            {"allowed": False, "evaluationError": "webhook down"},
            Verdict(False, "webhook down"),
            id="an evaluation error",
        ),
    ],
)
async def test_verdicts(tmp_path: Path, status: dict[str, Any], verdict: Verdict) -> None:
    answers = {"/apis/authorization.k8s.io/v1/subjectaccessreviews": {"status": status}}
    async with api(tmp_path, answers) as seen:
        reviewer: KubeAccessReviewer = seen.pop()
        assert await reviewer.review_access(Identity("a"), "get", "/metrics") == verdict


async def test_a_refused_review_raises(tmp_path: Path) -> None:
    answers = {"/apis/authentication.k8s.io/v1/tokenreviews": 403}
    async with api(tmp_path, answers) as seen:
        reviewer: KubeAccessReviewer = seen.pop()
        with pytest.raises(ApiError):
            await reviewer.review_token("t")
