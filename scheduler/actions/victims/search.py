"""The victim search shared by the evicting actions (preempt; reclaim) (layer 2).

For a task that cannot be placed, :meth:`VictimSearch.make_room` nominates it to a node,
evicting what it takes there, inside the caller's statement:

1. if a node has room now, or room being freed by earlier evictions, the task is
   nominated there (pipelined) with no new victims;
2. otherwise candidate nodes are those where the task fails only for reasons that
   removing pods can fix (resources, pod count, host ports, anti-affinity), and those
   where it fits but its queue lacks room; of the N such nodes, taken from a start that
   moves on each time, the first ``k`` (:meth:`SearchArguments.candidates`) are looked at,
   and those with possible victims (the policy's :meth:`~.policy.VictimPolicy.possible`)
   able to free what the task lacks are evaluated; while none has, the search looks
   further, so a node that could be freed is never missed;
3. on each candidate, on the session itself inside the statement (:meth:`simulate`):
   every possible victim is evicted and the task must then fit (the policy's
   :meth:`~.policy.VictimPolicy.fits`); then the victims are re-added one at a time, most
   important first (pods whose eviction would violate a PodDisruptionBudget, then members
   of running gangs with no member to spare, before the others), and each one that still
   lets the task fit stays. Every removal and re-add goes through ``Session.move``, so
   every plugin with state (devices, ports, affinity, queue usage) follows, and a re-added
   pod returns exactly where it was. A gang left below its minMember loses its other
   evictable members too (:meth:`bundle`). The node is rolled back;
4. the candidates rank by the policy's :meth:`~.policy.VictimPolicy.rank`; the best one's
   evictions are applied and the task is nominated to that node.

Step 3 is the costly one, so it runs on the candidates in the order of the policy's cheap
lower bound of their rank, and stops as soon as the best rank found is below the next
bound. The chosen node is the one an evaluation of every candidate would choose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scheduler.actions.victims.bundles import split
from scheduler.actions.victims.candidates import Candidate, RankKey, pdb_violations
from scheduler.actions.victims.policy import VictimPolicy
from scheduler.api import reasons
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.framework.effects import VictimBundle
from scheduler.framework.fit import Fit
from scheduler.framework.node_sets import NodeSet
from scheduler.framework.node_table import BoolVector
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement

CHUNK = 64
"""Fewest rows :meth:`VictimSearch.window` bounds at once while it looks for more."""


@dataclass(frozen=True, slots=True)
class SearchArguments:
    """How many candidate nodes a search looks at (``actionArguments.<action>``), as
    kube-scheduler's DefaultPreemption arguments."""

    minCandidateNodesPercentage: int = 10
    minCandidateNodesAbsolute: int = 100
    maxCandidateNodes: int = 1000
    maxDomains: int = 5
    """At most this many node sets (domains) tried per gang and cycle, for a gang that
    must stay in one (a required topology level)."""

    REFUSED: ClassVar[Mapping[str, str]] = {
        "roiThreshold": "applies to reclaim only: preemption takes the victims of lowest "
        "priority first and never lets ROI outweigh priority (ROI only breaks ties)",
        "minRuntimeSeconds": "applies to reclaim only: a preemption follows priority, and a "
        "pod of higher priority is never taken back by the one it preempted",
    }
    """Arguments of another action, refused here with the reason (the config loader)."""

    def __post_init__(self) -> None:
        if not 0 <= self.minCandidateNodesPercentage <= 100:
            raise ValueError("minCandidateNodesPercentage must be within 0..100")
        if self.minCandidateNodesAbsolute < 1:
            raise ValueError("minCandidateNodesAbsolute must be at least 1")
        if self.maxCandidateNodes < self.minCandidateNodesAbsolute:
            raise ValueError("maxCandidateNodes must be at least minCandidateNodesAbsolute")
        if self.maxDomains < 1:
            raise ValueError("maxDomains must be at least 1")

    def candidates(self, total: int) -> int:
        """``k = clamp(total * percentage / 100, absolute, max)``, at most ``total``."""
        n = total * self.minCandidateNodesPercentage // 100
        return min(total, max(n, self.minCandidateNodesAbsolute), self.maxCandidateNodes)


