"""Who may be a victim, and how candidates rank: what varies between evicting actions
(layer 2).

A :class:`VictimPolicy` parameterises the shared :class:`~.search.VictimSearch`.
:class:`LowerPriority` is the preempt action's: pods of strictly lower priority of other
jobs in the preemptor's queue (or of its own job), ranked in kube-scheduler's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from scheduler.actions.victims.bundles import Kind
from scheduler.actions.victims.candidates import Candidate, RankKey, kube_rank, kube_rank_bound
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import BEING_PLACED, EVICTABLE
from scheduler.framework.effects import EvictReason
from scheduler.framework.session import Session

if TYPE_CHECKING:
    from scheduler.actions.victims.bundle_scores import Scored


class VictimPolicy(Protocol):
    """What an evicting action tells the search. Every method is pure with respect to the
    session, which it may read; called by the search only."""

    @property
    def reason(self) -> EvictReason:
        """The reason of the Evict effects (preempted, reclaimed)."""
        ...

    @property
    def nothing_helps(self) -> str:
        """The sentence added to a pod's reason when no node can be freed for it."""
        ...

    @property
    def priority_first(self) -> bool:
        """Is the victims' highest priority the first criterion of a gang's choice of
        victims (preempt: never more important victims for fewer or cheaper ones), or
        does :meth:`order_bundles` decide (reclaim: queue fairness first)?"""
        ...

    def may_help(self, session: Session, preemptor: TaskInfo) -> bool:
        """Could any eviction anywhere help ``preemptor``? A cheap, conservative answer (no
        means no); the search asks it before walking the nodes."""
        ...

    def possible(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        """The tasks on ``node`` that may be evicted for ``preemptor``, every plugin's
        filter applied, in the order the policy would take them."""
        ...

    def candidates(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        """A cheap superset of :meth:`possible` (the same when that is cheap): what the
        window counts and bounds nodes by, on many nodes per search."""
        ...

    def keep_first(self, session: Session, tasks: Sequence[TaskInfo]) -> list[TaskInfo]:
        """``tasks`` (possible victims on one node) most worth keeping first: the order
        in which the simulation re-adds them (the last taken first)."""
        ...

    def fits(self, session: Session, preemptor: TaskInfo, node: str) -> bool:
        """Would ``preemptor`` be placed on ``node`` now, counting the room being released
        as free, and its queue allow it?"""
        ...

    def allowed(
        self, session: Session, preemptors: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Which of ``candidates`` (in the order given) may be evicted together to make
        room for ``preemptors`` (pods of one job; the first is the one the plugins' victim
        filters are asked about), as the session stands."""
        ...

    def rank(self, session: Session, candidate: Candidate) -> RankKey:
        """Smaller is better."""
        ...

    def queue_allows(self, session: Session, preemptor: TaskInfo) -> bool:
        """Does ``preemptor``'s queue have room for it (within its share)?"""
        ...

    def order_bundles(
        self, session: Session, scored: Sequence[Scored], roi_threshold: float
    ) -> list[Scored]:
        """The bundles in the order a gang's victims are taken (Safe before Whole, then
        the policy's order)."""
        ...

    def rank_bound(
        self,
        session: Session,
        node: str,
        possible: Sequence[TaskInfo],
        room: Sequence[Sequence[int]],
        need: Sequence[int],
    ) -> RankKey | None:
        """A lower bound of :meth:`rank` of any candidate on ``node`` evicting among
        ``possible`` (what each frees: ``room``; what the node lacks: ``need``), or None
        when they cannot free ``need`` at all."""
        ...


def fits_within_share(session: Session, preemptor: TaskInfo, node: str) -> bool:
    """Would ``preemptor`` be placed on ``node`` once the pods being evicted there are gone,
    within its queue's deserved share?"""
    return session.fits_on(preemptor, node, releasing=True) and within_share(session, preemptor)


def within_share(session: Session, preemptor: TaskInfo) -> bool:
    """Does ``preemptor``'s queue have room for it within its deserved share?"""
    job = session.jobs[preemptor.job_id]
    return session.queue_allocatable(session.queues[job.queue], preemptor)


def may_take(session: Session, preemptor: TaskInfo) -> bool:
    """May ``preemptor``'s queue take room for it in a reclaim, as the session stands (the
    victims gone): within its share, or beyond it into room that nobody's guarantee holds
    and within its capabilities (``QUEUE_BORROWABLE``): a pod larger than what is left
    of its queue's share, or the later members of a gang larger than it. Whether the
    queue may reclaim at all, and which victims keep the reclaim fair, is asked before
    (``QUEUE_RECLAIMS``, the plugins' reclaim budgets)."""
    queue = session.queues[session.jobs[preemptor.job_id].queue]
    return session.queue_allocatable(queue, preemptor) or session.queue_borrowable(queue, preemptor)


AFTER_BIND = 2.0
"""Seconds after which a reclaimer held back only by pods whose binds were not through is
tried again (a parked job is otherwise let go only by an event that may free room, or
after five minutes: a bind is neither)."""


NOT_YET_BOUND = BEING_PLACED | {TaskStatus.PIPELINED}
"""Pods on a node that are no victims yet: allocated or binding this cycle, or nominated
and waiting for the pods evicted for them to go."""


class BeingPlaced:
    """The gangs some of whose members are being placed (allocated this cycle, or their
    bind in flight), as an evicting action finds them: none of their pods is a victim
    this cycle. Breaking such a gang would leave its new members alone on their nodes,
    bound a moment later to a gang that can no longer run (until the ``dissolve`` action
    took them down); once the binds are done, the gang is a candidate like any other.
    A gang taken whole is not being placed, so nothing is lost by waiting a cycle.

    Worked out once per session, at the first question (allocate and backfill place;
    preempt and reclaim, which ask, only nominate and evict, and their dry runs place
    the preemptor's own job, which is never asked about)."""

    def __init__(self) -> None:
        self._cached: tuple[Session, frozenset[str]] | None = None

    def of(self, session: Session) -> frozenset[str]:
        cached = self._cached
        if cached is None or cached[0] is not session:
            jobs = frozenset(
                job.uid
                for job in session.jobs.values()
                if job.has_pod_group and any(t.status in BEING_PLACED for t in job.tasks.values())
            )
            cached = self._cached = (session, jobs)
        return cached[1]


class LowerPriority:
    """The preempt action's policy (KEP-4832, kube-scheduler's DefaultPreemption):
    victims have strictly lower priority than the preemptor and are in its queue (other
    jobs) or its own job; candidates rank as kube-scheduler ranks them."""

    reason = EvictReason.PREEMPTED
    nothing_helps = "preemption: no node has lower-priority pods whose eviction makes room."
    priority_first = True

    def __init__(self) -> None:
        self._lowest: tuple[Session, int, dict[str, int]] | None = None
        self._placed = BeingPlaced()

    def may_help(self, session: Session, preemptor: TaskInfo) -> bool:
        """Is some evictable pod of the preemptor's queue (or job) of lower priority?"""
        lowest = self._lowest_priorities(session)
        job = session.jobs.get(preemptor.job_id)
        queue = f"queue:{job.queue}" if job is not None else ""
        limit = preemptor.priority
        return lowest.get(queue, limit) < limit or lowest.get(preemptor.job_id, limit) < limit

    def _lowest_priorities(self, session: Session) -> dict[str, int]:
        """The lowest priority of the evictable pods of each queue (``queue:<name>``) and
        each job, as the session began: evictions only remove candidates, so it stays a
        lower bound for the whole cycle."""
        cached = self._lowest
        if cached is not None and cached[0] is session:
            return cached[2]
        lowest: dict[str, int] = {}
        for job in session.jobs.values():
            q = f"queue:{job.queue}"
            for t in job.tasks.values():
                if t.status in EVICTABLE and t.sluice:
                    if t.priority < lowest.get(q, t.priority + 1):
                        lowest[q] = t.priority
                    if t.priority < lowest.get(job.uid, t.priority + 1):
                        lowest[job.uid] = t.priority
        self._lowest = (session, session.version, lowest)
        return lowest

    def possible(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        job = session.jobs.get(preemptor.job_id)
        queue = job.queue if job is not None else ""
        placing = self._placed.of(session)
        out = []
        for t in node.tasks.values():
            if t.status not in EVICTABLE or t.priority >= preemptor.priority or not t.sluice:
                continue
            owner = session.jobs.get(t.job_id)
            if owner is None or (owner.queue != queue and t.job_id != preemptor.job_id):
                continue
            if t.job_id in placing and t.job_id != preemptor.job_id:
                continue
            out.append(t)
        return session.victims(preemptor, out)

    def candidates(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        return self.possible(session, preemptor, node)

    def keep_first(self, session: Session, tasks: Sequence[TaskInfo]) -> list[TaskInfo]:
        """Higher priority first, then the older (kube-scheduler's MoreImportantPod: of
        two pods of one priority the one started later goes)."""
        del session
        return sorted(tasks, key=lambda t: (-t.priority, t.start_time, t.key))

    def allowed(
        self, session: Session, preemptors: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Those of lower priority than every one of ``preemptors`` the plugins let go."""
        limit = min(p.priority for p in preemptors)
        lower = [c for c in candidates if c.priority < limit]
        return session.victims(preemptors[0], lower) if lower else []

    def fits(self, session: Session, preemptor: TaskInfo, node: str) -> bool:
        return fits_within_share(session, preemptor, node)

    def rank(self, session: Session, candidate: Candidate) -> RankKey:
        return kube_rank(candidate)

    def queue_allows(self, session: Session, preemptor: TaskInfo) -> bool:
        return within_share(session, preemptor)

    def order_bundles(
        self, session: Session, scored: Sequence[Scored], roi_threshold: float
    ) -> list[Scored]:
        """Safe before Whole; then lower job priority first, ties broken by ROI (higher
        first), then the job's name."""
        del session, roi_threshold
        return sorted(
            scored,
            key=lambda s: (
                s.bundle.kind is Kind.WHOLE,
                s.bundle.job.priority,
                -s.roi,
                s.bundle.job.uid,
            ),
        )

    def rank_bound(
        self,
        session: Session,
        node: str,
        possible: Sequence[TaskInfo],
        room: Sequence[Sequence[int]],
        need: Sequence[int],
    ) -> RankKey | None:
        return kube_rank_bound(node, possible, room, need)


class QueueReclaim:
    """The reclaim action's policy (Volcano's reclaim): victims are pods of other queues
    that hold more than their deserved share, as far as the plugins' reclaim budgets allow
    (``proportion``: never below a queue's guarantee; only while the reclaim makes the
    shares fairer; never from a queue that is not ``reclaimable``), whatever their
    priority; the reclaiming queue must be below its own share in what the pod asks
    (:func:`may_take`), the pod may be larger than what is left of it. Victims come from the
    queue of lowest queue priority first (the reverse of the queue order), then from the
    queue furthest above its share; then as kube-scheduler ranks them (lower pod
    priorities first). With a minimum runtime (``minRuntimeSeconds``), a job that
    started less than that ago is no victim (:meth:`too_young`)."""

    reason = EvictReason.RECLAIMED
    nothing_helps = (
        "reclaim: no queue above its share has pods whose eviction makes room for this one "
        "and leaves the queues' shares fairer."
    )
    priority_first = False

    def __init__(self, min_runtime: float = 0.0) -> None:
        self._shares: tuple[Session, int, _Shares] | None = None
        self.min_runtime = min_runtime
        """Seconds a job runs before it may be a victim (``minRuntimeSeconds``)."""
        self._young: tuple[Session, dict[str, float]] | None = None
        self._placed = BeingPlaced()

    def may_help(self, session: Session, preemptor: TaskInfo) -> bool:
        del preemptor  # the reclaim action asks first whether any queue is above its share
        return True

    def shares(self, session: Session) -> _Shares:
        """The queues' shares as the session stands now (cached until the next move)."""
        cached = self._shares
        if cached is not None and cached[0] is session and cached[1] == session.version:
            return cached[2]
        shares = _Shares(session)
        self._shares = (session, session.version, shares)
        return shares

    def possible(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        """:meth:`candidates`, as far as the plugins' reclaim budgets allow."""
        return session.reclaimable([preemptor], self.candidates(session, preemptor, node))

    def candidates(self, session: Session, preemptor: TaskInfo, node: NodeInfo) -> list[TaskInfo]:
        """Pods of other queues above their share, of the queue of lowest queue priority
        first, then of the queue furthest above its share, then lower pod priority, then
        younger; those the plugins protect left out (the reclaim budgets are not asked:
        :meth:`possible`), and those of jobs too young (:meth:`too_young`: the
        preemptor's job is then to be tried again when the first of them comes of age,
        :meth:`Session.revisit`) or not yet bound (allocated this cycle, their bind in
        flight or nominated and waiting for their victims, or of a gang that has
        members being placed: tried again :data:`AFTER_BIND` seconds later)."""
        mine = session.jobs[preemptor.job_id].queue
        shares = self.shares(session)
        placing = self._placed.of(session)
        out: list[TaskInfo] = []
        for t in node.tasks.values():
            if not t.sluice or (t.status not in EVICTABLE and t.status not in NOT_YET_BOUND):
                continue
            owner = session.jobs.get(t.job_id)
            if owner is None or owner.queue == mine:
                continue
            if shares.of(owner.queue) <= 1.0:
                continue
            if t.status in NOT_YET_BOUND or owner.uid in placing:
                # Its bind is not through yet (or it waits for its own victims): no
                # victim now, but maybe once it is bound (the preemptor's job, parked, is
                # tried again then, not at the 5-minute retry).
                session.revisit(preemptor.job_id, AFTER_BIND)
                continue
            young_for = self.too_young(session, owner)
            if young_for > 0:
                session.revisit(preemptor.job_id, young_for)
            else:
                out.append(t)
        if not out:
            return []
        return session.victims(preemptor, sorted(out, key=lambda t: self._taken(session, t)))

    def too_young(self, session: Session, job: JobInfo) -> float:
        """How much longer ``job`` is too young to be a victim (0: it is not): until its
        youngest member that holds room has run :attr:`min_runtime` since its
        ``status.startTime`` (a gang one of whose pods was replaced lately restarted).
        Pods with no start time, and a cycle that knows no wall clock, protect nothing.
        Cached per session: start times do not change within one."""
        if self.min_runtime <= 0 or session.wall <= 0:
            return 0.0
        cached = self._young
        if cached is None or cached[0] is not session:
            cached = self._young = (session, {})
        left = cached[1].get(job.uid)
        if left is None:
            latest = max(
                (t.start_time for t in job.tasks.values() if t.status in EVICTABLE), default=0.0
            )
            left = latest + self.min_runtime - session.wall if latest > 0 else 0.0
            cached[1][job.uid] = left = max(left, 0.0)
        return left

    def _taken(self, session: Session, t: TaskInfo) -> tuple[int, float, int, float, str]:
        """The order victims are taken in, the first first (see :meth:`candidates`)."""
        return (
            *self.shares(session).key(session.jobs[t.job_id].queue),
            t.priority,
            -t.start_time,
            t.key,
        )

    def keep_first(self, session: Session, tasks: Sequence[TaskInfo]) -> list[TaskInfo]:
        """The reverse of the order victims are taken in."""
        return sorted(tasks, key=lambda t: self._taken(session, t), reverse=True)

    def allowed(
        self, session: Session, preemptors: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        return session.reclaimable(preemptors, candidates)

    def fits(self, session: Session, preemptor: TaskInfo, node: str) -> bool:
        return session.fits_on(preemptor, node, releasing=True) and may_take(session, preemptor)

    def queue_allows(self, session: Session, preemptor: TaskInfo) -> bool:
        return may_take(session, preemptor)

    def order_bundles(
        self, session: Session, scored: Sequence[Scored], roi_threshold: float
    ) -> list[Scored]:
        """:func:`reclaim_order` with the queues' shares as the session stands."""
        return reclaim_order(scored, self.shares(session).key, roi_threshold)

    def rank(self, session: Session, candidate: Candidate) -> RankKey:
        """PDB violations; then the victims' queues (the worst of them: the highest queue
        priority, then the least share over); then as kube-scheduler ranks."""
        shares = self.shares(session)
        worst = max(shares.key(session.jobs[v.job_id].queue) for v in candidate.victims)
        pdb, *rest = kube_rank(candidate)
        return (pdb, *worst, *rest)

    def rank_bound(
        self,
        session: Session,
        node: str,
        possible: Sequence[TaskInfo],
        room: Sequence[Sequence[int]],
        need: Sequence[int],
    ) -> RankKey | None:
        bound = kube_rank_bound(node, possible, room, need)
        if bound is None:
            return None
        shares = self.shares(session)
        best = min(shares.key(session.jobs[t.job_id].queue) for t in possible)
        pdb, *rest = bound
        return (pdb, *best, *rest)


def reclaim_order(
    scored: Sequence[Scored],
    queue_key: Callable[[str], tuple[int, float]],
    roi_threshold: float,
) -> list[Scored]:
    """Reclaim's order of bundles, a total order (the same whatever the order given):
    Safe before Whole; then by the victim's queue (``queue_key``: lowest queue priority
    first, then furthest above its share); then, among those alike, ROI decides where it
    differs by more than ``roi_threshold`` and job priority (lower first) where it does
    not: the bundles are grouped, best ROI first, each group holding those within
    ``roi_threshold`` of its best, groups in ROI order and within a group lower priority
    first, then higher ROI, then the job's name and the bundle's pods.

    (A pairwise rule "ROI if it differs by more than the threshold, else priority" is not
    transitive: with ROIs 0.50, 0.47, 0.44 and a threshold of 0.05 it orders the first
    two and the last two by priority and the first and last by ROI, so the result
    depended on the order the bundles came in.)"""

    def ident(s: Scored) -> tuple[str, str, tuple[str, ...]]:
        return (s.bundle.job.uid, s.bundle.kind.value, tuple(t.uid for t in s.bundle.tasks))

    def head(s: Scored) -> tuple[bool, int, float]:
        return (s.bundle.kind is Kind.WHOLE, *queue_key(s.bundle.job.queue))

    group: dict[int, int] = {}
    classes: dict[tuple[bool, int, float], list[Scored]] = {}
    for s in scored:
        classes.setdefault(head(s), []).append(s)
    for members in classes.values():
        leader: float | None = None
        g = -1
        for s in sorted(members, key=lambda s: (-s.roi, ident(s))):
            if leader is None or leader - s.roi > roi_threshold:
                leader, g = s.roi, g + 1
            group[id(s)] = g
    return sorted(
        scored,
        key=lambda s: (*head(s), group[id(s)], s.bundle.job.priority, -s.roi, ident(s)),
    )


class _Shares:
    """Queue shares as the session says them now, looked up once per queue."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._known: dict[str, float] = {}

    def of(self, queue: str) -> float:
        share = self._known.get(queue)
        if share is None:
            info = self._session.queues.get(queue)
            found = self._session.queue_share(info) if info is not None else None
            share = self._known[queue] = found.share if found is not None else 0.0
        return share

    def priority(self, queue: str) -> int:
        info = self._session.queues.get(queue)
        return info.priority if info is not None else 0

    def key(self, queue: str) -> tuple[int, float]:
        """The order of victims' queues, the first taken first: the lowest queue priority
        (the reverse of the queue order), then the furthest above its share."""
        return (self.priority(queue), -self.of(queue))
