"""How the answers of several plugins combine: each rule written once (layer 1).

=======================  ===================================================================
rule                     extension points, and what the rule does
=======================  ===================================================================
LEXICOGRAPHIC            job/task/queue order: every plugin's key, tier by tier, in plugin
                         order; an identity tie-break last, so the order is total
FIRST_FAILURE            job valid / ready / pipelined: the first status that is not
                         success (tier, then plugin order) wins; none registered: success
ALL_AGREE                queue allocatable (none: yes), job starving (none: no)
ANY                      queue overused: any plugin suffices (none: no)
VOTE                     job enqueueable: per tier, any REJECT rejects; else any PERMIT
                         permits and later tiers are not asked; a tier of abstentions
                         defers to the next; none: PERMIT
EVERY_FILTER             node filter: a node passes only if no filter of any tier rejects
                         it
EVERY_ROW_FILTER         row filter (one node): every filter, a plugin's row filter standing
                         for its node filter on that row
LARGEST                  shortfall: the largest of every plugin's, per row and column
WEIGHTED_SUM             node score: weighted sum of every scorer
FIRST_TIER_INTERSECTION  victims: intersection of the answers of the first tier that has a
                         plugin
CHAIN                    reclaimable: each plugin, in order, keeps a subsequence of what the
                         plugins before it kept (stateful plugins cut the ordered list)
FIRST_ANSWER             queue share, enqueue room, gang victim selector, bind volumes: the
                         first answer that is not None
NOTIFY                   job and placement handlers: all, in registration order, even after
                         one raises (their state stays in step); the first failure is
                         raised once all have run
NOTIFY_REVERSED          unplace handlers (the undo of placement): the same, in reverse order
MERGE                    bind annotations: the union in plugin order; the first plugin to
                         give a key keeps it
CONCAT                   bind claims: every plugin's answers one after the other, in plugin
                         order
LAYERED                  node sets: each plugin splits every set the plugins before it
                         produced (P1, P2; then P1R1, P1R2, P2R1...); a plugin answering
                         None leaves a set whole; none relevant: None
=======================  ===================================================================

The rule of a point is taken from its declaration (:class:`~.extension_points.Point`),
in one place: :func:`bind` gives, once per session, the function that asks a point with
its registrations; the session asks every point through it, so changing a point's rule
changes how it is asked everywhere.

Every call of a hook is blamed: an exception a hook raises leaves here as a
:class:`~scheduler.api.errors.PluginError` naming the plugin and the extension point,
chained to the original. A ``try`` costs nothing while nothing raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from typing import Any, TypeVar, assert_never, cast

import numpy as np

from scheduler.api.errors import PluginError
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import (
    NODE_FILTER,
    FilterGroups,
    HookSet,
    JobEnqueueable,
    JobStatus,
    NodeFilter,
    NodeScorer,
    OrderKey,
    Point,
    Registration,
    RowFilter,
    Rule,
    Shortfall,
    SubsetNodes,
    VictimFilter,
    Vote,
)
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets, layer
from scheduler.framework.node_table import FloatVector, IndexVector, IntMatrix, TableView
from scheduler.framework.plugin_status import SUCCESS, Code, Status

T = TypeVar("T")
R = TypeVar("R")


def blame(reg: Registration[Any], exc: BaseException) -> PluginError:
    """``exc``, raised by ``reg``'s hook, as the PluginError that names it (unchanged if
    it already is one: a hook calling the framework back is not blamed twice)."""
    if isinstance(exc, PluginError):
        return exc
    return PluginError(reg.plugin, reg.point, exc)


def lexicographic(regs: Sequence[Registration[Callable[[T], OrderKey]]], item: T) -> OrderKey:
    """Every plugin's key for ``item``, in order, as one key (the caller adds an identity
    last, so that the order is total)."""
    out: list[int | float | str] = []
    for reg in regs:
        try:
            out.extend(reg.hook(item))
        except Exception as exc:
            raise blame(reg, exc) from exc
    return tuple(out)


def first_failure(regs: Sequence[Registration[JobStatus]], job: JobInfo) -> Status:
    for reg in regs:
        try:
            status = reg.hook(job)
        except Exception as exc:
            raise blame(reg, exc) from exc
        if status.code is Code.ERROR:
            raise PluginError(reg.plugin, reg.point, RuntimeError(status.message))
        if not status.ok:
            return status if status.plugin else Status(status.code, status.message, reg.plugin)
    return SUCCESS


def all_agree(regs: Sequence[Registration[Callable[..., bool]]], default: bool, *args: Any) -> bool:
    if not regs:
        return default
    for reg in regs:
        try:
            if not reg.hook(*args):
                return False
        except Exception as exc:
            raise blame(reg, exc) from exc
    return True


def any_yes(regs: Sequence[Registration[Callable[..., bool]]], *args: Any) -> bool:
    for reg in regs:
        try:
            if reg.hook(*args):
                return True
        except Exception as exc:
            raise blame(reg, exc) from exc
    return False


def enqueue_vote(regs: Sequence[Registration[JobEnqueueable]], job: JobInfo) -> bool:
    for _, tier in groupby(regs, key=lambda r: r.tier):
        votes = []
        for reg in tier:
            try:
                votes.append(reg.hook(job))
            except Exception as exc:
                raise blame(reg, exc) from exc
        if Vote.REJECT in votes:
            return False
        if Vote.PERMIT in votes:
            return True
    return True


def filter_groups(
    regs: Sequence[Registration[NodeFilter]], task: TaskInfo, table: TableView, releasing: bool
) -> FilterGroups:
    """Every filter's rejections, grouped by plugin in registration order."""
    out: FilterGroups = []
    for reg in regs:
        try:
            rejections = reg.hook(task, table, releasing)
        except Exception as exc:
            raise blame(reg, exc) from exc
        if rejections:
            out.append((reg.plugin, rejections))
    return out


