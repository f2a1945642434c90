"""JobInfo: a gang (a PodGroup, or a lone pod as a gang of one) (layer 0)."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.api.resource import ZERO, Resource
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import ALIVE, COUNTS_FOR_GANG, EVICTABLE, KEEPS_GANG_GOING


class PodGroupPhase(enum.Enum):
    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    COMPLETED = "Completed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """Where a gang must (``required_level``) or should (``preferred_level``) share one
    domain: label keys of the levels of Topology ``topology``.

    Two other shapes come from other APIs and are resolved against the cluster's
    Topologies by the ``topology`` plugin: with ``tier`` or ``tier_name`` set (Volcano's
    ``networkTopology``), the level is the ``tier``-th narrowest of ``topology`` (or of the
    only Topology when ``topology`` is ""), or the level whose name is ``tier_name``,
    preferred rather than required when ``soft``; with ``topology`` "" and no tier,
    ``required_level`` is a node label key on its own (a ``scheduling.k8s.io`` PodGroup's
    ``schedulingConstraints.topology``)."""

    topology: str
    required_level: str = ""
    preferred_level: str = ""
    tier: int = 0
    tier_name: str = ""
    soft: bool = False


@dataclass(slots=True)
class JobInfo:
    """A gang. ``uid`` is ``namespace/name`` of its PodGroup, or of the lone pod.

    ``tasks`` maps pod uid to TaskInfo. ``has_pod_group`` is False for a lone pod, which
    is a gang of one and needs no enqueue.
    """

    uid: str
    namespace: str
    name: str
    queue: str
    min_member: int = 1
    min_task_member: dict[str, int] = field(default_factory=dict)
    min_resources: Resource = ZERO
    priority: int = 0
    priority_class: str = ""
    creation: float = 0.0
    phase: PodGroupPhase = PodGroupPhase.PENDING
    has_pod_group: bool = False
    topology: TopologyConstraint | None = None
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    pod_group_uid: str = ""
    conditions: tuple[tuple[str, str, str, str], ...] = ()
    """The PodGroup's conditions as last seen: (type, status, reason, message)."""
    problem: str = ""
    """Why the job cannot be scheduled at all, found when building it (a missing PodGroup)."""

    def add_task(self, task: TaskInfo) -> None:
        self.tasks[task.uid] = task

    def remove_task(self, uid: str) -> None:
        self.tasks.pop(uid, None)

    def count(self, statuses: frozenset[TaskStatus]) -> int:
        return sum(1 for t in self.tasks.values() if t.status in statuses)

    def placed_count(self) -> int:
        """Tasks that count toward readiness: allocated, binding, bound, running, succeeded."""
        return self.count(COUNTS_FOR_GANG)

    def placed_by_role(self, extra: frozenset[TaskStatus] = frozenset()) -> Counter[str]:
        statuses = COUNTS_FOR_GANG | extra
        return Counter(t.role for t in self.tasks.values() if t.status in statuses)

    @property
    def elastic(self) -> bool:
        """Is the gang elastic: ``minMember`` below the sum of its ``minTaskMember``? Then
        it counts ``minMember`` only, never a role's minimum: to be tried, to be placed,
        to be spared by evictions, to run (Volcano's rule: its ``CheckTaskValid``,
        ``CheckTaskReady`` and ``CheckTaskPipelined`` skip the task minimums then, and
        its job controller writes each task's minimum as its replicas, so a job of
        ``minAvailable`` 3 and 6 replicas is such a gang). The same rule for every API."""
        return bool(self.min_task_member) and self.min_member < sum(self.min_task_member.values())

    def role_minimums(self) -> dict[str, int]:
        """The per-role minimums that bind (``minTaskMember``): none for an elastic gang,
        whose minMember is below their sum (Volcano skips task minimums then)."""
        return {} if self.elastic else dict(self.min_task_member)

    def minimums_first(self, ordered: Sequence[TaskInfo]) -> list[TaskInfo]:
        """``ordered`` (tasks of this job still to place, in task order) with, first, as
        many of each role as it still lacks of its minimum (its members placed or
        nominated already, not in ``ordered``, counted), then the rest; each part in the
        order given. So a gang whose workers were created before its ps places the ps
        before a surplus worker takes its room. Used by allocate, backfill and the victim
        search alike; a gang without ``minTaskMember`` keeps the order given. An elastic
        gang is ordered so too: where its role minimums do not bind, the order costs
        nothing (:meth:`role_minimums` is what binds)."""
        minimums = self.min_task_member
        if not minimums:
            return list(ordered)
        given = {t.uid for t in ordered}
        held = COUNTS_FOR_GANG | {TaskStatus.PIPELINED}
        have = Counter(
            t.role for t in self.tasks.values() if t.status in held and t.uid not in given
        )
        first: list[TaskInfo] = []
        rest: list[TaskInfo] = []
        for t in ordered:
            if have[t.role] < minimums.get(t.role, 0):
                have[t.role] += 1
                first.append(t)
            else:
                rest.append(t)
        return first + rest

    def short_of_minimum(self, statuses: frozenset[TaskStatus]) -> bool:
        """Are the members in ``statuses`` fewer than ``minMember``, or, unless the gang
        is elastic, fewer than a role's ``minTaskMember``?"""
        if self.count(statuses) < self.min_member:
            return True
        if self.elastic or not self.min_task_member:
            return False
        by_role = Counter(t.role for t in self.tasks.values() if t.status in statuses)
        return any(by_role[r] < n for r, n in self.min_task_member.items())

    def held_by_gates(self) -> bool:
        """Are this job's pods still to be placed all held by scheduling gates (one at
        least, none pending or nominated)? Then no action tries it, yet it waits for
        something users must be told of (Kueue gates a job's pods until it admits it)."""
        waiting = [
            t.status
            for t in self.tasks.values()
            if t.sluice and t.status in (TaskStatus.PENDING, TaskStatus.PIPELINED, TaskStatus.GATED)
        ]
        return bool(waiting) and all(s is TaskStatus.GATED for s in waiting)

    def runs_below_minimum(self) -> bool:
        """Is this PodGroup's gang running below its minimum: some members running (bound,
        not being evicted), but fewer of them there or on their way
        (:data:`~scheduler.api.task_states.KEEPS_GANG_GOING`) than it needs? A member
        evicted, failed or deleted whose replacement is not placed leaves it so; such a
        gang cannot do its work and holds its room for nothing. A gang with a member
        that succeeded is finishing, not broken; a gang of one never runs below.

        Nor is a gang with a member whose eviction this scheduler has asked for and the
        API has not shown yet (releasing, not terminating): the call may fail and the
        member stay, so the gang is not known to be broken until that is settled. A
        member the API shows leaving (``deletionTimestamp``) no longer counts."""
        if not self.has_pod_group or not any(t.status in EVICTABLE for t in self.tasks.values()):
            return False
        for t in self.tasks.values():
            if t.status is TaskStatus.SUCCEEDED:
                return False
            if t.eviction_in_flight:
                return False
        return self.short_of_minimum(KEEPS_GANG_GOING)

    def valid_count(self) -> int:
        """Tasks that can still run: every task that has not failed."""
        return self.count(ALIVE)

    def pending_tasks(self) -> list[TaskInfo]:
        return [t for t in self.tasks.values() if t.status is TaskStatus.PENDING and t.sluice]

    def clone(self) -> JobInfo:
        """A copy with an empty task map; the snapshot fills it with cloned tasks."""
        return JobInfo(
            self.uid,
            self.namespace,
            self.name,
            self.queue,
            self.min_member,
            self.min_task_member,
            self.min_resources,
            self.priority,
            self.priority_class,
            self.creation,
            self.phase,
            self.has_pod_group,
            self.topology,
            {},
            self.pod_group_uid,
            self.conditions,
            self.problem,
        )

    def __repr__(self) -> str:
        return f"Job({self.uid} q={self.queue} min={self.min_member} tasks={len(self.tasks)})"
