"""The ``allocate`` action (layer 2): place pending gangs on nodes with free room.

Queues are visited in the session's queue order, re-evaluated after every job (so a
queue that just received its share gives way); within a queue, jobs in job order; within
a job, tasks in task order. A gang is committed only when it is ready, otherwise its
statement is rolled back and nothing of it is bound. Jobs whose waiting tasks all request
nothing are left to ``backfill``.
"""

from __future__ import annotations

from collections import deque

from scheduler.actions.common import eligible, job_boundary, place_job, waiting_tasks
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
        by_queue: dict[str, list[JobInfo]] = {}
        for job in session.jobs.values():
            tasks = waiting_tasks(job)
            if not tasks or all(t.spec.best_effort for t in tasks):
                continue
            if eligible(session, job):
                by_queue.setdefault(job.queue, []).append(job)
        pending = {q: deque(session.order_jobs(jobs)) for q, jobs in sorted(by_queue.items())}
        while pending:
            name = min(pending, key=lambda q: session.queue_key(session.queues[q]))
            queue = session.queues[name]
            jobs = pending[name]
            job = jobs.popleft()
            if not jobs:
                del pending[name]
            with job_boundary(session, job):
                self._allocate(session, queue, job)

    @staticmethod
    def _allocate(session: Session, queue: QueueInfo, job: JobInfo) -> None:
        tasks = waiting_tasks(job)
        if session.queue_overused(queue) and any(t.status is TaskStatus.PENDING for t in tasks):
            # Nominated tasks are already counted in the queue; new demand is not.
            reason = f"queue {queue.name!r} has used its deserved share"
            session.record_job_reason(job, reason)
            for t in tasks:
                session.task_reasons.setdefault(t.uid, reason)
            return
        place_job(session, queue, job, tasks)
