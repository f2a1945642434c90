"""What the actions share (layer 2): which jobs are eligible and how a gang is placed
(the per-job error boundary is the framework's: :meth:`Session.job_scope`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.api import reasons
from scheduler.api.holds import Hold, HoldKind
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.queue import QueueInfo
from scheduler.api.reasons import Reason
from scheduler.api.resource import CPU, PODS, Resource
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.node_sets import NodeSet, Purpose
from scheduler.framework.plugin_status import Code
from scheduler.framework.session import Session


def waiting_tasks(job: JobInfo) -> list[TaskInfo]:
    """Tasks still to be placed: pending ones, and nominated ones waiting for room."""
    return [
        t
        for t in job.tasks.values()
        if t.sluice and t.status in (TaskStatus.PENDING, TaskStatus.PIPELINED)
    ]


def _say_gated(session: Session, job: JobInfo, hold: Hold) -> None:
    """Reasons for a job held behind its preemption's gate, as they stand: each nominated
    pod waits on its node for the victims to go (or for the calls to finish); the
    others wait for the gate. Worded as :func:`say_nominated` worded them, so that the
    gate's progress writes nothing new."""
    nodes: set[str] = set()
    for t in job.tasks.values():
        if not t.sluice or t.status not in (TaskStatus.PENDING, TaskStatus.PIPELINED):
            continue
        node = t.nominated_node or (t.node_name if t.status is TaskStatus.PIPELINED else "")
        if node and (hold.victims or hold.devices):
            reason = reasons.waiting_for_victims([node])
            nodes.add(node)
        elif node and hold.calls_left:
            reason = reasons.waiting_for_preemption_calls(node)
        elif node:
            reason = reasons.nominated_binding_next(node)
        else:
            reason = reasons.waiting_for_job_preemption()
        session.record_task_reason(t, reason)
    if nodes:
        session.record_job_reason(job, reasons.waiting_for_victims(nodes))
    else:
        session.record_job_reason(job, reasons.waiting_for_preemption())


def _say_held(session: Session, job: JobInfo, hold: Hold) -> None:
    """What a job the scheduling queue holds says this cycle, by the kind of its hold."""
    match hold.kind:
        case HoldKind.EVICTIONS:
            _say_gated(session, job, hold)
        case HoldKind.PARKED:
            if hold.told is not None:
                session.record_job_reason(job, hold.told)
            for t in job.tasks.values():
                told = hold.task_reasons.get(t.uid)
                if told is not None:
                    session.record_task_reason(t, told)
        case HoldKind.ERROR:
            session.failing_jobs.add(job.uid)
            session.record_job_reason(job, reasons.retried_after(hold.reason, hold.delay))
        case HoldKind.NO_PREEMPTION:
            pass  # placed normally; the evicting actions say it (reasons.preemption_backoff)


def eligible(
    session: Session,
    job: JobInfo,
    *,
    need_inqueue: bool = True,
    parked_too: bool = False,
    valid_too: bool = True,
) -> bool:
    """May an action try to place ``job`` this cycle? Records the reason when not. A job
    the scheduling queue holds (:mod:`scheduler.api.holds`) is not tried and says what
    its hold says; a parked job is tried all the same with ``parked_too``.
    ``valid_too=False`` leaves out the plugins' validity check (enqueue admits a PodGroup
    whose pods do not exist yet: Volcano's Job controller creates them once it is
    Inqueue)."""
    if job.uid in session.job_errors or job.uid in session.deferred:
        return False
    hold = session.hold(job)
    if (
        hold is not None
        and hold.kind.blocks_placement
        and not (parked_too and hold.kind is HoldKind.PARKED)
    ):
        _say_held(session, job, hold)
        return False
    if job.problem:
        session.record_job_reason(job, reasons.job_unresolved(job.problem))
        return False
    queue = session.queues.get(job.queue)
    if queue is None:
        session.record_job_reason(job, reasons.queue_missing(job.queue))
        return False
    tree = session.queue_tree
    closed = tree.closed.get(job.queue)
    if closed is not None:
        session.record_job_reason(job, reasons.queue_closed(job.queue, closed))
        return False
    if not tree.is_leaf(job.queue):
        session.record_job_reason(job, reasons.queue_not_leaf(job.queue, tree.children[job.queue]))
        return False
    if queue.state != "Open":
        session.record_job_reason(job, reasons.queue_not_open(job.queue, queue.state))
        return False
    if need_inqueue and job.has_pod_group and job.phase is PodGroupPhase.PENDING:
        return False
    if not valid_too:
        return True
    with session.job_scope(job):
        status = session.job_valid(job)
        if not status:
            session.record_job_reason(job, reasons.job_not_valid(status.message))
            return False
        return True
    return False


