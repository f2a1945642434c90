"""The guard of ``sluice run``'s port (layer 3, serving): kube-scheduler's delegated
authentication and authorization, as an aiohttp middleware.

For every request whose path is not always allowed (:attr:`GuardSettings.always_allow_paths`,
by default ``/healthz``, ``/readyz`` and ``/livez``, as kube's
``--authorization-always-allow-paths``):

1. **Authentication.** The ``Authorization: Bearer TOKEN`` header's token is reviewed by
   the API server (a TokenReview, through an :class:`AccessReviewer`). No token, a token
   the server does not accept, or a review that cannot be made: ``401``. Unlike
   kube-scheduler, a request without credentials is not let on as ``system:anonymous``
   (whom RBAC would then refuse with ``403``): it is refused at once with ``401``.
2. **Authorization.** A user in an always-allowed group (``system:masters``, which the
   API server's own authorizer allows everything) passes; anyone else needs a
   SubjectAccessReview of the non-resource URL to allow them: the request's path, the
   verb its lowercase method (``get``), as kube's delegated authorization asks. Refused:
   ``403`` naming the user, verb and path; a review that cannot be made: ``500``.

Answers are kept as kube keeps them (:class:`~scheduler.serving.ttl_cache.TtlCache`): a
token's review 10 s whether it authenticated or not, an access review 10 s whether
allowed or denied; a failed review is not kept. Errors are JSON ``Status`` objects, as
the API server writes them. The reviewer is the only I/O; the guard never raises out of
the middleware for a review's failure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from scheduler.api.errors import ApiError
from scheduler.logging import get_logger
from scheduler.serving.settings import GuardSettings
from scheduler.serving.ttl_cache import TtlCache

__all__ = ["AccessReviewer", "Guard", "Identity", "Verdict", "bearer_token", "status_response"]

log = get_logger("sluice.serving")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a token is, as a TokenReview's ``status.user`` says."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``status.user.extra``, sorted by key (hashable: it keys the access cache)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A SubjectAccessReview's answer."""

    allowed: bool
    reason: str = ""


class AccessReviewer(Protocol):
    """The API server's reviews, made by the backend (``scheduler.kube.reviews``). One
    attempt each; a review that cannot be made raises an
    :class:`~scheduler.api.errors.ApiError`."""

    async def review_token(self, token: str) -> Identity | None:
        """Who ``token`` is (TokenReview), or None when the API server does not
        authenticate it."""
        ...

    async def review_access(self, identity: Identity, verb: str, path: str) -> Verdict:
        """May ``identity`` use ``verb`` on the non-resource URL ``path``
        (SubjectAccessReview)?"""
        ...


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Guard:
    """The middleware (:meth:`middleware`) and its two caches. One per served port."""

    reviewer: AccessReviewer
    settings: GuardSettings = field(default_factory=GuardSettings)
    now: Callable[[], float] | None = None
    """The caches' monotonic clock (None: ``time.monotonic``)."""

    def __post_init__(self) -> None:
        s = self.settings
        clock = {} if self.now is None else {"now": self.now}
        self._tokens: TtlCache[Identity | None] = TtlCache(
            lambda _: s.token_ttl, size=s.cache_size, **clock
        )
        self._access: TtlCache[Verdict] = TtlCache(
            lambda v: s.allowed_ttl if v.allowed else s.denied_ttl, size=s.cache_size, **clock
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if self.settings.is_open(path):
            return await handler(request)
        token = bearer_token(request.headers)
        if token is None:
            return status_response(401, "Unauthorized", "Unauthorized")
        try:
            identity = await self._tokens.get(
                _token_key(token), lambda: self.reviewer.review_token(token)
            )
        except ApiError as exc:
            log.warning("a token review failed; the request is refused", path=path, error=str(exc))
            return status_response(401, "Unauthorized", "Unauthorized")
        if identity is None:
            return status_response(401, "Unauthorized", "Unauthorized")
        if any(g in self.settings.always_allow_groups for g in identity.groups):
            return await handler(request)
        verb = request.method.lower()
        try:
            verdict = await self._access.get(
                (identity, verb, path),
                lambda: self.reviewer.review_access(identity, verb, path),
            )
        except ApiError as exc:
            log.warning("an access review failed", path=path, user=identity.user, error=str(exc))
            return status_response(
                500, "InternalError", f"Internal Server Error: {path!r}: authorization error"
            )
        if not verdict.allowed:
            message = f'forbidden: User "{identity.user}" cannot {verb} path "{path}"'
            if verdict.reason:
                message += f": {verdict.reason}"
            return status_response(403, "Forbidden", message)
        return await handler(request)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (the scheme in any case),
    or None when there is none or the header is of another scheme."""
    scheme, _, token = headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _token_key(token: str) -> str:
    """The token's cache key: its digest, so that the cache holds no credential."""
    return hashlib.sha256(token.encode()).hexdigest()


def status_response(code: int, reason: str, message: str) -> web.Response:
    """A ``v1 Status`` failure, as the API server writes its refusals."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.Response(
        status=code, text=json.dumps(body), content_type="application/json", headers=_NO_STORE
    )


_NO_STORE = {"Cache-Control": "no-store"}
