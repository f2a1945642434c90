"""What the actions share (layer 2): which jobs are eligible, how a gang is placed, and
the per-job error boundary."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from scheduler.api.errors import SessionCorruptedError
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


@contextmanager
def job_boundary(session: Session, job: JobInfo) -> Iterator[None]:
    """Confine a failure of the block (a plugin that raised, an AllocationError, a bug) to
    ``job``: its statement has already been rolled back by the statement's own block; the
    job says SchedulerError (:meth:`Session.record_job_error`) and no action tries it again
    this cycle; the other jobs go on.

    A failure after the job committed decisions, or a rollback that failed, leaves the
    session untrustworthy: that escalates as SessionCorruptedError, and the loop throws
    the cycle away.
    """
    committed = len(session.effects)
    try:
        yield
    except SessionCorruptedError:
        raise
    except Exception as exc:
        if len(session.effects) != committed:
            raise SessionCorruptedError(
                f"job {job.uid} failed after committing decisions: {exc}"
            ) from exc
        session.record_job_error(job, exc)


def for_each_job(
    session: Session, jobs: Iterable[JobInfo], attempt: Callable[[Session, JobInfo], None]
) -> None:
    """``attempt(session, job)`` for each job in order, each inside :func:`job_boundary`.
    Jobs that failed earlier in the cycle are skipped."""
    for job in jobs:
        if job.uid in session.job_errors:
            continue
        with job_boundary(session, job):
            attempt(session, job)


def eligible(session: Session, job: JobInfo, *, need_inqueue: bool = True) -> bool:
    """May an action try to place ``job`` this cycle? Records the reason when not."""
    if session.is_gated(job) or job.uid in session.job_errors:
        return False
    backoff = session.snapshot.error_backoffs.get(job.uid)
    if backoff is not None and backoff.until > session.now:
        session.error_jobs.add(job.uid)
        session.record_job_reason(
            job, f"{backoff.reason}; retried in {backoff.until - session.now:.0f}s"
        )
        return False
    if job.problem:
        session.record_job_reason(job, job.problem)
        return False
    queue = session.queues.get(job.queue)
    if queue is None:
        session.record_job_reason(job, f"queue {job.queue!r} does not exist")
        return False
    tree = session.queue_tree
    closed = tree.closed.get(job.queue)
    if closed is not None:
        session.record_job_reason(job, f"queue {job.queue!r} is closed: {closed}")
        return False
    if not tree.is_leaf(job.queue):
        children = ", ".join(tree.children[job.queue])
        session.record_job_reason(
            job,
            f"queue {job.queue!r} has child queues ({children}); "
            "pods and PodGroups must name a leaf queue",
        )
        return False
    if queue.state != "Open":
        session.record_job_reason(job, f"queue {job.queue!r} is {queue.state}")
        return False
    if need_inqueue and job.has_pod_group and job.phase is PodGroupPhase.PENDING:
        return False
    with job_boundary(session, job):
        status = session.job_valid(job)
        if not status:
            session.record_job_reason(job, status.message)
            return False
        return True
    return False


class Placed(enum.Enum):
    """What :func:`place_job` did."""

    COMMITTED = "committed"
    SHORT_OF_SHARE = "short of share"
    """Not committed, and some task lacked room in its queue's share (not a node)."""
    NOT_PLACED = "not placed"


def place_job(
    session: Session,
    queue: QueueInfo,
    job: JobInfo,
    tasks: list[TaskInfo],
    *,
    borrow: bool = False,
) -> Placed:
    """Try to place ``tasks`` of ``job``; commit only if the job is then ready.

    A task nominated to a node is tried there first. Tasks that find no node record
    why. If the job is not ready at the end, every decision is rolled back and the job
    records why (the plugins' readiness status). With ``borrow``, a task its queue's share
    has no room for may go beyond it where the plugins allow (room no queue below its
    share could use). Raises what the plugins raise (callers wrap it in
    :func:`job_boundary`).
    """
    with session.statement() as stmt:
        first_reason = ""
        short_of_share = False
        for task in session.order_tasks(tasks):
            reason, share = _place_task(session, stmt.allocate, queue, task, borrow=borrow)
            short_of_share |= share
            if reason:
                first_reason = first_reason or f"{task.key}: {reason}"
        ready = session.job_ready(job)
        if stmt.operations and ready:
            stmt.commit()
            session.job_reasons.pop(job.uid, None)  # a first round's reason no longer holds
            return Placed.COMMITTED
        if not ready and not session.job_pipelined(job):
            msg = ready.message or f"gang {job.uid} is not ready"
            if first_reason:
                msg += f"; {first_reason}"
            stmt.discard()
            session.record_job_reason(job, msg)
            for t in tasks:
                session.task_reasons.setdefault(t.uid, msg)
        return Placed.SHORT_OF_SHARE if short_of_share else Placed.NOT_PLACED


def _place_task(
    session: Session,
    allocate: Callable[[TaskInfo, str], None],
    queue: QueueInfo,
    task: TaskInfo,
    *,
    borrow: bool,
) -> tuple[str, bool]:
    """Place ``task`` in the statement: ("", ...) when placed, else (why, whether its
    queue's share is what lacked)."""
    if not session.queue_allocatable(queue, task) and not (
        borrow and session.queue_borrowable(queue, task)
    ):
        fit = session.fit(task)  # failing path only: say so if no node could take it anyway
        if not fit.any:
            reason = fit.explain()
            session.record_task_reason(task, reason)
            return reason, False
        reason = f"queue {queue.name!r} has no room left within its share"
        session.record_task_reason(task, reason)
        return reason, True
    if task.status is TaskStatus.PIPELINED and session.fits_on(task, task.node_name):
        allocate(task, task.node_name)
        return "", False
    if task.nominated_node in session.nodes and session.fits_on(task, task.nominated_node):
        allocate(task, task.nominated_node)
        return "", False
    fit = session.fit(task)
    node = session.select_node(task, fit)
    if node is None:
        reason = fit.explain()
        session.record_task_reason(task, reason)
        return reason, False
    allocate(task, node.name)
    return "", False
