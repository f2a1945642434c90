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
``backfill``.
"""

from __future__ import annotations

from collections import deque

from scheduler.actions.common import Placed, eligible, place_job, waiting_tasks
from scheduler.api import reasons
from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskStatus
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session


class AllocateAction:
    name = "allocate"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        jobs = []
        for job in session.jobs.values():
            tasks = waiting_tasks(job)
            if not tasks or all(t.spec.best_effort for t in tasks):
                continue
            if eligible(session, job):
                jobs.append(job)
        short = self._round(session, jobs, borrow=False)
        if short:
            self._round(session, short, borrow=True)

    def _round(self, session: Session, jobs: list[JobInfo], *, borrow: bool) -> list[JobInfo]:
        """Try ``jobs`` queue by queue; return those that lacked only their queue's share."""
        by_queue: dict[str, list[JobInfo]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append(job)
        pending = {q: deque(session.order_jobs(js)) for q, js in sorted(by_queue.items())}
        short: list[JobInfo] = []
        while pending:
            name = min(pending, key=lambda q: session.queue_key(session.queues[q]))
            queue = session.queues[name]
            queued = pending[name]
            job = queued.popleft()
            if not queued:
                del pending[name]
            if job.uid in session.job_errors:
                continue
            with session.job_scope(job):
                if self._allocate(session, queue, job, borrow=borrow) is Placed.SHORT_OF_SHARE:
                    short.append(job)
        return short

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
