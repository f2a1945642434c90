"""The ``preempt`` action (layer 2): room for starving gangs from lower-priority pods.

For each starving job (its gang not pipelined, tasks waiting), most important first, and
each waiting task of it (unless ``preemptionPolicy: Never``):

1. if a node has room now, or room being freed by earlier evictions, the task is
   nominated there (pipelined) with no new victims;
2. otherwise candidate nodes are those where the task fails only for reasons that
   removing pods can fix (resources, pod count, host ports, anti-affinity); of the N
   such nodes, taken from a start that moves on each time, the first
   ``k = clamp(N * minCandidateNodesPercentage / 100, minCandidateNodesAbsolute,
   maxCandidateNodes)`` are looked at, and those with lower-priority pods able to free
   what the task lacks are evaluated; while none has, the search looks further, so a
   node that could be freed is never missed;
3. on each candidate, on the session itself inside a statement: every possible victim
   is evicted (lower priority: other jobs of the same queue, or lower-priority tasks of
   the same job; never what the plugins protect), and the task must then fit with
   releasing room counted as free and its queue must have room; then the victims are
   re-added one at a time, most important first and those whose eviction would violate
   a PodDisruptionBudget before the others, and each one that still lets the task fit
   stays. Every removal and re-add goes through ``Session.move``, so every plugin with
   state (devices, ports, affinity, queue usage) follows, and a re-added pod returns
   exactly where it was. What is left evicted are the victims; the node is rolled back;
4. the candidates are ranked as kube-scheduler ranks them: fewest PDB violations, lowest
   priority of the highest victim, smallest sum of victim priorities, fewest victims,
   latest start of the highest-priority victims, then node name; the best one's
   evictions are applied and the task is nominated to that node.

Step 3 is the costly one, so it runs on the candidates in the order of a cheap lower
bound of their rank (:func:`rank_bound`: no PDB violation, and the fewest, least
important, latest started victims that could free what the filters say the node lacks),
and stops as soon as the best rank found is below the next bound. The chosen node is the
one an evaluation of every candidate would choose; on nodes alike, one simulation is
often all it takes.

A job's evictions and nominations are committed only if the whole gang is then
pipelined; otherwise everything tried is rolled back, so evictions happen only on the
nodes where a preemption succeeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.actions.common import eligible, waiting_tasks
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.snapshot import DisruptionBudget
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.fit import Fit
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement

_PRIORITY_OFFSET = 1 << 31  # makes every priority positive for the sum, as kube-scheduler
EVICTABLE = frozenset({TaskStatus.BOUND, TaskStatus.RUNNING})

RankKey = tuple[int, int, int, int, float, str]
"""A candidate's rank (:meth:`Candidate.rank`); smaller is better."""
NO_VICTIMS = "preemption: no node has lower-priority pods whose eviction makes room."
"""Appended to the reason of a pod (and of its PodGroup) that preemption cannot help."""
_CHUNK = 64
"""Fewest rows :meth:`PreemptAction._window` bounds at once while it looks for more."""


@dataclass(frozen=True, slots=True)
class PreemptArguments:
    """Arguments of the ``preempt`` action (``actionArguments.preempt``)."""

    minCandidateNodesPercentage: int = 10
    minCandidateNodesAbsolute: int = 100
    maxCandidateNodes: int = 1000

    def __post_init__(self) -> None:
        if not 0 <= self.minCandidateNodesPercentage <= 100:
            raise ValueError("minCandidateNodesPercentage must be within 0..100")
        if self.minCandidateNodesAbsolute < 1:
            raise ValueError("minCandidateNodesAbsolute must be at least 1")
        if self.maxCandidateNodes < self.minCandidateNodesAbsolute:
            raise ValueError("maxCandidateNodes must be at least minCandidateNodesAbsolute")

    def candidates(self, total: int) -> int:
        n = total * self.minCandidateNodesPercentage // 100
        return min(total, max(n, self.minCandidateNodesAbsolute), self.maxCandidateNodes)


@dataclass(frozen=True, slots=True)
class Candidate:
    node: NodeInfo
    victims: tuple[TaskInfo, ...]
    pdb_violations: int

    def rank(self) -> RankKey:
        """Smaller is better, in kube-scheduler's order."""
        top = max(v.priority for v in self.victims)
        total = sum(v.priority + _PRIORITY_OFFSET for v in self.victims)
        earliest_top_start = min(v.start_time for v in self.victims if v.priority == top)
        return (
            self.pdb_violations,
            top,
            total,
            len(self.victims),
            -earliest_top_start,
            self.node.name,
        )


