"""The ``proportion`` plugin (layer 2): each queue's fair share of the cluster.

At session open every queue gets a *deserved* share, per resource dimension:

1. the cluster's capacity is that of ready, schedulable nodes;
2. a queue's demand is what it has allocated plus what its pending tasks request;
3. a queue with an explicit ``deserved`` gets min(deserved, demand, capability);
4. each queue first gets min(guarantee, demand); the guarantees of the others are
   reserved, so a queue can never be given what another is guaranteed;
5. the rest is water-filled by weight: every round each unsatisfied queue receives
   ``remaining * weight / total weight``, capped by its demand and its capability, and
   queues that reach their cap leave; rounds repeat until nothing is left or nobody
   can take more.

Then: queues are ordered by their dominant share (allocated / deserved); a task is
allocatable when the queue's allocation plus the task stays within its deserved share;
a PodGroup is enqueueable when its ``minResources`` fits the queue's room (capability,
less the others' guarantees, less what is allocated and reserved by inqueue gangs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.resource import ZERO, Resource, ResourceSum
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    JOB_ENQUEUEABLE,
    ON_ENQUEUE,
    QUEUE_ALLOCATABLE,
    QUEUE_ORDER,
    QUEUE_OVERUSED,
    HookSet,
    OrderKey,
    PluginContext,
    Vote,
)
from scheduler.framework.registry import NoArguments

_INF = 1 << 62


@dataclass(slots=True)
class QueueAttr:
    queue: QueueInfo
    allocated: Resource = ZERO
    demand: Resource = ZERO
    reserved: Resource = ZERO
    """minResources not yet allocated of the queue's Inqueue gangs."""
    deserved: Resource = ZERO
    limit: dict[str, int] = field(default_factory=dict)
    """Per dimension: capability, less the guarantees of the other queues."""
    nominated: dict[str, tuple[int, Resource]] = field(default_factory=dict)
    """Nominated tasks of the queue (uid -> priority, request), counted in ``allocated``."""
    nominated_priorities: Counter[int] = field(default_factory=Counter)
    """How many nominated tasks of each priority: the fast path of ``allocatable``."""

    def nominate(self, uid: str, priority: int, request: Resource) -> None:
        self.nominated[uid] = (priority, request)
        self.nominated_priorities[priority] += 1

    def unnominate(self, uid: str) -> None:
        held = self.nominated.pop(uid, None)
        if held is not None:
            self.nominated_priorities[held[0]] -= 1
            if not self.nominated_priorities[held[0]]:
                del self.nominated_priorities[held[0]]

    def share(self) -> float:
        worst = 0.0
        for name, used in self.allocated.items():
            d = self.deserved[name]
            if d <= 0:
                if used > 0:
                    return float("inf")
                continue
            worst = max(worst, used / d)
        return worst


