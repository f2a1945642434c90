"""The bundles of a gang search, scored: what each frees in the domain and takes in the
cluster, its ROI (step 3 of :mod:`.gang_search`), the gang's need (step 1), and, for the
exact choice of step 5, every way to take victims from each job.

Pure functions of the session's table: nothing here evicts or places.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.actions.victims.bundles import Bundle, Kind, keeps_whole
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.framework.node_sets import NodeSet
from scheduler.framework.node_table import IntVector
from scheduler.framework.session import Session

EXACT_CHOICES = 512
"""With at most this many ways to choose the victims of a domain, every way is tried."""
EXACT_TASKS = 8
"""...and only when no job has more candidates than this in the domain."""


@dataclass(frozen=True, slots=True)
class Way:
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


def job_top(job: JobInfo) -> int:
    """The highest priority of ``job``'s evictable pods: what breaking it costs."""
    return max(
        (t.priority for t in job.tasks.values() if t.status in EVICTABLE and t.sluice),
        default=-(1 << 31),
    )


def whole_jobs(scored: Sequence[Scored]) -> list[Scored]:
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


def gang_need(session: Session, pending: Sequence[TaskInfo], domain: NodeSet) -> IntVector:
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


def score_bundles(
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


def exact_ways(session: Session, scored: list[Scored]) -> list[list[Way]] | None:
    """Per job (in the order of ``scored``), every way to take victims from it: each
    subset of its candidates that leaves it whole, and, when its Whole bundle is a
    candidate, all of them (broken). None when there are too many ways to try all."""
    table = session.table
    by_job: dict[str, list[Scored]] = {}
    for sc in scored:
        by_job.setdefault(sc.bundle.job.uid, []).append(sc)
    out: list[list[Way]] = []
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
            Way(False, subset, (), local(subset), rank)
            for k in range(len(tasks) + 1)
            for subset in itertools.combinations(tasks, k)
            if keeps_whole(job, subset)
        ]
        if whole is not None:
            everything = tuple(tasks)
            ways.append(Way(True, everything, tuple(whole.extras), local(everything), rank))
        total *= len(ways)
        if total > EXACT_CHOICES:
            return None
        out.append(ways)
    return out


def way_bundles(session: Session, combo: tuple[Way, ...]) -> list[Scored]:
    """The bundles of one way to choose (:func:`exact_ways`)."""
    out: list[Scored] = []
    for w in combo:
        if not w.tasks:
            continue
        job = session.jobs[w.tasks[0].job_id]
        kind = Kind.WHOLE if w.broken else Kind.SAFE
        out.append(Scored(Bundle(job, kind, w.tasks), w.local, w.local, extras=list(w.extras)))
    return out
