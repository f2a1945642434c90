"""What the evicting actions (preempt, reclaim) do for one job (layer 2).

:func:`make_room_for_job` nominates every pending task of a starving job, evicting what
it takes through the action's :class:`~scheduler.actions.victims.VictimSearch`, and
commits only if the whole gang is then pipelined; otherwise everything tried is rolled
back, so evictions happen only where the gang can start.

A gang (a PodGroup of more than one pod) is made room for as a whole, domain-wide
(:class:`~scheduler.actions.victims.gang_search.GangSearch`: bundles, ROI, one call to the
plugins, the smallest sufficient set, every task nominated); a pod of its own, pod by pod
(:class:`~scheduler.actions.victims.VictimSearch`). A job the plugins give node sets (a
gang with a required topology level) is made room for inside one domain only: the first
``maxDomains`` sets (best first, as the plugins order them for eviction) are each tried in
full and rolled back, and the one that costs least (fewest gangs broken, then fewest and
cheapest victims) is done again and committed, so that a smaller job cannot take the room
freed. Without node sets the gang's domain is the whole cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from scheduler.actions.common import waiting_tasks
from scheduler.actions.victims import VictimSearch
from scheduler.actions.victims.candidates import PRIORITY_OFFSET
from scheduler.actions.victims.gang_search import GangSearch
from scheduler.api import reasons
from scheduler.api.holds import HoldKind
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTS_FOR_GANG
from scheduler.framework.node_sets import NodeSet, Purpose
from scheduler.framework.session import Session
from scheduler.framework.statement import Recording, Statement


def make_room_for_job(
    session: Session,
    job: JobInfo,
    search: VictimSearch,
    gang_search: GangSearch,
    *,
    max_domains: int,
) -> None:
    """Make room for ``job``'s pending tasks (see the module docstring). Called by an
    evicting action inside its per-job boundary; records reasons when nothing helps."""
    if job.uid in session.unresolvable:
        return  # a plugin said no eviction can help it: no victim search (its reason stands)
    backoff = session.hold(job)
    waiting = waiting_tasks(job)
    if backoff is not None and backoff.kind is HoldKind.NO_PREEMPTION:
        for t in waiting:
            base = session.task_reasons.get(t.uid)
            told = reasons.preemption_backoff(base, backoff.reason, backoff.delay)
            session.record_task_reason(t, told)
        return
    pending = [
        t
        for t in job.minimums_first(session.order_tasks(waiting))
        if t.status is TaskStatus.PENDING and t.preemption_policy != "Never"
    ]
    if not pending:
        return
    subsets = session.node_sets(job, waiting, Purpose.EVICT)
    needed = needed_for_minimum(job, pending)
    if is_gang(job, needed):
        domains = [session.all_nodes] if subsets is None else list(subsets.sets[:max_domains])
        # One cheap question first: could any eviction anywhere help (a possible victim of
        # lower priority, or of a queue above its share, exists at all)?
        rep = min(needed, key=lambda t: t.priority)
        if not search.policy.may_help(session, rep) or not _gang_in_best_domain(
            session, job, gang_search, needed, domains
        ):
            _say_nothing_helps(session, job, pending, search)
        return
    if subsets is None:
        found_none = _attempt(session, job, search, pending, None)
    else:
        domains = list(subsets.sets[:max_domains])
        found_none = True
        if len(domains) == 1:
            found_none = _attempt(session, job, search, pending, domains[0])
        else:
            best: tuple[tuple[int, int, int], Recording, NodeSet] | None = None
            for domain in domains:
                trial = _trial(session, job, search, pending, domain)
                if trial is not None and (best is None or trial[0] < best[0]):
                    best = (trial[0], trial[1], domain)
            if best is not None:
                found_none = False
                with session.statement() as stmt:
                    stmt.replay(best[1])
                    _commit_room(session, job, stmt, best[2])
    reason = session.job_reasons.get(job.uid)
    if found_none and reason:  # the PodGroup's condition says it as its pods do
        session.record_job_reason(job, reasons.nothing_helps(reason, search.policy.nothing_helps))


def is_gang(job: JobInfo, needed: Sequence[TaskInfo]) -> bool:
    """Is ``job`` made room for as a gang (domain-wide), rather than pod by pod? When it
    needs room for more than one pod to reach its minimum (``needed``:
    :func:`needed_for_minimum`)."""
    return job.has_pod_group and len(needed) > 1


def needed_for_minimum(job: JobInfo, pending: Sequence[TaskInfo]) -> list[TaskInfo]:
    """The tasks of ``pending`` (in the order given: task order, role minimums first) that
    evictions must make room for: as many as ``job`` lacks to reach its minimum, counting
    its tasks placed or nominated already; each role short of its ``minTaskMember`` first
    (unless the gang is elastic: :meth:`JobInfo.role_minimums`), then any, up to
    ``minMember``. A job of ``minMember: 1`` with two pending pods needs room for one, as
    Volcano's preempt stops once the job is no longer starving. A lone pod, or a job whose
    pending tasks cannot reach the minimum anyway, needs them all (the gang search then
    finds no room, and says so)."""
    if not job.has_pod_group:
        return list(pending)
    counted = COUNTS_FOR_GANG | {TaskStatus.PIPELINED}
    have = Counter(t.role for t in job.tasks.values() if t.status in counted)
    chosen: list[TaskInfo] = []
    taken: set[str] = set()
    minimums = job.role_minimums()
    for role in sorted(minimums):
        short = minimums[role] - have[role]
        for t in pending:
            if short <= 0:
                break
            if t.role == role:
                chosen.append(t)
                taken.add(t.uid)
                short -= 1
    short = job.min_member - sum(have.values()) - len(chosen)
    for t in pending:
        if short <= 0:
            break
        if t.uid not in taken:
            chosen.append(t)
            short -= 1
    if short > 0 or not chosen:
        return list(pending)
    order = {t.uid: i for i, t in enumerate(pending)}
    return sorted(chosen, key=lambda t: order[t.uid])


def _gang_in_best_domain(
    session: Session,
    job: JobInfo,
    gang_search: GangSearch,
    pending: Sequence[TaskInfo],
    domains: Sequence[NodeSet],
) -> bool:
    """Clear, for the gang, the domain among ``domains`` where that costs least (fewest
    gangs broken, then fewest victims), and commit; False when no domain can take it.
    Each domain is searched once: the best search's decisions are replayed
    (:meth:`Statement.replay`), not searched again."""
    if len(domains) == 1:
        with session.statement() as stmt:
            plan = gang_search.clear(session, stmt, job, pending, domains[0])
            if plan is None or not session.job_pipelined(job):
                return False
            _commit_room(session, job, stmt, domains[0])
        return True
    best: tuple[tuple[int, ...], Recording, NodeSet] | None = None
    for domain in domains:
        with session.statement() as stmt:
            plan = gang_search.clear(session, stmt, job, pending, domain)
            key = gang_search.plan_key(plan) if plan is not None else None
            better = key is not None and (best is None or key < best[0])
            if key is not None and better and session.job_pipelined(job):
                best = (key, stmt.recorded(), domain)
    if best is None:
        return False
    with session.statement() as stmt:
        stmt.replay(best[1])
        _commit_room(session, job, stmt, best[2])
    return True


def _commit_room(session: Session, job: JobInfo, stmt: Statement, domain: NodeSet) -> None:
    """Commit ``stmt`` (the room made for ``job`` in ``domain``) and say so."""
    if stmt.operations:
        stmt.commit()
        say_nominated(session, job)
    if domain.name:
        session.placed_in[job.uid] = domain.name


def say_nominated(session: Session, job: JobInfo) -> None:
    """Reasons for ``job``'s pods nominated by a preemption or reclaim just committed:
    what they wait for, in the words later cycles keep while the victims go
    (:func:`~scheduler.api.reasons.waiting_for_victims`)."""
    nodes: set[str] = set()
    for t in job.tasks.values():
        if t.sluice and t.status is TaskStatus.PIPELINED:
            session.record_task_reason(t, reasons.waiting_for_victims([t.node_name]))
            nodes.add(t.node_name)
    if nodes:
        session.record_job_reason(job, reasons.waiting_for_victims(nodes))


def _say_nothing_helps(
    session: Session, job: JobInfo, pending: Sequence[TaskInfo], search: VictimSearch
) -> None:
    """Reasons for a gang no domain could be cleared for: each pod keeps what allocate said
    and adds that eviction cannot help; so does the PodGroup."""
    sentence = search.policy.nothing_helps
    for t in pending:
        base = session.task_reasons.get(t.uid) or session.job_reasons.get(job.uid)
        session.record_task_reason(t, reasons.nothing_helps(base, sentence))
    reason = session.job_reasons.get(job.uid)
    if reason:
        session.record_job_reason(job, reasons.nothing_helps(reason, sentence))


def _attempt(
    session: Session,
    job: JobInfo,
    search: VictimSearch,
    pending: Sequence[TaskInfo],
    within: NodeSet | None,
) -> bool:
    """Make room for every task of ``pending`` (in ``within``), pod by pod, committing if
    the gang is then pipelined. True when some task found no node to free."""
    found_none = False
    with session.statement() as stmt:
        for task in pending:
            if session.job_pipelined(job):
                break  # no longer starving: room for more is not evicted for
            found_none |= not search.make_room(session, stmt, task, within)
        if stmt.operations and session.job_pipelined(job):
            _commit_room(session, job, stmt, within or session.all_nodes)
    return found_none


def _trial(
    session: Session,
    job: JobInfo,
    search: VictimSearch,
    pending: Sequence[TaskInfo],
    domain: NodeSet,
) -> tuple[tuple[int, int, int], Recording] | None:
    """What making room for ``pending`` pod by pod in ``domain`` costs (the highest victim
    priority, then the number of victims, then the sum of their priorities) with the
    decisions that make it (to replay), or None if the job cannot be pipelined there.
    Leaves nothing behind."""
    with session.statement() as stmt:
        for task in pending:
            if session.job_pipelined(job):
                break
            search.make_room(session, stmt, task, domain)
        if not session.job_pipelined(job):
            return None
        victims = stmt.evicted()
        top = max((v.priority for v in victims), default=-PRIORITY_OFFSET)
        cost = (top, len(victims), sum(v.priority + PRIORITY_OFFSET for v in victims))
        return cost, stmt.recorded()
