"""Room for a gang, node by node (layer 2): the greedy half of the domain-wide search.

When there are too many ways to choose victims to try them all, :class:`NodeFill` says,
for each node of the domain, the cheapest way to make room there for *one more* of the
gang's pods: first spare members (each leaving its gang whole: a Safe choice, breaking
nothing), then, if allowed and still short, whole gangs broken (in the order of the
bundles). The search (:class:`~.gang_search.GangSearch`) takes the cheapest node's way (fewest
gangs broken, then fewest victims, then the lowest priorities), evicts it, and asks again
until the gang fits. A broken gang frees room on every node it ran on, so later rounds
find those nodes cheaper: the search follows the room a break has already paid for.

"One more pod" is measured with the least the gang's pods ask in each resource (the
*slot*); the search's dry run of allocate has the last word. Answers are cached per node
and forgotten, with :meth:`NodeFill.touched`, for the nodes an eviction changed: the
nodes of the victims, and every node of a job whose spare count changed. Used within one
call of the search, on the session as it stands (evictions made are in it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from scheduler.actions.victims.bundles import below_minimum, elastic, keeps_whole
from scheduler.api.task import TaskInfo
from scheduler.framework.node_table import IndexVector, IntMatrix, IntVector
from scheduler.framework.session import Session

if TYPE_CHECKING:
    from scheduler.actions.victims.bundle_scores import Scored


@dataclass(frozen=True, slots=True)
class Way:
    """The victims that give one node room for one more pod: ``spares`` (each leaving
    its gang whole) and the jobs to break (``breaks``, by uid; their every member goes)."""

    cost: tuple[int, int, int]
    """Gangs broken, victims, sum of the victims' priorities: the lower the better."""
    spares: tuple[TaskInfo, ...]
    breaks: tuple[str, ...]


