"""The dry run of a gang search: allocate restricted to the domain, in the search's
statement, to learn whether (and where) the gang's pending tasks would all be placed.

Every function leaves the statement as it found it except :func:`place`, whose
nominations the caller keeps or rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.actions.victims.fill import Slots
from scheduler.actions.victims.policy import VictimPolicy, within_share
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.node_sets import NodeSet
from scheduler.framework.node_table import IntVector
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement


@dataclass(slots=True)
class SearchRun:
    """One search: a gang's ``pending`` tasks to make room for in ``domain``, its
    decisions recorded in ``stmt``. Made by :meth:`~.gang_search.GangSearch.clear` for
    each search and dropped after it: nothing of a search outlives it."""

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


def dry_placement(policy: VictimPolicy, run: SearchRun) -> list[tuple[TaskInfo, str]] | None:
    """Where the dry run puts each pending task (in task order), or None; rolled back."""
    cp = run.stmt.checkpoint()
    try:
        if not place(policy, run):
            return None
        ordered = run.job.minimums_first(run.session.order_tasks(list(run.pending)))
        return [(t, t.node_name) for t in ordered]
    finally:
        run.stmt.rollback(cp)


def fits(policy: VictimPolicy, run: SearchRun, *, beyond_share: bool = True) -> bool:
    """Would every pending task be placed in the domain now (victims gone)? A dry run
    of allocate, rolled back, after a cheap necessary check (room for that many pods
    of the least size they ask). ``beyond_share``: see :func:`place`."""
    slots = Slots(run.session, run.pending)
    rows = np.flatnonzero(run.domain.rows)
    free = run.session.table.free(
        slots.priority, "", slice(None), rows, releasing=True, job=run.job.uid
    )
    if slots.total(free) < len(run.pending):
        return False
    cp = run.stmt.checkpoint()
    try:
        return place(policy, run, beyond_share=beyond_share)
    finally:
        run.stmt.rollback(cp)


def place(policy: VictimPolicy, run: SearchRun, *, beyond_share: bool = True) -> bool:
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
    if _place_in_order(policy, run, ordered, beyond_share=beyond_share):
        return True
    largest = sorted(ordered, key=lambda t: largest_share(session, t, run.domain), reverse=True)
    if [t.uid for t in largest] == [t.uid for t in ordered]:
        return False
    run.stmt.rollback(cp)
    return _place_in_order(policy, run, largest, beyond_share=beyond_share)


def _place_in_order(
    policy: VictimPolicy, run: SearchRun, tasks: Sequence[TaskInfo], *, beyond_share: bool
) -> bool:
    session = run.session
    for task in tasks:
        allowed = (
            policy.queue_allows(session, task) if beyond_share else within_share(session, task)
        )
        if not allowed:
            return False
        fit = session.fit(task, releasing=True).restricted(run.domain.rows)
        node = session.select_node(task, fit) if fit.any else None
        if node is None:
            return False
        run.stmt.pipeline(task, node.name)
    return True


def largest_share(session: Session, task: TaskInfo, domain: NodeSet) -> float:
    """``task``'s largest share of ``domain``'s allocatable room in any resource it asks."""
    table = session.table
    total = table.allocatable[domain.rows].sum(axis=0)
    ask = table.request(task.request)
    shares = np.divide(ask, total, out=np.zeros(len(ask), dtype=np.float64), where=total > 0)
    return float(shares.max()) if len(shares) else 0.0
