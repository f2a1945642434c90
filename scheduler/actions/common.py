"""What the actions share (layer 2): which jobs are eligible, and how a gang is placed."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.session import Session


def waiting_tasks(job: JobInfo) -> list[TaskInfo]:
    """Tasks still to be placed: pending ones, and nominated ones waiting for room."""
    return [
        t
        for t in job.tasks.values()
        if t.sluice and t.status in (TaskStatus.PENDING, TaskStatus.PIPELINED)
    ]


def eligible(session: Session, job: JobInfo, *, need_inqueue: bool = True) -> bool:
    """May an action try to place ``job`` this cycle? Records the reason when not."""
    if session.is_gated(job):
        return False
    if job.problem:
        session.record_job_reason(job, job.problem)
        return False
    queue = session.queues.get(job.queue)
    if queue is None:
        session.record_job_reason(job, f"queue {job.queue!r} does not exist")
        return False
    if queue.state != "Open":
        session.record_job_reason(job, f"queue {job.queue!r} is {queue.state}")
        return False
    if need_inqueue and job.has_pod_group and job.phase is PodGroupPhase.PENDING:
        return False
    reason = session.job_valid(job)
    if reason is not None:
        session.record_job_reason(job, reason)
        return False
    return True


def place_job(session: Session, queue: QueueInfo, job: JobInfo, tasks: list[TaskInfo]) -> bool:
    """Try to place ``tasks`` of ``job``; commit only if the job is then ready.

    A task nominated to a node is tried there first. Tasks that find no node record
    why. If the job is not ready at the end, every decision is rolled back and the job
    records why. Returns True when something was committed.
    """
    with session.statement() as stmt:
        first_reason = ""
        for task in session.order_tasks(tasks):
            reason = _place_task(session, stmt.allocate, queue, task)
            if reason:
                first_reason = first_reason or f"{task.key}: {reason}"
        if stmt.operations and session.job_ready(job):
            stmt.commit()
            return True
        if not session.job_ready(job) and not session.job_pipelined(job):
            msg = _gang_message(job)
            if first_reason:
                msg += f"; {first_reason}"
            stmt.discard()
            session.record_job_reason(job, msg)
            for t in tasks:
                session.task_reasons.setdefault(t.uid, msg)
        return False


def _gang_message(job: JobInfo) -> str:
    """Why a gang is not ready: too few tasks placed in all, or in one role."""
    placed = job.placed_count()
    if placed < job.min_member:
        return (
            f"{placed}/{len(job.tasks)} tasks of gang {job.uid} can be placed, "
            f"minMember is {job.min_member}"
        )
    by_role = job.placed_by_role()
    for role in sorted(job.min_task_member):
        need = job.min_task_member[role]
        if by_role[role] < need:
            return (
                f"{by_role[role]} tasks of role {role!r} of gang {job.uid} can be placed, "
                f"minTaskMember is {need}"
            )
    return f"gang {job.uid} is not ready"


def _place_task(
    session: Session, allocate: Callable[[TaskInfo, str], None], queue: QueueInfo, task: TaskInfo
) -> str:
    if not session.queue_allocatable(queue, task):
        fit = session.fit(task)  # failing path only: say so if no node could take it anyway
        reason = (
            fit.explain()
            if not fit.any
            else f"queue {queue.name!r} has no room left within its share"
        )
        session.record_task_reason(task, reason)
        return reason
    if task.status is TaskStatus.PIPELINED and session.fits_on(task, task.node_name):
        allocate(task, task.node_name)
        return ""
    if task.nominated_node in session.nodes and session.fits_on(task, task.nominated_node):
        allocate(task, task.nominated_node)
        return ""
    fit = session.fit(task)
    node = session.select_node(task, fit)
    if node is None:
        reason = fit.explain()
        session.record_task_reason(task, reason)
        return reason
    allocate(task, node.name)
    return ""
