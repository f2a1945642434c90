"""Session: one cycle's view of the cluster, where actions decide (layer 1).

A session owns a snapshot (its own copy), the plugin instances of this cycle, their
hooks, and the :class:`NodeTable` kept in step with every placement. It is made of three
parts: the questions actions ask the plugins (:mod:`.plugin_questions`), the job
boundaries and the time budget (:mod:`.job_boundaries`: whatever a plugin raises about a
job fails that job only), and, here, what the cycle was given and decided, the running
of an action (:meth:`Session.run_action`) and the one mutation, :meth:`Session.move`,
which keeps nodes, table and plugin state consistent, so a rolled-back statement leaves
the session exactly as it was.

Plugins never see the session: they get a :class:`~.session_context.SessionContext`, a
read-only handle on its table, nodes, jobs and queues.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.errors import (
    AllocationError,
    PluginError,
)
from scheduler.api.holds import Hold, HoldKind, Reservation
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.queue_tree import QueueTree, queue_tree
from scheduler.api.reasons import Reason
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS, ON_NODE, TO_PLACE, USES_NODE
from scheduler.framework import tiers
from scheduler.framework.action import Action
from scheduler.framework.effects import Effect
from scheduler.framework.extension_points import (
    NODE_SCORER,
    ON_PLACE,
    ON_UNPLACE,
    POINTS,
    SUBSET_NODES,
    HookSet,
    Plugin,
    Point,
)
from scheduler.framework.job_boundaries import never
from scheduler.framework.node_table import NodeTable
from scheduler.framework.plugin_questions import PluginQuestions, nodes_to_score
from scheduler.framework.registry import ResolvedConfiguration
from scheduler.framework.session_context import SessionContext
from scheduler.framework.starvation_decision import StarvationDecision
from scheduler.framework.statement import Statement
from scheduler.logging import get_logger

log = get_logger("sluice.session")


class Session(PluginQuestions):
    """Created by :func:`open_session`; used by the actions of one cycle, then closed.

    It holds what one cycle is given and what it decides, nothing that lives longer:

    - given: the snapshot (nodes, jobs, queues; the scheduling queue's holds), the
      configuration, the plugins and their hooks, the node table kept in step;
    - decided: :attr:`effects` (through statements only), the reasons users read
      (:attr:`task_reasons`, :attr:`job_reasons`), the jobs that failed
      (:attr:`job_errors`: raised this cycle; :attr:`failing_jobs`: saying SchedulerError,
      new or backing off), :attr:`placed_in`, the queues' shares, and starvation
      protection's reservation (:attr:`starvation`).

    Plugins are asked through its typed methods only, one per extension point; the one
    generic asker, ``_ask``, is the framework's own (a new point gets a new method).

    What must outlive the cycle (holds, backoffs, the reservation, waiting times) is the
    loop's scheduling queue's, which reads the decisions after the cycle.

    Raises PluginError if a plugin's ``open`` raises (the plugins opened before it are
    closed again): the loop counts the cycle as failed.
    """

    def __init__(
        self, snapshot: Snapshot, resolved: ResolvedConfiguration, plugins: list[tuple[int, Plugin]]
    ) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.config = resolved.config
        self.resolved = resolved
        self.nodes: dict[str, NodeInfo] = snapshot.nodes
        self.jobs: dict[str, JobInfo] = snapshot.jobs
        self.queues: dict[str, QueueInfo] = snapshot.queues
        self.jobs_to_place: list[JobInfo] = _jobs_to_place(snapshot)
        """The jobs with a pod of Sluice's still to place as the cycle opens, in the order
        of :attr:`jobs`: the only ones the actions that place, preempt, reclaim or
        reserve for look at (a job's pods only leave that state during a cycle, so a
        job that has none at the start has none later either)."""
        extra = {
            name for job in self.jobs.values() for t in job.tasks.values() for name in t.request
        }
        self.table = NodeTable(
            list(self.nodes.values()),
            extra,
            {uid: job.queue for uid, job in self.jobs.items()},
            {u: j.priority for u, j in self.jobs.items() if j.has_pod_group and j.min_member > 1},
        )
        self.hooks = HookSet()
        self.plugins: list[tuple[int, Plugin]] = []
        self.effects: list[Effect] = []
        self.task_reasons: dict[str, Reason] = {}
        """Why a task is still unscheduled, by task uid (for PodScheduled and events)."""
        self.job_reasons: dict[str, Reason] = {}
        """Why a job is not scheduled, by job uid (for the PodGroup condition)."""
        self.job_errors: dict[str, Exception] = {}
        """Jobs whose attempt failed this cycle (a plugin raised), with what was raised.
        Their statements were rolled back; no action tries them again this cycle."""
        self.placed_in: dict[str, str] = {}
        """The node set each job committed this cycle was placed in (``rack rb``), by uid."""
        self.queue_shares: dict[str, QueueShare] = {}
        """Each queue's share at the end of the cycle (:meth:`record_queue_shares`)."""
        self.queue_errors: dict[str, PluginError] = {}
        """Queues whose share a plugin failed to give this cycle (:meth:`each_queue_share`)."""
        self.unresolvable: set[str] = set()
        """Jobs a plugin found unschedulable in a way no eviction can change (an
        UNRESOLVABLE readiness answer): the evicting actions leave them alone this cycle."""
        self.failing_jobs: set[str] = set()
        """Jobs whose reason is a scheduler error (new this cycle, or backing off after
        one): their pods say ``SchedulerError`` rather than ``Unschedulable``."""
        self.revisits: dict[str, float] = {}
        """Jobs that something only time ends holds back (a reclaim's victims too young
        to take: ``minRuntimeSeconds``): seconds from the cycle's start after which
        trying them again may help (:meth:`revisit`). The loop's scheduling queue wakes
        a parked job then, instead of waiting for an event."""
        self.wake_at = math.inf
        """The earliest time (the loop's clock) at which an action would decide something
        new though nothing else changes (a gang running below its minimum comes to the
        end of its grace: the ``dissolve`` action); ``inf``: none (:meth:`wake`). The loop
        runs a cycle then."""
        self.version = 0
        """Moves so far: what a cache of session-derived values is keyed on."""
        self.starvation = StarvationDecision(
            snapshot.queue.reservation, snapshot.queue.waiting_since, snapshot.now
        )
        """Starvation protection: the starving job elected and the nodes reserved for it,
        as the ``elect`` and ``reserve`` actions leave it (the loop's queue keeps it for
        the next cycle). Plugins read it through their context."""
        self._next_start = 0
        self._last_pick = -1
        """The row the last selection by scores took (where ties go next)."""
        self._score_count = nodes_to_score(
            len(self.table), self.config.percentage_of_nodes_to_score
        )
        context = SessionContext(self)
        for tier, plugin in plugins:
            self.hooks.tier, self.hooks.plugin = tier, plugin.name
            try:
                plugin.open(context, self.hooks)
            except Exception as exc:
                self.close()
                raise PluginError(plugin.name, "open", exc) from exc
            self.plugins.append((tier, plugin))
        h = self.hooks
        self._askers: dict[str, Callable[..., Any]] = {p.name: tiers.bind(h, p) for p in POINTS}
        """Each point's asker, its rule taken from its declaration (bound once)."""
        self._subset_points = bool(h[SUBSET_NODES])
        self._scorers = bool(h[NODE_SCORER])

    def close(self) -> None:
        """Close every opened plugin, in reverse order. A plugin that raises here is
        reported after the others are closed."""
        failed: PluginError | None = None
        for _, plugin in reversed(self.plugins):
            try:
                plugin.close()
            except Exception as exc:
                failed = failed or PluginError(plugin.name, "close", exc)
        self.plugins = []
        if failed is not None:
            raise failed

    @property
    def now(self) -> float:
        """The loop's clock when this cycle began."""
        return self.snapshot.now

    @property
    def wall(self) -> float:
        """The wall clock (Unix seconds) when this cycle began: what API timestamps such
        as a pod's ``status.startTime`` are compared with."""
        return self.snapshot.wall

    @property
    def reservation(self) -> Reservation | None:
        """The reservation of starvation protection as it stands now (read-only here)."""
        return self.starvation.reservation

    def hold(self, job: JobInfo) -> Hold | None:
        """What holds ``job`` back this cycle (the scheduling queue's view), or None."""
        return self.snapshot.queue.holds.get(job.uid)

    def waiting_since(self, job: JobInfo) -> float | None:
        """Since when ``job`` has waited to start (loop clock), or None if it does not."""
        return self.snapshot.queue.waiting_since.get(job.uid)

    @property
    def below_minimum(self) -> Mapping[str, float]:
        """Since when (loop clock) each gang has run below its minimum without a break, by
        job uid, as the scheduling queue counts it (the ``dissolve`` action's clock)."""
        return self.snapshot.queue.below_minimum_since

    def overtaken(self, job: JobInfo) -> bool:
        """Has a later job of no higher priority been placed while ``job`` waited?"""
        return job.uid in self.snapshot.queue.overtaken

    @functools.cached_property
    def queue_tree(self) -> QueueTree:
        """The hierarchy of the session's queues (built on first use)."""
        return queue_tree(self.queues)

    def record_queue_shares(self) -> None:
        """Ask every queue's share (deserved, allocated) now, for what users see after the
        cycle (queue status, metrics): called by the loop after the actions, before the
        plugins close."""
        self.queue_shares.update(self.each_queue_share())

    def each_queue_share(self) -> dict[str, QueueShare]:
        """Every queue's share as the plugins see it now, by name. A queue whose share a
        plugin could not give (it raised) is left out and logged (:attr:`queue_errors`):
        a question about one queue fails that queue only, not the cycle."""
        shares: dict[str, QueueShare] = {}
        for name, queue in self.queues.items():
            self._scopes.append(f"queue {name}")
            try:
                share = self.queue_share(queue)
            except PluginError as exc:
                if name not in self.queue_errors:
                    self.queue_errors[name] = exc
                    log.error("a queue's share could not be had", queue=name, error=str(exc))
                continue
            finally:
                self._scopes.pop()
            if share is not None:
                shares[name] = share
        return shares

    def revisit(self, job_uid: str, after: float) -> None:
        """Trying job ``job_uid`` again ``after`` seconds from the cycle's start may help,
        though nothing else changes (see :attr:`revisits`); the earliest time given in a
        cycle counts. Idempotent."""
        if after > 0:
            self.revisits[job_uid] = min(after, self.revisits.get(job_uid, after))

    def wake(self, at: float) -> None:
        """An action would decide something new at ``at`` (the loop's clock) by the time
        alone (see :attr:`wake_at`); the earliest time given in a cycle counts."""
        self.wake_at = min(self.wake_at, at)

    # Questions actions ask -------------------------------------------------------------

    def is_gated(self, job: JobInfo) -> bool:
        """Is ``job`` held behind its preemption's gate (calls running, victims leaving)?"""
        hold = self.snapshot.queue.holds.get(job.uid)
        return hold is not None and hold.kind is HoldKind.EVICTIONS

    def statement(self) -> Statement:
        return Statement(self)

    def record_task_reason(self, task: TaskInfo, reason: Reason) -> None:
        """Why ``task`` is not placed this cycle (the last one recorded stands)."""
        self.task_reasons[task.uid] = reason

    def record_job_reason(self, job: JobInfo, reason: Reason) -> None:
        """Why ``job`` is not placed this cycle (the last one recorded stands)."""
        self.job_reasons[job.uid] = reason

    # Running an action ----------------------------------------------------------------

    def run_action(
        self,
        action: Action,
        out_of_time: Callable[[], bool] | None = None,
        slice_over: Callable[[], bool] | None = None,
    ) -> None:
        """Run ``action`` on this session. While it runs, every question about one job
        (a JOB-scoped extension point) must be asked inside that job's boundary.

        ``out_of_time`` (the loop's clock against the action's time budget; None: no
        budget) is asked before each job the action tries (:meth:`try_job`): once it says
        yes, the jobs left are deferred to the next cycle. ``slice_over`` (default: the
        same) is what an action that keeps its place asks instead (:meth:`slice_over`):
        the loop makes the first slice of a cycle shorter than the budget."""
        self._acting = action.name
        self._out_of_time = out_of_time or never
        self._slice_over = slice_over or self._out_of_time
        self._tried = 0
        try:
            action.execute(self)
        finally:
            self._acting = ""
            self._out_of_time = self._slice_over = never

    # The one mutation primitive ------------------------------------------------------

    def move(self, task: TaskInfo, status: TaskStatus, node: str) -> None:
        """Put ``task`` in ``status`` on ``node`` ("" for none), keeping everything in step.

        Called only by statements (and simulations that undo themselves). Removes the
        task from its current node (telling plugins), changes it, and adds it to the new
        node (telling plugins). ALLOCATED placements are strict: they raise
        AllocationError rather than over-allocate. A plugin that raises in a placement
        handler leaves as PluginError after the move is complete in the session's own
        state (nodes and table); the plugin's own state is then its problem, and the
        caller's statement rolls back.
        """
        prev_status, prev_node = task.status, task.node_name
        self.version += 1
        self.snapshot.touched_tasks.add(task.uid)
        failed: PluginError | None = None
        if task.node_name:
            self.snapshot.touched_nodes.add(task.node_name)
            old = self.nodes[task.node_name]
            if task.uid in old.tasks:
                if task.status in COUNTED_FOR_PLUGINS:
                    failed = self._tell(ON_UNPLACE, task, old)
                old.remove_task(task)
                self._shift(old.name, task, task.status, +1)
            else:
                prev_node = ""
        task.status = status
        task.node_name = node if status in ON_NODE else ""
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
                    if prev_status in COUNTED_FOR_PLUGINS:
                        failed = failed or self._tell(ON_PLACE, task, back)
                if failed is not None:
                    raise failed from None
                raise
            self._shift(new.name, task, status, -1)
            if status in COUNTED_FOR_PLUGINS:
                failed = failed or self._tell(ON_PLACE, task, new)
        if failed is not None:
            raise failed

    def _tell(self, point: Point[Any, None], task: TaskInfo, node: NodeInfo) -> PluginError | None:
        """Tell every placement handler of ``point`` (each one, even after one raises, so
        the others stay in step: the NOTIFY rules); the first failure is returned for the
        caller to raise once its own bookkeeping is done."""
        try:
            self._ask(point, task, node)
        except PluginError as exc:
            return exc
        return None

    def _shift(self, node: str, task: TaskInfo, status: TaskStatus, sign: int) -> None:
        """Update the table for ``task`` leaving (sign +1) or joining (-1) ``node``."""
        table = self.table
        vec = table.request(task.request)
        if status is TaskStatus.PIPELINED:
            table.nominate(node, task.uid, task.priority, vec, add=sign < 0, job=task.job_id)
            return
        if status not in USES_NODE:
            return
        row = table.row[node]
        pad = task.spec.nonzero_pad
        if sign > 0:
            table.idle[row] += vec
            table.idle_total += vec
            if pad:
                table.nonzero_pad[row] -= table.request(pad)
            if status is TaskStatus.RELEASING:
                table.releasing[row] -= vec
        else:
            table.idle[row] -= vec
            table.idle_total -= vec
            if pad:
                table.nonzero_pad[row] += table.request(pad)
            if status is TaskStatus.RELEASING:
                table.releasing[row] += vec


def _jobs_to_place(snapshot: Snapshot) -> list[JobInfo]:
    """The snapshot's jobs with a task of Sluice's to place, in their order: from its
    index when the cache's builder made one, else by a walk of the jobs."""
    index = snapshot.to_place
    if index is None:
        return [
            job
            for job in snapshot.jobs.values()
            if any(t.sluice and t.status in TO_PLACE for t in job.tasks.values())
        ]
    if not index:
        return []
    return [job for uid, job in snapshot.jobs.items() if uid in index]


def open_session(snapshot: Snapshot, resolved: ResolvedConfiguration) -> Session:
    """A session over ``snapshot`` (which it takes ownership of) with fresh plugins."""
    return Session(snapshot, resolved, resolved.build_plugins())


def cluster_capacity(session: Session) -> tuple[int, ...]:
    """Total allocatable of ready, schedulable nodes, per table column (for plugins)."""
    ok = [i for i, n in enumerate(session.table.nodes) if n.ready and not n.unschedulable]
    if not ok:
        return tuple(0 for _ in session.table.columns)
    return tuple(int(x) for x in session.table.allocatable[ok].sum(axis=0))
