"""The ``allocate`` action (layer 2): place pending gangs on nodes with free room.

Two rounds. In the first, queues are visited in the session's queue order, re-evaluated
after every turn of a job (so a queue that just received its share gives way); within a
queue, jobs in job order; within a job, tasks in task order; each queue stays within its
deserved share. A job's turn places its tasks until it is ready (its minimum); a job
with tasks left then goes back among its queue's jobs, by its job order as it now stands
(a ready job after those not ready yet; with ``drf``, by its share), and each later turn
places one more, as Volcano's allocate does: beyond their minimum, jobs and queues take
turns by their order. In the second, the jobs that lacked only their queue's share are tried
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

import heapq
from dataclasses import dataclass, field

from scheduler.actions.common import Placed, Turn, eligible, place_job, waiting_tasks
from scheduler.api import reasons
from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session

_Queued = tuple[tuple[int | float | str, ...], JobInfo]
"""A job among its queue's, by its job key (which ends with its uid: no two are equal)."""


@dataclass(slots=True)
class _Progress:
    """Where allocate is in a session: the round, the jobs left per queue (a heap by job
    key), the tasks each job has not tried yet this round (absent: all it waits with),
    and the jobs the first round left short of their queue's share. Kept in the session
    (:meth:`Session.carry`) when the action's time budget runs out, so that the next
    slice of the same session goes on from here."""

    borrow: bool
    pending: dict[str, list[_Queued]]
    short: list[JobInfo] = field(default_factory=list)
    left: dict[str, list[TaskInfo]] = field(default_factory=dict)


class AllocateAction:
    name = "allocate"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        progress = session.resume(self.name)
        if not isinstance(progress, _Progress):
            jobs = []
            for job in session.jobs_to_place:
                tasks = waiting_tasks(job)
                if not tasks and job.has_pod_group and job.held_by_gates():
                    eligible(session, job)  # not tried, but its reason names the gates
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
    def _queues(session: Session, jobs: list[JobInfo]) -> dict[str, list[_Queued]]:
        by_queue: dict[str, list[_Queued]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append((session.job_key(job), job))
        for queued in by_queue.values():
            heapq.heapify(queued)
        return dict(sorted(by_queue.items()))

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
            _, job = heapq.heappop(queued)
            if not queued:
                del pending[name]
            if job.uid in session.job_errors or job.uid in session.deferred:
                continue
            session.note_try()
            with session.job_scope(job):
                tasks = progress.left.pop(job.uid, None) or waiting_tasks(job)
                turn = Turn()
                placed = self._allocate(
                    session, queue, job, tasks, borrow=progress.borrow, turn=turn
                )
                if placed is Placed.SHORT_OF_SHARE and not progress.borrow:
                    progress.short.append(job)
                rest = [t for t in tasks if t.uid not in turn.tried]
                if placed is Placed.COMMITTED and rest:  # its next turn, in its new place
                    progress.left[job.uid] = rest
                    heapq.heappush(pending.setdefault(name, []), (session.job_key(job), job))
        return True

    @staticmethod
    def _allocate(
        session: Session,
        queue: QueueInfo,
        job: JobInfo,
        tasks: list[TaskInfo],
        *,
        borrow: bool,
        turn: Turn,
    ) -> Placed:
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
        return place_job(session, queue, job, tasks, borrow=borrow, turn=turn)
