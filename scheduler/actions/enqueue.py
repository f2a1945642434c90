"""The ``enqueue`` action (layer 2): admit PodGroups from Pending to Inqueue.

A PodGroup is admitted when its ``minResources`` fits in what the cluster has idle
(less what gangs admitted earlier still reserve) and the plugins agree that its queue
has room. A plugin may measure that room its own way (``ENQUEUE_ROOM``: the
``overcommit`` plugin's allocatable times a factor); each gang admitted takes its
``minResources`` off the room, whoever measured it. Queues are visited in queue order
and jobs in job order, so when room is short the most important gangs are admitted
first. Gangs without ``minResources`` are admitted at once. A PodGroup none of whose pods
exist yet is admitted all the same (Volcano's Job controller creates the pods once it is
Inqueue); one with some pods must have enough of them (the plugins' validity check).
Lone pods need no admission.
"""

from __future__ import annotations

from scheduler.actions.common import eligible
from scheduler.api import reasons
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import ZERO, Resource
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session


def _idle(session: Session) -> Resource:
    idle = ZERO
    for node in session.nodes.values():
        if node.ready and not node.unschedulable:
            idle = idle + (node.idle - node.nominated).clamp()
    for job in session.jobs.values():
        if job.has_pod_group and job.phase is PodGroupPhase.INQUEUE:
            placed = ZERO
            for t in job.tasks.values():
                if t.node_name:
                    placed = placed + t.request
            idle = idle - (job.min_resources - placed).clamp()
    return idle


class EnqueueAction:
    name = "enqueue"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        candidates: dict[str, list[JobInfo]] = {}
        for job in session.jobs.values():
            if (
                job.has_pod_group
                and job.phase is PodGroupPhase.PENDING
                and eligible(session, job, need_inqueue=False, valid_too=bool(job.tasks))
            ):
                candidates.setdefault(job.queue, []).append(job)
        if not candidates:
            return
        measured = session.enqueue_room()
        budget = measured.room if measured is not None else _idle(session)
        queues = sorted(candidates, key=lambda q: session.queue_key(session.queues[q]))
        for name in queues:
            for job in session.order_jobs(candidates[name]):
                need = job.min_resources
                if not need.fits_in(budget):
                    short = ", ".join(need.insufficient(budget))
                    session.record_job_reason(
                        job,
                        reasons.min_resources_exceed_idle(job.uid, short)
                        if measured is None
                        else reasons.min_resources_exceed_room(job.uid, short, measured.measure),
                    )
                    continue
                with session.job_scope(job):
                    if not session.job_enqueueable(job):
                        session.record_job_reason(
                            job, reasons.queue_no_room_for_min_resources(name, job.uid)
                        )
                        continue
                    with session.statement() as stmt:
                        stmt.enqueue(job)  # the plugins first: if one raises, no effect
                        stmt.commit()
                    budget = budget - need
