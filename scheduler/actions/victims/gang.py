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
5. **Select.** When the ways to choose are few (at most :data:`EXACT_CHOICES`: per job,
   a subset of its candidates that leaves it whole, or all of it), every way is tried,
   fewest jobs broken first, then fewest victims, then the jobs first in the order of
   step 3: the least that makes room is found, wherever the spare members run. Else
   bundles are evicted in order until the gang fits: a cheap vector check of the room
   freed, then the dry run. Evicting a Whole bundle evicts its gang's other evictable
   members wherever they run (a broken gang only holds room). With few Whole bundles (at
   most :data:`EXACT_LIMIT`), every set of them is tried by increasing size instead, so
   that the fewest gangs are broken.
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

from scheduler.actions.victims.bundles import Bundle, Kind, bundles, keeps_whole
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
EXACT_CHOICES = 512
"""With at most this many ways to choose the victims of a domain, every way is tried."""
EXACT_TASKS = 8
"""...and only when no job has more candidates than this in the domain."""


@dataclass(frozen=True, slots=True)
class _Way:
    """One way to take victims from one job: ``tasks`` of the domain (and ``extras``
    elsewhere), breaking it or not."""

    broken: bool
    tasks: tuple[TaskInfo, ...]
    extras: tuple[TaskInfo, ...]
    local: IntVector
    rank: int
    """The job's place in the order of step 3."""


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


def _whole_jobs(scored: Sequence[Scored]) -> list[Scored]:
    """The Whole bundles of ``scored``, each with its job's Safe bundle joined to it: a
    gang broken loses every member (in the domain and elsewhere), spares included."""
    safe = {s.bundle.job.uid: s for s in scored if s.bundle.kind is Kind.SAFE}
    out: list[Scored] = []
    for s in scored:
        if s.bundle.kind is not Kind.WHOLE:
            continue
        spare = safe.get(s.bundle.job.uid)
        if spare is None:
            out.append(s)
            continue
        tasks = (*spare.bundle.tasks, *s.bundle.tasks)
        bundle = Bundle(s.bundle.job, Kind.WHOLE, tasks)
        out.append(Scored(bundle, spare.local + s.local, s.global_, s.roi, s.extras))
    return out


def _spare_cost(took: Sequence[TaskInfo]) -> tuple[int, int]:
    return (len(took), sum(t.priority for t in took))


