"""The ``allocate`` action (layer 2): place pending gangs on nodes with free room.

Two rounds. In the first, queues are visited in the session's queue order, re-evaluated
after every job (so a queue that just received its share gives way); within a queue,
jobs in job order; within a job, tasks in task order; each queue stays within its
deserved share. In the second, the jobs that lacked only their queue's share are tried
again, in the same orders, and may take what is left beyond their share where the plugins
allow it (``QUEUE_BORROWABLE``): room that no queue below its share could use in the
first round, so that no room stays idle while a pod could use it. What a queue takes
beyond its share is the first to be reclaimed.

A gang is committed only when it is ready, otherwise its statement is rolled back and
nothing of it is bound. Jobs whose waiting tasks all request nothing are left to
``backfill``. Once its slice is over (its time budget spent, or the cycle's shorter first
slice: :meth:`~scheduler.framework.session.Session.slice_over`) it stops between two jobs and
leaves where it is in the session (:meth:`~scheduler.framework.session.Session.carry`):
the loop hands on what was decided so far, lets the binds go out, and runs the action
again on the same session, which goes on from there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from scheduler.actions.common import Placed, eligible, place_job, waiting_tasks
from scheduler.api import reasons
from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskStatus
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session


@dataclass(slots=True)
class _Progress:
    """Where allocate is in a session: the round, the jobs left per queue (in job
    order), and the jobs the first round left short of their queue's share. Kept in the
    session (:meth:`Session.carry`) when the action's time budget runs out, so that the
    next slice of the same session goes on from here."""

    borrow: bool
    pending: dict[str, deque[JobInfo]]
    short: list[JobInfo] = field(default_factory=list)


class AllocateAction:
    name = "allocate"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        progress = session.resume(self.name)
        if not isinstance(progress, _Progress):
            jobs = []
            for job in session.jobs.values():
                tasks = waiting_tasks(job)
                if not tasks or all(t.spec.best_effort for t in tasks):
                    continue
                if eligible(session, job):
                    jobs.append(job)
            progress = _Progress(False, self._queues(session, jobs))
        if not self._round(session, progress):
            session.carry(self.name, progress)  # out of time: the next slice goes on
            return
        if not progress.borrow and progress.short:
            progress = _Progress(True, self._queues(session, progress.short))
            if not self._round(session, progress):
                session.carry(self.name, progress)

    @staticmethod
    def _queues(session: Session, jobs: list[JobInfo]) -> dict[str, deque[JobInfo]]:
        by_queue: dict[str, list[JobInfo]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append(job)
        return {q: deque(session.order_jobs(js)) for q, js in sorted(by_queue.items())}

    def _round(self, session: Session, progress: _Progress) -> bool:
        """Try the jobs of ``progress`` queue by queue (the first round within each
        queue's share, the second beyond it); the first round notes in it the jobs that
        lacked only their queue's share. False when the slice was over first
        (``progress`` then holds what is left)."""
        pending = progress.pending
        while pending:
            name = min(pending, key=lambda q: session.queue_key(session.queues[q]))
            if session.slice_over():
                return False
            queue = session.queues[name]
            queued = pending[name]
            job = queued.popleft()
            if not queued:
                del pending[name]
            if job.uid in session.job_errors or job.uid in session.deferred:
                continue
            session.note_try()
            with session.job_scope(job):
                placed = self._allocate(session, queue, job, borrow=progress.borrow)
                if placed is Placed.SHORT_OF_SHARE and not progress.borrow:
                    progress.short.append(job)
        return True

    @staticmethod
    def _allocate(session: Session, queue: QueueInfo, job: JobInfo, *, borrow: bool) -> Placed:
        tasks = waiting_tasks(job)
        if (
            not borrow
            and session.queue_overused(queue)
            and any(t.status is TaskStatus.PENDING for t in tasks)
        ):
            # Nominated tasks are already counted in the queue; new demand is not.
            reason = reasons.queue_deserved_used(queue.name)
            session.record_job_reason(job, reason)
            for t in tasks:
                session.task_reasons.setdefault(t.uid, reason)
            return Placed.SHORT_OF_SHARE
        return place_job(session, queue, job, tasks, borrow=borrow)