def pdb_violations(victims: Sequence[TaskInfo], budgets: Sequence[DisruptionBudget]) -> list[bool]:
    """For each victim, in order, whether evicting it (after the ones before) breaks a budget."""
    allowed = {(b.namespace, b.name): b.disruptions_allowed for b in budgets}
    out = []
    for v in victims:
        broke = False
        for b in budgets:
            if b.namespace == v.namespace and b.selector.matches(v.labels or {}):
                key = (b.namespace, b.name)
                allowed[key] -= 1
                broke = broke or allowed[key] < 0
        out.append(broke)
    return out


def rank_bound(
    node: str, possible: Sequence[TaskInfo], room: Sequence[Sequence[int]], need: Sequence[int]
) -> RankKey | None:
    """A lower bound of the rank of any preemption on ``node`` that evicts pods of
    ``possible`` there, or None when evicting all of them cannot free ``need``.

    ``room[i]`` is what evicting ``possible[i]`` frees, per column; ``need`` is what the
    node lacks, per column (:meth:`Session.shortfall`). Sound because the victims on the
    node must free ``need``, so they are at least ``k`` (the fewest whose room covers every
    column), and the rank compares lexicographically: no PDB violation; the lowest
    priority among ``possible``; the ``k`` lowest priorities; ``k``; and, if every victim
    has that lowest priority, their earliest start is no later than the ``k``-th latest
    start among such pods. Victims of a broken gang elsewhere only add to the rank.
    """
    if not possible:
        return None
    fewest = 1
    for j, lack in enumerate(need):
        if lack <= 0:
            continue
        freed = 0
        for count, amount in enumerate(sorted((r[j] for r in room), reverse=True), 1):
            freed += amount
            if freed >= lack:
                fewest = max(fewest, count)
                break
        else:
            return None
    priorities = sorted(t.priority for t in possible)
    lowest = priorities[0]
    starts = sorted((t.start_time for t in possible if t.priority == lowest), reverse=True)
    latest = starts[min(fewest, len(starts)) - 1]
    total = sum(p + _PRIORITY_OFFSET for p in priorities[:fewest])
    return (0, lowest, total, fewest, -latest, node)


def _in_full_gang(session: Session, task: TaskInfo) -> bool:
    """Is ``task`` a member of a running gang that has no member to spare?"""
    job = session.jobs.get(task.job_id)
    return (
        job is not None
        and job.has_pod_group
        and job.min_member > 1
        and job.placed_count() <= job.min_member
    )


