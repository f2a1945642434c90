"""Session: one cycle's view of the cluster, where actions decide (layer 1).

A session owns a snapshot (its own copy), the plugin instances of this cycle, their
hooks, and the :class:`NodeTable` kept in step with every placement. Actions ask their
questions through the methods below; the answers combine per :mod:`tiers`. Every change
of a task's place goes through :meth:`move`, which keeps nodes, table and plugin state
consistent, so a rolled-back statement leaves the session exactly as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from scheduler.api.errors import AllocationError
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.snapshot import Snapshot
from scheduler.api.task import OCCUPYING, TaskInfo, TaskStatus
from scheduler.framework import tiers
from scheduler.framework.effects import Effect
from scheduler.framework.extension_points import HookSet, Plugin
from scheduler.framework.fit import Fit
from scheduler.framework.node_table import IndexVector, IntMatrix, NodeTable
from scheduler.framework.registry import ResolvedConfiguration
from scheduler.framework.statement import Statement

HELD = (OCCUPYING - {TaskStatus.RELEASING}) | {TaskStatus.PIPELINED}
"""Statuses in which a task counts for plugin state (queue usage, devices, affinity)."""

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def nodes_to_score(total: int, percentage: int) -> int:
    """How many feasible nodes to score, as kube-scheduler's numFeasibleNodesToFind."""
    if total < MIN_FEASIBLE_NODES_TO_FIND:
        return total
    pct = percentage
    if pct <= 0:
        pct = max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, 50 - total // 125)
    if pct >= 100:
        return total
    return max(MIN_FEASIBLE_NODES_TO_FIND, total * pct // 100)


class Session:
    """Created by :func:`open_session`; used by the actions of one cycle, then closed."""

    def __init__(
        self, snapshot: Snapshot, resolved: ResolvedConfiguration, plugins: list[tuple[int, Plugin]]
    ) -> None:
        self.snapshot = snapshot
        self.config = resolved.config
        self.resolved = resolved
        self.nodes: dict[str, NodeInfo] = snapshot.nodes
        self.jobs: dict[str, JobInfo] = snapshot.jobs
        self.queues: dict[str, QueueInfo] = snapshot.queues
        extra = {
            name for job in self.jobs.values() for t in job.tasks.values() for name in t.request
        }
        self.table = NodeTable(list(self.nodes.values()), extra)
        self.hooks = HookSet()
        self.plugins = plugins
        self.effects: list[Effect] = []
        self.task_reasons: dict[str, str] = {}
        """Why a task is still unscheduled, by task uid (for PodScheduled and events)."""
        self.job_reasons: dict[str, str] = {}
        """Why a job is not scheduled, by job uid (for the PodGroup condition)."""
        self.annotations: dict[str, dict[str, str]] = {}
        """Annotations to write on a pod before binding it, by task uid (set by plugins)."""
        self._next_start = 0
        self._score_count = nodes_to_score(
            len(self.table), self.config.percentage_of_nodes_to_score
        )
        for tier, plugin in plugins:
            self.hooks.tier, self.hooks.plugin = tier, plugin.name
            plugin.open(self, self.hooks)
        h = self.hooks
        self.job_key = tiers.order_key(h.job_order, lambda j: j.uid)
        self.task_key = tiers.order_key(h.task_order, lambda t: t.key)
        self.queue_key = tiers.order_key(h.queue_order, lambda q: q.name)

    def close(self) -> None:
        for _, plugin in reversed(self.plugins):
            plugin.close(self)

    # Questions actions ask -------------------------------------------------------------

    def job_valid(self, job: JobInfo) -> str | None:
        return tiers.first_reason(self.hooks, job)

    def job_ready(self, job: JobInfo) -> bool:
        return tiers.all_agree(self.hooks.job_ready, job)

    def job_pipelined(self, job: JobInfo) -> bool:
        return tiers.all_agree(self.hooks.job_pipelined, job)

    def job_starving(self, job: JobInfo) -> bool:
        return tiers.all_agree(self.hooks.job_starving, job, default=False)

    def job_enqueueable(self, job: JobInfo) -> bool:
        return tiers.enqueue_vote(self.hooks, job)

    def queue_allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return tiers.queue_allocatable(self.hooks, queue, task)

    def queue_overused(self, queue: QueueInfo) -> bool:
        return tiers.queue_overused(self.hooks, queue)

    def victims(self, preemptor: TaskInfo, candidates: list[TaskInfo]) -> list[TaskInfo]:
        return tiers.victims(self.hooks, preemptor, candidates)

    def job_enqueued(self, job: JobInfo) -> None:
        """Tell plugins that ``job`` just went Inqueue (called by the enqueue action)."""
        tiers.enqueued(self.hooks, job)

    def is_gated(self, job: JobInfo) -> bool:
        return job.uid in self.snapshot.gated

    def order_jobs(self, jobs: list[JobInfo]) -> list[JobInfo]:
        return sorted(jobs, key=self.job_key)

    def order_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        return sorted(tasks, key=self.task_key)

    def fit(self, task: TaskInfo) -> Fit:
        """Every node filter's verdict on ``task`` against the session's current state."""
        return Fit.of(len(self.table), tiers.filter_groups(self.hooks, task, self.table))

    def fits_on(self, task: TaskInfo, node: str) -> bool:
        """Does ``task`` pass every filter on ``node``?"""
        return tiers.passes_row(self.hooks, task, self.table, self.table.row[node])

    def shortfall(self, task: TaskInfo, rows: IndexVector) -> IntMatrix:
        """Room that must at least be freed on each of ``rows`` (per table column) before
        ``task`` can fit there: a lower bound from the filters, for the preemption search."""
        return tiers.shortfall(self.hooks, task, self.table, rows)

    @contextmanager
    def counting_releasing(self) -> Iterator[None]:
        """Within the block, room held by releasing tasks counts as free: the view of a
        preemptor that will wait on a node for its victims to go."""
        before = self.table.count_releasing
        self.table.count_releasing = True
        try:
            yield
        finally:
            self.table.count_releasing = before

    def select_node(self, task: TaskInfo, fit: Fit) -> NodeInfo | None:
        """The best feasible node for ``task``, scoring a sample as kube-scheduler does.

        Feasible rows are taken in order from a start index that moves on after each
        selection, up to the number of nodes to score; the highest weighted score wins,
        the first of them in that order on a tie. Deterministic for the same session.
        """
        rows = np.flatnonzero(fit.feasible)
        if len(rows) == 0:
            return None
        k = self._score_count
        if len(rows) > k:
            pos = int(np.searchsorted(rows, self._next_start))
            rows = np.concatenate((rows[pos : pos + k], rows[: max(0, k - (len(rows) - pos))]))
        self._next_start = (int(rows[-1]) + 1) % len(self.table)
        if len(rows) == 1 or not self.hooks.node_scorer:
            return self.table.nodes[int(rows[0])]
        scores = tiers.weighted_score(self.hooks, task, self.table, rows)
        return self.table.nodes[int(rows[int(np.argmax(scores))])]

    def statement(self) -> Statement:
        return Statement(self)

    def bind_annotations(self, task: TaskInfo) -> dict[str, str]:
        return self.annotations.get(task.uid, {})

    def record_task_reason(self, task: TaskInfo, reason: str) -> None:
        self.task_reasons[task.uid] = reason

    def record_job_reason(self, job: JobInfo, reason: str) -> None:
        self.job_reasons[job.uid] = reason

    # The one mutation primitive ------------------------------------------------------

    def move(self, task: TaskInfo, status: TaskStatus, node: str) -> None:
        """Put ``task`` in ``status`` on ``node`` ("" for none), keeping everything in step.

        Called only by statements (and simulations that undo themselves). Removes the
        task from its current node (telling plugins), changes it, and adds it to the new
        node (telling plugins). ALLOCATED placements are strict: they raise
        AllocationError rather than over-allocate.
        """
        prev_status, prev_node = task.status, task.node_name
        self.snapshot.touched_tasks.add(task.uid)
        if task.node_name:
            self.snapshot.touched_nodes.add(task.node_name)
            old = self.nodes[task.node_name]
            if task.uid in old.tasks:
                if task.status in HELD:
                    tiers.unplaced(self.hooks, task, old)
                old.remove_task(task)
                self._shift(old.name, task, task.status, +1)
            else:
                prev_node = ""
        task.status = status
        task.node_name = node if status in OCCUPYING or status is TaskStatus.PIPELINED else ""
        if task.node_name:
            self.snapshot.touched_nodes.add(task.node_name)
            new = self.nodes[task.node_name]
            try:
                new.add_task(task, strict=status is TaskStatus.ALLOCATED)
            except AllocationError:
                # Put it back where it was, so a refused move changes nothing.
                task.status, task.node_name = prev_status, prev_node
                if prev_node:
                    back = self.nodes[prev_node]
                    back.add_task(task)
                    self._shift(prev_node, task, prev_status, -1)
                    if prev_status in HELD:
                        tiers.placed(self.hooks, task, back)
                raise
            self._shift(new.name, task, status, -1)
            if status in HELD:
                tiers.placed(self.hooks, task, new)

    def _shift(self, node: str, task: TaskInfo, status: TaskStatus, sign: int) -> None:
        """Update the table for ``task`` leaving (sign +1) or joining (-1) ``node``."""
        table = self.table
        vec = table.request(task.request)
        if status is TaskStatus.PIPELINED:
            table.nominate(node, task.uid, task.priority, vec, add=sign < 0)
            return
        if status not in OCCUPYING:
            return
        row = table.row[node]
        if sign > 0:
            table.idle[row] += vec
            if status is TaskStatus.RELEASING:
                table.releasing[row] -= vec
        else:
            table.idle[row] -= vec
            if status is TaskStatus.RELEASING:
                table.releasing[row] += vec


def open_session(snapshot: Snapshot, resolved: ResolvedConfiguration) -> Session:
    """A session over ``snapshot`` (which it takes ownership of) with fresh plugins."""
    return Session(snapshot, resolved, resolved.build_plugins())


def cluster_capacity(session: Session) -> tuple[int, ...]:
    """Total allocatable of ready, schedulable nodes, per table column (for plugins)."""
    ok = [i for i, n in enumerate(session.table.nodes) if n.ready and not n.unschedulable]
    if not ok:
        return tuple(0 for _ in session.table.columns)
    return tuple(int(x) for x in session.table.allocatable[ok].sum(axis=0))
