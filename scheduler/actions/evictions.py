"""What the evicting actions (preempt, reclaim) do for one job (layer 2).

:func:`make_room_for_job` nominates every pending task of a starving job, evicting what
it takes through the action's :class:`~scheduler.actions.victims.VictimSearch`, and
commits only if the whole gang is then pipelined; otherwise everything tried is rolled
back, so evictions happen only where the gang can start.

A job the plugins give node sets (a gang with a required topology level) is made room for
inside one domain only: the first ``maxDomains`` sets (best first, as the plugins order
them for eviction) are each tried in full and rolled back, and the one whose evictions
are fewest and cheapest is done again and committed. Every task of the gang is then
nominated to a node of that domain, so a smaller job cannot take the room freed.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.actions.common import waiting_tasks
from scheduler.actions.victims import VictimSearch, with_sentence
from scheduler.actions.victims.candidates import PRIORITY_OFFSET
from scheduler.api.job import JobInfo
from scheduler.api.snapshot import Backoff
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.node_sets import NodeSet, Purpose
from scheduler.framework.session import Session


def backoff_reason(backoff: Backoff) -> str:
    """What a job backing off after a failed preemption or reclaim says."""
    return f"{backoff.reason}; preemption retried in {backoff.delay:g}s"


def make_room_for_job(
    session: Session, job: JobInfo, search: VictimSearch, *, max_domains: int
) -> None:
    """Make room for ``job``'s pending tasks (see the module docstring). Called by an
    evicting action inside its per-job boundary; records reasons when nothing helps."""
    backoff = session.snapshot.preemption.backoffs.get(job.uid)
    if backoff is not None:
        for t in waiting_tasks(job):
            base = session.task_reasons.get(t.uid, "")
            session.record_task_reason(t, f"{base} {backoff_reason(backoff)}".strip())
        return
    pending = [
        t
        for t in session.order_tasks(waiting_tasks(job))
        if t.status is TaskStatus.PENDING and t.preemption_policy != "Never"
    ]
    if not pending:
        return
    subsets = session.node_sets(job, waiting_tasks(job), Purpose.EVICT)
    if subsets is None:
        found_none = _attempt(session, job, search, pending, None, commit=True)
    else:
        domains = list(subsets.sets[:max_domains])
        found_none = True
        best: tuple[tuple[int, int], NodeSet] | None = None
        for domain in domains if len(domains) > 1 else ():
            cost = _trial(session, job, search, pending, domain)
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, domain)
        chosen = best[1] if best is not None else (domains[0] if len(domains) == 1 else None)
        if chosen is not None:
            found_none = _attempt(session, job, search, pending, chosen, commit=True)
    reason = session.job_reasons.get(job.uid)
    if found_none and reason:  # the PodGroup's condition says it as its pods do
        session.record_job_reason(job, with_sentence(reason, search.policy.nothing_helps))


def _attempt(  # noqa: PLR0917
    session: Session,
    job: JobInfo,
    search: VictimSearch,
    pending: Sequence[TaskInfo],
    within: NodeSet | None,
    commit: bool,
) -> bool:
    """Make room for every task of ``pending`` (in ``within``), committing if the gang is
    then pipelined and ``commit``. True when some task found no node to free."""
    found_none = False
    with session.statement() as stmt:
        for task in pending:
            found_none |= not search.make_room(session, stmt, task, within)
        if commit and stmt.operations and session.job_pipelined(job):
            stmt.commit()
            if within is not None and within.name:
                session.placed_in[job.uid] = within.name
    return found_none


def _trial(
    session: Session,
    job: JobInfo,
    search: VictimSearch,
    pending: Sequence[TaskInfo],
    domain: NodeSet,
) -> tuple[int, int] | None:
    """What making room for the gang in ``domain`` costs (victims, then the sum of their
    priorities), or None if the gang cannot be pipelined there. Leaves nothing behind."""
    with session.statement() as stmt:
        for task in pending:
            search.make_room(session, stmt, task, domain)
        if not session.job_pipelined(job):
            return None
        victims = stmt.evicted()
        return (len(victims), sum(v.priority + PRIORITY_OFFSET for v in victims))