@dataclass(frozen=True, slots=True)
class RowFilters:
    """The filters asked about one row: the row forms, and the full forms of the plugins
    that have no row form."""

    filters: Sequence[Registration[NodeFilter]]
    row_filters: Sequence[Registration[RowFilter]]


def passes_row(
    both: RowFilters,
    task: TaskInfo,
    table: TableView,
    row: int,
    releasing: bool,
) -> bool:
    """Every filter on one row: the row form where a plugin has one, else its full form."""
    with_rows = {r.plugin for r in both.row_filters}
    for reg in both.row_filters:
        try:
            if not reg.hook(task, table, row, releasing):
                return False
        except Exception as exc:
            raise blame(reg, exc) from exc
    for freg in both.filters:
        if freg.plugin in with_rows:
            continue
        try:
            rejections = freg.hook(task, table, releasing)
        except Exception as exc:
            raise blame(freg, exc) from exc
        if any(bool(r.nodes[row]) for r in rejections):
            return False
    return True


def largest(
    regs: Sequence[Registration[Shortfall]],
    task: TaskInfo,
    table: TableView,
    rows: IndexVector,
    releasing: bool,
) -> IntMatrix:
    """The room that must at least be freed on each of ``rows`` for ``task``: the largest
    any filter asks."""
    out: IntMatrix = np.zeros((len(rows), len(table.columns)), dtype=np.int64)
    for reg in regs:
        try:
            np.maximum(out, reg.hook(task, table, rows, releasing), out=out)
        except Exception as exc:
            raise blame(reg, exc) from exc
    return out


def weighted_score(
    regs: Sequence[Registration[NodeScorer]],
    task: TaskInfo,
    table: TableView,
    rows: IndexVector,
    releasing: bool,
) -> FloatVector:
    total: FloatVector = np.zeros(len(rows), dtype=np.float64)
    for reg in regs:
        if reg.weight:
            try:
                total += reg.weight * reg.hook(task, table, rows, releasing)
            except Exception as exc:
                raise blame(reg, exc) from exc
    return total


def first_tier_intersection(
    regs: Sequence[Registration[VictimFilter]], preemptor: TaskInfo, candidates: Sequence[TaskInfo]
) -> list[TaskInfo]:
    allowed: list[TaskInfo] = list(candidates)
    for _, tier in groupby(regs, key=lambda r: r.tier):
        for reg in tier:
            try:
                keep = {t.uid for t in reg.hook(preemptor, allowed)}
            except Exception as exc:
                raise blame(reg, exc) from exc
            allowed = [t for t in allowed if t.uid in keep]
        return allowed
    return allowed


def chain(
    regs: Sequence[Registration[Callable[[TaskInfo, Sequence[TaskInfo]], Sequence[TaskInfo]]]],
    subject: TaskInfo,
    candidates: Sequence[TaskInfo],
) -> list[TaskInfo]:
    kept: list[TaskInfo] = list(candidates)
    for reg in regs:
        try:
            allowed = {t.uid for t in reg.hook(subject, kept)}
        except Exception as exc:
            raise blame(reg, exc) from exc
        kept = [t for t in kept if t.uid in allowed]
    return kept


