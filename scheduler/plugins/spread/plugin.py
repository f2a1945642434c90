"""The ``podtopologyspread`` plugin: kube-scheduler's PodTopologySpread filter and score,
vectorised over the node table (layer 2). See the package docstring for the rules."""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.pod import StaticShape, Taint, Toleration
from scheduler.api.spread import HOSTNAME
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    NODE_FILTER,
    NODE_SCORER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_labels import LabelColumn, NodeLabelIndex, frozen
from scheduler.framework.node_table import (
    BoolVector,
    FloatVector,
    IndexVector,
    IntVector,
    TableView,
)
from scheduler.framework.pod_counts import DomainSum, PodCounts, matches
from scheduler.plugins.spread.constraints import (
    Constraints,
    Effective,
    PodConstraints,
    PodTopologySpreadArguments,
)

MAX_SCORE = 100
WAITING = frozenset((TaskStatus.PENDING, TaskStatus.PIPELINED))
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = SKEW + " (missing required label)"
FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class PodTopologySpreadPlugin:
    """Topology spread as kube-scheduler's plugin. One instance per session.

    ``open`` registers the filter, the score (when its weight is not 0) and the placement
    handlers; the counts of matching pods are built on first use and follow every
    placement of the session (so pods placed earlier in the cycle count, and a rollback
    undoes them). ``close`` drops them.
    """

    name = "podtopologyspread"

    def __init__(self, arguments: PodTopologySpreadArguments | None = None) -> None:
        self.arguments = arguments if arguments is not None else PodTopologySpreadArguments()
        self._constraints = Constraints(self.arguments)
        self._context: PluginContext | None = None
        self._table: TableView | None = None
        self._labels = NodeLabelIndex(())
        self._counts: PodCounts | None = None
        self._masks: dict[Hashable, BoolVector] = {}
        self._taints: list[tuple[tuple[str, str, str], ...]] = []

    # Plugin protocol -----------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        self._context = context
        self._table = table
        self._labels = NodeLabelIndex(table.nodes)
        self._counts = PodCounts(table)
        self._taints = [
            tuple((t.key, t.value, t.effect) for t in n.taints if t.effect in FILTERING_EFFECTS)
            for n in table.nodes
        ]
        hard, soft = self._wanted(context)
        if hard:
            hooks.add(NODE_FILTER, self.filter)
            hooks.add(ROW_FILTER, self.filter_row)
        if soft and self.arguments.weight:
            hooks.add(NODE_SCORER, self.score, self.arguments.weight)
        hooks.add_placement_handlers(self._place, self._unplace)

    def _wanted(self, context: PluginContext) -> tuple[bool, bool]:
        """(filter, score): does a waiting pod have constraints of each kind, its own or
        by default (some Service or controller selects pods)? A cluster whose pods have
        none pays no filter and no score."""
        defaults = self._constraints.defaults_of_kind if context.spread_selectors_known else ()
        hard = any(c.hard for c in defaults)
        soft = any(not c.hard for c in defaults)
        if hard and soft:
            return True, True
        for job in context.jobs.values():
            for t in job.tasks.values():
                spread = t.spec.spread
                if spread and t.status in WAITING:
                    hard = hard or any(c.hard for c in spread)
                    soft = soft or any(not c.hard for c in spread)
                    if hard and soft:
                        return True, True
        return hard, soft

    def close(self) -> None:
        self._context = None
        self._table = None
        self._labels = NodeLabelIndex(())
        self._counts = None
        self._masks.clear()
        self._taints = []
        self._constraints = Constraints(self.arguments)

    def _pod_counts(self) -> PodCounts:
        assert self._counts is not None, "podtopologyspread used outside an open session"
        return self._counts

    def constraints(self, task: TaskInfo) -> PodConstraints:
        """``task``'s constraints: its own, or the defaults by its Services and controllers."""
        if task.spec.spread or not self._constraints.has_defaults or self._context is None:
            return self._constraints.of(task, None)
        return self._constraints.of(task, self._context.spread_selector(task))

    # Eligible nodes --------------------------------------------------------------------------

    def _eligible(
        self, c: Effective, keys: tuple[str, ...], shape: StaticShape
    ) -> tuple[BoolVector, Hashable]:
        """The rows whose domains count for ``c``: every one of ``keys``, and the pod's
        node affinity and taints as the constraint's policies say; with its cache key."""
        affinity = (
            (shape.node_selector, shape.required_terms) if c.constraint.honor_affinity else None
        )
        taints = shape.tolerations if c.constraint.honor_taints else None
        key = (keys, affinity, taints)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.ones(len(self._labels), dtype=np.bool_)
            for k in keys:
                mask &= self._labels.column(k).present()
            if affinity is not None:
                mask &= self._labels.affinity(shape.node_selector, shape.required_terms)
            if taints is not None:
                mask &= self._tolerated(shape.tolerations)
            mask = self._masks[key] = frozen(mask)
        return mask, key

    def _tolerated(self, tolerations: tuple[Toleration, ...]) -> BoolVector:
        """Rows with no NoSchedule or NoExecute taint that ``tolerations`` leave untolerated."""
        cache: dict[tuple[str, str, str], bool] = {}
        out = np.ones(len(self._taints), dtype=np.bool_)
        for row, taints in enumerate(self._taints):
            for t in taints:
                ok = cache.get(t)
                if ok is None:
                    ok = cache[t] = any(x.tolerates(Taint(*t)) for x in tolerations)
                if not ok:
                    out[row] = False
                    break
        return out

    def _domains(
        self, c: Effective, column: LabelColumn, eligible: BoolVector, cache_key: Hashable
    ) -> DomainSum:
        """Matching pods per domain of ``column`` over the eligible rows (zeros for a
        selector that counts nothing, with the domains still present)."""
        if c.counts_nothing:
            size = column.missing + 1
            present = np.zeros(size, dtype=np.bool_)
            present[column.codes[eligible]] = True
            present[column.missing] = False
            return DomainSum(column, eligible, np.zeros(size, dtype=np.int64), present)
        return self._pod_counts().domains(c.key, column, eligible, (column.values, cache_key))

    def _own(self, task: TaskInfo) -> int | None:
        """The row ``task`` itself is counted on, if it is held there."""
        table = self._table
        if table is None or task.status not in COUNTED_FOR_PLUGINS or not task.node_name:
            return None
        row = table.row.get(task.node_name)
        if row is None or task.uid not in table.nodes[row].tasks:
            return None
        return row

    def _counts_without(
        self, task: TaskInfo, c: Effective, found: DomainSum, own: int | None
    ) -> IntVector:
        """The domain counts of ``found`` less ``task`` itself where it is held."""
        counts = found.counts
        if (
            own is not None
            and not c.counts_nothing
            and found.eligible[own]
            and matches(c.key, task)
        ):
            counts = counts.copy()
            counts[found.column.codes[own]] -= 1
        return counts

    # The filter ------------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rows where ``task``'s DoNotSchedule constraints fail: a node without a
        constraint's key (unresolvable), or where the pod would make its domain's skew
        exceed maxSkew (resolvable: evicting matching pods there lowers it). Each row is
        charged to the first constraint that fails it, as kube stops at the first.
        ``releasing`` changes nothing: pods being evicted are already not counted."""
        del releasing
        pc = self.constraints(task)
        if not pc.hard:
            return []
        n = len(table)
        decided = np.zeros(n, dtype=np.bool_)
        missing = np.zeros(n, dtype=np.bool_)
        skewed = np.zeros(n, dtype=np.bool_)
        own = self._own(task)
        labels = task.labels or {}
        for c in pc.hard:
            column = self._labels.column(c.constraint.topology_key)
            eligible, key = self._eligible(c, pc.hard_keys, task.spec.shape)
            found = self._domains(c, column, eligible, key)
            counts = self._counts_without(task, c, found, own)
            lowest = _minimum(counts, found.present, c.constraint.min_domains)
            mine = 1 if c.selector.matches(labels) else 0
            present = column.present()
            over = present & (counts[column.codes] + mine - lowest > c.constraint.max_skew)
            missing |= ~present & ~decided
            skewed |= over & ~decided
            decided |= ~present | over
        out = []
        if missing.any():
            out.append(Rejection(MISSING_LABEL, missing, False))
        if skewed.any():
            out.append(Rejection(SKEW, skewed, True))
        return out

    def filter_row(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """:meth:`filter` on one row, at the cost of one row per constraint (the victim
        search asks it many times per candidate node)."""
        del table, releasing
        pc = self.constraints(task)
        if not pc.hard:
            return True
        own = self._own(task)
        labels = task.labels or {}
        for c in pc.hard:
            column = self._labels.column(c.constraint.topology_key)
            code = int(column.codes[row])
            if code == column.missing:
                return False
            eligible, key = self._eligible(c, pc.hard_keys, task.spec.shape)
            found = self._domains(c, column, eligible, key)
            counts = self._counts_without(task, c, found, own)
            lowest = _minimum(counts, found.present, c.constraint.min_domains)
            mine = 1 if c.selector.matches(labels) else 0
            if counts[code] + mine - lowest > c.constraint.max_skew:
                return False
        return True

    # The score -------------------------------------------------------------------------------

    def score(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> FloatVector:
        """kube's spread score of ``rows`` for ``task``'s ScheduleAnyway constraints: fewer
        matching pods in a node's domains is better, each constraint's count weighted by
        the log of its number of domains among ``rows``; normalised over ``rows``. 0
        everywhere for a pod without such constraints."""
        del table, releasing
        pc = self.constraints(task)
        if not pc.soft or not len(rows):
            return np.zeros(len(rows), dtype=np.float64)
        ignored = np.zeros(len(rows), dtype=np.bool_)
        every_key = pc.soft_need_every_key
        if every_key:
            for k in pc.soft_keys:
                ignored |= ~self._labels.column(k).present()[rows]
        valid = ~ignored
        own = self._own(task)
        raw = np.zeros(len(rows), dtype=np.float64)
        for c in pc.soft:
            column = self._labels.column(c.constraint.topology_key)
            present = column.present()[rows]
            if c.constraint.topology_key == HOSTNAME:
                size = int(valid.sum())
                counts = self._node_counts(task, c, own)[rows]
            else:
                size = _domains_among(column, rows[valid])
                keys = pc.soft_keys if every_key else ()
                eligible, key = self._eligible(c, keys, task.spec.shape)
                found = self._domains(c, column, eligible, key)
                counts = self._counts_without(task, c, found, own)[column.codes[rows]]
            weight = math.log(size + 2)
            raw += np.where(present, counts * weight + (c.constraint.max_skew - 1), 0.0)
        scores = np.floor(raw + 0.5).astype(np.int64)  # Go's math.Round, for scores >= 0
        return _normalise(scores, valid)

    def _node_counts(self, task: TaskInfo, c: Effective, own: int | None) -> IntVector:
        """Matching pods on each node (hostname constraints count per node, all nodes)."""
        if c.counts_nothing:
            return np.zeros(len(self._labels), dtype=np.int64)
        counts = self._pod_counts().rows(c.key)
        if own is not None and matches(c.key, task):
            counts = counts.copy()
            counts[own] -= 1
        return counts

    # Placement handlers ---------------------------------------------------------------------

    def _row(self, node: NodeInfo) -> int:
        assert self._table is not None, "podtopologyspread used outside an open session"
        return self._table.row[node.name]

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        counts = self._pod_counts()
        if counts:
            counts.account(task, self._row(node), +1)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        counts = self._pod_counts()
        if counts:
            counts.account(task, self._row(node), -1)


def _minimum(counts: IntVector, present: BoolVector, min_domains: int) -> int:
    """kube's global minimum: the least count over the domains, 0 while there are fewer
    than ``min_domains`` of them."""
    domains = int(present.sum())
    if domains < min_domains or domains == 0:
        return 0
    return int(counts[present].min())


def _domains_among(column: LabelColumn, rows: IndexVector) -> int:
    """How many domains ``rows`` are in; rows without the label are one more domain (kube
    counts them under the empty value)."""
    codes = column.codes[rows]
    empty = column.index.get("")
    if empty is not None:
        codes = np.where(codes == column.missing, empty, codes)
    return len(np.unique(codes))


def _normalise(scores: IntVector, valid: BoolVector) -> FloatVector:
    """kube's NormalizeScore: ``100 * (max + min - score) // max`` over the valid rows (all
    100 when max is 0); 0 for the others."""
    out = np.zeros(len(scores), dtype=np.float64)
    if not valid.any():
        return out
    kept = scores[valid]
    low, high = int(kept.min()), int(kept.max())
    if high == 0:
        out[valid] = MAX_SCORE
        return out
    out[valid] = (MAX_SCORE * (high + low - kept) // high).astype(np.float64)
    return out
