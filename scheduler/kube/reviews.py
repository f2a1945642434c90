"""The API server's reviews of the callers of ``sluice run``'s port (layer 4, kube):
:class:`~scheduler.serving.guard.AccessReviewer` over TokenReview and SubjectAccessReview.

A client of their own (kube's delegated authentication and authorization use 200 QPS, burst
400, and a 10 s timeout), so a burst of scrapes never takes a token a bind waits for. The
ServiceAccount needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``
(``system:auth-delegator``: ``manifests/clusterrolebinding-auth-delegator.yaml``).
"""

from __future__ import annotations

from typing import Any, Final

from scheduler.api.errors import ServerError
from scheduler.kube.client import KubeClient
from scheduler.serving.guard import Identity, Verdict

__all__ = ["REVIEW_BURST", "REVIEW_QPS", "REVIEW_TIMEOUT", "KubeAccessReviewer"]

REVIEW_QPS: Final = 200.0
REVIEW_BURST: Final = 400
REVIEW_TIMEOUT: Final = 10.0
_TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
_ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class KubeAccessReviewer:
    """TokenReview and SubjectAccessReview on ``client`` (made with :meth:`for_client`:
    a sibling of the process's client with the reviews' rate; the caller closes it)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    @classmethod
    def for_client(cls, client: KubeClient) -> KubeAccessReviewer:
        return cls(client.sibling(qps=REVIEW_QPS, burst=REVIEW_BURST))

    async def review_token(self, token: str) -> Identity | None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        reply = await self.client.request(
            "POST", _TOKEN_REVIEWS, body=body, timeout=REVIEW_TIMEOUT, kind="TokenReview"
        )
        return identity_of(reply)

    async def review_access(self, identity: Identity, verb: str, path: str) -> Verdict:
        body = access_review(identity, verb, path)
        reply = await self.client.request(
            "POST", _ACCESS_REVIEWS, body=body, timeout=REVIEW_TIMEOUT, kind="SubjectAccessReview"
        )
        status = reply.get("status")
        if not isinstance(status, dict):
            raise ServerError(
                "a SubjectAccessReview came back without status", kind="SubjectAccessReview"
            )
        return Verdict(
            allowed=status.get("allowed") is True and status.get("denied") is not True,
            reason=str(status.get("reason") or status.get("evaluationError") or ""),
        )

    async def close(self) -> None:
        await self.client.close()


def identity_of(reply: dict[str, Any]) -> Identity | None:
    """The user of a TokenReview's reply; None when it did not authenticate. Raises
    ServerError for a reply without status."""
    status = reply.get("status")
    if not isinstance(status, dict):
        raise ServerError("a TokenReview came back without status", kind="TokenReview")
    if status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return Identity(
        user=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
    )


def access_review(identity: Identity, verb: str, path: str) -> dict[str, Any]:
    """The SubjectAccessReview of ``verb`` on the non-resource URL ``path`` for
    ``identity``, as kube's delegated authorizer writes it."""
    spec: dict[str, Any] = {
        "user": identity.user,
        "groups": list(identity.groups),
        "nonResourceAttributes": {"path": path, "verb": verb},
    }
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
