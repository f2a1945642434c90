"""The client-side rate limit (layer 4, kube): a token bucket, as client-go's
``flowcontrol.NewTokenBucketRateLimiter``, and the ``ApiClient`` whose every request
waits for a token and gets a timeout.

kubernetes-asyncio has no rate limiting of its own: without this, a burst of binds would
be sent as fast as the event loop allows. Used from one event loop.
"""

from __future__ import annotations

import math
from typing import Any

from kubernetes_asyncio.client import ApiClient, Configuration

from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock

__all__ = ["LimitedApiClient", "TokenBucket"]


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


class LimitedApiClient(ApiClient):
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