class _Spares:
    """The candidates that may be spared, per node of the domain (in the order of the
    bundles), and what a node needs to take one more of the gang's pods."""

    def __init__(self, session: Session, scored: Sequence[Scored], pending: Sequence[TaskInfo]):
        table = session.table
        self.jobs = session.jobs
        self.priority = min(t.priority for t in pending)
        self.by_row: dict[int, list[TaskInfo]] = {}
        self.vec: dict[str, IntVector] = {}
        for s in scored:
            for t in s.bundle.tasks:
                if t.node_name in table.row and t.uid not in self.vec:
                    self.vec[t.uid] = table.request(t.request)
                    self.by_row.setdefault(table.row[t.node_name], []).append(t)
        asks = np.array([table.request(t.request) for t in pending])
        self.slot: IntVector = asks.min(axis=0)
        """The least the gang's pods ask, per column: the room of "one more pod"."""
        self._cols = self.slot > 0

    def slots(self, free: IntVector) -> int:
        """How many pods of :attr:`slot` size ``free`` holds."""
        if not self._cols.any():
            return 1 << 30
        return int((np.maximum(free[self._cols], 0) // self.slot[self._cols]).min())

    def room(self, broken: set[str]) -> IntVector:
        """What every candidate of the jobs not ``broken`` frees (an upper bound of what
        sparing can add)."""
        out: IntVector = np.zeros(len(self.slot), dtype=np.int64)
        for tasks in self.by_row.values():
            for t in tasks:
                if t.job_id not in broken:
                    out = out + self.vec[t.uid]
        return out

    def for_one_more(
        self,
        row: int,
        free: IntVector,
        taken: dict[str, list[TaskInfo]],
        broken: set[str],
    ) -> list[TaskInfo]:
        """The fewest spares of node ``row`` (in order, each leaving its gang whole with
        what is ``taken``, and evicted, already) after which the node holds one more pod;
        empty when its spares cannot do it."""
        goal = self.slots(free) + 1
        room = free.copy()
        took: list[TaskInfo] = []
        extra: dict[str, list[TaskInfo]] = {}
        for t in self.by_row.get(row, ()):
            if t.job_id in broken or any(t is x for x in taken.get(t.job_id, ())):
                continue
            # ``taken`` is evicted in the session already: the job's counts show it.
            if not keeps_whole(self.jobs[t.job_id], [*extra.get(t.job_id, ()), t]):
                continue
            extra.setdefault(t.job_id, []).append(t)
            took.append(t)
            room = room + self.vec[t.uid]
            if self.slots(room) >= goal:
                return took
        return []


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
        ways = self._ways(session, scored)
        if ways is not None:
            return self._exact(session, stmt, pending, domain, rep, ways, need)
        whole = _whole_jobs(scored)
        spares = _Spares(session, scored, pending)
        wanted = need > 0
        mark = stmt.checkpoint()
        spared = self._spare(session, stmt, pending, domain, rep, spares, set())
        if spared is not None:
            return self._trim(session, stmt, pending, domain, rep, spared)
        if len(whole) <= EXACT_LIMIT:
            for size in range(1, len(whole) + 1):
                for combo in itertools.combinations(whole, size):
                    broken = {s.bundle.job.uid for s in combo}
                    local = spares.room(broken) + sum((s.local for s in combo), np.zeros_like(need))
                    if not (local[wanted] >= need[wanted]).all():
                        continue
                    for s in combo:
                        self._evict(stmt, s, rep)
                    spared = self._spare(session, stmt, pending, domain, rep, spares, broken)
                    if spared is not None:
                        chosen = [*spared, *combo]
                        return self._trim(session, stmt, pending, domain, rep, chosen)
                    stmt.rollback(mark)
            return None
        chosen = []
        broken = set()
        for s in whole:
            self._evict(stmt, s, rep)
            chosen.append(s)
            broken.add(s.bundle.job.uid)
            local = spares.room(broken) + sum((c.local for c in chosen), np.zeros_like(need))
            if not (local[wanted] >= need[wanted]).all():
                continue
            spared = self._spare(session, stmt, pending, domain, rep, spares, broken)
            if spared is not None:
                return self._trim(session, stmt, pending, domain, rep, [*spared, *chosen])
        stmt.rollback(mark)
        return None

    def _spare(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        spares: _Spares,
        broken: set[str],
    ) -> list[Scored] | None:
        """Evict spare members (each leaving its gang whole; none of a job in ``broken``)
        node by node until the gang fits: each round, on the node where the fewest
        evictions (then the lowest priorities) make room for one more of the gang's
        pods. The spares taken, each a Safe bundle of one task, in order; or None, with
        nothing of this call left evicted, when the gang still does not fit."""
        cp = stmt.checkpoint()
        taken: dict[str, list[TaskInfo]] = {}
        out: list[Scored] = []
        rows = np.flatnonzero(domain.rows)
        while not self._fits(session, stmt, pending, domain):
            free = session.table.free(spares.priority, "", slice(None), rows, releasing=True)
            best: tuple[tuple[int, int], list[TaskInfo]] | None = None
            for i, row in enumerate(rows.tolist()):
                took = spares.for_one_more(row, free[i], taken, broken)
                if took and (best is None or _spare_cost(took) < best[0]):
                    best = (_spare_cost(took), took)
            if best is None:
                stmt.rollback(cp)
                return None
            for t in best[1]:
                taken.setdefault(t.job_id, []).append(t)
                scored = Scored(
                    Bundle(session.jobs[t.job_id], Kind.SAFE, (t,)),
                    spares.vec[t.uid],
                    spares.vec[t.uid],
                )
                self._evict(stmt, scored, rep)
                out.append(scored)
        return out

    @staticmethod
    def _ways(session: Session, scored: list[Scored]) -> list[list[_Way]] | None:
        """Per job (in the order of ``scored``), every way to take victims from it: each
        subset of its candidates that leaves it whole, and, when its Whole bundle is a
        candidate, all of them (broken). None when there are too many ways to try all."""
        table = session.table
        by_job: dict[str, list[Scored]] = {}
        for s in scored:
            by_job.setdefault(s.bundle.job.uid, []).append(s)
        out: list[list[_Way]] = []
        total = 1
        zero: IntVector = np.zeros(len(table.columns), dtype=np.int64)
        for rank, group in enumerate(by_job.values()):
            job = group[0].bundle.job
            whole = next((s for s in group if s.bundle.kind is Kind.WHOLE), None)
            tasks = [t for s in group for t in s.bundle.tasks]
            if len(tasks) > EXACT_TASKS:
                return None
            vec = {t.uid: table.request(t.request) for t in tasks}

            def local(chosen: Sequence[TaskInfo], vec: dict[str, IntVector] = vec) -> IntVector:
                return sum((vec[t.uid] for t in chosen), zero.copy())

            ways = [
                _Way(False, subset, (), local(subset), rank)
                for k in range(len(tasks) + 1)
                for subset in itertools.combinations(tasks, k)
                if keeps_whole(job, subset)
            ]
            if whole is not None:
                everything = tuple(tasks)
                ways.append(_Way(True, everything, tuple(whole.extras), local(everything), rank))
            total *= len(ways)
            if total > EXACT_CHOICES:
                return None
            out.append(ways)
        return out

    def _exact(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        ways: list[list[_Way]],
        need: IntVector,
    ) -> list[Scored] | None:
        """Try every way to choose (fewest jobs broken, then fewest victims, then the
        jobs first in order); the first that makes room is evicted in ``stmt`` and
        returned as bundles. None (nothing left evicted) when none does."""
        wanted = need > 0

        def cost(combo: tuple[_Way, ...]) -> tuple[int, int, list[int]]:
            taken = [w for w in combo if w.tasks or w.extras]
            return (
                sum(w.broken for w in combo),
                sum(len(w.tasks) + len(w.extras) for w in combo),
                sorted(w.rank for w in taken),
            )

        for combo in sorted(itertools.product(*ways), key=cost):
            freed = sum((w.local for w in combo), np.zeros_like(need))
            if not (freed[wanted] >= need[wanted]).all():
                continue
            cp = stmt.checkpoint()
            picked = self._scored(session, combo)
            for s in picked:
                self._evict(stmt, s, rep)
            if self._fits(session, stmt, pending, domain):
                return picked
            stmt.rollback(cp)
        return None

    @staticmethod
    def _scored(session: Session, combo: tuple[_Way, ...]) -> list[Scored]:
        out: list[Scored] = []
        for w in combo:
            if not w.tasks:
                continue
            job = session.jobs[w.tasks[0].job_id]
            kind = Kind.WHOLE if w.broken else Kind.SAFE
            out.append(Scored(Bundle(job, kind, w.tasks), w.local, w.local, extras=list(w.extras)))
        return out

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
