"""What one cycle decided, as the loop reports it to its observers (the simulator, the
live page, the benchmarks, the tests): :class:`CycleReport`, filled from the closed
session by :func:`record_decisions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.api.holds import EMPTY_QUEUE, QueueView
from scheduler.api.queue import QueueShare
from scheduler.api.reasons import Reason
from scheduler.framework.effects import Bind, Effect
from scheduler.framework.session import Session
from scheduler.loop.queue import ReservationChange
from scheduler.loop.status import WAITING


@dataclass(slots=True)
class CycleReport:
    """What one cycle decided. Given to observers after the cycle's effects are handed on."""

    number: int
    started: float
    """Clock time (virtual in simulations) when the cycle began."""
    effects: list[Effect] = field(default_factory=list)
    task_reasons: dict[str, Reason] = field(default_factory=dict)
    """Why each still-pending pod is unscheduled, by ``namespace/name``."""
    job_reasons: dict[str, Reason] = field(default_factory=dict)
    placements: dict[str, str] = field(default_factory=dict)
    """The node set (``rack rb``) each pod bound this cycle was placed in, by
    ``namespace/name``, for the pods of gangs placed in one."""
    job_errors: dict[str, str] = field(default_factory=dict)
    """Jobs whose attempt raised this cycle (rolled back, backing off), with the message."""
    failed: str = ""
    """Non-empty when the cycle failed as a whole: where (its decisions were discarded)."""
    seconds: float = 0.0
    """Wall time the decisions took."""
    reservation_changes: list[ReservationChange] = field(default_factory=list)
    """Nodes reserved for a starving job, or released, this cycle."""
    queue_view: QueueView = EMPTY_QUEUE
    """What the scheduling queue held back as the cycle started (its holds, starvation
    protection's target and nodes)."""
    queue_shares: Mapping[str, QueueShare] = field(default_factory=dict)
    """Each queue's deserved share and allocation as the cycle ended (empty when it
    failed)."""
    deferred: int = 0
    """Jobs left to the next cycle because an action spent its time budget (the loop
    then runs the next cycle at once)."""
    slices: int = 1
    """Stretches the cycle held the loop in (more than one when an action went on in the
    same session after the background calls ran: see ``SchedulingLoop._decide``)."""
    handed_on: int = 0
    """Effects handed on (assumed, submitted) between slices, before the cycle's end."""
    longest_hold: float = 0.0
    """The longest stretch (seconds of wall time) the cycle held the loop without
    letting a background call or a watch event run: what ``max_cycle_seconds`` of the
    benchmarks reports."""
    slice_started: float = 0.0
    revision: int = 0
    """The cache's :attr:`~scheduler.cache.SchedulerCache.revision` at the snapshot."""
    settled: bool = False
    """The cycle decided nothing and left no pod of Sluice waiting
    (:func:`~scheduler.loop.idle.settled`): until the cache changes, the next may be
    skipped. Worked out only by a loop that skips idle cycles (``skip_idle``)."""
    parts: dict[str, float] = field(default_factory=dict)
    """Wall time of each part of the decisions: ``snapshot``, ``open``, each action."""

    @property
    def decided(self) -> bool:
        return bool(self.effects or self.reservation_changes)


class CycleObserver(Protocol):
    def __call__(self, report: CycleReport, /) -> None: ...


def record_decisions(report: CycleReport, session: Session) -> None:
    """Copy into ``report`` what ``session`` decided: its effects, the reasons of the
    pods of Sluice still waiting, the jobs' reasons and errors, the node sets placed in,
    the queues' shares and the jobs deferred. Called once per cycle that did not fail,
    after the session closed."""
    report.effects = list(session.effects)
    for job in session.jobs.values():
        for t in job.tasks.values():
            told = session.task_reasons.get(t.uid) or session.job_reasons.get(job.uid)
            if told is not None and told.message and t.status in WAITING and t.sluice:
                report.task_reasons[t.key] = told
    report.job_reasons = dict(session.job_reasons)
    report.queue_shares = session.queue_shares
    if session.placed_in:
        for effect in report.effects:
            if isinstance(effect, Bind) and effect.task.job_id in session.placed_in:
                report.placements[effect.task.key] = session.placed_in[effect.task.job_id]
    report.job_errors = {
        uid: told.message if (told := session.job_reasons.get(uid)) is not None else ""
        for uid in session.job_errors
    }
    report.deferred = len(session.deferred)
