"""Session: one cycle's view of the cluster, where actions decide (layer 1).

A session owns a snapshot (its own copy), the plugin instances of this cycle, their
hooks, and the :class:`NodeTable` kept in step with every placement. Actions ask their
questions through the methods below (or :meth:`Session.ask` for any extension point);
every point is asked through the rule it declares (:func:`tiers.bind`).

Every question about one job is asked inside that job's boundary
(:meth:`Session.job_scope`, :meth:`Session.for_each_job`, :meth:`Session.select_jobs`):
whatever a plugin raises there fails that job only (rolled back, SchedulerError, a
backoff) and the cycle goes on. While an action runs (:meth:`Session.run_action`, which
the loop and ``sluice explain`` use), the session refuses a JOB-scoped question asked
outside any boundary (InvariantError): a hole in the boundary is a bug the tests find, not
a cycle thrown away in production. Every change of a task's place goes through
:meth:`move`, which keeps nodes, table and plugin state consistent, so a rolled-back
statement leaves the session exactly as it was.

Plugins never see the session: they get a :class:`~.extension_points.PluginContext`, a
read-only handle on its table, nodes, jobs and queues.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from scheduler.api import reasons
from scheduler.api.cluster_snapshot import DisruptionBudget, Snapshot, TopologyInfo
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.dra.view import DraView
from scheduler.api.errors import (
    AllocationError,
    InvariantError,
    PluginError,
    SessionCorruptedError,
)
from scheduler.api.holds import Hold, HoldKind, Reservation
from scheduler.api.job import JobInfo
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.queue_tree import QueueTree, queue_tree
from scheduler.api.reasons import Reason
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS, ON_NODE, TO_PLACE, USES_NODE
from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.api.volumes.view import VolumeView
from scheduler.framework import tiers
from scheduler.framework.action import Action
from scheduler.framework.effects import Effect
from scheduler.framework.extension_points import (
    BIND_ANNOTATIONS,
    BIND_CLAIMS,
    BIND_VOLUMES,
    ENQUEUE_ROOM,
    JOB_ENQUEUEABLE,
    JOB_ORDER,
    JOB_PIPELINED,
    JOB_READY,
    JOB_STARVING,
    JOB_VALID,
    NODE_FILTER,
    NODE_SCORER,
    ON_ENQUEUE,
    ON_PLACE,
    ON_UNPLACE,
    POINTS,
    QUEUE_ALLOCATABLE,
    QUEUE_BORROWABLE,
    QUEUE_ORDER,
    QUEUE_OVERUSED,
    QUEUE_RECLAIMS,
    QUEUE_SHARE,
    RECLAIMABLE,
    ROW_FILTER,
    SHORTFALL,
    SUBSET_NODES,
    TASK_ORDER,
    VICTIMS,
    AdmissionRoom,
    HookSet,
    Plugin,
    Point,
    Scope,
)
from scheduler.framework.fit import Fit
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets, everything
from scheduler.framework.node_table import IndexVector, IntMatrix, NodeTable, TableView
from scheduler.framework.plugin_status import Status
from scheduler.framework.registry import ResolvedConfiguration
from scheduler.framework.starvation_decision import StarvationDecision
from scheduler.framework.statement import Statement
from scheduler.logging import get_logger, v

log = get_logger("sluice.session")

R = TypeVar("R")

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


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The :class:`~.extension_points.PluginContext` of a session: what plugins read."""

    _session: Session

    @property
    def table(self) -> TableView:
        return self._session.table

    @property
    def nodes(self) -> Mapping[str, NodeInfo]:
        return self._session.nodes

    @property
    def jobs(self) -> Mapping[str, JobInfo]:
        return self._session.jobs

    @property
    def queues(self) -> Mapping[str, QueueInfo]:
        return self._session.queues

    @property
    def budgets(self) -> Sequence[DisruptionBudget]:
        return self._session.snapshot.budgets

    @property
    def topologies(self) -> Mapping[str, TopologyInfo]:
        return self._session.snapshot.topologies

    @property
    def now(self) -> float:
        return self._session.snapshot.now

    @property
    def reservation(self) -> Reservation | None:
        return self._session.reservation

    @property
    def dra(self) -> DraView | None:
        return self._session.snapshot.dra

    @property
    def volumes(self) -> VolumeView | None:
        return self._session.snapshot.volumes

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return self._session.snapshot.namespaces

    def spread_selector(self, task: TaskInfo) -> LabelSelector | None:
        return self._session.snapshot.spread_selectors.of(
            task.namespace, task.labels or {}, task.controller
        )

    @property
    def spread_selectors_known(self) -> bool:
        selectors = self._session.snapshot.spread_selectors
        return bool(selectors.services or selectors.controllers)


