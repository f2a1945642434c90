"""The ``backfill`` action (layer 2): place pods that request nothing but a pod slot.

Such pods take no share of any resource, so they are placed on any node that passes the
filters, after ``allocate``, in job order. Gangs still go in full or not at all.
"""

from __future__ import annotations

from scheduler.actions.common import eligible, place_job, waiting_tasks
from scheduler.api.job import JobInfo
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session


class BackfillAction:
    name = "backfill"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        jobs = []
        for job in session.jobs_to_place:
            tasks = waiting_tasks(job)
            if tasks and all(t.spec.best_effort for t in tasks) and eligible(session, job):
                jobs.append(job)
        session.for_each_job(session.order_jobs(jobs), _backfill)


def _backfill(session: Session, job: JobInfo) -> None:
    place_job(session, session.queues[job.queue], job, waiting_tasks(job))
