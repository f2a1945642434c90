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

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.actions.victims.bundles import Bundle, Kind, bundles, keeps_whole
from scheduler.actions.victims.candidates import breaking, pdb_violations
from scheduler.actions.victims.fill import NodeFill, Slots
from scheduler.actions.victims.policy import VictimPolicy, within_share
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
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


@dataclass(slots=True)
class _Search:
    """One search: a gang's ``pending`` tasks to make room for in ``domain``, its
    decisions recorded in ``stmt``. Made by :meth:`GangSearch.clear` for each search and
    dropped after it: nothing of a search outlives it."""

    session: Session
    stmt: Statement
    job: JobInfo
    pending: Sequence[TaskInfo]
    domain: NodeSet
    rep: TaskInfo
    """The pending task of lowest priority: who the plugins are asked about."""
    need: IntVector
    """What the victims must free (step 1)."""
    vec: dict[str, IntVector] = field(default_factory=dict)
    """The request vectors of the candidates (step 2)."""


class GangSearch:
    """One per evicting action (its policy's, with its ROI threshold); holds no state of
    a search. Synchronous; :meth:`clear` records its decisions in the caller's statement
    and leaves nothing else behind."""

    def __init__(self, policy: VictimPolicy, roi_threshold: float = 0.05) -> None:
        self.policy = policy
        self.roi_threshold = roi_threshold

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
        rep = min(pending, key=lambda t: t.priority)
        run = _Search(session, stmt, job, pending, domain, rep, _need(session, pending, domain))
        if self._fits(run, beyond_share=False):
            self._place(run, beyond_share=False)
            return GangPlan((), ())
        scored = self._candidates(run)
        if not scored:
            return None
        chosen = self._choose(run, scored)
        if not chosen:
            # None, or no victim needed after all: then the gang rides beyond its share
            # on room nobody's eviction for it frees (see :meth:`_place`), which it may not
            stmt.rollback(mark)
            return None
        placement = self._placement(run)
        stmt.rollback(mark)
        if placement is None:
            return None
        # Recorded again in their final form: each victim evicted for the task nominated to
        # its node (collateral members of a broken gang, elsewhere, for the first task),
        # then each task nominated where the dry run put it.
        by_node = {node: task for task, node in placement}
        victims: list[tuple[TaskInfo, Kind]] = []
        taken = [t for sc in chosen for t in (*sc.bundle.tasks, *sc.extras)]
        breaks = breaking(taken, session.snapshot.budgets)
        for sc in chosen:
            kind = sc.bundle.kind if sc.bundle.job.has_pod_group else Kind.POD
            for t in (*sc.bundle.tasks, *sc.extras):
                preemptor = by_node.get(t.node_name, placement[0][0])
                stmt.evict(
                    t,
                    self.policy.reason,
                    preemptor=preemptor,
                    queue=job.queue,
                    bundle=kind,
                    breaks_budget=breaks[t.uid],
                )
                victims.append((t, sc.bundle.kind))
        for task, node in placement:
            stmt.pipeline(task, node)
        broken = tuple(sc.bundle.job.uid for sc in chosen if sc.bundle.kind is Kind.WHOLE)
        return GangPlan(tuple(victims), broken)

    # Steps 2 to 4 ----------------------------------------------------------------------

    def _candidates(self, run: _Search) -> list[Scored]:
        """The bundles of the possible victims in the domain, ordered, after the plugins'
        one call (steps 2 to 4)."""
        session, need = run.session, run.need
        table = session.table
        tasks: list[TaskInfo] = []
        for row in np.flatnonzero(run.domain.rows).tolist():
            tasks.extend(self.policy.candidates(session, run.rep, table.nodes[row]))
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
        run.vec = {t.uid: vectors[i] for i, t in enumerate(tasks)}
        # Ties go to the pod last in name order, as the pod-by-pod search spares the first.
        tasks.sort(key=lambda t: t.key, reverse=True)
        found = bundles(session.jobs, tasks, lambda t: keys[t.uid])
        ordered = self._ordered(run, found)
        # A Whole bundle's members elsewhere go with it: the plugins weigh them too.
        flat = [t for sc in ordered for t in (*sc.bundle.tasks, *sc.extras)]
        gang = [run.rep, *(t for t in run.pending if t is not run.rep)]
        allowed = {t.uid for t in self.policy.allowed(session, gang, flat)}
        if len(allowed) == len(flat):
            return ordered
        kept: list[Bundle] = []
        for sc in ordered:
            inside = tuple(t for t in sc.bundle.tasks if t.uid in allowed)
            whole = len(inside) == len(sc.bundle.tasks)
            if sc.bundle.kind is Kind.WHOLE and not (
                whole and all(t.uid in allowed for t in sc.extras)
            ):
                continue  # a Whole bundle partly refused cannot be taken
            if inside:
                kept.append(Bundle(sc.bundle.job, sc.bundle.kind, inside))
        return self._ordered(run, kept)

    def _ordered(self, run: _Search, found: Sequence[Bundle]) -> list[Scored]:
        """``found`` scored and in the policy's order (step 3)."""
        scored = _score(run.session, found, run.need, run.domain, run.vec)
        return self.policy.order_bundles(run.session, scored, self.roi_threshold)

    # Steps 5 and 6 -------------------------------------------------------------------

    def plan_key(self, plan: GangPlan) -> tuple[int, ...]:
        """How two plans (in different domains) compare, smaller better: for a policy that
        puts priority first, the highest victim priority, then :attr:`GangPlan.cost`."""
        if self.policy.priority_first:
            return (plan.top, *plan.cost)
        return plan.cost

    def _choose(self, run: _Search, scored: list[Scored]) -> list[Scored] | None:
        """The bundles to evict (evicted in ``run.stmt``), or None (nothing left evicted).

        A choice that breaks no PodDisruptionBudget is looked for first (kube-scheduler's
        first criterion), over the candidates no exhausted budget protects. For a policy
        that puts priority first (preempt), the victims' highest priority is
        the first criterion, as kube-scheduler's choice of node takes the lowest
        highest-victim priority before the fewest victims: the search runs with the
        candidates up to each priority in turn, lowest first, and the first that makes
        room wins; within it, fewest gangs broken, then fewest victims, then ROI. A
        gang's Whole bundle counts at the highest priority of all its evictable members
        (breaking it takes them all)."""
        selected = self._selected_by_plugin(run, scored)
        if selected is not None:
            for sc in selected:
                self._evict(run, sc)
            return selected if self._fits(run) else None
        budgets = run.session.snapshot.budgets
        # As kube-scheduler ranks candidates, fewest PodDisruptionBudget violations come
        # first: a choice that breaks none is looked for before any other.
        for spare_budgets in (True, False) if budgets else (False,):
            pool = self._within_budgets(run, scored) if spare_budgets else scored
            mark = run.stmt.checkpoint()
            chosen = self._choose_by_priority(run, pool)
            if chosen is None:
                continue
            victims = [t for sc in chosen for t in (*sc.bundle.tasks, *sc.extras)]
            if spare_budgets and any(pdb_violations(victims, budgets)):
                run.stmt.rollback(mark)
                continue
            return chosen
        return None

    def _within_budgets(self, run: _Search, scored: list[Scored]) -> list[Scored]:
        """``scored`` without the tasks a PodDisruptionBudget allows no disruption of (a
        Whole bundle with one of them is left out: its gang would go with it)."""
        exhausted = [b for b in run.session.snapshot.budgets if b.disruptions_allowed <= 0]

        def free(t: TaskInfo) -> bool:
            return not any(
                b.namespace == t.namespace and b.selector.matches(t.labels or {}) for b in exhausted
            )

        def whole_free(sc: Scored) -> bool:
            return all(free(t) for t in (*sc.bundle.tasks, *sc.extras))

        return self._filtered(run, scored, free, whole_free)

    def _filtered(
        self,
        run: _Search,
        scored: list[Scored],
        task_ok: Callable[[TaskInfo], bool],
        whole_ok: Callable[[Scored], bool],
    ) -> list[Scored]:
        """``scored`` with the tasks ``task_ok`` refuses left out: a Safe bundle shrinks,
        a Whole bundle stays only if ``whole_ok`` (its gang goes whole or not at all).
        Rescored and ordered again when something was cut; else ``scored`` itself."""
        kept: list[Bundle] = []
        cut = False
        for sc in scored:
            if sc.bundle.kind is Kind.WHOLE:
                if whole_ok(sc):
                    kept.append(sc.bundle)
                else:
                    cut = True
                continue
            tasks = tuple(t for t in sc.bundle.tasks if task_ok(t))
            cut |= len(tasks) < len(sc.bundle.tasks)
            if tasks:
                kept.append(Bundle(sc.bundle.job, Kind.SAFE, tasks))
        return self._ordered(run, kept) if cut else scored

    def _choose_by_priority(self, run: _Search, scored: list[Scored]) -> list[Scored] | None:
        """:meth:`_choose_among` with the candidates up to each priority in turn, lowest
        first, for a policy that puts priority first; else over all of them."""
        if not scored:
            return None
        if not self.policy.priority_first:
            return self._choose_among(run, scored)
        need = run.need
        wanted = need > 0
        tops = {sc.bundle.job.uid: _job_top(sc.bundle.job) for sc in scored}
        levels = sorted({t.priority for sc in scored for t in (*sc.bundle.tasks, *sc.extras)})
        for limit in levels:
            within = self._capped(run, scored, limit, tops)
            room = sum((sc.local for sc in within), np.zeros_like(need))
            if not within or not (room[wanted] >= need[wanted]).all():
                continue
            chosen = self._choose_among(run, within)
            if chosen is not None:
                return chosen
        return None

    def _capped(
        self, run: _Search, scored: list[Scored], limit: int, tops: dict[str, int]
    ) -> list[Scored]:
        """``scored`` with no victim above priority ``limit``: a Safe bundle keeps its
        tasks up to it; a Whole bundle stays only if its gang's every evictable member is
        up to it (``tops``: each job's highest)."""

        def task_ok(t: TaskInfo) -> bool:
            return t.priority <= limit

        def whole_ok(sc: Scored) -> bool:
            return tops[sc.bundle.job.uid] <= limit

        return self._filtered(run, scored, task_ok, whole_ok)

    def _choose_among(self, run: _Search, scored: list[Scored]) -> list[Scored] | None:
        """Step 5 and 6 over ``scored``: the bundles evicted (in ``run.stmt``), or None.

        Before any search that may try many sets (every way, every set of gangs broken)
        and when a greedy fill finds nodes with room enough but the gang still does not
        fit, it asks once whether the gang would fit with every candidate gone
        (``hopeless``); when it would not, nothing more is tried. A fill that makes
        room at its first try never pays for that question (one dry run over every
        candidate of the domain: 2,500 evictions rolled back, per gang of the
        gang-preemption benchmark)."""
        session, stmt, need = run.session, run.stmt, run.need
        hopeless = functools.cache(lambda: not self._fits_without_all(run, scored))
        ways = _ways(session, scored)
        if ways is not None:
            return None if hopeless() else self._exact(run, ways)
        whole = _whole_jobs(scored)
        slots = Slots(session, run.pending)
        wholes = {sc.bundle.job.uid: sc for sc in whole}
        fill = NodeFill(session, scored, slots, wholes, run.vec)
        mark = stmt.checkpoint()
        if len(whole) > EXACT_LIMIT:
            chosen = self._fill(run, fill, set(), allow_break=True, hopeless=hopeless)
            return None if chosen is None else self._trim(run, chosen)
        spared = self._fill(run, fill, set(), allow_break=False, hopeless=hopeless)
        if spared is not None:
            return self._trim(run, spared)
        if hopeless():
            return None
        wanted = need > 0
        for size in range(1, len(whole) + 1):
            for combo in itertools.combinations(whole, size):
                broken = {sc.bundle.job.uid for sc in combo}
                local = fill.room(broken) + sum((sc.local for sc in combo), np.zeros_like(need))
                if not (local[wanted] >= need[wanted]).all():
                    continue
                for sc in combo:
                    self._evict(run, sc)
                fill.reset()
                spared = self._fill(run, fill, broken, allow_break=False, hopeless=hopeless)
                if spared is not None:
                    return self._trim(run, [*spared, *combo])
                stmt.rollback(mark)
        return None

    def _fits_without_all(self, run: _Search, scored: Sequence[Scored]) -> bool:
        """Would the gang fit in the domain with every candidate of ``scored`` gone? An
        eviction never makes a gang fit that does not fit then (removing pods only frees
        room on nodes and in queues), so when it does not (its queue has no room for it
        within its share, say), no choice among them is worth a dry run: there can be
        thousands. One dry run, rolled back."""
        mark = run.stmt.checkpoint()
        try:
            for sc in scored:
                self._evict(run, sc)
            return self._fits(run)
        finally:
            run.stmt.rollback(mark)

    def _fill(
        self,
        run: _Search,
        fill: NodeFill,
        broken: set[str],
        *,
        allow_break: bool,
        hopeless: Callable[[], bool],
    ) -> list[Scored] | None:
        """Evict, round after round, the cheapest way any node of the domain has to room
        for one more of the gang's pods (:class:`~.fill.NodeFill`: spares first, then,
        if ``allow_break``, gangs broken whole; none of the jobs ``broken`` already),
        until the gang fits. The victims, as bundles in the order taken (a Safe bundle
        per spare, a Whole one per gang broken, its spares taken before included); or
        None, with nothing of this call left evicted, when it never fits."""
        session, stmt = run.session, run.stmt
        cp = stmt.checkpoint()
        rows = np.flatnonzero(run.domain.rows)
        broken = set(broken)
        evicted: set[str] = set()
        spares: list[TaskInfo] = []
        breaks: list[str] = []
        while True:
            free = session.table.free(
                fill.slots.priority, "", slice(None), rows, releasing=True, job=run.job.uid
            )
            if fill.slots.total(free) >= len(run.pending):
                if self._fits(run):
                    break
                if hopeless():  # room on the nodes, yet no fit: something else refuses
                    stmt.rollback(cp)
                    fill.reset()
                    return None
            way = fill.best(rows, free, broken, evicted, allow_break=allow_break)
            if way is None:
                stmt.rollback(cp)
                fill.reset()
                return None
            for t in way.spares:
                kind = Kind.SAFE if session.jobs[t.job_id].has_pod_group else Kind.POD
                self._evict_task(run, t, kind)
                evicted.add(t.uid)
                spares.append(t)
            for gang in way.breaks:
                whole = fill.wholes[gang]
                kind = Kind.WHOLE if whole.bundle.job.has_pod_group else Kind.POD
                for t in (*whole.bundle.tasks, *whole.extras):
                    if t.uid not in evicted:
                        self._evict_task(run, t, kind)
                        evicted.add(t.uid)
                broken.add(gang)
                breaks.append(gang)
            fill.touched(way)
        out = [
            Scored(
                Bundle(session.jobs[t.job_id], Kind.SAFE, (t,)), fill.vec[t.uid], fill.vec[t.uid]
            )
            for t in spares
            if t.job_id not in broken
        ]
        out.extend(fill.wholes[gang] for gang in breaks)
        return out

    def _exact(self, run: _Search, ways: list[list[_Way]]) -> list[Scored] | None:
        """Try every way to choose (fewest jobs broken, then fewest victims, then the
        jobs first in order); the first that makes room is evicted in ``run.stmt`` and
        returned as bundles. None (nothing left evicted) when none does."""
        need = run.need
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
            cp = run.stmt.checkpoint()
            picked = _scored(run.session, combo)
            for sc in picked:
                self._evict(run, sc)
            if self._fits(run):
                return picked
            run.stmt.rollback(cp)
        return None

    def _trim(self, run: _Search, chosen: list[Scored]) -> list[Scored]:
        """Put victims back, the last chosen first (a Whole bundle as a unit, a Safe one
        task by task), while the gang still fits without them (Volcano evicts too many
        here; this does not)."""
        stmt = run.stmt
        kept: list[Scored] = []
        for sc in reversed(chosen):
            if sc.bundle.kind is Kind.WHOLE:
                for t in (*sc.bundle.tasks, *sc.extras):
                    stmt.undo(t)
                if self._fits(run):
                    continue
                self._evict(run, sc)
                kept.append(sc)
                continue
            left: list[TaskInfo] = []
            for t in reversed(sc.bundle.tasks):
                stmt.undo(t)
                if not self._fits(run):
                    self._evict_task(run, t, Kind.SAFE if sc.bundle.job.has_pod_group else Kind.POD)
                    left.append(t)
            if left:
                left.reverse()
                bundle = Bundle(sc.bundle.job, Kind.SAFE, tuple(left))
                kept.append(Scored(bundle, sc.local, sc.global_, sc.roi))
        kept.reverse()
        return kept

    def _selected_by_plugin(self, run: _Search, scored: list[Scored]) -> list[Scored] | None:
        """The bundles of the jobs a ``GANG_VICTIM_SELECTOR`` plugin chose, or None when no
        plugin answers."""
        session = run.session
        if not session.hooks[GANG_VICTIM_SELECTOR]:
            return None
        offered = [(sc.bundle.job, sc.bundle.kind, sc.bundle.tasks) for sc in scored]
        answer = session.ask(GANG_VICTIM_SELECTOR, run.job, run.pending, run.domain, offered)
        if answer is None:
            return None
        jobs = set(answer)
        return [sc for sc in scored if sc.bundle.job.uid in jobs]

    def _evict(self, run: _Search, sc: Scored) -> None:
        """Evict ``sc``'s tasks in ``run.stmt``, those not evicted already (a fill may
        have taken some of them before it asks :meth:`_fits_without_all`)."""
        kind = sc.bundle.kind if sc.bundle.job.has_pod_group else Kind.POD
        for t in (*sc.bundle.tasks, *sc.extras):
            if t.status is not TaskStatus.RELEASING:
                self._evict_task(run, t, kind)

    def _evict_task(self, run: _Search, task: TaskInfo, kind: Kind) -> None:
        run.stmt.evict(
            task, self.policy.reason, preemptor=run.rep, queue=run.job.queue, bundle=kind
        )

    # The dry run ---------------------------------------------------------------------

    def _placement(self, run: _Search) -> list[tuple[TaskInfo, str]] | None:
        """Where the dry run puts each pending task (in task order), or None; rolled back."""
        cp = run.stmt.checkpoint()
        try:
            if not self._place(run):
                return None
            ordered = run.job.minimums_first(run.session.order_tasks(list(run.pending)))
            return [(t, t.node_name) for t in ordered]
        finally:
            run.stmt.rollback(cp)

    def _fits(self, run: _Search, *, beyond_share: bool = True) -> bool:
        """Would every pending task be placed in the domain now (victims gone)? A dry run
        of allocate, rolled back, after a cheap necessary check (room for that many pods
        of the least size they ask). ``beyond_share``: see :meth:`_place`."""
        slots = Slots(run.session, run.pending)
        rows = np.flatnonzero(run.domain.rows)
        free = run.session.table.free(
            slots.priority, "", slice(None), rows, releasing=True, job=run.job.uid
        )
        if slots.total(free) < len(run.pending):
            return False
        cp = run.stmt.checkpoint()
        try:
            return self._place(run, beyond_share=beyond_share)
        finally:
            run.stmt.rollback(cp)

    def _place(self, run: _Search, *, beyond_share: bool = True) -> bool:
        """Nominate every pending task to a node of the domain (releasing room counted),
        as the policy lets its queue take it (``queue_allows``), in ``run.stmt``: True
        when all were; else what was nominated stays for the caller to roll back.

        The tasks go in task order, each to its best-scored node; when that leaves one
        without a node, once more largest first (by its largest share of the domain's
        room in any resource): the scores spread the first tasks over the emptiest nodes,
        which may be the only ones a larger task behind them fits on.

        Without ``beyond_share`` every task must fit within its queue's share, whatever
        the policy allows: a gang placed with no victims of its own rides on room others
        release, as a lone pod does (``VictimSearch.make_room``). Beyond its share it would
        take the surplus that a reclaim's whole-gang victims leave (room their queue, now
        below its share, needs back) unjudged by the reclaim budget, and that queue would
        take back from it."""
        session = run.session
        ordered = run.job.minimums_first(session.order_tasks(list(run.pending)))
        cp = run.stmt.checkpoint()
        if self._place_in_order(run, ordered, beyond_share):
            return True
        largest = sorted(ordered, key=lambda t: _share(session, t, run.domain), reverse=True)
        if [t.uid for t in largest] == [t.uid for t in ordered]:
            return False
        run.stmt.rollback(cp)
        return self._place_in_order(run, largest, beyond_share)

    def _place_in_order(self, run: _Search, tasks: Sequence[TaskInfo], beyond_share: bool) -> bool:
        session = run.session
        for task in tasks:
            allowed = (
                self.policy.queue_allows(session, task)
                if beyond_share
                else within_share(session, task)
            )
            if not allowed:
                return False
            fit = session.fit(task, releasing=True).restricted(run.domain.rows)
            node = session.select_node(task, fit) if fit.any else None
            if node is None:
                return False
            run.stmt.pipeline(task, node.name)
        return True


