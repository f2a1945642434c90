"""What the scheduler itself holds back, as one cycle sees it (layer 0).

Between cycles the loop's scheduling queue (:mod:`scheduler.loop.queue`) keeps every hold
on a job: parked until the cluster changes, backed off after an error or a failed
preemption, gated behind the evictions of its preemption; starvation protection's state
(since when each job waits, who was overtaken, the job elected and the nodes reserved
for it); and dissolve's count (since when each gang runs below its minimum): every
per-job clock. Before each cycle it publishes them in one read-only
:class:`QueueView`, which the loop attaches to the snapshot; the actions read it through
the session (``session.hold(job)``: one lookup) and never change it. Only the queue moves
a job from one hold to another.

A job has at most one hold in the view: the strongest of those the queue keeps for it, in
the order of :class:`HoldKind` (a job backing off after an error that also may not preempt
yet shows the error; once that ends, the other).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.reasons import Reason


@dataclass(frozen=True, slots=True)
class Reservation:
    """Starvation protection, as a cycle sees it: the starving job ``elect`` chose
    (``job``, its uid, of ``priority``), since when it had been waiting, and the nodes
    ``reserve`` holds for it (empty until it picks them; no other job of the target's
    priority or lower is placed on them). Times are the loop clock's seconds."""

    job: str
    priority: int
    waiting_since: float
    nodes: frozenset[str] = frozenset()
    reserved_at: float = 0.0
    """When the nodes were picked (0 while there are none)."""


class HoldKind(enum.Enum):
    """Why a job is held, strongest first. Every kind but NO_PREEMPTION keeps every action
    from trying the job; NO_PREEMPTION keeps it only from preempting and reclaiming."""

    EVICTIONS = "evictions"
    """Behind the gate of its preemption: its API calls are running or its victims have
    not gone yet (DESIGN section 4). It says what it waits for; nothing tries it."""
    ERROR = "error"
    """Backing off after a SchedulerError (a plugin raised while it was tried), or after
    a bind of one of its pods was refused."""
    PARKED = "parked"
    """Found unschedulable, and nothing that could help it changed since
    (:mod:`scheduler.loop.queue.parking`). It says again what it was told."""
    NO_PREEMPTION = "no preemption"
    """Backing off after a preemption of its failed: scheduled normally meanwhile, but it
    does not preempt or reclaim until ``until``."""

    @property
    def blocks_placement(self) -> bool:
        """Does this hold keep every action (enqueue, elect, allocate, backfill too) from
        trying the job, not only the evicting ones?"""
        return self is not HoldKind.NO_PREEMPTION

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Hold:
    """One job's hold as the cycle sees it (see :class:`HoldKind` for each kind)."""

    kind: HoldKind
    reason: str = ""
    """ERROR and NO_PREEMPTION: what failed."""
    told: Reason | None = None
    """PARKED: what the job was told when it was parked."""
    until: float = math.inf
    """When it ends by itself (the loop's clock); ``inf``: only at an event (PARKED ends
    at an event that could help, or after the queue's retry period; EVICTIONS when the
    calls are done and the victims gone)."""
    delay: float = 0.0
    """Backoffs: the wait in all (what users read: it does not count down)."""
    task_reasons: Mapping[str, Reason] = field(default_factory=dict)
    """PARKED: what each pod was told, by uid."""
    victims: frozenset[str] = frozenset()
    """EVICTIONS: the victims (uids) whose deletion has not been seen yet."""
    devices: frozenset[str] = frozenset()
    """EVICTIONS: the victims (uids) whose DRA claims still hold devices for them."""
    calls_left: int = 0
    """EVICTIONS: preemptions of the job whose API calls have not finished."""

    @property
    def text(self) -> str:
        """What the hold says in a sentence: what failed, or what a parked job was told."""
        if self.told is not None:
            return self.told.message
        return self.reason


@dataclass(frozen=True, slots=True)
class QueueView:
    """The scheduling queue as one cycle sees it (read-only)."""

    holds: Mapping[str, Hold] = field(default_factory=dict)
    """The hold of each held job, by job uid."""
    reservation: Reservation | None = None
    """The starving job elected and the nodes reserved for it, as the last cycle left it."""
    waiting_since: Mapping[str, float] = field(default_factory=dict)
    """Since when (loop clock) each job has waited to start: a PodGroup since it was first
    seen Inqueue with pods pending, a lone pod since it was first seen pending."""
    overtaken: frozenset[str] = frozenset()
    """Jobs waiting to start that a later job of no higher priority has passed (placed
    while they waited): what starvation looks like."""
    below_minimum_since: Mapping[str, float] = field(default_factory=dict)
    """Since when (loop clock) each gang has run below its minimum, as the snapshots seen
    so far (this cycle's included) showed it without a break: the ``dissolve`` action's
    count."""

    def hold(self, job: str) -> Hold | None:
        """``job``'s hold, or None when nothing holds it."""
        return self.holds.get(job)


@dataclass(frozen=True, slots=True)
class GateTicket:
    """What the preemption executor holds for one preemption it runs: the preemptor's job
    and the token of the gate that preemption joined (the queue's, for its reports)."""

    job: str
    token: int


EMPTY_QUEUE = QueueView()
"""No holds at all (a snapshot taken outside the loop: ``sluice explain``, tests)."""