@dataclass(frozen=True, slots=True)
class ReclaimArguments(SearchArguments):
    """The reclaim action's arguments (``actionArguments.reclaim``): the candidate window
    of :class:`SearchArguments`, how much ROI must differ to outweigh priority, and how
    long a job runs before a reclaim may take it."""

    roiThreshold: float = 0.05
    """Between two bundles of queues equally above their share, ROI decides over
    priority only when the two differ by more than this."""
    minRuntimeSeconds: float = 0.0
    """A job none of whose running pods has run this long (since its ``status.startTime``)
    is no victim of a reclaim (KAI's reclaim min-runtime): the hysteresis that keeps
    queues whose deserved shares move a little with demand from taking pods back and
    forth. 0 (the default, as Volcano): no such protection."""

    REFUSED: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        SearchArguments.__post_init__(self)
        if not self.roiThreshold >= 0:
            raise ValueError("roiThreshold must not be negative")
        if not self.minRuntimeSeconds >= 0:
            raise ValueError("minRuntimeSeconds must not be negative")


Bounded = tuple[RankKey, NodeInfo, list[TaskInfo]]
"""A node worth evaluating: the lower bound of its rank, the node, its possible victims."""


def victim_kinds(session: Session, victims: Sequence[TaskInfo]) -> dict[str, VictimBundle]:
    """SAFE or WHOLE for each victim of a gang (does its eviction leave the gang whole?),
    POD for a pod of its own; as the gangs stand before the evictions."""
    by_job: dict[str, list[TaskInfo]] = {}
    for t in victims:
        by_job.setdefault(t.job_id, []).append(t)
    out: dict[str, VictimBundle] = {}
    for job_id, members in by_job.items():
        job = session.jobs[job_id]
        if not job.has_pod_group:
            out.update((t.uid, VictimBundle.POD) for t in members)
            continue
        safe, whole = split(job, members, lambda t: (t.priority, -t.start_time, t.key))
        out.update((t.uid, VictimBundle.SAFE) for t in safe)
        out.update((t.uid, VictimBundle.WHOLE) for t in whole)
    return out


def spare_order(session: Session, tasks: Sequence[TaskInfo]) -> dict[str, int]:
    """For each of ``tasks`` (possible victims on one node), how late to spare it: 0 for
    the core of a running gang (Whole: its eviction breaks the gang), 1 for a pod of a job
    of its own, 2 for a gang's surplus (Safe: it breaks nothing), lower priorities and
    younger pods taken as the surplus first."""
    by_job: dict[str, list[TaskInfo]] = {}
    for t in tasks:
        by_job.setdefault(t.job_id, []).append(t)
    out: dict[str, int] = {}
    for job_id, members in by_job.items():
        job = session.jobs[job_id]
        safe, whole = split(job, members, lambda t: (t.priority, -t.start_time, t.key))
        core = 0 if job.has_pod_group and job.min_member > 1 else 1
        out.update((t.uid, 2) for t in safe)
        out.update((t.uid, core) for t in whole)
    return out