def water_fill(
    total: int, demands: dict[str, int], weights: dict[str, int], floors: dict[str, int]
) -> dict[str, int]:
    """Split ``total`` among queues by weight, each capped by its demand.

    ``floors`` are given first (guarantees, fixed shares). Integer arithmetic; the last
    units that cannot be split by weight go one by one to the queue furthest below its
    weighted share. Deterministic: ties go by queue name.
    """
    got = {q: min(floors.get(q, 0), demands[q]) for q in demands}
    remaining = total - sum(got.values())
    active = sorted(q for q in demands if got[q] < demands[q] and weights.get(q, 0) > 0)
    while remaining > 0 and active:
        weight = sum(weights[q] for q in active)
        start = remaining
        for q in list(active):
            give = min(start * weights[q] // weight, demands[q] - got[q], remaining)
            got[q] += give
            remaining -= give
            if got[q] >= demands[q]:
                active.remove(q)
        if remaining == start:
            break
    # Whole units too few to split by weight go one at a time to the queue furthest below
    # its weighted share, so no unit that some queue asks for is left unassigned.
    while remaining > 0 and active:
        q = min(active, key=lambda q: (got[q] / weights[q], q))
        got[q] += 1
        remaining -= 1
        if got[q] >= demands[q]:
            active.remove(q)
    return got


class ProportionPlugin:
    name = "proportion"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments
        self.attrs: dict[str, QueueAttr] = {}
        self.total: Resource = ZERO
        self._jobs: Mapping[str, JobInfo] = {}

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        total = ZERO
        for node in context.nodes.values():
            if node.ready and not node.unschedulable:
                total = total + node.allocatable
                for t in node.tasks.values():
                    if not t.sluice:  # pods of other schedulers hold capacity no queue owns
                        total = total - t.request
        total = total.clamp()
        self.total = total
        self._jobs = context.jobs
        attrs = {name: QueueAttr(q) for name, q in context.queues.items()}
        allocated = {name: ResourceSum() for name in attrs}
        demand = {name: ResourceSum() for name in attrs}
        for job in context.jobs.values():
            attr = attrs.get(job.queue)
            if attr is None:
                continue
            q_alloc, q_demand = allocated[job.queue], demand[job.queue]
            job_alloc = ResourceSum() if job.has_pod_group else None
            for t in job.tasks.values():
                if t.status in COUNTED_FOR_PLUGINS:
                    if t.status is TaskStatus.PIPELINED:
                        attr.nominate(t.uid, t.priority, t.request)
                    q_alloc.add(t.request)
                    q_demand.add(t.request)
                    if job_alloc is not None:
                        job_alloc.add(t.request)
                elif t.status is TaskStatus.PENDING and t.sluice:
                    q_demand.add(t.request)
            if job_alloc is not None and job.phase is PodGroupPhase.INQUEUE:
                attr.reserved = attr.reserved + (job.min_resources - job_alloc.result()).clamp()
        for name, attr in attrs.items():
            attr.allocated = allocated[name].result()
            attr.demand = demand[name].result()
        self._share_out(attrs, total)
        self.attrs = attrs
        hooks.add(QUEUE_ORDER, self.queue_key)
        hooks.add(QUEUE_ALLOCATABLE, self.allocatable)
        hooks.add(QUEUE_OVERUSED, self.overused)
        hooks.add(JOB_ENQUEUEABLE, self.enqueueable)
        hooks.add(ON_ENQUEUE, self.enqueued)
        hooks.add_placement_handlers(self.on_place, self.on_unplace)

    def _share_out(self, attrs: dict[str, QueueAttr], total: Resource) -> None:
        guarantees = ZERO
        for a in attrs.values():
            guarantees = guarantees + a.queue.guarantee
        names = set(total)
        for a in attrs.values():
            names.update(a.demand)
        deserved: dict[str, dict[str, int]] = {q: {} for q in attrs}
        for r in sorted(names):
            demands: dict[str, int] = {}
            floors: dict[str, int] = {}
            weights: dict[str, int] = {}
            fixed = 0
            for q, a in attrs.items():
                others = guarantees[r] - a.queue.guarantee[r]
                cap = total[r] - others
                if a.queue.capability is not None and r in a.queue.capability:
                    cap = min(cap, a.queue.capability[r])
                a.limit[r] = max(cap, 0)
                want = min(a.demand[r], a.limit[r])
                if a.queue.deserved is not None and r in a.queue.deserved:
                    deserved[q][r] = min(a.queue.deserved[r], want)
                    fixed += deserved[q][r]
                    continue
                demands[q] = want
                floors[q] = a.queue.guarantee[r]
                weights[q] = a.queue.weight
            for q, n in water_fill(max(total[r] - fixed, 0), demands, weights, floors).items():
                deserved[q][r] = n
        for q, a in attrs.items():
            a.deserved = Resource(deserved[q])

    def close(self) -> None:
        self.attrs = {}
        self._jobs = {}

    def deserved(self, queue: str) -> Resource:
        return self.attrs[queue].deserved

    def allocated(self, queue: str) -> Resource:
        return self.attrs[queue].allocated

    def queue_key(self, queue: QueueInfo) -> OrderKey:
        attr = self.attrs.get(queue.name)
        return (-queue.priority, attr.share() if attr else float("inf"))

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Room in the queue's deserved share for ``task``. A nominated task is already
        counted; nominations of lower priority do not hold room against it (KEP-4832)."""
        attr = self.attrs.get(queue.name)
        if attr is None:
            return False
        acc = ResourceSum()
        acc.add(attr.allocated)
        if task.status is not TaskStatus.PIPELINED:
            acc.add(task.request)
        after = acc.result()
        if attr.nominated_priorities and min(attr.nominated_priorities) < task.priority:
            for uid, (prio, req) in attr.nominated.items():
                if uid != task.uid and prio < task.priority:
                    after = after - req
        deserved = attr.deserved
        return all(after[r] <= deserved[r] for r in task.request)

    def overused(self, queue: QueueInfo) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None:
            return True
        return bool(attr.deserved) and attr.deserved.fits_in(attr.allocated)

    def enqueueable(self, job: JobInfo) -> Vote:
        attr = self.attrs.get(job.queue)
        if attr is None or attr.queue.state != "Open":
            return Vote.REJECT
        if job.min_resources.is_zero():
            return Vote.PERMIT
        after = attr.allocated + attr.reserved + job.min_resources
        if all(after[r] <= attr.limit.get(r, _INF) for r in job.min_resources):
            return Vote.PERMIT
        return Vote.REJECT

    def enqueued(self, job: JobInfo) -> None:
        attr = self.attrs.get(job.queue)
        if attr is not None:
            attr.reserved = attr.reserved + job.min_resources

    def on_place(self, task: TaskInfo, node: NodeInfo) -> None:
        attr = self._attr_of(task)
        if attr is not None:
            attr.allocated = attr.allocated + task.request
            if task.status is TaskStatus.PIPELINED:
                attr.nominate(task.uid, task.priority, task.request)

    def on_unplace(self, task: TaskInfo, node: NodeInfo) -> None:
        attr = self._attr_of(task)
        if attr is not None:
            attr.allocated = attr.allocated - task.request
            attr.unnominate(task.uid)

    def _attr_of(self, task: TaskInfo) -> QueueAttr | None:
        job = self._jobs.get(task.job_id)
        return self.attrs.get(job.queue) if job is not None else None