class Placed(enum.Enum):
    """What :func:`place_job` did."""

    COMMITTED = "committed"
    SHORT_OF_SHARE = "short of share"
    """Not committed, and some task lacked room in its queue's share (not a node)."""
    NOT_PLACED = "not placed"


@dataclass(slots=True)
class Turn:
    """One turn of a job in ``allocate`` (Volcano's): its tasks are placed, in task order,
    until the job is ready, and no further; what is left waits for the job's next turn,
    when one more is placed, so that jobs and queues take turns by their order beyond their
    minimum. Readiness is asked once ``minMember`` tasks are placed (no plugin's holds
    before). ``tried`` receives the uids of the tasks tried in the turn."""

    tried: set[str] = field(default_factory=set)


def place_job(
    session: Session,
    queue: QueueInfo,
    job: JobInfo,
    tasks: list[TaskInfo],
    *,
    borrow: bool = False,
    turn: Turn | None = None,
) -> Placed:
    """Try to place ``tasks`` of ``job``; commit only if the job is then ready.

    A task nominated to a node is tried there first. Tasks that find no node record
    why. If the job is not ready at the end, every decision is rolled back and the job
    records why (the plugins' readiness status). With ``borrow``, a task its queue's share
    has no room for may go beyond it where the plugins allow (room no queue below its
    share could use). Raises what the plugins raise (callers wrap it in
    :meth:`Session.job_scope`).

    When the plugins give the job node sets (``SUBSET_NODES``), the whole gang is placed
    inside the first set where it fits, and nothing of it outside; the set's name is
    recorded (``session.placed_in``). When no set fits, the pods say why as they would
    cluster-wide, and the job that no set of its kind has room for its minimum.

    With ``turn``, only one turn of the job is placed (see :class:`Turn`); a job placed in
    node sets has all its tasks tried in one turn (its surplus must go in the same set).
    """
    pending = [t for t in tasks if t.status is TaskStatus.PENDING]
    if job.has_pod_group and pending:
        left = job.min_member - job.placed_count() - (len(tasks) - len(pending))
        lacking = session.gang_shortfall(pending, left) if left > 1 else {}
        if lacking:
            reason = reasons.gang_too_large(shortfall(lacking), gang_size(job, pending))
            session.record_job_reason(job, reason)
            _explain_each(session, pending, reason)
            return Placed.NOT_PLACED
    subsets = session.node_sets(job, tasks, Purpose.ALLOCATE)
    if subsets is None:
        return _place_in(session, queue, job, tasks, borrow=borrow, within=None, turn=turn)
    if turn is not None:
        turn.tried.update(t.uid for t in tasks)
    short = False
    for node_set in subsets.sets:
        placed = _place_in(session, queue, job, tasks, borrow=borrow, within=node_set)
        if placed is Placed.COMMITTED:
            if node_set.name:
                session.placed_in[job.uid] = node_set.name
            return placed
        short |= placed is Placed.SHORT_OF_SHARE
    reason = reasons.no_node_set_fits(subsets.kind, gang_size(job, pending))
    session.record_job_reason(job, reason)
    _explain_each(session, pending, reason)  # users never see node sets
    return Placed.SHORT_OF_SHARE if short else Placed.NOT_PLACED


def _explain_each(session: Session, pending: list[TaskInfo], gang_reason: Reason) -> None:
    """Each pod of a gang that was not tried pod by pod says what it would say cluster-wide:
    why no node can take it alone, or else why the gang cannot go (pods alike share the
    one answer)."""
    said: dict[object, Reason] = {}
    for t in pending:
        shape = (t.request, t.spec.shape)
        told = said.get(shape)
        if told is None:
            fit = session.fit(t)
            told = reasons.nodes_unavailable(fit.explain()) if not fit.any else gang_reason
            said[shape] = told
        session.record_task_reason(t, told)


def gang_size(job: JobInfo, pending: list[TaskInfo]) -> str:
    """``4 pods of 2 CPU`` (the gang's minimum still to place, in one shape when its pods
    are alike), for messages."""
    count = max(job.min_member - job.placed_count(), 1) if job.has_pod_group else 1
    count = min(count, len(pending)) or 1
    shapes = {t.request for t in pending}
    if len(shapes) == 1:
        return f"{count} pod{'s' if count > 1 else ''} of {describe(next(iter(shapes)))}"
    return f"{count} pods"


