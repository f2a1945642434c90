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
   are few (at most :data:`~.bundle_scores.EXACT_CHOICES`: per job, a subset of its candidates that
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
from dataclasses import dataclass

import numpy as np

from scheduler.actions.victims.bundle_scores import (
    Scored,
    Way,
    exact_ways,
    gang_need,
    job_top,
    score_bundles,
    way_bundles,
    whole_jobs,
)
from scheduler.actions.victims.bundles import Bundle, Kind, bundles
from scheduler.actions.victims.candidates import breaking, pdb_violations
from scheduler.actions.victims.fill import NodeFill, Slots
from scheduler.actions.victims.gang_dry_run import SearchRun, dry_placement, fits, place
from scheduler.actions.victims.policy import VictimPolicy
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.extension_points import GANG_VICTIM_SELECTOR
from scheduler.framework.node_sets import NodeSet
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement

EXACT_LIMIT = 10
"""With at most this many Whole bundles to choose from, every set of them is tried (by
increasing size) so that the fewest gangs are broken; beyond, they are taken in order."""


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
        run = SearchRun(
            session, stmt, job, pending, domain, rep, gang_need(session, pending, domain)
        )
        if fits(self.policy, run, beyond_share=False):
            place(self.policy, run, beyond_share=False)
            return GangPlan((), ())
        scored = self._candidates(run)
        if not scored:
            return None
        chosen = self._choose(run, scored)
        if not chosen:
            # None, or no victim needed after all: then the gang rides beyond its share
            # on room nobody's eviction for it frees (see gang_dry_run.place), which it may not
            stmt.rollback(mark)
            return None
        placement = dry_placement(self.policy, run)
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

    def _candidates(self, run: SearchRun) -> list[Scored]:
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

    def _ordered(self, run: SearchRun, found: Sequence[Bundle]) -> list[Scored]:
        """``found`` scored and in the policy's order (step 3)."""
        scored = score_bundles(run.session, found, run.need, run.domain, run.vec)
        return self.policy.order_bundles(run.session, scored, self.roi_threshold)

    # Steps 5 and 6 -------------------------------------------------------------------

    def plan_key(self, plan: GangPlan) -> tuple[int, ...]:
        """How two plans (in different domains) compare, smaller better: for a policy that
        puts priority first, the highest victim priority, then :attr:`GangPlan.cost`."""
        if self.policy.priority_first:
            return (plan.top, *plan.cost)
        return plan.cost

    def _choose(self, run: SearchRun, scored: list[Scored]) -> list[Scored] | None:
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
            return selected if fits(self.policy, run) else None
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

    def _within_budgets(self, run: SearchRun, scored: list[Scored]) -> list[Scored]:
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
        run: SearchRun,
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

    def _choose_by_priority(self, run: SearchRun, scored: list[Scored]) -> list[Scored] | None:
        """:meth:`_choose_among` with the candidates up to each priority in turn, lowest
        first, for a policy that puts priority first; else over all of them."""
        if not scored:
            return None
        if not self.policy.priority_first:
            return self._choose_among(run, scored)
        need = run.need
        wanted = need > 0
        tops = {sc.bundle.job.uid: job_top(sc.bundle.job) for sc in scored}
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
        self, run: SearchRun, scored: list[Scored], limit: int, tops: dict[str, int]
    ) -> list[Scored]:
        """``scored`` with no victim above priority ``limit``: a Safe bundle keeps its
        tasks up to it; a Whole bundle stays only if its gang's every evictable member is
        up to it (``tops``: each job's highest)."""

        def task_ok(t: TaskInfo) -> bool:
            return t.priority <= limit

        def whole_ok(sc: Scored) -> bool:
            return tops[sc.bundle.job.uid] <= limit

        return self._filtered(run, scored, task_ok, whole_ok)

    def _choose_among(self, run: SearchRun, scored: list[Scored]) -> list[Scored] | None:
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
        ways = exact_ways(session, scored)
        if ways is not None:
            return None if hopeless() else self._exact(run, ways)
        whole = whole_jobs(scored)
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

    def _fits_without_all(self, run: SearchRun, scored: Sequence[Scored]) -> bool:
        """Would the gang fit in the domain with every candidate of ``scored`` gone? An
        eviction never makes a gang fit that does not fit then (removing pods only frees
        room on nodes and in queues), so when it does not (its queue has no room for it
        within its share, say), no choice among them is worth a dry run: there can be
        thousands. One dry run, rolled back."""
        mark = run.stmt.checkpoint()
        try:
            for sc in scored:
                self._evict(run, sc)
            return fits(self.policy, run)
        finally:
            run.stmt.rollback(mark)

    def _fill(
        self,
        run: SearchRun,
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
                if fits(self.policy, run):
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

    def _exact(self, run: SearchRun, ways: list[list[Way]]) -> list[Scored] | None:
        """Try every way to choose (fewest jobs broken, then fewest victims, then the
        jobs first in order); the first that makes room is evicted in ``run.stmt`` and
        returned as bundles. None (nothing left evicted) when none does."""
        need = run.need
        wanted = need > 0

        def cost(combo: tuple[Way, ...]) -> tuple[int, int, list[int]]:
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
            picked = way_bundles(run.session, combo)
            for sc in picked:
                self._evict(run, sc)
            if fits(self.policy, run):
                return picked
            run.stmt.rollback(cp)
        return None

    def _trim(self, run: SearchRun, chosen: list[Scored]) -> list[Scored]:
        """Put victims back, the last chosen first (a Whole bundle as a unit, a Safe one
        task by task), while the gang still fits without them (Volcano evicts too many
        here; this does not)."""
        stmt = run.stmt
        kept: list[Scored] = []
        for sc in reversed(chosen):
            if sc.bundle.kind is Kind.WHOLE:
                for t in (*sc.bundle.tasks, *sc.extras):
                    stmt.undo(t)
                if fits(self.policy, run):
                    continue
                self._evict(run, sc)
                kept.append(sc)
                continue
            left: list[TaskInfo] = []
            for t in reversed(sc.bundle.tasks):
                stmt.undo(t)
                if not fits(self.policy, run):
                    self._evict_task(run, t, Kind.SAFE if sc.bundle.job.has_pod_group else Kind.POD)
                    left.append(t)
            if left:
                left.reverse()
                bundle = Bundle(sc.bundle.job, Kind.SAFE, tuple(left))
                kept.append(Scored(bundle, sc.local, sc.global_, sc.roi))
        kept.reverse()
        return kept

    def _selected_by_plugin(self, run: SearchRun, scored: list[Scored]) -> list[Scored] | None:
        """The bundles of the jobs a ``GANG_VICTIM_SELECTOR`` plugin chose, or None when no
        plugin answers."""
        session = run.session
        if not session.hooks[GANG_VICTIM_SELECTOR]:
            return None
        offered = [(sc.bundle.job, sc.bundle.kind, sc.bundle.tasks) for sc in scored]
        answer = session.gang_victims(run.job, run.pending, run.domain, offered)
        if answer is None:
            return None
        jobs = set(answer)
        return [sc for sc in scored if sc.bundle.job.uid in jobs]

    def _evict(self, run: SearchRun, sc: Scored) -> None:
        """Evict ``sc``'s tasks in ``run.stmt``, those not evicted already (a fill may
        have taken some of them before it asks :meth:`_fits_without_all`)."""
        kind = sc.bundle.kind if sc.bundle.job.has_pod_group else Kind.POD
        for t in (*sc.bundle.tasks, *sc.extras):
            if t.status is not TaskStatus.RELEASING:
                self._evict_task(run, t, kind)

    def _evict_task(self, run: SearchRun, task: TaskInfo, kind: Kind) -> None:
        run.stmt.evict(
            task, self.policy.reason, preemptor=run.rep, queue=run.job.queue, bundle=kind
        )
