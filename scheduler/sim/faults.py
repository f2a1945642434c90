"""API latency and fault injection for the embedded cluster (layer 4).

Every call the scheduler makes to the embedded cluster goes through
:meth:`FaultInjector.call` with its kind (``bind``, ``delete``, ``evict``, ``patch``,
``create``): it waits the configured latency on the simulation clock, then fails with
the configured probability (a refusal: the call is not applied), or, with the
probability of a lost reply, is applied and then raises
:class:`~scheduler.api.errors.AmbiguousError`, as a reply lost to a dropped connection or
a timeout would. Random draws come from ``random.Random`` generators owned by the
injector, one draw per call from each (refusals and lost replies draw from two separate
generators), so a seed repeats a run exactly and adding lost replies leaves the refusals
of a seed as they were.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from scheduler.api.errors import AmbiguousError, ApiError, ConfigError, ServerError
from scheduler.ports import Clock
from scheduler.sim.durations import parse_duration, parse_kind_map, parse_rate

__all__ = ["CALL_KINDS", "ApiBehaviour", "FaultInjector", "LostReply"]

#: The kinds of API call that latency and failures can be configured for.
CALL_KINDS: Final[tuple[str, ...]] = ("bind", "delete", "evict", "patch", "create")


class LostReply(AmbiguousError):
    """An injected lost reply: what the caller sees is an AmbiguousError; ``applied`` tells
    the simulation (not the scheduler) whether the call had taken effect."""

    def __init__(self, kind: str, *, applied: bool) -> None:
        self.applied = applied
        super().__init__(f"injected lost reply of {kind}")


@dataclass(frozen=True)
class ApiBehaviour:
    """How the embedded API server behaves per kind of call. Validated on construction."""

    #: Seconds each call of that kind takes (kinds not listed: 0).
    latency: Mapping[str, float] = field(default_factory=dict)
    #: Probability in [0, 1] that a call of that kind fails with ServerError (not listed: 0).
    failure_rate: Mapping[str, float] = field(default_factory=dict)
    #: Seed of the injector's random draws.
    seed: int = 0
    #: Probability in [0, 1] that a call of that kind is applied and its reply then lost:
    #: the caller gets AmbiguousError (not listed: 0).
    lost_reply_rate: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "latency", MappingProxyType(dict(self.latency)))
        object.__setattr__(self, "failure_rate", MappingProxyType(dict(self.failure_rate)))
        object.__setattr__(self, "lost_reply_rate", MappingProxyType(dict(self.lost_reply_rate)))
        for kind, rate in self.lost_reply_rate.items():
            if kind not in CALL_KINDS:
                raise ConfigError(
                    "apiLostReplies", kind, f"unknown kind; one of {', '.join(CALL_KINDS)}"
                )
            if not 0.0 <= rate <= 1.0:
                raise ConfigError("apiLostReplies", kind, f"must be within [0, 1], got {rate}")
        for kind, seconds in self.latency.items():
            if kind not in CALL_KINDS:
                raise ConfigError(
                    "apiLatency", kind, f"unknown kind; one of {', '.join(CALL_KINDS)}"
                )
            if not seconds >= 0:
                raise ConfigError("apiLatency", kind, f"must not be negative, got {seconds}")
        for kind, rate in self.failure_rate.items():
            if kind not in CALL_KINDS:
                raise ConfigError(
                    "apiFailures", kind, f"unknown kind; one of {', '.join(CALL_KINDS)}"
                )
            if not 0.0 <= rate <= 1.0:
                raise ConfigError("apiFailures", kind, f"must be within [0, 1], got {rate}")

    @classmethod
    def parse(
        cls, latency: str = "", failures: str = "", seed: int = 0, lost_replies: str = ""
    ) -> ApiBehaviour:
        """From the flag texts ``--api-latency``, ``--api-failures``, ``--seed`` and
        ``--api-lost-replies``."""
        return cls(
            latency=parse_kind_map(
                latency, parse_value=parse_duration, allowed=CALL_KINDS, flag="--api-latency"
            ),
            failure_rate=parse_kind_map(
                failures, parse_value=parse_rate, allowed=CALL_KINDS, flag="--api-failures"
            ),
            seed=seed,
            lost_reply_rate=parse_kind_map(
                lost_replies,
                parse_value=parse_rate,
                allowed=CALL_KINDS,
                flag="--api-lost-replies",
            ),
        )


class FaultInjector:
    """Applies an :class:`ApiBehaviour` to calls; one per simulated cluster.

    ``async with injector.call("bind"): ...`` sleeps the latency of ``bind`` on ``clock``,
    then raises ``ServerError("injected failure of bind")`` with probability
    ``failure_rate["bind"]``; otherwise the body (the real call) runs, and then, with
    probability ``lost_reply_rate["bind"]``, its result (or its error) is replaced by
    ``AmbiguousError("injected lost reply of bind")``. The random draws are taken when the
    call starts, one per call from each generator whatever its kind, so the n-th call
    always gets the n-th draws. Not thread-safe; used from one event loop.
    """

    def __init__(self, behaviour: ApiBehaviour, clock: Clock) -> None:
        self.behaviour = behaviour
        self._clock = clock
        self._latency = {k: float(self.behaviour.latency.get(k, 0.0)) for k in CALL_KINDS}
        self._rate = {k: float(self.behaviour.failure_rate.get(k, 0.0)) for k in CALL_KINDS}
        self._lost = {k: float(self.behaviour.lost_reply_rate.get(k, 0.0)) for k in CALL_KINDS}
        self._random = random.Random(self.behaviour.seed)
        self._random_lost = random.Random(f"lost replies {self.behaviour.seed}")
        self._in_flight = 0
        self._calls = dict.fromkeys(CALL_KINDS, 0)
        self._failures = dict.fromkeys(CALL_KINDS, 0)
        self._lost_replies = dict.fromkeys(CALL_KINDS, 0)

    @property
    def in_flight(self) -> int:
        """Calls that entered :meth:`call` and have not left it yet."""
        return self._in_flight

    @property
    def calls(self) -> Mapping[str, int]:
        """Calls started, per kind."""
        return dict(self._calls)

    @property
    def failures(self) -> Mapping[str, int]:
        """Injected failures, per kind."""
        return dict(self._failures)

    @property
    def lost_replies(self) -> Mapping[str, int]:
        """Calls applied whose reply was then lost (AmbiguousError), per kind."""
        return dict(self._lost_replies)

    @asynccontextmanager
    async def call(self, kind: str) -> AsyncIterator[None]:
        """Wrap one API call of ``kind`` (one of :data:`CALL_KINDS`; ValueError otherwise)."""
        if kind not in self._latency:
            raise ValueError(f"unknown API call kind {kind!r}; one of {', '.join(CALL_KINDS)}")
        self._in_flight += 1
        try:
            self._calls[kind] += 1
            fail = self._random.random() < self._rate[kind]
            lose = self._random_lost.random() < self._lost[kind]
            latency = self._latency[kind]
            if latency > 0:
                await self._clock.sleep(latency)
            if fail:
                self._failures[kind] += 1
                raise ServerError(f"injected failure of {kind}")
            try:
                yield
            except ApiError as exc:
                if not lose:
                    raise
                self._lost_replies[kind] += 1
                raise LostReply(kind, applied=False) from exc
            if lose:
                self._lost_replies[kind] += 1
                raise LostReply(kind, applied=True)
        finally:
            self._in_flight -= 1
