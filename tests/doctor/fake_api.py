"""A scripted API server for the doctor's checks (not a test module): replies by method
and path (and query, when given), each a JSON object or an ApiError to raise; every
request made is kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.api.errors import ApiError, NotFoundError

Reply = dict[str, Any] | ApiError | bytes | Callable[[Any, Mapping[str, str]], Any]
"""A reply, an error to raise, or a function of the request's body and headers giving one."""


class FakeApi:
    host = "https://fake:6443"

    def __init__(self, replies: Mapping[tuple[str, str], Reply] | None = None) -> None:
        self.replies: dict[tuple[str, str], Reply] = dict(replies or {})
        self.calls: list[tuple[str, str, tuple[tuple[str, str], ...], Any, dict[str, str]]] = []

    def _answer(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        key_query = f"{path}?{'&'.join(f'{k}={v}' for k, v in query)}"
        for key in ((method, key_query), (method, path)):
            if key in self.replies:
                reply = self.replies[key]
                if callable(reply):
                    reply = reply(body, dict(headers or {}))
                if isinstance(reply, ApiError):
                    raise reply
                return reply
        raise NotFoundError(f"{method} {path}: not scripted")

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self.calls.append((method, path, tuple(query), body, dict(headers or {})))
        reply = self._answer(method, path, query, body, headers)
        assert isinstance(reply, dict), (method, path)
        return reply

    async def request_bytes(self, method: str, path: str, **_: Any) -> bytes:
        self.calls.append((method, path, (), None, {}))
        reply = self._answer(method, path, ())
        assert isinstance(reply, bytes), (method, path)
        return reply