class VictimSearch:
    """One per evicting action; lives as long as the action (its window start moves on
    from cycle to cycle). Synchronous; every method leaves the session as it found it,
    except :meth:`make_room`, which records its decisions in the caller's statement."""

    def __init__(self, arguments: SearchArguments, policy: VictimPolicy) -> None:
        self.args = arguments
        self.policy = policy
        self._start = 0

    def make_room(
        self, session: Session, stmt: Statement, task: TaskInfo, within: NodeSet | None = None
    ) -> bool:
        """Nominate ``task`` somewhere (on a node of ``within``, if given), evicting what
        it takes, in ``stmt``. False when no node could be freed for it (the task's reason
        then says so)."""
        queue = session.queues[session.jobs[task.job_id].queue]
        whole = session.fit(task)
        fit = whole.restricted(within.rows) if within is not None else whole
        if fit.any and session.queue_allocatable(queue, task):
            node = session.select_node(task, fit)
            if node is not None:
                stmt.pipeline(task, node.name)
                return True
        future = session.fit(task, releasing=True)
        if within is not None:
            future = future.restricted(within.rows)
        node = session.select_node(task, future) if future.any else None
        if node is not None and session.queue_allocatable(queue, task):
            stmt.pipeline(task, node.name)
            return True
        best = self.best(session, stmt, task, whole, within)
        if best is None:
            base = session.task_reasons.get(task.uid) or reasons.nodes_unavailable(whole.explain())
            session.record_task_reason(task, reasons.nothing_helps(base, self.policy.nothing_helps))
            return False
        kinds = victim_kinds(session, best.victims)
        breaks = pdb_violations(best.victims, session.snapshot.budgets)
        for victim, broken in zip(best.victims, breaks, strict=True):
            stmt.evict(
                victim,
                self.policy.reason,
                preemptor=task,
                queue=queue.name,
                bundle=kinds[victim.uid],
                breaks_budget=broken,
            )
        stmt.pipeline(task, best.node.name)
        return True

    def best(
        self,
        session: Session,
        stmt: Statement,
        task: TaskInfo,
        fit: Fit,
        within: NodeSet | None = None,
    ) -> Candidate | None:
        """The best-ranked candidate for ``task`` (``fit``: its verdict now, on every
        node), on a node of ``within`` if given, by branch and bound over the policy's
        rank bound."""
        if not self.policy.may_help(session, task):
            return None
        total = int(np.count_nonzero(self._eligible(fit, within)))
        looked = 0
        best: Candidate | None = None
        best_rank: RankKey | None = None
        considered: set[str] = set()
        while True:
            window, seen = self.window(session, task, fit, within)
            looked += seen
            bounded = [b for b in window if b[1].name not in considered]
            considered.update(b[1].name for b in bounded)
            bounded.sort(key=lambda b: b[0])
            optimistic = False
            for bound, node, superset in bounded:
                if best_rank is not None and best_rank < bound:
                    break  # every candidate left ranks at or above its bound
                possible = self.policy.possible(session, task, node)
                optimistic |= len(possible) < len(superset)
                cand = self.simulate(session, stmt, task, node, possible) if possible else None
                if cand is None:
                    continue
                rank = self.policy.rank(session, cand)
                if best_rank is None or rank < best_rank:
                    best, best_rank = cand, rank
            # The window counted nodes by a superset of their victims; if that was too
            # hopeful and nothing was found, look further, so no node that could be
            # freed is missed. As kube-scheduler, look further too (over windows of nodes
            # not considered yet) while the best candidate breaks a PodDisruptionBudget:
            # one that breaks none may be next.
            if best is None:
                if optimistic and looked < total:
                    continue
                return None
            if best.pdb_violations and bounded and len(considered) < total:
                continue
            return best

    @staticmethod
    def _eligible(fit: Fit, within: NodeSet | None) -> BoolVector:
        """Rows where evictions could help: those failing only for reasons removing pods
        can fix, and those that fit already (there the queue's room is what lacks, and
        evicting pods of the same queue frees it); within ``within``."""
        rows = fit.candidates() | fit.feasible
        return rows & within.rows if within is not None else rows

    def window(
        self, session: Session, task: TaskInfo, fit: Fit, within: NodeSet | None = None
    ) -> tuple[list[Bounded], int]:
        """The candidates to evaluate for ``task``, and how many nodes were looked at:
        :meth:`bounded` entries of nodes taken in row order from a start that moves on each
        time, until ``k`` of them could be freed, with ``k`` from
        :meth:`SearchArguments.candidates` of the number of nodes where eviction could
        help. Past the first ``k`` nodes (or :data:`CHUNK`), it looks on only while none has
        been found: a node that could be freed is never missed, and a burst of preemptions
        that has used up most nodes does not make each later preemptor walk the whole
        cluster."""
        rows = np.flatnonzero(self._eligible(fit, within))
        if len(rows) == 0:
            return [], 0
        k = self.args.candidates(len(rows))
        pos = int(np.searchsorted(rows, self._start % len(session.table)))
        rows = np.concatenate((rows[pos:], rows[:pos]))
        found: list[tuple[int, Bounded]] = []
        looked = 0
        while looked < len(rows) and len(found) < k and not (found and looked >= k):
            chunk = [int(r) for r in rows[looked : looked + max(k - len(found), CHUNK)]]
            found.extend(self.bounded(session, task, chunk))
            looked += len(chunk)
        last = found[k - 1][0] if len(found) >= k else int(rows[looked - 1])
        self._start = last + 1
        return [entry for _, entry in found[:k]], looked

    def bounded(
        self, session: Session, task: TaskInfo, rows: list[int]
    ) -> list[tuple[int, Bounded]]:
        """(row, (bound, node, candidate victims)) of each of ``rows`` that may take
        ``task`` by eviction, in the order of ``rows``, with what each lacks as the
        simulation counts it (releasing room free). The candidates are the policy's cheap
        superset of the possible victims: the bound stays a lower bound."""
        table = session.table
        nodes = [table.nodes[row] for row in rows]
        possible = [self.policy.candidates(session, task, node) for node in nodes]
        with_victims = [i for i, p in enumerate(possible) if p]
        if not with_victims:
            return []
        lacking = session.shortfall(task, np.array([rows[i] for i in with_victims]), releasing=True)
        out = []
        for i, need in zip(with_victims, lacking.tolist(), strict=True):
            room = [table.amounts(t.request) for t in possible[i]]
            bound = self.policy.rank_bound(session, nodes[i].name, possible[i], room, need)
            if bound is not None:
                out.append((rows[i], (bound, nodes[i], possible[i])))
        return out

    def simulate(
        self,
        session: Session,
        stmt: Statement,
        task: TaskInfo,
        node: NodeInfo,
        possible: list[TaskInfo],
    ) -> Candidate | None:
        """Victims among ``possible`` on ``node`` for ``task``, or None. Leaves the
        session as it found it."""
        # how much each one's eviction breaks, as the gangs stand before any removal
        spared = spare_order(session, possible)
        # Most worth keeping first (the policy's order: for preempt the most important,
        # for reclaim the reverse of the order victims are taken in, by the queues' shares
        # before any removal); among them, pods whose eviction breaks a budget, then the
        # core of running gangs (Whole: evicting one breaks the gang), then pods of their
        # own, and the gangs' surplus (Safe) last: the likeliest to be spared first, and
        # the Safe ones the first victims.
        ordered = self.policy.keep_first(session, possible)
        fits = self.policy.fits
        cp = stmt.checkpoint()
        try:
            for v in possible:
                stmt.evict(v, self.policy.reason, preemptor=task)
            if not fits(session, task, node.name):
                return None
            breaks = dict(
                zip(
                    (t.uid for t in ordered),
                    pdb_violations(ordered, session.snapshot.budgets),
                    strict=True,
                )
            )
            ordered.sort(key=lambda t: (not breaks[t.uid], spared[t.uid]))
            victims = []
            for v in ordered:
                stmt.undo(v)
                if not fits(session, task, node.name):
                    stmt.evict(v, self.policy.reason, preemptor=task)
                    victims.append(v)
            if not victims:
                return None
            rest = self.bundle(session, stmt, task, victims)
            if rest is None:
                return None  # it would break a gang it cannot take whole
        finally:
            stmt.rollback(cp)
        # The rest of the gangs broken go only if all of them may go with the victims, as
        # one eviction (a reclaim budget weighs what the whole set takes).
        if rest and len(self.policy.allowed(session, [task], [*victims, *rest])) < len(
            victims
        ) + len(rest):
            return None  # it would leave a gang broken and running
        victims.extend(rest)
        violations = sum(pdb_violations(victims, session.snapshot.budgets))
        return Candidate(node, tuple(victims), violations)

    def bundle(
        self, session: Session, stmt: Statement, task: TaskInfo, victims: list[TaskInfo]
    ) -> list[TaskInfo] | None:
        """The rest of every gang the victims break: a gang is the unit of eviction.

        A running gang left below its minMember cannot make progress and only holds room,
        so its other members (wherever they run) go with it. They are evicted in the
        statement like the others. None when one of them is not this scheduler's (it
        cannot be evicted); whether they may all go with the victims (the policy's
        :meth:`~VictimPolicy.allowed`, asked of the whole set) is :meth:`simulate`'s
        question: if not, the victims would leave that gang broken and running, and are
        no candidate (as a Whole bundle partly refused is dropped in a gang's search).
        """
        extra: list[TaskInfo] = []
        seen = {v.uid for v in victims}
        for job_id in sorted({v.job_id for v in victims}):
            job = session.jobs.get(job_id)
            if job is None or not job.has_pod_group or job_id == task.job_id:
                continue
            if job.placed_count() >= job.min_member:
                continue  # still whole without the victims
            members = [t for t in job.tasks.values() if t.status in EVICTABLE and t.uid not in seen]
            if not all(t.sluice for t in members):
                return None
            for t in members:
                stmt.evict(t, self.policy.reason, preemptor=task)
                extra.append(t)
                seen.add(t.uid)
        return extra
