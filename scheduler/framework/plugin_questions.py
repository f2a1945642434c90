"""The questions actions ask the plugins: one typed method for each extension point, each
asked through the rule the point declares (:func:`~scheduler.framework.tiers.bind`).

:class:`PluginQuestions` is the part of :class:`~scheduler.framework.session.Session`
that asks; the node selection (a sample scored as kube-scheduler's, ties shared
round-robin) is here too, as it asks the scorers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import InvariantError
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.task import TaskInfo
from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.framework.effects import VictimBundle
from scheduler.framework.extension_points import (
    BIND_ANNOTATIONS,
    BIND_CLAIMS,
    BIND_VOLUMES,
    ENQUEUE_ROOM,
    GANG_VICTIM_SELECTOR,
    JOB_ENQUEUEABLE,
    JOB_ORDER,
    JOB_PIPELINED,
    JOB_READY,
    JOB_STARVING,
    JOB_VALID,
    NODE_FILTER,
    NODE_SCORER,
    ON_ENQUEUE,
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
    Point,
    Scope,
)
from scheduler.framework.fit import Fit
from scheduler.framework.job_boundaries import JobBoundaries
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets, everything
from scheduler.framework.node_table import IndexVector, IntMatrix, NodeTable
from scheduler.framework.plugin_status import Status
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


class PluginQuestions(JobBoundaries):
    """What the session sets for the questions (in its ``__init__``) is declared here."""

    table: NodeTable
    nodes: dict[str, NodeInfo]
    _askers: dict[str, Callable[..., Any]]
    _subset_points: bool
    _scorers: bool
    _score_count: int
    _next_start: int
    _last_pick: int

    @functools.cached_property
    def all_nodes(self) -> NodeSet:
        """The set of every node (what the first node-set plugin splits), built once."""
        return everything(len(self.table))

    def _ask(self, point: Point[Any, R], *args: Any, **kwargs: Any) -> R:
        """Ask ``point`` with ``args``, its answers combined by its declared rule. While an
        action runs, a JOB point must be asked inside a job's boundary (:meth:`job_scope`)."""
        if point.scope is Scope.JOB and self._acting and not self._scopes:
            raise InvariantError(
                f"action {self._acting!r} asked extension point {point.name!r} outside "
                "any job's boundary"
            )
        answer: R = self._askers[point.name](*args, **kwargs)
        return answer

    def job_key(self, job: JobInfo) -> tuple[int | float | str, ...]:
        """``job``'s sort key among jobs: the plugins' keys, then the older first, then
        its uid (Volcano's default order)."""
        return (*self._ask(JOB_ORDER, job), job.creation, job.uid)

    def task_key(self, task: TaskInfo) -> tuple[int | float | str, ...]:
        """``task``'s sort key among its job's tasks (the plugins' keys, then its name)."""
        return (*self._ask(TASK_ORDER, task), task.key)

    def queue_key(self, queue: QueueInfo) -> tuple[int | float | str, ...]:
        """``queue``'s sort key among queues (the plugins' keys, then its name)."""
        return (*self._ask(QUEUE_ORDER, queue), queue.name)

    def job_valid(self, job: JobInfo) -> Status:
        """May ``job`` be tried at all? Success, or why not."""
        return self._ask(JOB_VALID, job)

    def job_ready(self, job: JobInfo) -> Status:
        """Is enough of ``job`` placed for it to be bound? Success, or why not."""
        return self._ask(JOB_READY, job)

    def job_pipelined(self, job: JobInfo) -> Status:
        """Is enough of ``job`` placed or nominated? Success, or why not."""
        return self._ask(JOB_PIPELINED, job)

    def job_starving(self, job: JobInfo) -> bool:
        return self._ask(JOB_STARVING, job)

    def job_enqueueable(self, job: JobInfo) -> bool:
        return self._ask(JOB_ENQUEUEABLE, job)

    def enqueue_room(self) -> AdmissionRoom | None:
        """The room a plugin measures for admitting gangs this cycle (None: no plugin
        does; the enqueue action then uses its own measure)."""
        return self._ask(ENQUEUE_ROOM)

    def queue_allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        return self._ask(QUEUE_ALLOCATABLE, queue, task)

    def queue_overused(self, queue: QueueInfo) -> bool:
        return self._ask(QUEUE_OVERUSED, queue)

    def queue_borrowable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``task`` go beyond ``queue``'s share into room nobody below theirs could use?"""
        return self._ask(QUEUE_BORROWABLE, queue, task)

    def queue_reclaims(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``queue`` take room for ``task`` by reclaim (below its share in what
        ``task`` asks, though ``task`` may be larger than what is left of it)?"""
        return self._ask(QUEUE_RECLAIMS, queue, task)

    def queue_share(self, queue: QueueInfo) -> QueueShare | None:
        """``queue``'s deserved and allocated share this cycle (None without a plugin)."""
        return self._ask(QUEUE_SHARE, queue)

    def node_sets(
        self, job: JobInfo, tasks: Sequence[TaskInfo], purpose: Purpose
    ) -> Subsets | None:
        """Where ``job``'s ``tasks`` should be placed, as node sets in order of preference
        (see :mod:`~scheduler.framework.node_sets`); None when no plugin is relevant to
        the job: then every node will do."""
        if not self._subset_points:
            return None
        counts: dict[str, int] = {}
        sets = self._ask(SUBSET_NODES, job, tasks, self.all_nodes, purpose, counts=counts)
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
        return self._ask(RECLAIMABLE, reclaimers, allowed)

    def gang_victims(
        self,
        job: JobInfo,
        tasks: Sequence[TaskInfo],
        nodes: NodeSet,
        candidates: Sequence[tuple[JobInfo, VictimBundle, Sequence[TaskInfo]]],
    ) -> Sequence[str] | None:
        """The jobs a plugin chose to evict so that gang ``job``'s ``tasks`` fit in
        ``nodes`` (see :class:`~.extension_points.GangVictimSelector`); None: the search
        chooses."""
        return self._ask(GANG_VICTIM_SELECTOR, job, tasks, nodes, candidates)

    def victims(self, preemptor: TaskInfo, candidates: Sequence[TaskInfo]) -> list[TaskInfo]:
        return self._ask(VICTIMS, preemptor, candidates)

    def job_enqueued(self, job: JobInfo) -> None:
        """Tell plugins that ``job`` just went Inqueue (called by the enqueue action)."""
        self._ask(ON_ENQUEUE, job)

    def order_jobs(self, jobs: list[JobInfo]) -> list[JobInfo]:
        return sorted(jobs, key=self.job_key)

    def order_tasks(self, tasks: list[TaskInfo]) -> list[TaskInfo]:
        return sorted(tasks, key=self.task_key)

    def fit(self, task: TaskInfo, *, releasing: bool = False) -> Fit:
        """Every node filter's verdict on ``task`` against the session's current state;
        with ``releasing``, the room of pods being evicted counts as free."""
        groups = self._ask(NODE_FILTER, task, self.table, releasing)
        return Fit.of(len(self.table), groups, releasing=releasing)

    def fits_on(self, task: TaskInfo, node: str, *, releasing: bool = False) -> bool:
        """Does ``task`` pass every filter on ``node``?"""
        return self._ask(ROW_FILTER, task, self.table, self.table.row[node], releasing)

    def shortfall(self, task: TaskInfo, rows: IndexVector, *, releasing: bool = False) -> IntMatrix:
        """Room that must at least be freed on each of ``rows`` (per table column) before
        ``task`` can fit there: a lower bound from the filters, for the preemption search."""
        return self._ask(SHORTFALL, task, self.table, rows, releasing)

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
        scores = self._ask(NODE_SCORER, task, self.table, rows, fit.releasing)
        tied = rows[scores == scores.max()]
        if len(tied) > 1:
            after = (tied - self._last_pick - 1) % len(self.table)
            row = int(tied[int(np.argmin(after))])
        else:
            row = int(tied[0])
        self._last_pick = row
        return self.table.nodes[row]

    def bind_annotations(self, task: TaskInfo, node: str) -> dict[str, str]:
        """What the plugins write on ``task``'s pod before binding it to ``node``."""
        return self._ask(BIND_ANNOTATIONS, task, self.nodes[node])

    def bind_claims(self, task: TaskInfo, node: str) -> tuple[ClaimBinding, ...]:
        """What the plugins write to ``task``'s ResourceClaims before binding it to ``node``."""
        return self._ask(BIND_CLAIMS, task, self.nodes[node])

    def bind_volumes(self, task: TaskInfo, node: str) -> VolumeBindings | None:
        """What the plugins write to ``task``'s PVs and claims before binding it to
        ``node``, and how long the bind waits for them to be bound (None: nothing)."""
        return self._ask(BIND_VOLUMES, task, self.nodes[node])
