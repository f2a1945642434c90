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
5. **Select.** Nothing is tried when the gang does not fit with every candidate gone
   (its queue's share refuses it, say: no eviction can help). When the ways to choose
   are few (at most :data:`EXACT_CHOICES`: per job, a subset of its candidates that
   leaves it whole, or all of it), every way is tried,
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.actions.victims.bundles import Bundle, Kind, bundles, keeps_whole
from scheduler.actions.victims.candidates import pdb_violations
from scheduler.actions.victims.fill import NodeFill, Slots
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
    def top(self) -> int:
        """The highest priority among the victims (the lowest possible without any)."""
        return max((t.priority for t, _ in self.victims), default=-(1 << 31))

    @property
    def cost(self) -> tuple[int, int, int]:
        """Fewest gangs broken, then fewest victims, then the lowest priorities."""
        return (
            len(self.broken),
            len(self.victims),
            sum(t.priority + (1 << 31) for t, _ in self.victims),
        )


def _job_top(job: JobInfo) -> int:
    """The highest priority of ``job``'s evictable pods: what breaking it costs."""
    return max(
        (t.priority for t in job.tasks.values() if t.status in EVICTABLE and t.sluice),
        default=-(1 << 31),
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


class GangSearch:
    """One per evicting action (its policy's). Synchronous; :meth:`clear` records its
    decisions in the caller's statement and leaves nothing else behind."""

    def __init__(self, policy: VictimPolicy, roi_threshold: float = 0.05) -> None:
        self.policy = policy
        self.roi_threshold = roi_threshold
        self._queue = ""
        """The queue of the gang being made room for (its evictions say it)."""
        self._vec: dict[str, IntVector] = {}
        """The request vectors of the candidates of the search under way."""

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
        vectors = np.array([table.request(t.request) for t in tasks])
        covers = np.minimum(vectors, need)[:, wanted].sum(axis=1) if wanted.any() else None
        sizes = vectors.sum(axis=1)
        keys = {
            t.uid: (
                -float(covers[i]) if covers is not None else 0.0,
                t.priority,
                int(sizes[i]),
                -t.start_time,
            )
            for i, t in enumerate(tasks)
        }
        vec = {t.uid: vectors[i] for i, t in enumerate(tasks)}
        self._vec = vec
        # Ties go to the pod last in name order, as the pod-by-pod search spares the first.
        tasks.sort(key=lambda t: t.key, reverse=True)
        found = bundles(session.jobs, tasks, lambda t: keys[t.uid])
        scored = self._score(session, found, need, domain, vec)
        ordered = self.policy.order_bundles(session, scored, self.roi_threshold)
        flat = [t for s in ordered for t in s.bundle.tasks]
        allowed = {t.uid for t in self.policy.allowed(session, rep, flat)}
        if len(allowed) == len(flat):
            return ordered
        kept: list[Bundle] = []
        for s in ordered:
            inside = tuple(t for t in s.bundle.tasks if t.uid in allowed)
            if s.bundle.kind is Kind.WHOLE and len(inside) < len(s.bundle.tasks):
                continue  # a Whole bundle partly refused cannot be taken
            if inside:
                kept.append(Bundle(s.bundle.job, s.bundle.kind, inside))
        rescored = self._score(session, kept, need, domain, vec)
        return self.policy.order_bundles(session, rescored, self.roi_threshold)

    @staticmethod
    def _score(
        session: Session,
        found: Sequence[Bundle],
        need: IntVector,
        domain: NodeSet,
        vec: dict[str, IntVector],
    ) -> list[Scored]:
        """Each bundle with what it frees in the domain, what it takes in the cluster (a
        Whole bundle: its gang's every evictable member) and its ROI (``vec``: the
        candidates' request vectors)."""
        table = session.table
        cols = len(table.columns)
        local = np.zeros((len(found), cols), dtype=np.int64)
        global_ = np.zeros((len(found), cols), dtype=np.int64)
        extras: list[list[TaskInfo]] = [[] for _ in found]
        for i, b in enumerate(found):
            for t in b.tasks:
                local[i] += vec[t.uid]
            if b.kind is Kind.WHOLE and b.job.has_pod_group:
                inside = {t.uid for t in b.tasks}
                for t in b.job.tasks.values():
                    if t.uid not in inside and t.status in EVICTABLE and t.sluice:
                        global_[i] += vec[t.uid] if t.uid in vec else table.request(t.request)
                        row = table.row.get(t.node_name)
                        if row is None or not domain.rows[row]:
                            extras[i].append(t)
        global_ += local
        wanted = need > 0
        if wanted.any() and len(found):
            needed = need[wanted].astype(np.float64)
            gain = (np.minimum(local[:, wanted], need[wanted]) / needed).sum(axis=1)
            cost = (global_[:, wanted] / needed).sum(axis=1)
            roi = np.divide(gain, cost, out=np.zeros_like(gain), where=cost > 0)
        else:
            roi = np.zeros(len(found))
        return [
            Scored(b, local[i], global_[i], float(roi[i]), extras[i]) for i, b in enumerate(found)
        ]

    # Steps 5 and 6 -------------------------------------------------------------------

    def plan_key(self, plan: GangPlan) -> tuple[int, ...]:
        """How two plans (in different domains) compare, smaller better: for a policy that
        puts priority first, the highest victim priority, then :attr:`GangPlan.cost`."""
        if self.policy.priority_first:
            return (plan.top, *plan.cost)
        return plan.cost

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
        """The bundles to evict (evicted in ``stmt``), or None (nothing left evicted).

        A choice that breaks no PodDisruptionBudget is looked for first (kube-scheduler's
        first criterion), over the candidates no exhausted budget protects. For a policy
        that puts priority first (preempt), the victims' highest priority is
        the first criterion, as kube-scheduler's choice of node takes the lowest
        highest-victim priority before the fewest victims: the search runs with the
        candidates up to each priority in turn, lowest first, and the first that makes
        room wins; within it, fewest gangs broken, then fewest victims, then ROI. A
        gang's Whole bundle counts at the highest priority of all its evictable members
        (breaking it takes them all)."""
        selected = self._selected_by_plugin(session, job, pending, domain, scored)
        if selected is not None:
            for s in selected:
                self._evict(stmt, s, rep)
            return selected if self._fits(session, stmt, pending, domain) else None
        budgets = session.snapshot.budgets
        # As kube-scheduler ranks candidates, fewest PodDisruptionBudget violations come
        # first: a choice that breaks none is looked for before any other.
        for spare_budgets in (True, False) if budgets else (False,):
            pool = self._within_budgets(session, scored, need, domain) if spare_budgets else scored
            mark = stmt.checkpoint()
            chosen = self._choose_by_priority(session, stmt, pending, domain, rep, pool, need)
            if chosen is None:
                continue
            victims = [t for s in chosen for t in (*s.bundle.tasks, *s.extras)]
            if spare_budgets and any(pdb_violations(victims, budgets)):
                stmt.rollback(mark)
                continue
            return chosen
        return None

    def _within_budgets(
        self, session: Session, scored: list[Scored], need: IntVector, domain: NodeSet
    ) -> list[Scored]:
        """``scored`` without the tasks a PodDisruptionBudget allows no disruption of (a
        Whole bundle with one of them is left out: its gang would go with it)."""
        exhausted = [b for b in session.snapshot.budgets if b.disruptions_allowed <= 0]

        def free(t: TaskInfo) -> bool:
            return not any(
                b.namespace == t.namespace and b.selector.matches(t.labels or {}) for b in exhausted
            )

        def whole_free(s: Scored) -> bool:
            return all(free(t) for t in (*s.bundle.tasks, *s.extras))

        return self._filtered(session, scored, free, whole_free, need, domain)

    def _filtered(  # noqa: PLR0917
        self,
        session: Session,
        scored: list[Scored],
        task_ok: Callable[[TaskInfo], bool],
        whole_ok: Callable[[Scored], bool],
        need: IntVector,
        domain: NodeSet,
    ) -> list[Scored]:
        """``scored`` with the tasks ``task_ok`` refuses left out: a Safe bundle shrinks,
        a Whole bundle stays only if ``whole_ok`` (its gang goes whole or not at all).
        Rescored and ordered again when something was cut; else ``scored`` itself."""
        kept: list[Bundle] = []
        cut = False
        for s in scored:
            if s.bundle.kind is Kind.WHOLE:
                if whole_ok(s):
                    kept.append(s.bundle)
                else:
                    cut = True
                continue
            tasks = tuple(t for t in s.bundle.tasks if task_ok(t))
            cut |= len(tasks) < len(s.bundle.tasks)
            if tasks:
                kept.append(Bundle(s.bundle.job, Kind.SAFE, tasks))
        if not cut:
            return scored
        rescored = self._score(session, kept, need, domain, self._vec)
        return self.policy.order_bundles(session, rescored, self.roi_threshold)

    def _choose_by_priority(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        scored: list[Scored],
        need: IntVector,
    ) -> list[Scored] | None:
        """:meth:`_choose_among` with the candidates up to each priority in turn, lowest
        first, for a policy that puts priority first; else over all of them."""
        if not scored:
            return None
        if not self.policy.priority_first:
            return self._choose_among(session, stmt, pending, domain, rep, scored, need)
        wanted = need > 0
        tops = {s.bundle.job.uid: _job_top(s.bundle.job) for s in scored}
        levels = sorted({t.priority for s in scored for t in (*s.bundle.tasks, *s.extras)})
        for limit in levels:
            within = self._capped(session, scored, limit, tops, need, domain)
            room = sum((s.local for s in within), np.zeros_like(need))
            if not within or not (room[wanted] >= need[wanted]).all():
                continue
            chosen = self._choose_among(session, stmt, pending, domain, rep, within, need)
            if chosen is not None:
                return chosen
        return None

    def _capped(  # noqa: PLR0917
        self,
        session: Session,
        scored: list[Scored],
        limit: int,
        tops: dict[str, int],
        need: IntVector,
        domain: NodeSet,
    ) -> list[Scored]:
        """``scored`` with no victim above priority ``limit``: a Safe bundle keeps its
        tasks up to it; a Whole bundle stays only if its gang's every evictable member is
        up to it (``tops``: each job's highest)."""
        return self._filtered(
            session,
            scored,
            lambda t: t.priority <= limit,
            lambda s: tops[s.bundle.job.uid] <= limit,
            need,
            domain,
        )

    def _choose_among(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        scored: list[Scored],
        need: IntVector,
    ) -> list[Scored] | None:
        """Step 5 and 6 over ``scored``: the bundles evicted (in ``stmt``), or None."""
        if not self._fits_without_all(session, stmt, pending, domain, rep, scored):
            return None
        ways = self._ways(session, scored)
        if ways is not None:
            return self._exact(session, stmt, pending, domain, rep, ways, need)
        whole = _whole_jobs(scored)
        slots = Slots(session, pending)
        fill = NodeFill(session, scored, slots, {s.bundle.job.uid: s for s in whole}, self._vec)
        mark = stmt.checkpoint()
        if len(whole) > EXACT_LIMIT:
            chosen = self._fill(session, stmt, pending, domain, rep, fill, set(), allow_break=True)
            if chosen is None:
                return None
            return self._trim(session, stmt, pending, domain, rep, chosen)
        spared = self._fill(session, stmt, pending, domain, rep, fill, set(), allow_break=False)
        if spared is not None:
            return self._trim(session, stmt, pending, domain, rep, spared)
        wanted = need > 0
        for size in range(1, len(whole) + 1):
            for combo in itertools.combinations(whole, size):
                broken = {s.bundle.job.uid for s in combo}
                local = fill.room(broken) + sum((s.local for s in combo), np.zeros_like(need))
                if not (local[wanted] >= need[wanted]).all():
                    continue
                for s in combo:
                    self._evict(stmt, s, rep)
                fill.reset()
                spared = self._fill(
                    session, stmt, pending, domain, rep, fill, broken, allow_break=False
                )
                if spared is not None:
                    return self._trim(session, stmt, pending, domain, rep, [*spared, *combo])
                stmt.rollback(mark)
        return None

    def _fits_without_all(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        scored: Sequence[Scored],
    ) -> bool:
        """Would the gang fit in ``domain`` with every candidate of ``scored`` gone? An
        eviction never makes a gang fit that does not fit then (removing pods only frees
        room on nodes and in queues), so when it does not (its queue has no room for it
        within its share, say), no choice among them is worth a dry run: there can be
        thousands. One dry run, rolled back."""
        mark = stmt.checkpoint()
        try:
            for s in scored:
                self._evict(stmt, s, rep)
            return self._fits(session, stmt, pending, domain)
        finally:
            stmt.rollback(mark)

    def _fill(  # noqa: PLR0917
        self,
        session: Session,
        stmt: Statement,
        pending: Sequence[TaskInfo],
        domain: NodeSet,
        rep: TaskInfo,
        fill: NodeFill,
        broken: set[str],
        *,
        allow_break: bool,
    ) -> list[Scored] | None:
        """Evict, round after round, the cheapest way any node of ``domain`` has to room
        for one more of the gang's pods (:class:`~.fill.NodeFill`: spares first, then,
        if ``allow_break``, gangs broken whole; none of the jobs ``broken`` already),
        until the gang fits. The victims, as bundles in the order taken (a Safe bundle
        per spare, a Whole one per gang broken, its spares taken before included); or
        None, with nothing of this call left evicted, when it never fits."""
        cp = stmt.checkpoint()
        rows = np.flatnonzero(domain.rows)
        broken = set(broken)
        evicted: set[str] = set()
        spares: list[TaskInfo] = []
        breaks: list[str] = []
        while True:
            free = session.table.free(fill.slots.priority, "", slice(None), rows, releasing=True)
            if fill.slots.total(free) >= len(pending) and self._fits(
                session, stmt, pending, domain
            ):
                break
            way = fill.best(rows, free, broken, evicted, allow_break=allow_break)
            if way is None:
                stmt.rollback(cp)
                fill.reset()
                return None
            for t in way.spares:
                kind = Kind.SAFE.value if session.jobs[t.job_id].has_pod_group else ""
                stmt.evict(t, self.policy.reason, preemptor=rep, queue=self._queue, bundle=kind)
                evicted.add(t.uid)
                spares.append(t)
            for job in way.breaks:
                whole = fill.wholes[job]
                kind = Kind.WHOLE.value if whole.bundle.job.has_pod_group else ""
                for t in (*whole.bundle.tasks, *whole.extras):
                    if t.uid not in evicted:
                        stmt.evict(
                            t, self.policy.reason, preemptor=rep, queue=self._queue, bundle=kind
                        )
                        evicted.add(t.uid)
                broken.add(job)
                breaks.append(job)
            fill.touched(way)
        out = [
            Scored(
                Bundle(session.jobs[t.job_id], Kind.SAFE, (t,)), fill.vec[t.uid], fill.vec[t.uid]
            )
            for t in spares
            if t.job_id not in broken
        ]
        out.extend(fill.wholes[job] for job in breaks)
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
        of allocate, rolled back, after a cheap necessary check (room for that many pods
        of the least size they ask)."""
        slots = Slots(session, pending)
        rows = np.flatnonzero(domain.rows)
        free = session.table.free(slots.priority, "", slice(None), rows, releasing=True)
        if slots.total(free) < len(pending):
            return False
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
