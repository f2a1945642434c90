"""Domain-wide victim selection for a gang preemptor (layer 2).

Volcano's gang-aware preemption, done on the session: for a gang (a PodGroup whose pending
tasks must all be placed), victims are chosen over a whole domain (a node set, or the
whole cluster), not node by node per task, and the gang is then placed on the domain by
a dry run of allocate restricted to it:

1. **Need.** What the gang's pending tasks ask, less what the domain has free (the room of
   pods already being evicted counts): the resources the victims must free.
2. **Bundles.** The possible victims in the domain (the policy's candidates), grouped per
   job into a Safe and a Whole bundle (:mod:`.bundles`), the tasks of a bundle in the
   order "covering more of the need first, then lower priority, then smaller, then
   younger".
3. **Order.** Safe before Whole; then the policy's order (:meth:`~.policy.VictimPolicy.
   order_bundles`): for preempt lower job priority first, ties by ROI; for reclaim the
   queue furthest above its share first, then ROI (when it differs by more than
   ``roiThreshold``), then priority. ROI = local gain / global cost over the resources
   still needed: gain = sum of min(local, needed) / needed, cost = sum of global / needed,
   with local what the bundle frees in the domain and global what evicting it takes in
   the whole cluster (a Whole bundle takes its gang's every member).
4. **One call.** The ordered candidates go to the plugins in one call (the policy's
   ``allowed``: the victim filter, and for reclaim the queue budgets, which cut the list
   where a queue would go below its share). A Whole bundle partly refused is dropped; a
   Safe one shrinks; the bundles are ordered again.
5. **Select.** Bundles are evicted in order until the gang fits: a cheap vector check of
   the room freed, then the dry run. Evicting a Whole bundle evicts its gang's other
   evictable members wherever they run (a broken gang only holds room). With few Whole
   bundles (at most :data:`EXACT_LIMIT`), every set of them is tried by increasing size
   instead, so that the fewest gangs are broken.
6. **Trim.** Victims are put back, the last chosen first (a Whole bundle as a unit, a Safe
   one task by task), while the gang still fits without them.
7. **Place.** The dry run's placement is kept: every task of the gang is nominated to its
   node of the domain.

``GANG_VICTIM_SELECTOR`` lets a plugin replace steps 3 to 6: it returns the jobs to evict.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.actions.victims.bundles import Bundle, Kind, bundles
from scheduler.actions.victims.policy import VictimPolicy
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.framework.extension_points import GANG_VICTIM_SELECTOR
from scheduler.framework.node_sets import NodeSet
from scheduler.framework.node_table import IntVector
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement

EXACT_LIMIT = 10
"""With at most this many Whole bundles to choose from, every set of them is tried (by
increasing size) so that the fewest gangs are broken; beyond, they are taken in order."""


@dataclass(slots=True)
class Scored:
    """A bundle with what it frees in the domain and takes in the cluster, per column."""

    bundle: Bundle
    local: IntVector
    global_: IntVector
    roi: float = 0.0
    extras: list[TaskInfo] = field(default_factory=list)
    """For a Whole bundle: its gang's other evictable members, outside the domain."""


@dataclass(frozen=True, slots=True)
class GangPlan:
    """What making room for a gang in a domain took: the victims by bundle (in the order
    chosen), and the gangs broken."""

    victims: tuple[tuple[TaskInfo, Kind], ...]
    broken: tuple[str, ...]

    @property
    def cost(self) -> tuple[int, int, int]:
        """Fewest gangs broken, then fewest victims, then the lowest priorities."""
        return (
            len(self.broken),
            len(self.victims),
            sum(t.priority + (1 << 31) for t, _ in self.victims),
        )


