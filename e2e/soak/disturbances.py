"""When the soak's cluster was disturbed, and since when it is settled (issue 26).

A part of the soak (:mod:`soak`). The chaos (:mod:`soak.chaos`) and the replicas'
supervisor (:mod:`soak.replicas`) open an interval when they disturb the cluster (the
API server killed, the proxy's outage, a leader gone) and close it when the disturbance
is over (the server ready, the proxy listening, the next bind of a new leader). The
checks that judge a state "once settled" (:mod:`soak.checks`) ask how long it has been
quiet. Times are ``time.monotonic()``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Disturbance:
    kind: str
    start: float
    end: float | None = None
    detail: dict[str, object] = field(default_factory=dict)


class Disturbances:
    """The intervals so far, open ones included."""

    def __init__(self) -> None:
        self.all: list[Disturbance] = []

    def open(self, kind: str, **detail: object) -> Disturbance:
        d = Disturbance(kind, time.monotonic(), detail=dict(detail))
        self.all.append(d)
        return d

    def close(self, d: Disturbance, **detail: object) -> None:
        if d.end is None:
            d.end = time.monotonic()
        d.detail.update(detail)

    def ongoing(self) -> bool:
        return any(d.end is None for d in self.all)

    def last_end(self) -> float:
        """When the latest disturbance ended (0.0: none yet); ``inf`` while one is on."""
        if self.ongoing():
            return float("inf")
        return max((d.end for d in self.all if d.end is not None), default=0.0)

    def quiet_for(self, now: float) -> float:
        """Seconds since the last disturbance ended (0 while one is on)."""
        return max(0.0, now - self.last_end())

    def held_settled(self, since: float, now: float, settle: float) -> float:
        """How long a state that began at ``since`` has held while the cluster was settled:
        counted from ``settle`` seconds after the last disturbance ended, if later."""
        if self.ongoing():
            return 0.0
        return max(0.0, now - max(since, self.last_end() + settle))
