"""Exponential backoff for the informers' retries (layer 4, kube): capped, jittered, and
forgetting old failures, as client-go's reflector backs off. Used by
:mod:`scheduler.kube.informers`; no I/O (the caller sleeps)."""

from __future__ import annotations

import random

from scheduler.loop.system_clock import SystemClock
from scheduler.ports import Clock

__all__ = ["Backoff"]


class Backoff:
    """Exponential backoff, capped and jittered, that forgets old failures.

    :meth:`next` returns the delay before the next attempt: ``initial * 2**n`` capped at
    ``maximum``, reduced by up to ``jitter`` of itself at random (so it never exceeds the
    cap). After :meth:`reset`, or when the previous :meth:`next` was more than
    ``reset_after`` seconds ago, ``n`` starts from 0 again.
    """

    def __init__(
        self,
        initial: float,
        maximum: float,
        *,
        jitter: float = 0.5,
        reset_after: float = 120.0,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.initial = initial
        self.maximum = max(initial, maximum)
        self.jitter = jitter
        self.reset_after = reset_after
        self.clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._attempt = 0
        self._last: float | None = None

    def next(self) -> float:
        now = self.clock.now()
        if self._last is not None and now - self._last > self.reset_after:
            self._attempt = 0
        self._last = now
        base = min(self.maximum, self.initial * 2.0 ** min(self._attempt, 62))
        self._attempt += 1
        return base * (1.0 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self._attempt = 0
        self._last = None
