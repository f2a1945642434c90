"""How the answers of several plugins combine: the one place this rule is written (layer 1).

=====================  =====================================================================
extension point        rule
=====================  =====================================================================
job/task/queue order   lexicographic: every plugin's key, tier by tier, in plugin order;
                       an identity tie-break last, so the order is total and deterministic
job valid              the first plugin (tier, then plugin order) that gives a reason wins
job ready / pipelined  all plugins must agree (no plugin registered: True)
job starving           all plugins must agree (no plugin registered: False)
job enqueueable        per tier: any REJECT rejects; else any PERMIT permits and later tiers
                       are not asked; a tier of abstentions defers to the next; none: PERMIT
node filter            every filter of every tier applies: a node passes only if none rejects;
                       for one node, a plugin's row filter stands for its node filter
shortfall              the largest of every plugin's, per row and column (none: zeros)
node score             weighted sum of every scorer
queue allocatable      all plugins must agree (none: True)
queue overused         any plugin suffices (none: False)
victims (preemptable)  intersection of the answers of the first tier that has a plugin
job handlers           all, in registration order
placement handlers     all, in registration order; on undo, in reverse order
=====================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby
from typing import TypeVar

import numpy as np

from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import (
    HookSet,
    JobPredicate,
    OrderKey,
    Registration,
    Rejection,
    Vote,
)
from scheduler.framework.node_table import FloatVector, IndexVector, IntMatrix, NodeTable

T = TypeVar("T")


def order_key(
    regs: Sequence[Registration[Callable[[T], OrderKey]]], identity: Callable[[T], str]
) -> Callable[[T], OrderKey]:
    """Lexicographic composition of the plugins' keys, with ``identity`` as the last word."""
    fns = [r.hook for r in regs]

    def key(item: T) -> OrderKey:
        out: list[int | float | str] = []
        for fn in fns:
            out.extend(fn(item))
        out.append(identity(item))
        return tuple(out)

    return key


def first_reason(hooks: HookSet, job: JobInfo) -> str | None:
    for reg in hooks.job_valid:
        reason = reg.hook(job)
        if reason is not None:
            return reason
    return None


def all_agree(
    regs: Sequence[Registration[JobPredicate]], job: JobInfo, default: bool = True
) -> bool:
    if not regs:
        return default
    return all(r.hook(job) for r in regs)


def enqueue_vote(hooks: HookSet, job: JobInfo) -> bool:
    for _, tier in groupby(hooks.job_enqueueable, key=lambda r: r.tier):
        votes = [r.hook(job) for r in tier]
        if Vote.REJECT in votes:
            return False
        if Vote.PERMIT in votes:
            return True
    return True


def filter_groups(
    hooks: HookSet, task: TaskInfo, table: NodeTable
) -> list[tuple[str, Sequence[Rejection]]]:
    """Every filter's rejections, grouped by plugin in registration order."""
    out: list[tuple[str, Sequence[Rejection]]] = []
    for reg in hooks.node_filter:
        rejections = reg.hook(task, table)
        if rejections:
            out.append((reg.plugin, rejections))
    return out


def passes_row(hooks: HookSet, task: TaskInfo, table: NodeTable, row: int) -> bool:
    """Every filter on one row: the row form where a plugin has one, else its full form."""
    with_rows = {r.plugin for r in hooks.row_filter}
    for reg in hooks.row_filter:
        if not reg.hook(task, table, row):
            return False
    for freg in hooks.node_filter:
        if freg.plugin in with_rows:
            continue
        if any(bool(r.nodes[row]) for r in freg.hook(task, table)):
            return False
    return True


def shortfall(hooks: HookSet, task: TaskInfo, table: NodeTable, rows: IndexVector) -> IntMatrix:
    """The room that must at least be freed on each of ``rows`` for ``task``: the largest
    any filter asks."""
    out: IntMatrix = np.zeros((len(rows), len(table.columns)), dtype=np.int64)
    for reg in hooks.shortfall:
        np.maximum(out, reg.hook(task, table, rows), out=out)
    return out


def weighted_score(
    hooks: HookSet, task: TaskInfo, table: NodeTable, rows: IndexVector
) -> FloatVector:
    total: FloatVector = np.zeros(len(rows), dtype=np.float64)
    for reg in hooks.node_scorer:
        if reg.weight:
            total += reg.weight * reg.hook(task, table, rows)
    return total


def queue_allocatable(hooks: HookSet, queue: QueueInfo, task: TaskInfo) -> bool:
    return all(r.hook(queue, task) for r in hooks.queue_allocatable)


def queue_overused(hooks: HookSet, queue: QueueInfo) -> bool:
    return any(r.hook(queue) for r in hooks.queue_overused)


def victims(hooks: HookSet, preemptor: TaskInfo, candidates: Sequence[TaskInfo]) -> list[TaskInfo]:
    allowed: list[TaskInfo] = list(candidates)
    for _, tier in groupby(hooks.preemptable, key=lambda r: r.tier):
        for reg in tier:
            keep = {t.uid for t in reg.hook(preemptor, allowed)}
            allowed = [t for t in allowed if t.uid in keep]
        return allowed
    return allowed


def enqueued(hooks: HookSet, job: JobInfo) -> None:
    for reg in hooks.on_enqueue:
        reg.hook(job)


def placed(hooks: HookSet, task: TaskInfo, node: NodeInfo) -> None:
    for reg in hooks.on_place:
        reg.hook(task, node)


def unplaced(hooks: HookSet, task: TaskInfo, node: NodeInfo) -> None:
    for reg in reversed(hooks.on_unplace):
        reg.hook(task, node)
