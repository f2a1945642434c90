"""What the live page keeps of each cycle (layer 4, live).

:class:`LiveSummary` is a :class:`~scheduler.loop.cycle_report.CycleObserver`: after each
cycle the loop hands it the cycle's report, and it keeps references to what the report
already holds (the reasons, the scheduling queue's view, the queue shares) and the last
:data:`RECENT` preemption and reclaim decisions. That is all the work the page adds to a
cycle: no copy of the cluster, no loop over pods or nodes. Everything else the page shows
is read when the page asks (:mod:`scheduler.live.state`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.holds import EMPTY_QUEUE, QueueView
from scheduler.api.queue import QueueShare
from scheduler.api.reasons import Reason
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.decisions import Decision, decisions_of

RECENT = 50
"""How many preemption and reclaim decisions the page lists (the most recent)."""


@dataclass(frozen=True, slots=True)
class RecentDecision:
    """A :class:`Decision` with the cycle that made it and that cycle's start (the loop's
    clock)."""

    cycle: int
    at: float
    decision: Decision


@dataclass
class LiveSummary:
    """The last cycle's report, as the page reads it, and the recent decisions. Fed by
    the loop (:meth:`observe`, in its task, after each cycle); read by the page's
    handlers on the same event loop."""

    cycle: int = 0
    started: float = 0.0
    """When the last cycle began (the loop's clock)."""
    seconds: float = 0.0
    """Wall time the last cycle's decisions took."""
    failed: str = ""
    task_reasons: Mapping[str, Reason] = field(default_factory=dict)
    """Why each pending pod (``namespace/name``) is not placed, as the last cycle said."""
    job_reasons: Mapping[str, Reason] = field(default_factory=dict)
    queue_view: QueueView = EMPTY_QUEUE
    """The scheduling queue's holds as the last cycle started."""
    queue_shares: Mapping[str, QueueShare] = field(default_factory=dict)
    recent: deque[RecentDecision] = field(default_factory=lambda: deque(maxlen=RECENT))

    def observe(self, report: CycleReport) -> None:
        """Keep what ``report`` says (references, no copies). A cycle that failed as a
        whole changes only the cycle number and ``failed``: the page keeps showing the
        last cycle that ran to its end."""
        self.cycle = report.number
        self.started = report.started
        self.failed = report.failed
        if report.failed:
            return
        self.seconds = report.seconds
        self.task_reasons = report.task_reasons
        self.job_reasons = report.job_reasons
        self.queue_view = report.queue_view
        self.queue_shares = report.queue_shares
        for d in decisions_of(report.effects):
            self.recent.append(RecentDecision(report.number, report.started, d))