class GangSearch:
    """One per evicting action (its policy's). Synchronous; :meth:`clear` records its
    decisions in the caller's statement and leaves nothing else behind."""

    def __init__(self, policy: VictimPolicy, roi_threshold: float = 0.05) -> None:
        self.policy = policy
        self.roi_threshold = roi_threshold
        self._queue = ""
        """The queue of the gang being made room for (its evictions say it)."""

    def clear(
        self,
        session: Session,
        stmt: Statement,
        job: JobInfo,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
    ) -> GangPlan | None:
        """Evict what ``job``'s ``pending`` tasks need in ``domain`` and nominate each of
        them to a node of it, in ``stmt``; None (and nothing recorded) when the gang cannot
        be placed there whatever is evicted."""
        mark = stmt.checkpoint()
        if self._fits(session, stmt, pending, domain):
            self._place(session, stmt, pending, domain)
            return GangPlan((), ())
        rep = min(pending, key=lambda t: t.priority)
        self._queue = job.queue
        need = self._need(session, pending, domain)
        scored = self._candidates(session, rep, domain, need)
        if not scored:
            return None
        chosen = self._choose(session, stmt, job, pending, domain, rep, scored, need)
        if chosen is None:
            stmt.rollback(mark)
            return None
        placement = self._placement(session, stmt, pending, domain)
        stmt.rollback(mark)
        if placement is None:
            return None
        # Recorded again in their final form: each victim evicted for the task nominated to
        # its node (collateral members of a broken gang, elsewhere, for the first task),
        # then each task nominated where the dry run put it.
        by_node = {node: task for task, node in placement}
        victims: list[tuple[TaskInfo, Kind]] = []
        for s in chosen:
            kind = s.bundle.kind.value if s.bundle.job.has_pod_group else ""
            for t in (*s.bundle.tasks, *s.extras):
                preemptor = by_node.get(t.node_name, placement[0][0])
                stmt.evict(t, self.policy.reason, preemptor=preemptor, queue=job.queue, bundle=kind)
                victims.append((t, s.bundle.kind))
        for task, node in placement:
            stmt.pipeline(task, node)
        broken = tuple(s.bundle.job.uid for s in chosen if s.bundle.kind is Kind.WHOLE)
        return GangPlan(tuple(victims), broken)

    # Steps 1 and 2 -------------------------------------------------------------------

    @staticmethod
    def _need(session: Session, pending: Sequence[TaskInfo], domain: NodeSet) -> IntVector:
        table = session.table
        ask: IntVector = np.zeros(len(table.columns), dtype=np.int64)
        for t in pending:
            ask = ask + table.request(t.request)
        free = (
            table.free(
                min(t.priority for t in pending),
                "",
                slice(None),
                np.flatnonzero(domain.rows),
                releasing=True,
            )
            .clip(min=0)
            .sum(axis=0)
        )
        out: IntVector = np.maximum(ask - free, 0)
        return out

    def _candidates(
        self, session: Session, rep: TaskInfo, domain: NodeSet, need: IntVector
    ) -> list[Scored]:
        """The bundles of the possible victims in ``domain``, ordered, after the plugins'
        one call (steps 2 to 4)."""
        table = session.table
        tasks: list[TaskInfo] = []
        for row in np.flatnonzero(domain.rows).tolist():
            tasks.extend(self.policy.candidates(session, rep, table.nodes[row]))
        if not tasks:
            return []
        wanted = need > 0

        def prefer(t: TaskInfo) -> tuple[float, int, int, float]:
            vec = table.request(t.request)
            covers = float(np.minimum(vec, need)[wanted].sum()) if wanted.any() else 0.0
            return (-covers, t.priority, int(vec.sum()), -t.start_time)

        # Ties go to the pod last in name order, as the pod-by-pod search spares the first.
        tasks.sort(key=lambda t: t.key, reverse=True)
        scored = self._score(session, bundles(session.jobs, tasks, prefer), need, domain)
        ordered = self.policy.order_bundles(session, scored, self.roi_threshold)
        flat = [t for s in ordered for t in s.bundle.tasks]
        allowed = {t.uid for t in self.policy.allowed(session, rep, flat)}
        kept: list[Bundle] = []
        for s in ordered:
            inside = tuple(t for t in s.bundle.tasks if t.uid in allowed)
            if s.bundle.kind is Kind.WHOLE and len(inside) < len(s.bundle.tasks):
                continue  # a Whole bundle partly refused cannot be taken
            if inside:
                kept.append(Bundle(s.bundle.job, s.bundle.kind, inside))
        rescored = self._score(session, kept, need, domain)
        return self.policy.order_bundles(session, rescored, self.roi_threshold)

    @staticmethod
    def _score(
        session: Session, found: Sequence[Bundle], need: IntVector, domain: NodeSet
    ) -> list[Scored]:
        table = session.table
        wanted = need > 0
        out: list[Scored] = []
        for b in found:
            local: IntVector = np.zeros(len(table.columns), dtype=np.int64)
            for t in b.tasks:
                local = local + table.request(t.request)
            extras: list[TaskInfo] = []
            global_ = local.copy()
            if b.kind is Kind.WHOLE and b.job.has_pod_group:
                inside = {t.uid for t in b.tasks}
                for t in b.job.tasks.values():
                    if t.uid not in inside and t.status in EVICTABLE and t.sluice:
                        global_ = global_ + table.request(t.request)
                        if not (t.node_name in table.row and domain.rows[table.row[t.node_name]]):
                            extras.append(t)
            if wanted.any():
                needed = need[wanted].astype(np.float64)
                gain = float((np.minimum(local[wanted], need[wanted]) / needed).sum())
                cost = float((global_[wanted] / needed).sum())
                roi = gain / cost if cost > 0 else 0.0
            else:
                roi = 0.0
            out.append(Scored(b, local, global_, roi, extras))
        return out

    # Steps 5 and 6 -------------------------------------------------------------------

    def _choose(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        job: JobInfo,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        scored: list[Scored],
        need: IntVector,
    ) -> list[Scored] | None:
        """The bundles to evict (evicted in ``stmt``), or None (nothing left evicted)."""
        selected = self._selected_by_plugin(session, job, pending, domain, scored)
        if selected is not None:
            for s in selected:
                self._evict(stmt, s, rep)
            return selected if self._fits(session, stmt, pending, domain) else None
        safe = [s for s in scored if s.bundle.kind is Kind.SAFE]
        whole = [s for s in scored if s.bundle.kind is Kind.WHOLE]
        mark = stmt.checkpoint()
        chosen: list[Scored] = []
        freed: IntVector = np.zeros_like(need)
        wanted = need > 0
        for s in safe:
            self._evict(stmt, s, rep)
            chosen.append(s)
            freed = freed + s.local
            if (freed[wanted] >= need[wanted]).all() and self._fits(session, stmt, pending, domain):
                return self._trim(session, stmt, pending, domain, rep, chosen)
        if len(whole) <= EXACT_LIMIT:
            for size in range(1, len(whole) + 1):
                for combo in itertools.combinations(whole, size):
                    local = freed + sum((s.local for s in combo), np.zeros_like(need))
                    if not (local[wanted] >= need[wanted]).all():
                        continue
                    cp = stmt.checkpoint()
                    for s in combo:
                        self._evict(stmt, s, rep)
                    if self._fits(session, stmt, pending, domain):
                        return self._trim(session, stmt, pending, domain, rep, [*chosen, *combo])
                    stmt.rollback(cp)
            stmt.rollback(mark)
            return None
        for s in whole:
            self._evict(stmt, s, rep)
            chosen.append(s)
            freed = freed + s.local
            if (freed[wanted] >= need[wanted]).all() and self._fits(session, stmt, pending, domain):
                return self._trim(session, stmt, pending, domain, rep, chosen)
        stmt.rollback(mark)
        return None

    def _trim(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        chosen: list[Scored],
    ) -> list[Scored]:
        """Put victims back, the last chosen first (a Whole bundle as a unit, a Safe one
        task by task), while the gang still fits without them (Volcano evicts too many
        here; this does not)."""
        kept: list[Scored] = []
        for s in reversed(chosen):
            if s.bundle.kind is Kind.WHOLE:
                members = [*s.bundle.tasks, *s.extras]
                for t in members:
                    stmt.undo(t)
                if self._fits(session, stmt, pending, domain):
                    continue
                self._evict(stmt, s, rep)
                kept.append(s)
                continue
            left: list[TaskInfo] = []
            for t in reversed(s.bundle.tasks):
                stmt.undo(t)
                if not self._fits(session, stmt, pending, domain):
                    kind = Kind.SAFE.value if s.bundle.job.has_pod_group else ""
                    stmt.evict(t, self.policy.reason, preemptor=rep, queue=self._queue, bundle=kind)
                    left.append(t)
            if left:
                left.reverse()
                kept.append(
                    Scored(Bundle(s.bundle.job, Kind.SAFE, tuple(left)), s.local, s.global_, s.roi)
                )
        kept.reverse()
        return kept

    def _selected_by_plugin(
        self,
        session: Session,
        job: JobInfo,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        scored: list[Scored],
    ) -> list[Scored] | None:
        """The bundles of the jobs a ``GANG_VICTIM_SELECTOR`` plugin chose, or None when no
        plugin answers."""
        if not session.hooks[GANG_VICTIM_SELECTOR]:
            return None
        offered = [(s.bundle.job, s.bundle.kind.value, s.bundle.tasks) for s in scored]
        answer = session.ask(GANG_VICTIM_SELECTOR, job, pending, domain, offered)
        if answer is None:
            return None
        jobs = set(answer)
        return [s for s in scored if s.bundle.job.uid in jobs]

    def _evict(self, stmt: Statement, s: Scored, rep: TaskInfo) -> None:
        kind = s.bundle.kind.value if s.bundle.job.has_pod_group else ""
        for t in (*s.bundle.tasks, *s.extras):
            stmt.evict(t, self.policy.reason, preemptor=rep, queue=self._queue, bundle=kind)

    # The dry run ---------------------------------------------------------------------

    def _placement(
        self, session: Session, stmt: Statement, pending: Sequence[TaskInfo], domain: NodeSet
    ) -> list[tuple[TaskInfo, str]] | None:
        """Where the dry run puts each pending task (in task order), or None; rolled back."""
        cp = stmt.checkpoint()
        try:
            if not self._place(session, stmt, pending, domain):
                return None
            return [(t, t.node_name) for t in session.order_tasks(list(pending))]
        finally:
            stmt.rollback(cp)

    def _fits(
        self, session: Session, stmt: Statement, pending: Sequence[TaskInfo], domain: NodeSet
    ) -> bool:
        """Would every pending task be placed in ``domain`` now (victims gone)? A dry run
        of allocate, rolled back."""
        cp = stmt.checkpoint()
        try:
            return self._place(session, stmt, pending, domain)
        finally:
            stmt.rollback(cp)

    def _place(
        self, session: Session, stmt: Statement, pending: Sequence[TaskInfo], domain: NodeSet
    ) -> bool:
        """Nominate every pending task to a node of ``domain`` (releasing room counted),
        within its queue's share, in ``stmt``: True when all were; else what was nominated
        stays for the caller to roll back."""
        for task in session.order_tasks(list(pending)):
            if not self.policy.queue_allows(session, task):
                return False
            fit = session.fit(task, releasing=True).restricted(domain.rows)
            node = session.select_node(task, fit) if fit.any else None
            if node is None:
                return False
            stmt.pipeline(task, node.name)
        return True
