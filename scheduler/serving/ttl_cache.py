"""A small time-to-live cache for the guarded port's review answers (layer 3, serving).

kube's delegated authentication and authorization keep each TokenReview and
SubjectAccessReview answer for a short while (10 s by default) so that a storm of
requests costs the API server one review; :class:`TtlCache` does the same, and callers
asking for the same key while its answer is being fetched wait for that one fetch
instead of starting their own. Exceptions are not kept: the next caller asks again.

Used from one event loop; not thread-safe.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio

__all__ = ["TtlCache"]

V = TypeVar("V")


class _Flight(Generic[V]):
    """One fetch in progress: its waiters wait for :attr:`done`."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: V | None = None
        self.fetched = False
        self.error: Exception | None = None


class TtlCache(Generic[V]):
    """Answers by key, each kept for ``ttl(value)`` seconds, at most ``size`` of them (the
    oldest dropped first). ``now`` is a monotonic clock (tests pass a fake one)."""

    def __init__(
        self,
        ttl: Callable[[V], float],
        *,
        size: int = 4096,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._ttl = ttl
        self._size = size
        self._now = now
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._flights: dict[Hashable, _Flight[V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> V:
        """The kept answer for ``key`` if it has not expired; else ``await fetch()`` (once
        for every caller asking meanwhile), kept when its TTL is positive. An exception
        of ``fetch`` reaches every waiting caller and nothing is kept; when the caller
        that fetches is cancelled, one of those waiting fetches again."""
        while True:
            entry = self._entries.get(key)
            if entry is not None:
                expires, value = entry
                if self._now() < expires:
                    return value
                del self._entries[key]
            flight = self._flights.get(key)
            if flight is None:
                return await self._fetch(key, fetch)
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.fetched:
                return flight.value  # type: ignore[return-value]
            # the fetching caller was cancelled: ask again

    async def _fetch(self, key: Hashable, fetch: Callable[[], Awaitable[V]]) -> V:
        flight = self._flights[key] = _Flight()
        try:
            value = await fetch()
        except Exception as exc:
            flight.error = exc
            raise
        else:
            flight.value, flight.fetched = value, True
            self._keep(key, value)
            return value
        finally:
            del self._flights[key]
            flight.done.set()

    def _keep(self, key: Hashable, value: V) -> None:
        ttl = self._ttl(value)
        if ttl <= 0:
            return
        self._entries[key] = (self._now() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