# Free functions of one search ------------------------------------------------------------


def _share(session: Session, task: TaskInfo, domain: NodeSet) -> float:
    """``task``'s largest share of ``domain``'s allocatable room in any resource it asks."""
    table = session.table
    total = table.allocatable[domain.rows].sum(axis=0)
    ask = table.request(task.request)
    shares = np.divide(ask, total, out=np.zeros(len(ask), dtype=np.float64), where=total > 0)
    return float(shares.max()) if len(shares) else 0.0


def _need(session: Session, pending: Sequence[TaskInfo], domain: NodeSet) -> IntVector:
    """What the gang's ``pending`` tasks ask less what ``domain`` has free (step 1)."""
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
            job=pending[0].job_id,
        )
        .clip(min=0)
        .sum(axis=0)
    )
    out: IntVector = np.maximum(ask - free, 0)
    return out


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
    return [Scored(b, local[i], global_[i], float(roi[i]), extras[i]) for i, b in enumerate(found)]


def _ways(session: Session, scored: list[Scored]) -> list[list[_Way]] | None:
    """Per job (in the order of ``scored``), every way to take victims from it: each
    subset of its candidates that leaves it whole, and, when its Whole bundle is a
    candidate, all of them (broken). None when there are too many ways to try all."""
    table = session.table
    by_job: dict[str, list[Scored]] = {}
    for sc in scored:
        by_job.setdefault(sc.bundle.job.uid, []).append(sc)
    out: list[list[_Way]] = []
    total = 1
    zero: IntVector = np.zeros(len(table.columns), dtype=np.int64)
    for rank, group in enumerate(by_job.values()):
        job = group[0].bundle.job
        whole = next((sc for sc in group if sc.bundle.kind is Kind.WHOLE), None)
        tasks = [t for sc in group for t in sc.bundle.tasks]
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


def _scored(session: Session, combo: tuple[_Way, ...]) -> list[Scored]:
    """The bundles of one way to choose (:func:`_ways`)."""
    out: list[Scored] = []
    for w in combo:
        if not w.tasks:
            continue
        job = session.jobs[w.tasks[0].job_id]
        kind = Kind.WHOLE if w.broken else Kind.SAFE
        out.append(Scored(Bundle(job, kind, w.tasks), w.local, w.local, extras=list(w.extras)))
    return out
