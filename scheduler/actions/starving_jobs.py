"""What the ``elect`` and ``reserve`` actions share (layer 2): when a job has started,
which of its pods it still needs, and how soon a node could take them.

A node's room for the target is what remains once every pod of the target's priority or
lower has gone (those are the pods a reservation waits for; pods of higher priority
stay). Draining a node costs the pods that must go before it takes its share of the
target's pods: fewest first, then smallest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.actions.common import waiting_tasks
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import USES_NODE
from scheduler.framework.node_sets import NodeSet, Purpose
from scheduler.framework.node_table import IntVector
from scheduler.framework.session import Session


def started(job: JobInfo) -> bool:
    """Has ``job`` as many pods placed as its minimum (placed this cycle included)?"""
    return job.placed_count() >= max(job.min_member, 1)


def still_needed(session: Session, job: JobInfo) -> list[TaskInfo]:
    """The pending pods ``job`` still needs to reach its minimum, in task order, the
    members its roles lack of their minimums first (:meth:`JobInfo.minimums_first`)."""
    pending = [t for t in waiting_tasks(job) if t.status is TaskStatus.PENDING]
    missing = max(max(job.min_member, 1) - job.placed_count(), 0)
    return job.minimums_first(session.order_tasks(pending))[:missing]


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What node ``row`` offers the target: ``takes`` of its pods once drained, at the
    cost of draining ``pods`` pods of ``size`` (summed requests, table units)."""

    row: int
    takes: int
    pods: int
    size: int


def node_rooms(
    session: Session, job: JobInfo, tasks: list[TaskInfo], rows: NodeSet
) -> list[NodeRoom]:
    """For each node of ``rows`` where the target's first pod could run once pods of its
    priority or lower are gone (every other check passes): how many of ``tasks`` it
    takes then, and what must drain before it takes them."""
    if not tasks:
        return []
    table = session.table
    ask: IntVector = table.request(tasks[0].request)
    wanted = ask > 0
    fit = session.fit(tasks[0])
    usable = (fit.feasible | fit.candidates()) & rows.rows
    out: list[NodeRoom] = []
    for row in np.flatnonzero(usable).tolist():
        node = table.nodes[row]
        keep: IntVector = np.zeros(len(table.columns), dtype=np.int64)
        lower: list[IntVector] = []
        for t in node.tasks.values():
            if t.status not in USES_NODE or t.job_id == job.uid:
                continue
            vec = table.request(t.request)
            if t.priority > job.priority:
                keep = keep + vec
            else:
                lower.append(vec)
        room = table.allocatable[row] - keep
        if not wanted.any():
            takes = len(tasks)
        else:
            takes = int((np.maximum(room[wanted], 0) // ask[wanted]).min())
        takes = min(takes, len(tasks))
        if takes <= 0:
            continue
        # Pods that must go, largest first, before the node has room for ``takes`` pods.
        free = room - sum(lower, np.zeros_like(keep))
        short = np.maximum(ask * takes - free, 0)
        pods = size = 0
        for vec in sorted(lower, key=lambda v: -int(v[wanted].sum())):
            if not (short[wanted] > 0).any():
                break
            short = np.maximum(short - vec, 0)
            pods += 1
            size += int(vec[wanted].sum())
        out.append(NodeRoom(row, takes, pods, size))
    return out


def soonest(rooms: list[NodeRoom], count: int) -> list[NodeRoom] | None:
    """The nodes that take ``count`` pods soonest: cheapest to drain per pod taken
    first, just enough of them; None if all of them together take fewer."""
    chosen: list[NodeRoom] = []
    total = 0
    for r in sorted(rooms, key=lambda r: (r.pods / r.takes, r.size / r.takes, r.row)):
        if total >= count:
            break
        chosen.append(r)
        total += r.takes
    return chosen if total >= count else None


def domains(session: Session, job: JobInfo, tasks: list[TaskInfo]) -> list[NodeSet]:
    """Where ``job`` may be reserved: the node sets of its topology constraint (best
    first), or every node."""
    subsets = session.node_sets(job, tasks, Purpose.EVICT)
    if subsets is None:
        return [session.all_nodes]
    return list(subsets.sets)


def could_ever_fit(session: Session, job: JobInfo) -> bool:
    """Could ``job``'s missing pods fit in one domain with every pod of its priority or
    lower gone? False for a job larger than the cluster, or than every domain of its
    required level: no reservation is made for it."""
    tasks = still_needed(session, job)
    if not tasks:
        return False
    for domain in domains(session, job, tasks):
        if soonest(node_rooms(session, job, tasks, domain), len(tasks)) is not None:
            return True
    return False
