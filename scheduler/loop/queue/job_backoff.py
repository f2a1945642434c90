"""One backoff policy for every hold that waits after a failure (layer 3, loop).

A job whose attempt raised (a SchedulerError) and a job whose preemption failed both wait
before they are tried again (the latter only before it preempts again): 1 s after the
first failure, doubling with each failure in a row, at most 60 s, so that something that
keeps failing is not retried in a tight loop. kube-scheduler spaces a pod's attempts the
same way (``podInitialBackoffSeconds``, ``podMaxBackoffSeconds``); the repeats of a
pod's ``FailedScheduling`` event are spaced by their own, shorter rule
(:mod:`scheduler.loop.message_backoff`).

Owned by the scheduling queue (:mod:`scheduler.loop.queue`); its task only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.api.holds import Hold, HoldKind

FIRST_DELAY = 1.0
"""Seconds of the first wait after a failure."""
LONGEST_DELAY = 60.0
"""The longest wait: the delay doubles with each failure in a row up to this."""


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """How long to wait after a failure, given the wait after the one before it."""

    first: float = FIRST_DELAY
    longest: float = LONGEST_DELAY

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.longest:
            raise ValueError(f"need 0 < first <= longest, got {self.first}, {self.longest}")

    def after(self, previous: float | None) -> float:
        """The wait after a failure; ``previous``: the wait after the failure before it in
        a row (None: this is the first)."""
        return self.first if previous is None else min(self.longest, previous * 2)


class Backoffs:
    """The jobs backing off after failures of one kind (``kind``: ERROR or
    NO_PREEMPTION), and the delay each reached in its current run of failures."""

    def __init__(self, kind: HoldKind, policy: BackoffPolicy) -> None:
        self.kind = kind
        self.policy = policy
        self._holds: dict[str, Hold] = {}
        self._delays: dict[str, float] = {}

    def fail(self, job: str, reason: str, now: float) -> Hold:
        """``job`` failed at ``now`` (``reason``: what failed): it waits the next delay
        of its run of failures."""
        delay = self.policy.after(self._delays.get(job))
        self._delays[job] = delay
        hold = Hold(self.kind, reason, until=now + delay, delay=delay)
        self._holds[job] = hold
        return hold

    def active(self, now: float) -> dict[str, Hold]:
        """The backoffs still running at ``now``."""
        return {job: h for job, h in self._holds.items() if h.until > now}

    def ended(self, now: float) -> list[str]:
        """The jobs whose backoff is over at ``now`` (not yet forgotten)."""
        return [job for job, h in self._holds.items() if h.until <= now]

    def lift(self, job: str) -> None:
        """End ``job``'s wait; the run of failures goes on (the next failure waits longer)."""
        self._holds.pop(job, None)

    def end_run(self, job: str) -> None:
        """``job`` succeeded: its run of failures is over (the next failure waits the first
        delay); a wait already running goes on."""
        self._delays.pop(job, None)

    def reset(self, job: str) -> None:
        """``job`` did not fail: its wait ends and its next failure waits the first delay."""
        self._holds.pop(job, None)
        self._delays.pop(job, None)

    def retain(self, jobs: Iterable[str] | Mapping[str, object]) -> None:
        """Forget every job not in ``jobs`` (those that still exist)."""
        keep = set(jobs)
        self._holds = {j: h for j, h in self._holds.items() if j in keep}
        self._delays = {j: d for j, d in self._delays.items() if j in keep}

    def next_deadline(self, now: float) -> float:
        """When the next backoff ends after ``now`` (``inf``: none will)."""
        return min((h.until for h in self._holds.values() if h.until > now), default=math.inf)

    def __len__(self) -> int:
        return len(self._holds)

    def __contains__(self, job: object) -> bool:
        return job in self._holds
