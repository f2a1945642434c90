"""The ``elect`` action (layer 2): choose the one starving job that starvation protection
holds nodes for.

Volcano's Elect, for the case it exists for: a large job waits for ever behind a stream
of small ones, because whenever some room frees a small job takes it. Runs between
enqueue and allocate. A job *starves* when it has waited to start (the scheduling
queue's ``waiting_since``: a PodGroup since it was first seen Inqueue with pods pending,
a lone pod since it was first seen pending) for at least ``starvationThreshold``
seconds, a job of no higher priority that came later was placed meanwhile (the queue's
``overtaken``: a job first in line takes the next room that frees, and needs no
protection), it is not held by a preemption gate or a backoff, and it could fit in one
of its domains with every pod of its priority or lower gone (a job larger than the
cluster never starves: nothing would ever make room for it).

Of the starving jobs the target is the one of highest priority, then the one waiting
longest, then the first by name. One target at a time: it is kept until it starts, is
deleted, or a job of higher priority starves; then the reservation goes to that one.
The ``reserve`` action picks the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.actions.common import eligible
from scheduler.actions.starving_jobs import could_ever_fit, started, still_needed
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.framework.session import Session


@dataclass(frozen=True, slots=True)
class ElectArguments:
    """``actionArguments.elect``."""

    starvationThreshold: float = 10.0
    """Seconds a job waits to start before it may be elected."""

    def __post_init__(self) -> None:
        if not self.starvationThreshold >= 0:
            raise ValueError("starvationThreshold must be a number of seconds, at least 0")


class ElectAction:
    name = "elect"

    def __init__(self, arguments: ElectArguments) -> None:
        self.threshold = arguments.starvationThreshold

    def execute(self, session: Session) -> None:
        current = session.reservation
        target = session.jobs.get(current.job) if current is not None else None
        if current is not None:
            if target is None:
                session.starvation.release("the job was deleted")
            elif started(target):
                session.starvation.release("the job started")
            elif (
                not session.select_jobs([target], lambda j: bool(still_needed(session, j)))
                and target.uid not in session.job_errors
            ):
                session.starvation.release("the job has no pods left to place")
        starving = sorted(
            session.select_jobs(session.jobs_to_place, lambda j: self._waited_enough(session, j)),
            key=lambda j: (-j.priority, session.waiting_since(j) or 0.0, j.uid),
        )
        holder = session.jobs.get(session.reservation.job) if session.reservation else None
        for job in starving:
            if holder is not None and (job.uid == holder.uid or job.priority <= holder.priority):
                return  # the target stays: nobody of higher priority starves
            if not session.select_jobs([job], lambda j: self._may_be_elected(session, j)):
                continue
            if holder is not None:
                session.starvation.release(f"job {job.uid} of higher priority starves")
            session.starvation.elect(job)
            return

    @staticmethod
    def _may_be_elected(session: Session, job: JobInfo) -> bool:
        return eligible(session, job, parked_too=True) and could_ever_fit(session, job)

    def _waited_enough(self, session: Session, job: JobInfo) -> bool:
        if not session.overtaken(job):
            return False
        since = session.waiting_since(job)
        if since is None or session.now - since < self.threshold:
            return False
        if job.has_pod_group and job.phase is not PodGroupPhase.INQUEUE:
            return False
        return not started(job) and bool(still_needed(session, job))