class Slots:
    """How many of a gang's pods a node's free room holds, counted in the least its pods
    ask per resource (a necessary condition: the dry run decides)."""

    def __init__(self, session: Session, pending: Sequence[TaskInfo]) -> None:
        asks = np.array([session.table.request(t.request) for t in pending])
        self.priority = min(t.priority for t in pending)
        """The gang's lowest priority: the room it may count on is free for it."""
        self.size: IntVector = asks.min(axis=0)
        self._cols = self.size > 0
        self.wanted = len(pending)
        self.columns: tuple[int, ...] = tuple(np.flatnonzero(self._cols).tolist())
        """The columns the gang's pods ask for: the only ones that count here."""
        self._size = tuple(int(self.size[c]) for c in self.columns)

    def of(self, free: Sequence[int]) -> int:
        """Pods of the least size ``free`` (its :attr:`columns` only, as ints) holds."""
        if not self._size:
            return self.wanted
        return min(max(f, 0) // s for f, s in zip(free, self._size, strict=True))

    def pick(self, vector: IntVector) -> list[int]:
        """``vector``'s :attr:`columns`, as ints."""
        return [int(vector[c]) for c in self.columns]

    def total(self, free: IntMatrix) -> int:
        """Pods the rows of ``free`` hold in all."""
        if not self._cols.any() or not len(free):
            return self.wanted if len(free) else 0
        per_row = (np.maximum(free[:, self._cols], 0) // self.size[self._cols]).min(axis=1)
        return int(per_row.sum())


class NodeFill:
    """The candidates of a domain per node, and each node's cheapest way to one more pod.

    ``scored`` are the bundles in the search's order (their rank orders the gangs to
    break); ``wholes`` maps each job that may be broken to its bundle of every member
    (in the domain, and ``extras`` elsewhere); ``vectors`` the candidates' requests as
    the node table counts them, where known."""

    def __init__(
        self,
        session: Session,
        scored: Sequence[Scored],
        slots: Slots,
        wholes: Mapping[str, Scored],
        vectors: Mapping[str, IntVector],
    ) -> None:
        table = session.table
        self.jobs = session.jobs
        self.slots = slots
        self.wholes = wholes
        self.vec: dict[str, IntVector] = {}
        self._small: dict[str, list[int]] = {}
        """Each candidate's request in the slot's columns, as ints (cheap to add up)."""
        self.by_row: dict[int, list[TaskInfo]] = {}
        self.rows_of_job: dict[str, set[int]] = {}
        self.jobs_of_row: dict[int, list[str]] = {}
        for s in scored:
            for t in s.bundle.tasks:
                row = table.row.get(t.node_name)
                if row is None or t.uid in self.vec:
                    continue
                v = vectors.get(t.uid)
                self.vec[t.uid] = v if v is not None else table.request(t.request)
                self._small[t.uid] = slots.pick(self.vec[t.uid])
                self.by_row.setdefault(row, []).append(t)
                self.rows_of_job.setdefault(t.job_id, set()).add(row)
                on_row = self.jobs_of_row.setdefault(row, [])
                if t.job_id not in on_row:
                    on_row.append(t.job_id)
        self._on_row: dict[tuple[int, str], list[TaskInfo]] = {}
        for row, tasks in self.by_row.items():
            for t in tasks:
                self._on_row.setdefault((row, t.job_id), []).append(t)
        self._left: dict[str, int] = {}
        """Per job that may be broken, its members not evicted yet (what breaking it takes)."""
        self._left_priority: dict[str, int] = {}
        for job, whole in wholes.items():
            members = (*whole.bundle.tasks, *whole.extras)
            self._left[job] = len(members)
            self._left_priority[job] = sum(t.priority for t in members)
        self._left_at_start = dict(self._left)
        self._left_priority_at_start = dict(self._left_priority)
        self._cache: dict[int, Way | None] = {}
        self._spare: dict[str, int] = {}
        """Per job, how many more members it can lose and stay whole (jobs with roles
        that count are asked of :func:`keeps_whole` each time instead)."""

    def reset(self) -> None:
        """Forget every cached answer (the session was rolled back)."""
        self._cache.clear()
        self._spare.clear()
        self._left = dict(self._left_at_start)
        self._left_priority = dict(self._left_priority_at_start)

    def _can_spare(self, job_id: str, more: Sequence[TaskInfo]) -> bool:
        """May the job lose ``more`` (besides what it lost already, in the session)?"""
        job = self.jobs[job_id]
        if not job.has_pod_group:
            return False
        if job.min_task_member and not elastic(job):
            return keeps_whole(job, more)
        left = self._spare.get(job_id)
        if left is None:
            left = 1 << 30 if below_minimum(job) else job.placed_count() - job.min_member
            self._spare[job_id] = left
        return len(more) <= left

    def touched(self, way: Way) -> None:
        """Forget the answers of the nodes ``way``'s evictions changed: every node of a
        job that gave a spare or was broken (the victims' nodes among them)."""
        for t in way.spares:
            if t.job_id in self._left:
                self._left[t.job_id] -= 1
                self._left_priority[t.job_id] -= t.priority
        jobs = {t.job_id for t in way.spares} | set(way.breaks)
        for job in jobs:
            self._spare.pop(job, None)
            for row in self.rows_of_job.get(job, ()):
                self._cache.pop(row, None)

    def room(self, broken: set[str]) -> IntVector:
        """What every candidate of the jobs not ``broken`` frees (a bound of what sparing
        can add)."""
        out: IntVector = np.zeros(len(self.slots.size), dtype=np.int64)
        for tasks in self.by_row.values():
            for t in tasks:
                if t.job_id not in broken:
                    out = out + self.vec[t.uid]
        return out

    def best(
        self,
        rows: IndexVector,
        free: IntMatrix,
        broken: set[str],
        evicted: set[str],
        *,
        allow_break: bool,
    ) -> Way | None:
        """The cheapest way over ``rows`` (``free``: their free room, in that order), or
        None when no node can get room for one more pod."""
        best: Way | None = None
        for i, row in enumerate(rows.tolist()):
            if row not in self.by_row:
                continue
            if row in self._cache:
                way = self._cache[row]
            else:
                way = self._way(row, free[i], broken, evicted, allow_break=allow_break)
                self._cache[row] = way
            if way is not None and (best is None or way.cost < best.cost):
                best = way
        return best

    def _way(
        self,
        row: int,
        free: IntVector,
        broken: set[str],
        evicted: set[str],
        *,
        allow_break: bool,
    ) -> Way | None:
        small = self.slots.pick(free)
        goal = self.slots.of(small) + 1
        room = small
        spares: list[TaskInfo] = []
        by_job: dict[str, list[TaskInfo]] = {}
        for t in self.by_row[row]:
            if t.job_id in broken or t.uid in evicted:
                continue
            # Spares taken in earlier rounds are evicted in the session: its counts show it.
            more = [*by_job.get(t.job_id, ()), t]
            if not self._can_spare(t.job_id, more):
                continue
            by_job[t.job_id] = more
            spares.append(t)
            room = [a + b for a, b in zip(room, self._small[t.uid], strict=True)]
            if self.slots.of(room) >= goal:
                return Way((0, len(spares), sum(x.priority for x in spares)), tuple(spares), ())
        if not allow_break:
            return None
        breaks: list[str] = []
        for job in self.jobs_of_row.get(row, ()):
            if job in broken or job not in self.wholes:
                continue
            breaks.append(job)
            taken = {x.uid for x in by_job.get(job, ())}
            for t in self._on_row[row, job]:
                if t.uid not in evicted and t.uid not in taken:
                    room = [a + b for a, b in zip(room, self._small[t.uid], strict=True)]
            if self.slots.of(room) >= goal:
                kept = tuple(t for t in spares if t.job_id not in breaks)
                victims = len(kept) + sum(self._left[b] for b in breaks)
                priorities = sum(t.priority for t in kept) + sum(
                    self._left_priority[b] for b in breaks
                )
                return Way((len(breaks), victims, priorities), kept, tuple(breaks))
        return None