def first_answer(regs: Sequence[Registration[Callable[..., T | None]]], *args: Any) -> T | None:
    for reg in regs:
        try:
            answer = reg.hook(*args)
        except Exception as exc:
            raise blame(reg, exc) from exc
        if answer is not None:
            return answer
    return None


def notify(regs: Sequence[Registration[Callable[..., None]]], *args: Any) -> None:
    """Every handler, even after one raises (so that every plugin's state stays in step
    with the move); then the first failure, blamed."""
    failed: PluginError | None = None
    for reg in regs:
        try:
            reg.hook(*args)
        except Exception as exc:
            failed = failed or blame(reg, exc)
    if failed is not None:
        raise failed


def notify_reversed(regs: Sequence[Registration[Callable[..., None]]], *args: Any) -> None:
    """:func:`notify` in reverse registration order (undoing a placement)."""
    notify(list(reversed(regs)), *args)


def merge(
    regs: Sequence[Registration[Callable[[TaskInfo, NodeInfo], Any]]],
    task: TaskInfo,
    node: NodeInfo,
) -> dict[str, str]:
    out: dict[str, str] = {}
    for reg in regs:
        try:
            answer = reg.hook(task, node)
        except Exception as exc:
            raise blame(reg, exc) from exc
        for key, value in answer.items():
            out.setdefault(key, value)
    return out


def layered(
    regs: Sequence[Registration[SubsetNodes]],
    job: JobInfo,
    tasks: Sequence[TaskInfo],
    start: NodeSet,
    purpose: Purpose,
    *,
    counts: dict[str, int] | None = None,
) -> Subsets | None:
    """The node sets of ``job`` by :func:`~.node_sets.layer`; ``counts`` (if given)
    receives how many sets each plugin returned, for the logs."""

    def split_of(reg: Registration[SubsetNodes]) -> Callable[[NodeSet], Subsets | None]:
        def split(outer: NodeSet) -> Subsets | None:
            try:
                answer = reg.hook(job, tasks, outer, purpose)
            except Exception as exc:
                raise blame(reg, exc) from exc
            if answer is not None and counts is not None:
                counts[reg.plugin] = counts.get(reg.plugin, 0) + len(answer.sets)
            return answer

        return split

    return layer([(reg.plugin, split_of(reg)) for reg in regs], start)


def concat(
    regs: Sequence[Registration[Callable[[TaskInfo, NodeInfo], Sequence[T]]]],
    task: TaskInfo,
    node: NodeInfo,
) -> tuple[T, ...]:
    out: list[T] = []
    for reg in regs:
        try:
            out.extend(reg.hook(task, node))
        except Exception as exc:
            raise blame(reg, exc) from exc
    return tuple(out)


def bind(hooks: HookSet, point: Point[Any, R]) -> Callable[..., R]:
    """The function that asks ``point`` with its registrations in ``hooks``, combining
    the answers by the rule ``point`` declares; called with the point's arguments. The
    session binds every point once when it opens (registrations do not change after)."""
    regs = hooks[point]
    asker: Callable[..., Any]
    match point.rule:
        case Rule.LEXICOGRAPHIC:
            asker = partial(lexicographic, regs)
        case Rule.FIRST_FAILURE:
            asker = partial(first_failure, regs)
        case Rule.ALL_AGREE:
            asker = partial(all_agree, regs, point.default)
        case Rule.ANY:
            asker = partial(any_yes, regs)
        case Rule.VOTE:
            asker = partial(enqueue_vote, regs)
        case Rule.EVERY_FILTER:
            asker = partial(filter_groups, regs)
        case Rule.EVERY_ROW_FILTER:
            asker = partial(passes_row, RowFilters(hooks[NODE_FILTER], regs))
        case Rule.LARGEST:
            asker = partial(largest, regs)
        case Rule.WEIGHTED_SUM:
            asker = partial(weighted_score, regs)
        case Rule.FIRST_TIER_INTERSECTION:
            asker = partial(first_tier_intersection, regs)
        case Rule.CHAIN:
            asker = partial(chain, regs)
        case Rule.LAYERED:
            asker = partial(layered, regs)
        case Rule.FIRST_ANSWER:
            asker = partial(first_answer, regs)
        case Rule.NOTIFY:
            asker = partial(notify, regs)
        case Rule.NOTIFY_REVERSED:
            asker = partial(notify_reversed, regs)
        case Rule.MERGE:
            asker = partial(merge, regs)
        case Rule.CONCAT:
            asker = partial(concat, regs)
        case _:
            assert_never(point.rule)
    return cast(Callable[..., R], asker)