def shortfall(short: dict[str, tuple[int, int]]) -> str:
    """``0 CPU free in all, 9 CPU needed``: what a gang lacks of the cluster's free room,
    each resource it lacks (:meth:`Session.gang_shortfall`) as free, then needed; none
    left out for being zero."""
    parts = []
    for name in sorted(short, key=lambda n: (n != CPU, n)):
        free, need = short[name]
        parts.append(f"{amount(name, free)} free in all, {amount(name, need)} needed")
    return " and ".join(parts)


def amount(name: str, n: int) -> str:
    """``3 CPU``, ``1Gi memory``, ``2 pod slots``, ``0 nvidia.com/gpu``: one amount as
    users read it (zero too)."""
    value = Resource({name: n}).to_quantities()[name] if n > 0 else "0"
    if name == CPU:
        return f"{value} CPU"
    return f"{value} pod slots" if name == PODS else f"{value} {name}"


def describe(request: Resource) -> str:
    """``2 CPU, 4Gi memory``: a request as users read it (the pod count left out)."""
    quantities = request.to_quantities()
    parts = [f"{v} CPU" if k == CPU else f"{v} {k}" for k, v in quantities.items() if k != PODS]
    return ", ".join(parts) or "nothing"


def _place_in(
    session: Session,
    queue: QueueInfo,
    job: JobInfo,
    tasks: list[TaskInfo],
    *,
    borrow: bool,
    within: NodeSet | None,
    turn: Turn | None = None,
) -> Placed:
    """:func:`place_job` on the nodes of ``within`` (None: every node)."""
    with session.statement() as stmt:
        first_reason: Reason | None = None
        first_task = ""
        short_of_share = False
        counted = job.placed_count() if turn is not None else 0
        for task in job.minimums_first(session.order_tasks(tasks)):
            reason, share = _place_task(
                session, stmt.allocate, queue, task, borrow=borrow, within=within
            )
            short_of_share |= share
            if reason is not None and first_reason is None:
                first_reason, first_task = reason, task.key
            if turn is not None:
                turn.tried.add(task.uid)
                if reason is None:
                    counted += 1
                    if counted >= job.min_member and session.job_ready(job):
                        break
        ready = session.job_ready(job)
        if stmt.operations and ready:
            stmt.commit()
            session.job_reasons.pop(job.uid, None)  # a first round's reason no longer holds
            return Placed.COMMITTED
        if not ready and not session.job_pipelined(job):
            told = reasons.gang_not_ready(ready.message or f"gang {job.uid} is not ready")
            if first_reason is not None:
                told = told.and_then(f"{first_task}: {first_reason.message}")
            stmt.discard()
            if ready.code is Code.UNRESOLVABLE:
                session.unresolvable.add(job.uid)
            session.record_job_reason(job, told)
            for t in tasks:
                session.task_reasons.setdefault(t.uid, told)
        return Placed.SHORT_OF_SHARE if short_of_share else Placed.NOT_PLACED


def _place_task(
    session: Session,
    allocate: Callable[[TaskInfo, str], None],
    queue: QueueInfo,
    task: TaskInfo,
    *,
    borrow: bool,
    within: NodeSet | None = None,
) -> tuple[Reason | None, bool]:
    """Place ``task`` in the statement, on a node of ``within`` (None: any): (None, ...)
    when placed, else (why, whether its queue's share is what lacked)."""
    if not session.queue_allocatable(queue, task) and not (
        borrow and session.queue_borrowable(queue, task)
    ):
        fit = session.fit(task)  # failing path only: say so if no node could take it anyway
        if not fit.any:
            reason = reasons.nodes_unavailable(fit.explain())
            session.record_task_reason(task, reason)
            return reason, False
        reason = reasons.queue_share_used(queue.name)
        session.record_task_reason(task, reason)
        return reason, True
    rows = session.table.row
    for nominated in (
        task.node_name if task.status is TaskStatus.PIPELINED else "",
        task.nominated_node,
    ):
        if (
            nominated in rows
            and (within is None or within.rows[rows[nominated]])
            and session.fits_on(task, nominated)
        ):
            allocate(task, nominated)
            return None, False
    fit = session.fit(task)
    if within is not None:
        fit = fit.restricted(within.rows)
    node = session.select_node(task, fit)
    if node is None:
        reason = reasons.nodes_unavailable(fit.explain())
        session.record_task_reason(task, reason)
        return reason, False
    allocate(task, node.name)
    return None, False
