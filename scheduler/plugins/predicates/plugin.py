"""The ``predicates`` plugin: kube-scheduler's filters on all nodes at once (layer 2).

See the package docstring for the checks, their order and their costs.
"""

from __future__ import annotations

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    SHORTFALL,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import BoolVector, IndexVector, IntMatrix, TableView
from scheduler.plugins.predicates.kube_reasons import (
    EXISTING_ANTI_AFFINITY,
    HOST_PORTS,
    POD_AFFINITY,
    POD_ANTI_AFFINITY,
    insufficient,
)
from scheduler.plugins.predicates.pod_index import PodIndex
from scheduler.plugins.predicates.resource_fit import ResourceCheck, ResourceChecks
from scheduler.plugins.predicates.static import Static, StaticChecks


class PredicatesPlugin:
    """kube-scheduler's filters as one vectorised NodeFilter. No arguments.

    One instance per session. ``open`` builds the static checks of the nodes and indexes
    the host ports and anti-affinity terms of the tasks held on nodes (statuses in
    ``COUNTED_FOR_PLUGINS``); the placement handlers keep the indexes in step with the
    session's moves. ``close`` drops everything.
    """

    name = "predicates"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._table: TableView | None = None
        self._static = StaticChecks(())
        self._checks = ResourceChecks()
        self._pods: PodIndex | None = None

    # Plugin protocol -----------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        self._table = table
        self._static = StaticChecks(table.nodes)
        self._pods = PodIndex(table, self._static.labels, context.namespaces)
        for node in table.nodes:
            for task in node.tasks.values():
                if task.status in COUNTED_FOR_PLUGINS:
                    self._place(task, node)
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.filter_row)
        hooks.add(SHORTFALL, self.shortfall)
        hooks.add_placement_handlers(self._place, self._unplace)

    def close(self) -> None:
        self._table = None
        self._static = StaticChecks(())
        self._checks = ResourceChecks()
        self._pods = None

    def _pods_index(self) -> PodIndex:
        assert self._pods is not None, "predicates used outside an open session"
        return self._pods

    # The filter ----------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row of ``table``, in the order of the module table.

        Pure with respect to its arguments; reads the plugin's indexes. Empty when every
        node passes.
        """
        spec = task.spec
        static = self._static.verdict(spec.shape)
        check = self._checks.of(spec.request, table)
        # Nominations of lower priority in its queue and the task's own do not block it
        # (KEP-4832, and no priority across queues);
        # the room of pods being evicted counts when asked (a preemptor's view).
        free = table.free(task.priority, task.uid, check.cols, releasing=releasing, job=task.job_id)
        short = free < check.need
        short_any: BoolVector = np.logical_or.reduce(short, axis=1)
        pods = self._pods_index()
        existing = pods.existing_anti_rejected(task) if pods.has_anti_affinity else None
        if (
            static.bad is None
            and existing is None
            and not spec.host_ports
            and not spec.pod_affinity
            and not spec.pod_anti_affinity
            and not check.unknown
            and not short_any.any()
        ):
            return []
        return self._explain(
            task, table, static, check=check, short=short, short_any=short_any, existing=existing
        )

    def filter_row(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """:meth:`filter` on one row: the static verdict and the resources of that row; pods
        with ports or affinity (or a cluster with anti-affinity pods) take the full path."""
        spec = task.spec
        if (
            spec.host_ports
            or spec.pod_affinity
            or spec.pod_anti_affinity
            or self._pods_index().has_anti_affinity
        ):
            return not any(bool(r.nodes[row]) for r in self.filter(task, table, releasing))
        static = self._static.verdict(spec.shape)
        if static.bad is not None and static.bad[row]:
            return False
        check = self._checks.of(spec.request, table)
        if check.unknown:
            return False
        free = table.free_row(
            task.priority, task.uid, row, check.cols, releasing=releasing, job=task.job_id
        )
        return not bool((free < check.need).any())

    def shortfall(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> IntMatrix:
        """How much of each requested resource each of ``rows`` lacks for ``task`` (the
        resource check of :meth:`filter`); zeros elsewhere. The other checks (ports,
        affinity) free no countable room, so they add nothing: a lower bound, as the hook
        asks."""
        check = self._checks.of(task.spec.request, table)
        free = table.free(
            task.priority, task.uid, check.cols, rows, releasing=releasing, job=task.job_id
        )
        out: IntMatrix = np.zeros((len(rows), len(table.columns)), dtype=np.int64)
        out[:, check.cols] = np.maximum(check.need - free, 0)
        return out

    def _explain(
        self,
        task: TaskInfo,
        table: TableView,
        static: Static,
        *,
        check: ResourceCheck,
        short: BoolVector,
        short_any: BoolVector,
        existing: BoolVector | None,
    ) -> list[Rejection]:
        """The slow path: every check, each node charged to its first failing check."""
        spec = task.spec
        n = len(table)
        pods = self._pods_index()
        own_row = pods.held_row(task, table)
        out = list(static.rejections)
        seen = np.zeros(n, dtype=np.bool_) if static.bad is None else static.bad.copy()
        # The unresolvable pod affinity is charged before the resolvable checks (it is listed
        # after them), so a node failing it is never taken for a preemption candidate.
        affinity: Rejection | None = None
        if spec.pod_affinity:
            raw = pods.affinity_rejected(task, own_row)
            mine = raw & ~seen
            if mine.any():
                affinity = Rejection(POD_AFFINITY, mine, False)
            seen |= raw
        if check.unknown:
            short_any = np.ones(n, dtype=np.bool_)
        mine = short_any & ~seen
        if mine.any():
            for k, reason in enumerate(check.reasons):
                nodes = short[:, k] & mine
                if nodes.any():
                    out.append(Rejection(reason, nodes, True))
            for name in check.unknown:
                out.append(Rejection(insufficient(name), mine.copy(), True))
            seen |= mine
        if spec.host_ports:
            raw = pods.port_conflicts(task, own_row)
            mine = raw & ~seen
            if mine.any():
                out.append(Rejection(HOST_PORTS, mine, True))
                seen |= mine
        if affinity is not None:
            out.append(affinity)
        if spec.pod_anti_affinity:
            raw = pods.anti_affinity_rejected(task, own_row)
            mine = raw & ~seen
            if mine.any():
                out.append(Rejection(POD_ANTI_AFFINITY, mine, True))
                seen |= mine
        if existing is not None:
            mine = existing & ~seen
            if mine.any():
                out.append(Rejection(EXISTING_ANTI_AFFINITY, mine, True))
        return out

    # Placement handlers -----------------------------------------------------------------

    def _row(self, node: NodeInfo) -> int:
        assert self._table is not None, "predicates used outside an open session"
        return self._table.row[node.name]

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._pods_index().account(task, self._row(node), +1)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._pods_index().account(task, self._row(node), -1)