class Session:
    """Created by :func:`open_session`; used by the actions of one cycle, then closed.

    It holds what one cycle is given and what it decides, nothing that lives longer:

    - given: the snapshot (nodes, jobs, queues; the scheduling queue's holds), the
      configuration, the plugins and their hooks, the node table kept in step;
    - decided: :attr:`effects` (through statements only), the reasons users read
      (:attr:`task_reasons`, :attr:`job_reasons`), the jobs that failed
      (:attr:`job_errors`: raised this cycle; :attr:`failing_jobs`: saying SchedulerError,
      new or backing off), :attr:`placed_in`, the queues' shares, and starvation
      protection's reservation (:attr:`starvation`).

    What must outlive the cycle (holds, backoffs, the reservation, waiting times) is the
    loop's scheduling queue's, which reads the decisions after the cycle.

    Raises PluginError if a plugin's ``open`` raises (the plugins opened before it are
    closed again): the loop counts the cycle as failed.
    """

    def __init__(
        self, snapshot: Snapshot, resolved: ResolvedConfiguration, plugins: list[tuple[int, Plugin]]
    ) -> None:
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
        self._scopes: list[str] = []
        """The jobs whose boundaries the cycle is inside, innermost last."""
        self._acting = ""
        """The action running (:meth:`run_action`), while one does."""
        self.deferred: set[str] = set()
        """Jobs not tried this cycle because an action ran out of its time budget
        (:meth:`try_job`): no later action tries them, they say nothing new, and the next
        cycle tries them first (the loop runs it at once)."""
        self._out_of_time: Callable[[], bool] = _never
        self._slice_over: Callable[[], bool] = _never
        self._tried = 0
        self._carried: dict[str, object] = {}
        """What actions that ran out of time left to go on with (:meth:`carry`)."""
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
    def all_nodes(self) -> NodeSet:
        """The set of every node (what the first node-set plugin splits), built once."""
        return everything(len(self.table))

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

    # Boundaries ----------------------------------------------------------------------

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
        self._out_of_time = out_of_time or _never
        self._slice_over = slice_over or self._out_of_time
        self._tried = 0
        try:
            action.execute(self)
        finally:
            self._acting = ""
            self._out_of_time = self._slice_over = _never

    def out_of_time(self) -> bool:
        """Has the running action spent its time budget? Never before it tried a job in
        this run (:meth:`note_try`), so every run of an action makes progress."""
        return self._tried > 0 and self._out_of_time()

    def slice_over(self) -> bool:
        """Should the running action, which keeps its place (:meth:`carry`), stop here
        and let the loop hand on what was decided? Its budget is spent, or the slice the
        loop gave it is over (a cycle's first slice is short, so its first binds go out
        soon). Never before it tried a job in this run, as :meth:`out_of_time`."""
        return self._tried > 0 and self._slice_over()

    def note_try(self) -> None:
        """The running action is about to try a job (what :meth:`try_job` counts)."""
        self._tried += 1

    def carry(self, action: str, progress: object) -> None:
        """``action`` ran out of time and will go on from ``progress`` when run again on
        this session (:meth:`resume`). The loop then hands on what the session decided so
        far, lets background calls run for a while, and runs ``action`` again before any
        later action: one cycle in several slices, none holding the loop longer than the
        budget. Only an action that keeps its own place this way may call it."""
        self._carried[action] = progress

    def resume(self, action: str) -> object | None:
        """What ``action`` carried (:meth:`carry`) when it ran out of time, taken; None
        when it starts afresh."""
        return self._carried.pop(action, None)

    @property
    def unfinished(self) -> bool:
        """An action carried work to go on with in this session (:meth:`carry`)."""
        return bool(self._carried)

    def try_job(self, job: JobInfo) -> bool:
        """May the running action try ``job`` now? Called by an action just before it
        tries a job, in its order. False for a job deferred earlier in the cycle, and for
        every job once the action has used its time budget (then ``job`` is deferred:
        see :attr:`deferred`). The first job an action tries is always allowed, so every
        action makes progress each cycle; the jobs deferred are the last in the action's
        order, so job order holds across cycles: a cut is a pause, not a reordering."""
        if job.uid in self.deferred:
            return False
        if self.out_of_time():
            self.defer(job)
            return False
        self._tried += 1
        return True

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

    def defer(self, job: JobInfo) -> None:
        """Leave ``job`` to the next cycle: what this cycle recorded about it is dropped,
        so it is neither reported nor parked as if it had been tried."""
        self.deferred.add(job.uid)
        self.job_reasons.pop(job.uid, None)
        for t in job.tasks.values():
            self.task_reasons.pop(t.uid, None)

    @contextmanager
    def job_scope(self, job: JobInfo) -> Iterator[None]:
        """The boundary of ``job``: questions about it are asked inside, and a failure of
        the block (a plugin that raised, an AllocationError, a bug) is confined to it. Its
        statement has already been rolled back by the statement's own block; the job says
        SchedulerError (:meth:`record_job_error`) and no action tries it again this cycle;
        the other jobs go on. Nested scopes are fine (the innermost records the error).

        A failure after the job committed decisions, or a rollback that failed, leaves the
        session untrustworthy: that escalates as SessionCorruptedError, and the loop throws
        the cycle away.
        """
        committed = len(self.effects)
        self._scopes.append(job.uid)
        try:
            yield
        except SessionCorruptedError:
            raise
        except Exception as exc:
            if len(self.effects) != committed:
                raise SessionCorruptedError(
                    f"job {job.uid} failed after committing decisions: {exc}"
                ) from exc
            self.record_job_error(job, exc)
        finally:
            self._scopes.pop()

    def for_each_job(
        self,
        jobs: Iterable[JobInfo],
        attempt: Callable[[Session, JobInfo], None],
        *,
        keep_place: bool = False,
    ) -> None:
        """``attempt(session, job)`` for each job in order, each inside its boundary. Jobs
        that failed earlier in the cycle are skipped, and so are the jobs deferred
        (:meth:`try_job`: once the action is out of time, the rest).

        With ``keep_place`` the running action keeps its place instead of deferring: once
        it is out of time, the jobs left (a list, in order) are carried (:meth:`carry`)
        and the loop runs the action again on this session after handing on what was
        decided; the action then takes them from :meth:`resume` and calls this again with
        them. The other actions' work of the cycle is not done again, as it would be for
        jobs deferred to the next cycle."""
        ordered = list(jobs) if keep_place else jobs
        for i, job in enumerate(ordered):
            if job.uid in self.job_errors or job.uid in self.deferred:
                continue
            if keep_place and self.slice_over():
                assert isinstance(ordered, list)
                self.carry(self._acting, ordered[i:])
                return
            if not self.try_job(job):
                continue
            with self.job_scope(job):
                attempt(self, job)

    def select_jobs(
        self, jobs: Iterable[JobInfo], wanted: Callable[[JobInfo], bool]
    ) -> list[JobInfo]:
        """The jobs for which ``wanted(job)`` holds, each asked inside its boundary (a job
        whose question raised fails, and is not selected). Jobs that failed earlier in the
        cycle, and jobs deferred to the next one, are left out."""
        out: list[JobInfo] = []
        for job in jobs:
            if job.uid in self.job_errors or job.uid in self.deferred:
                continue
            keep = False
            with self.job_scope(job):
                keep = wanted(job)
            if keep:
                out.append(job)
        return out

    # Questions actions ask -------------------------------------------------------------

    def ask(self, point: Point[Any, R], *args: Any) -> R:
        """Ask ``point`` with ``args``, its answers combined by its declared rule. While an
        action runs, a JOB point must be asked inside a job's boundary (:meth:`job_scope`)."""
        if point.scope is Scope.JOB and self._acting and not self._scopes:
            raise InvariantError(
                f"action {self._acting!r} asked extension point {point.name!r} outside "
                "any job's boundary"
            )
        answer: R = self._askers[point.name](*args)
        return answer

    def job_key(self, job: JobInfo) -> tuple[int | float | str, ...]:
        """``job``'s sort key among jobs: the plugins' keys, then the older first, then
        its uid (Volcano's default order)."""
        return (*self.ask(JOB_ORDER, job), job.creation, job.uid)

    def task_key(self, task: TaskInfo) -> tuple[int | float | str, ...]:
        """``task``'s sort key among its job's tasks (the plugins' keys, then its name)."""
        return (*self.ask(TASK_ORDER, task), task.key)

    def queue_key(self, queue: QueueInfo) -> tuple[int | float | str, ...]:
        """``queue``'s sort key among queues (the plugins' keys, then its name)."""
        return (*self.ask(QUEUE_ORDER, queue), queue.name)

    def job_valid(self, job: JobInfo) -> Status:
        """May ``job`` be tried at all? Success, or why not."""
        return self.ask(JOB_VALID, job)

    def job_ready(self, job: JobInfo) -> Status:
        """Is enough of ``job`` placed for it to be bound? Success, or why not."""
        return self.ask(JOB_READY, job)

    def job_pipelined(self, job: JobInfo) -> Status:
        """Is enough of ``job`` placed or nominated? Success, or why not."""
        return self.ask(JOB_PIPELINED, job)

    def job_starving(self, job: JobInfo) -> bool:
        return self.ask(JOB_STARVING, job)

    def job_enqueueable(self, job: JobInfo) -> bool:
        return self.ask(JOB_ENQUEUEABLE, job)

    def enqueue_room(self) -> AdmissionRoom | None:
        """The room a plugin measures for admitting gangs this cycle (None: no plugin
        does; the enqueue action then uses its own measure)."""
        return self.ask(ENQUEUE_ROOM)

    def queue_allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return self.ask(QUEUE_ALLOCATABLE, queue, task)

    def queue_overused(self, queue: QueueInfo) -> bool:
        return self.ask(QUEUE_OVERUSED, queue)

    def queue_borrowable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``task`` go beyond ``queue``'s share into room nobody below theirs could use?"""
        return self.ask(QUEUE_BORROWABLE, queue, task)

    def queue_reclaims(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``queue`` take room for ``task`` by reclaim (below its share in what
        ``task`` asks, though ``task`` may be larger than what is left of it)?"""
        return self.ask(QUEUE_RECLAIMS, queue, task)

    def queue_share(self, queue: QueueInfo) -> QueueShare | None:
        """``queue``'s deserved and allocated share this cycle (None without a plugin)."""
        return self.ask(QUEUE_SHARE, queue)

    def node_sets(
        self, job: JobInfo, tasks: Sequence[TaskInfo], purpose: Purpose
    ) -> Subsets | None:
        """Where ``job``'s ``tasks`` should be placed, as node sets in order of preference
        (see :mod:`~scheduler.framework.node_sets`); None when no plugin is relevant to
        the job: then every node will do."""
        if not self._subset_points:
            return None
        counts: dict[str, int] = {}
        sets = self.ask(SUBSET_NODES, job, tasks, self.all_nodes, purpose, counts)
        if sets is not None and v(4):
            log.info("node sets", v=4, job=job.uid, purpose=purpose.value, sets=counts)
            if v(7):
                names = self.table.nodes
                for s in sets.sets:
                    rows = np.flatnonzero(s.rows).tolist()
                    log.info(
                        "node set",
                        v=7,
                        job=job.uid,
                        set=s.name,
                        nodes=[names[i].name for i in rows],
                    )
        return sets

    def reclaimable(
        self, reclaimers: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Which of ``candidates`` (pods of other queues, most reclaimable first) may be
        evicted to make room for ``reclaimers`` (pods of one job placed by the same
        reclaim): the plugins' victim filter (asked about the first of them), then their
        reclaim budgets."""
        allowed = self.victims(reclaimers[0], candidates)
        return self.ask(RECLAIMABLE, reclaimers, allowed)

    def victims(self, preemptor: TaskInfo, candidates: Sequence[TaskInfo]) -> list[TaskInfo]:
        return self.ask(VICTIMS, preemptor, candidates)

    def job_enqueued(self, job: JobInfo) -> None:
        """Tell plugins that ``job`` just went Inqueue (called by the enqueue action)."""
        self.ask(ON_ENQUEUE, job)

    def is_gated(self, job: JobInfo) -> bool:
        """Is ``job`` held behind its preemption's gate (calls running, victims leaving)?"""
        hold = self.snapshot.queue.holds.get(job.uid)
        return hold is not None and hold.kind is HoldKind.EVICTIONS

    def order_jobs(self, jobs: list[JobInfo]) -> list[JobInfo]:
        return sorted(jobs, key=self.job_key)

    def order_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        return sorted(tasks, key=self.task_key)

    def fit(self, task: TaskInfo, *, releasing: bool = False) -> Fit:
        """Every node filter's verdict on ``task`` against the session's current state;
        with ``releasing``, the room of pods being evicted counts as free."""
        groups = self.ask(NODE_FILTER, task, self.table, releasing)
        return Fit.of(len(self.table), groups, releasing=releasing)

    def fits_on(self, task: TaskInfo, node: str, *, releasing: bool = False) -> bool:
        """Does ``task`` pass every filter on ``node``?"""
        return self.ask(ROW_FILTER, task, self.table, self.table.row[node], releasing)

    def shortfall(self, task: TaskInfo, rows: IndexVector, *, releasing: bool = False) -> IntMatrix:
        """Room that must at least be freed on each of ``rows`` (per table column) before
        ``task`` can fit there: a lower bound from the filters, for the preemption search."""
        return self.ask(SHORTFALL, task, self.table, rows, releasing)

    def gang_could_fit(self, tasks: Sequence[TaskInfo], count: int) -> bool:
        """Could the ``count`` smallest of ``tasks`` fit in all the free room of the cluster
        together? One vector comparison once their need is summed: a gang whose minimum
        fails it cannot fit anywhere, and is not searched (a quick, sound "no")."""
        return not self.gang_shortfall(tasks, count)

    def gang_shortfall(self, tasks: Sequence[TaskInfo], count: int) -> dict[str, tuple[int, int]]:
        """What the ``count`` smallest of ``tasks`` need together beyond all the free room
        of the cluster: for each resource they lack, (free, needed); empty when they
        could fit (see :meth:`gang_could_fit`)."""
        table = self.table
        vectors = sorted((table.request(t.request) for t in tasks), key=lambda v: int(v.sum()))
        need = np.sum(vectors[: max(count, 1)], axis=0) if vectors else table.idle_total * 0
        idle = table.idle_total
        return {
            name: (max(int(idle[j]), 0), int(need[j]))
            for j, name in enumerate(table.columns)
            if need[j] > idle[j]
        }

    def select_node(self, task: TaskInfo, fit: Fit) -> NodeInfo | None:
        """The best feasible node for ``task``, scoring a sample as kube-scheduler does.

        Feasible rows are taken in order from a start index that moves on after each
        selection, up to the number of nodes to score; the highest weighted score wins.
        Among rows tied for it, the first after the row the last scored selection took (in
        row order, wrapping round): ties are shared round-robin, as kube-scheduler's random choice
        among them shares them, and a series of pods that every score finds equal does not
        pile onto one node. Deterministic for the same session.
        """
        rows = np.flatnonzero(fit.feasible)
        if len(rows) == 0:
            return None
        k = self._score_count
        if len(rows) > k:
            pos = int(np.searchsorted(rows, self._next_start))
            rows = np.concatenate((rows[pos : pos + k], rows[: max(0, k - (len(rows) - pos))]))
        self._next_start = (int(rows[-1]) + 1) % len(self.table)
        if len(rows) == 1 or not self._scorers:
            return self.table.nodes[int(rows[0])]
        scores = self.ask(NODE_SCORER, task, self.table, rows, fit.releasing)
        tied = rows[scores == scores.max()]
        if len(tied) > 1:
            after = (tied - self._last_pick - 1) % len(self.table)
            row = int(tied[int(np.argmin(after))])
        else:
            row = int(tied[0])
        self._last_pick = row
        return self.table.nodes[row]

    def statement(self) -> Statement:
        return Statement(self)

    def bind_annotations(self, task: TaskInfo, node: str) -> dict[str, str]:
        """What the plugins write on ``task``'s pod before binding it to ``node``."""
        return self.ask(BIND_ANNOTATIONS, task, self.nodes[node])

    def bind_claims(self, task: TaskInfo, node: str) -> tuple[ClaimBinding, ...]:
        """What the plugins write to ``task``'s ResourceClaims before binding it to ``node``."""
        return self.ask(BIND_CLAIMS, task, self.nodes[node])

    def bind_volumes(self, task: TaskInfo, node: str) -> VolumeBindings | None:
        """What the plugins write to ``task``'s PVs and claims before binding it to
        ``node``, and how long the bind waits for them to be bound (None: nothing)."""
        return self.ask(BIND_VOLUMES, task, self.nodes[node])

    def record_task_reason(self, task: TaskInfo, reason: Reason) -> None:
        """Why ``task`` is not placed this cycle (the last one recorded stands)."""
        self.task_reasons[task.uid] = reason

    def record_job_reason(self, job: JobInfo, reason: Reason) -> None:
        """Why ``job`` is not placed this cycle (the last one recorded stands)."""
        self.job_reasons[job.uid] = reason

    def record_job_error(self, job: JobInfo, exc: Exception) -> None:
        """``job``'s attempt raised ``exc``: it says SchedulerError, naming the plugin if a
        plugin raised, and is not tried again this cycle. Called by the actions' per-job
        boundary after the job's statement was rolled back."""
        self.job_errors.setdefault(job.uid, exc)
        self.failing_jobs.add(job.uid)
        self.job_reasons[job.uid] = reasons.scheduler_error(error_message(exc))
        for t in job.tasks.values():
            self.task_reasons.pop(t.uid, None)

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
            self.ask(point, task, node)
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


def _never() -> bool:
    return False


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


def error_message(exc: Exception) -> str:
    """What a job's pods say when its attempt raised ``exc``."""
    if isinstance(exc, PluginError):
        return f"SchedulerError: plugin {exc.plugin!r} failed in {exc.point}: {exc.cause}"
    return f"SchedulerError: {type(exc).__name__}: {exc}"


def cluster_capacity(session: Session) -> tuple[int, ...]:
    """Total allocatable of ready, schedulable nodes, per table column (for plugins)."""
    ok = [i for i, n in enumerate(session.table.nodes) if n.ready and not n.unschedulable]
    if not ok:
        return tuple(0 for _ in session.table.columns)
    return tuple(int(x) for x in session.table.allocatable[ok].sum(axis=0))