class PreemptAction:
    name = "preempt"

    def __init__(self, arguments: PreemptArguments) -> None:
        self.args = arguments
        self._start = 0

    def execute(self, session: Session) -> None:
        self._withdraw_stale_nominations(session)
        jobs = []
        for job in session.jobs.values():
            tasks = waiting_tasks(job)
            if (
                any(t.status is TaskStatus.PENDING for t in tasks)
                and not all(t.spec.best_effort for t in tasks)  # backfill's
                and session.job_starving(job)
                and eligible(session, job)
            ):
                jobs.append(job)
        for job in session.order_jobs(jobs):
            backoff = session.snapshot.preempt_backoff.get(job.uid)
            if backoff is not None:
                for t in waiting_tasks(job):
                    base = session.task_reasons.get(t.uid, "")
                    session.record_task_reason(t, f"{base} {backoff}".strip())
                continue
            queue = session.queues[job.queue]
            found_none = False
            with session.statement() as stmt:
                for task in session.order_tasks(
                    [t for t in waiting_tasks(job) if t.status is TaskStatus.PENDING]
                ):
                    found_none |= not self._preempt_for(session, stmt, queue, task)
                if stmt.operations and session.job_pipelined(job):
                    stmt.commit()
                    continue
            reason = session.job_reasons.get(job.uid)
            if found_none and reason:  # the PodGroup's condition says it as its pods do
                session.record_job_reason(job, _with(reason, NO_VICTIMS))

    def _withdraw_stale_nominations(self, session: Session) -> None:
        """A nominated task whose node can no longer take it, even once the victims are
        gone (a higher-priority pod took the room), is pending again and may preempt; and
        a gang that is not pipelined (for that reason, or because a higher preemption
        cleared a member's nomination) gives up the nominations of all its members, so
        they hold no room for a gang that cannot start."""
        jobs = [
            job
            for job in session.jobs.values()
            if not session.is_gated(job)
            and any(t.status is TaskStatus.PIPELINED for t in job.tasks.values())
        ]
        if not jobs:
            return
        with session.statement() as stmt:
            for job in jobs:
                nominated = [t for t in job.tasks.values() if t.status is TaskStatus.PIPELINED]
                for t in nominated:
                    with session.counting_releasing():
                        fits = session.fits_on(t, t.node_name)
                    if not fits:
                        stmt.unpipeline(t)
                if not session.job_pipelined(job) and not session.job_ready(job):
                    for t in nominated:
                        if t.status is TaskStatus.PIPELINED:
                            stmt.unpipeline(t)
            if stmt.operations:
                stmt.commit()

    def _preempt_for(
        self, session: Session, stmt: Statement, queue: QueueInfo, task: TaskInfo
    ) -> bool:
        """Nominate ``task`` somewhere, evicting what it takes, in ``stmt``. False when
        no node could be freed for it (the task's reason then says so)."""
        if task.preemption_policy == "Never":
            return True
        fit = session.fit(task)
        if fit.any and session.queue_allocatable(queue, task):
            node = session.select_node(task, fit)
            if node is not None:
                stmt.pipeline(task, node.name)
                return True
        with session.counting_releasing():
            future = session.fit(task)
            node = session.select_node(task, future) if future.any else None
        if node is not None and session.queue_allocatable(queue, task):
            stmt.pipeline(task, node.name)
            return True
        best = self._best_candidate(session, stmt, queue, task, fit)
        if best is None:
            base = session.task_reasons.get(task.uid) or fit.explain()
            session.record_task_reason(task, _with(base, NO_VICTIMS))
            return False
        for victim in best.victims:
            stmt.evict(victim, "preempted", preemptor=task)
        stmt.pipeline(task, best.node.name)
        return True

    def _window(
        self, session: Session, task: TaskInfo, fit: Fit
    ) -> list[tuple[RankKey, NodeInfo, list[TaskInfo]]]:
        """The candidates to evaluate for ``task``: :meth:`_bounded` entries of nodes
        taken in row order from a start that moves on each time, until ``k`` of them
        could be freed, with ``k`` from :meth:`PreemptArguments.candidates` of the number
        of nodes where preemption could help. Past the first ``k`` nodes (or
        :data:`_CHUNK`), it looks on only while none has been found: a node that could
        be freed is never missed, and a burst of preemptions that has used up most
        nodes does not make each later preemptor walk the whole cluster."""
        # Nodes that fit already are candidates too: there the queue's room is what lacks,
        # and evicting lower-priority pods of the same queue frees it.
        rows = np.flatnonzero(fit.candidates() | fit.feasible)
        if len(rows) == 0:
            return []
        k = self.args.candidates(len(rows))
        pos = int(np.searchsorted(rows, self._start % len(session.table)))
        rows = np.concatenate((rows[pos:], rows[:pos]))
        found: list[tuple[int, RankKey, NodeInfo, list[TaskInfo]]] = []
        looked = 0
        while looked < len(rows) and len(found) < k and not (found and looked >= k):
            chunk = [int(r) for r in rows[looked : looked + max(k - len(found), _CHUNK)]]
            found.extend(self._bounded(session, task, chunk))
            looked += len(chunk)
        last = found[k - 1][0] if len(found) >= k else int(rows[looked - 1])
        self._start = last + 1
        return [(bound, node, possible) for _, bound, node, possible in found[:k]]

    def _best_candidate(
        self, session: Session, stmt: Statement, queue: QueueInfo, task: TaskInfo, fit: Fit
    ) -> Candidate | None:
        """The best-ranked candidate, by branch and bound over :func:`rank_bound`."""
        bounded = self._window(session, task, fit)
        bounded.sort(key=lambda b: b[0])
        best: Candidate | None = None
        best_rank: RankKey | None = None
        for bound, node, possible in bounded:
            if best_rank is not None and best_rank < bound:
                break  # every candidate left ranks at or above its bound
            cand = self._simulate(session, stmt, queue, task, node, possible)
            if cand is None:
                continue
            rank = cand.rank()
            if best_rank is None or rank < best_rank:
                best, best_rank = cand, rank
        return best

    def _bounded(
        self, session: Session, task: TaskInfo, rows: list[int]
    ) -> list[tuple[int, RankKey, NodeInfo, list[TaskInfo]]]:
        """(row, :func:`rank_bound`, node, possible victims) of each of ``rows`` that
        may take ``task`` by preemption, in the order of ``rows``, with what each lacks
        as the simulation counts it (releasing room free)."""
        table = session.table
        nodes = [table.nodes[row] for row in rows]
        possible = [self._possible_victims(session, task, node) for node in nodes]
        with_victims = [i for i, p in enumerate(possible) if p]
        if not with_victims:
            return []
        with session.counting_releasing():
            lacking = session.shortfall(task, np.array([rows[i] for i in with_victims]))
        out = []
        for i, need in zip(with_victims, lacking.tolist(), strict=True):
            room = [table.amounts(t.request) for t in possible[i]]
            bound = rank_bound(nodes[i].name, possible[i], room, need)
            if bound is not None:
                out.append((rows[i], bound, nodes[i], possible[i]))
        return out

    def _possible_victims(self, session: Session, task: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        job = session.jobs.get(task.job_id)
        queue = job.queue if job is not None else ""
        out = []
        for t in node.tasks.values():
            if t.status not in EVICTABLE or t.priority >= task.priority or not t.sluice:
                continue
            owner = session.jobs.get(t.job_id)
            if owner is None or (owner.queue != queue and t.job_id != task.job_id):
                continue
            out.append(t)
        return session.victims(task, out)

    def _fits(self, session: Session, queue: QueueInfo, task: TaskInfo, node: str) -> bool:
        with session.counting_releasing():
            return session.fits_on(task, node) and session.queue_allocatable(queue, task)

    def _simulate(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        queue: QueueInfo,
        task: TaskInfo,
        node: NodeInfo,
        possible: list[TaskInfo],
    ) -> Candidate | None:
        """Victims among ``possible`` on ``node`` for ``task``, or None. Leaves the
        session as it found it."""
        # whether each one's gang has no member to spare, as it stands before any removal
        full = {t.uid: _in_full_gang(session, t) for t in possible}
        cp = stmt.checkpoint()
        try:
            for v in possible:
                stmt.evict(v, "simulated", preemptor=task)
            if not self._fits(session, queue, task, node.name):
                return None
            # Most important first; among them, pods whose eviction breaks a budget, then
            # pods whose eviction breaks a running gang, so they are the likeliest to be
            # spared.
            ordered = sorted(possible, key=lambda t: (-t.priority, -t.start_time, t.key))
            breaks = dict(
                zip(
                    (t.uid for t in ordered),
                    pdb_violations(ordered, session.snapshot.budgets),
                    strict=True,
                )
            )
            ordered.sort(key=lambda t: (not breaks[t.uid], not full[t.uid]))
            victims = []
            for v in ordered:
                stmt.undo(v)
                if not self._fits(session, queue, task, node.name):
                    stmt.evict(v, "simulated", preemptor=task)
                    victims.append(v)
            if not victims:
                return None
            victims.extend(self._bundle(session, stmt, task, victims))
            violations = sum(pdb_violations(victims, session.snapshot.budgets))
            return Candidate(node, tuple(victims), violations)
        finally:
            stmt.rollback(cp)

    def _bundle(
        self, session: Session, stmt: Statement, task: TaskInfo, victims: list[TaskInfo]
    ) -> list[TaskInfo]:
        """The rest of every gang the victims break: a gang is the unit of eviction.

        A running gang left below its minMember cannot make progress and only holds room,
        so its other members (wherever they run) go with it, if they may be evicted for
        ``task``. They are evicted in the statement like the others.
        """
        extra: list[TaskInfo] = []
        seen = {v.uid for v in victims}
        for job_id in sorted({v.job_id for v in victims}):
            job = session.jobs.get(job_id)
            if job is None or not job.has_pod_group or job_id == task.job_id:
                continue
            if job.placed_count() >= job.min_member:
                continue  # still whole without the victims
            members = [
                t
                for t in job.tasks.values()
                if t.status in EVICTABLE
                and t.uid not in seen
                and t.sluice
                and t.priority < task.priority
            ]
            for t in session.victims(task, members):
                stmt.evict(t, "simulated", preemptor=task)
                extra.append(t)
                seen.add(t.uid)
        return extra


def _with(reason: str, more: str) -> str:
    """``reason`` followed by the sentence ``more``."""
    return f"{reason}{' ' if reason.endswith('.') else '. '}{more}"
