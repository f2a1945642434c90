"""The ``dissolve`` action (layer 2): evict what is left of a gang that has run below its
minimum for too long (KAI-Scheduler's stale gang eviction).

A gang runs below its minimum when some of its members run but fewer of them are there
or on their way (placed, or nominated) than it needs
(:meth:`~scheduler.api.job.JobInfo.runs_below_minimum`): a member was evicted and the
eviction of another failed, a member was deleted or failed and its controller has not
made a new one yet (a Job's replacements wait out its pod-failure backoff), or the new
one finds no room. Such a gang cannot do its work, yet it holds its room. While an
eviction of a member that this scheduler asked for is in flight, the gang is not known
to be broken (the call may fail and leave it whole): the count starts once it settles.
Once it has been seen so for ``graceSeconds`` on end, its running members are evicted, so
that it can start again whole and its room serves others meanwhile. A member that comes
back within the grace (a replacement placed or nominated) ends the count. The count is
kept between cycles by the scheduling queue (:mod:`scheduler.loop.queue.below_minimum`)
by the rule of :func:`below_minimum_since`, and read from its view
(:attr:`Session.below_minimum`).

Runs last, after preempt and reclaim: those may take a broken gang's pods first (they
cost nothing to evict) for a pod that needs the room. Not dissolved: a gang with a
member that opted out of being a victim (``scheduling.sluice.dev/preemptable:
"false"``), and a gang whose eviction is under way (behind its gate) or failed and
backs off. A gang whose replacements the scheduling queue parked (they found no room)
is dissolved all the same: that is the case the action is for. The evictions go through
the preemption executor with no preemptor: the gang's own job is gated until its
members are gone. Decisions depend on the snapshot
only (the time since comes with it, in the queue's view), so a replay decides the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.api.holds import HoldKind
from scheduler.api.job import JobInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.framework.effects import EvictReason, VictimBundle
from scheduler.framework.session import Session

DEFAULT_GRACE_SECONDS = 60.0
"""As KAI-Scheduler's default staleness grace period."""


def below_minimum_since(
    jobs: Mapping[str, JobInfo], before: Mapping[str, float], now: float
) -> dict[str, float]:
    """The count of each gang of ``jobs`` (a snapshot's, taken at ``now``) that runs below
    its minimum: since ``before`` says, or ``now`` for a gang not counted yet. A gang
    that does not run below its minimum there is not counted (its count ends)."""
    return {job.uid: before.get(job.uid, now) for job in jobs.values() if job.runs_below_minimum()}


@dataclass(frozen=True, slots=True)
class DissolveArguments:
    """``actionArguments.dissolve``."""

    graceSeconds: float = DEFAULT_GRACE_SECONDS
    """Seconds a gang runs below its minimum before what is left of it is evicted; 0:
    at the first cycle that sees it."""

    def __post_init__(self) -> None:
        if not self.graceSeconds >= 0:
            raise ValueError("graceSeconds must be a number of seconds, at least 0")


class DissolveAction:
    name = "dissolve"

    def __init__(self, arguments: DissolveArguments) -> None:
        self.grace = arguments.graceSeconds

    def execute(self, session: Session) -> None:
        jobs = []
        for uid, since in session.below_minimum.items():
            job = session.jobs.get(uid)
            if job is None:
                continue
            if session.now - since >= self.grace:
                if job.runs_below_minimum():
                    jobs.append(job)
            else:
                session.wake(since + self.grace)  # nothing else may happen until then
        session.for_each_job(sorted(jobs, key=lambda j: j.uid), self._dissolve)

    def _dissolve(self, session: Session, job: JobInfo) -> None:
        hold = session.hold(job)
        if hold is not None and hold.kind in (HoldKind.EVICTIONS, HoldKind.NO_PREEMPTION):
            return  # its evictions are under way, or failed and it backs off
        running = [t for t in job.tasks.values() if t.status in EVICTABLE]
        if not all(t.preemptable for t in running):
            return
        stmt = session.statement()
        for t in sorted(running, key=lambda t: t.key):
            stmt.evict(t, EvictReason.DISSOLVED, queue=job.queue, bundle=VictimBundle.WHOLE)
        stmt.commit()
