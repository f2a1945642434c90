"""The ``proportion`` plugin (layer 2): each queue's fair share of the cluster, down the tree.

At session open every queue of the tree (:mod:`scheduler.api.queue_tree`) gets a
*deserved* share, per resource dimension:

1. the cluster's capacity is that of ready, schedulable nodes, less the pods of other
   schedulers; DRA devices count as the resource ``deviceclass/NAME`` (the devices each
   DeviceClass selects on those nodes), and a pod's claims as the devices they hold or
   ask of each class (:mod:`scheduler.api.dra.pods`; a claim shared by several pods
   counts once, for the first of them by uid), so ``deserved``, ``capability`` and
   ``guarantee`` may name them;
2. a leaf queue's demand is what it has allocated plus what its pending tasks request;
   a parent's is the sum of its children's; each is capped by the queue's
   ``capability`` (a ``capability`` of 0 closes the resource);
3. a queue's floor is its ``guarantee``, and at least the sum of its children's floors:
   a guarantee is reserved all the way up, whether the queue asks for it now or not;
4. from the root down, a parent's share is split among its children: a child with an
   explicit ``deserved`` gets min(deserved, demand); the others get their floor first
   (the others' floors are never given away), then the rest by weight, each capped by its
   demand and by what its siblings' floors leave, in rounds until nothing is left
   (:func:`water_fill`).

Then, for the actions:

- queues are ordered by priority, then by their dominant share (allocated / deserved),
  then by how much of the cluster they lack of their shares (more first);
- a task is *allocatable* while its queue's allocation plus the task stays within its
  deserved share; a queue is *overused* once its allocation covers its deserved share;
- a task may *borrow* beyond its queue's share from room no queue below its share could
  use (the allocate action asks after every queue had its chance): up to the capabilities
  of the queue and its ancestors, never into other queues' unused floors; what a queue
  holds above its share is the first to be reclaimed;
- a PodGroup is *enqueueable* when its ``minResources`` (without any: the DRA devices
  its pods' claims ask) fits the queue's limit (the capabilities on its path, less the
  floors of every other queue), and every ancestor's capability still holds what its
  subtree uses and has reserved for admitted gangs;
- a queue *may reclaim* for a task when it is below its deserved share in a contended
  resource the task asks for (one some queue deserves less of than it asks for), and
  its capabilities hold the task;
- of the candidates for reclaim, in the order given, those are allowed whose eviction
  keeps the reclaim fair (:mod:`scheduler.plugins.fair_reclaim`: max-min fairness over
  the queues' satisfactions with whole pods, then what they hold within their shares),
  leaves their queues (and every ancestor below the reclaiming queue's branch) at or
  above their guarantees, and whose queues are ``reclaimable``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.api.dra.pods import claims_of_pod, class_capacity, device_counts
from scheduler.api.dra.view import DraView
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.queue_tree import ROOT, queue_tree
from scheduler.api.resource import ZERO, Resource, ResourceSum
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    JOB_ENQUEUEABLE,
    ON_ENQUEUE,
    QUEUE_ALLOCATABLE,
    QUEUE_BORROWABLE,
    QUEUE_ORDER,
    QUEUE_OVERUSED,
    QUEUE_RECLAIMS,
    QUEUE_SHARE,
    RECLAIMABLE,
    HookSet,
    OrderKey,
    PluginContext,
    Vote,
)
from scheduler.framework.registry import NoArguments
from scheduler.plugins.fair_reclaim import ReclaimBudget, Standing

_INF = 1 << 62


@dataclass(slots=True)
class QueueAttr:
    queue: QueueInfo
    allocated: Resource = ZERO
    """Placed or nominated, summed over the leaves below (for a parent)."""
    demand: Resource = ZERO
    reserved: Resource = ZERO
    """minResources not yet allocated of the Inqueue gangs of the queue (for a parent: of
    its leaves)."""
    deserved: Resource = ZERO
    floor: Resource = ZERO
    limit: dict[str, int] = field(default_factory=dict)
    """Per dimension: the capabilities on the path, less the floors of every other queue."""
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
        return dominant_share(self.allocated, self.deserved)


def dominant_share(allocated: Mapping[str, int], deserved: Mapping[str, int]) -> float:
    """The largest ratio of ``allocated`` to ``deserved`` over the resources allocated:
    inf when something is allocated that nothing is deserved of (a queue holding what it
    deserves none of is above its share without bound, and is ordered after, and
    reclaimed from before, every queue that deserves what it holds); 1 for a queue that
    holds nothing and deserves nothing (it has its share: all of nothing); 0 for one
    that holds nothing of a positive share."""
    worst = 0.0
    for name, used in allocated.items():
        d = deserved.get(name, 0)
        if d <= 0:
            if used > 0:
                return float("inf")
            continue
        worst = max(worst, used / d)
    if worst == 0.0 and not any(used > 0 for used in allocated.values()):
        return 0.0 if any(d > 0 for d in deserved.values()) else 1.0
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
        """Every queue of the tree (parents included), by name."""
        self.tree = queue_tree({})
        self.total: Resource = ZERO
        self._jobs: Mapping[str, JobInfo] = {}
        self._paths: dict[str, tuple[str, ...]] = {}
        """Each queue and its ancestors, bottom up."""
        self._dra: DraView | None = None
        self._requests: dict[str, Resource] = {}
        """Requests with the pod's DRA devices counted (``deviceclass/NAME``), by uid."""
        self._charged: dict[str, str] = {}
        """DRA claim key -> the pod its devices are counted for: a claim shared by several
        pods counts once, for the first of them by uid."""
        self.contended: frozenset[str] = frozenset()
        """The resources some queue deserves less of than it asks for (its demand capped by
        its capability): the only ones a reclaim is judged in."""

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        total = ZERO
        self._dra = dra = context.dra
        self._requests = {}
        self._charged = self._charge_claims(context.jobs) if dra is not None else {}
        devices: list[int] = []
        for node in context.nodes.values():
            if node.ready and not node.unschedulable:
                total = total + node.allocatable
                if dra is not None:
                    devices.extend(dra.inventory.node_devices(node.name, node.labels))
                for t in node.tasks.values():
                    if not t.sluice:  # pods of other schedulers hold capacity no queue owns
                        total = total - self._request(t)
        if dra is not None:
            total = total + Resource(class_capacity(dra.inventory, sorted(set(devices))))
        self.total = total = total.clamp()
        self._jobs = context.jobs
        self.tree = tree = queue_tree(context.queues)
        attrs = {name: QueueAttr(context.queues[name]) for name in tree.top_down()}
        self._paths = {name: (name, *tree.ancestors(name)) for name in attrs}
        allocated = {name: ResourceSum() for name in attrs}
        demand = {name: ResourceSum() for name in attrs}
        for job in context.jobs.values():
            path = self._paths.get(job.queue)
            if path is None:
                continue
            job_alloc = ResourceSum() if job.has_pod_group else None
            for t in job.tasks.values():
                if t.status in COUNTED_FOR_PLUGINS:
                    if t.status is TaskStatus.PIPELINED:
                        attrs[job.queue].nominate(t.uid, t.priority, self._request(t))
                    for q in path:
                        allocated[q].add(self._request(t))
                        demand[q].add(self._request(t))
                    if job_alloc is not None:
                        job_alloc.add(self._request(t))
                elif t.status is TaskStatus.PENDING and t.sluice:
                    for q in path:
                        demand[q].add(self._request(t))
            if job_alloc is not None and job.phase is PodGroupPhase.INQUEUE:
                unplaced = (job.min_resources - job_alloc.result()).clamp()
                for q in path:
                    attrs[q].reserved = attrs[q].reserved + unplaced
        for name, attr in attrs.items():
            attr.allocated = allocated[name].result()
            attr.demand = demand[name].result()
        self.attrs = attrs
        self._share_out(total)
        hooks.add(QUEUE_ORDER, self.queue_key)
        hooks.add(QUEUE_ALLOCATABLE, self.allocatable)
        hooks.add(QUEUE_BORROWABLE, self.borrowable)
        hooks.add(QUEUE_OVERUSED, self.overused)
        hooks.add(QUEUE_SHARE, self.queue_share)
        hooks.add(QUEUE_RECLAIMS, self.reclaims)
        hooks.add(JOB_ENQUEUEABLE, self.enqueueable)
        hooks.add(ON_ENQUEUE, self.enqueued)
        hooks.add(RECLAIMABLE, self.reclaimable)
        hooks.add_placement_handlers(self.on_place, self.on_unplace)

    # Deserved shares --------------------------------------------------------------------

    def _share_out(self, total: Resource) -> None:
        attrs = self.attrs
        names = set(total)
        for a in attrs.values():
            names.update(a.demand)
        deserved: dict[str, dict[str, int]] = {q: {} for q in attrs}
        floors: dict[str, dict[str, int]] = {q: {} for q in attrs}
        contended: set[str] = set()
        for r in sorted(names):
            capped = self._capped_demands(r)
            floor = self._floors(r)
            for q in attrs:
                floors[q][r] = floor[q]
            self._fill(ROOT, total[r], r, capped=capped, floor=floor, deserved=deserved)
            if any(deserved[q][r] < capped[q] for q in attrs):
                contended.add(r)
        self.contended = frozenset(contended)
        for q, a in attrs.items():
            a.deserved = Resource(deserved[q])
            a.floor = Resource(floors[q])
        for q, a in attrs.items():
            a.limit = {r: self._limit(q, r, total[r]) for r in sorted(names)}

    def _capped_demands(self, r: str) -> dict[str, int]:
        """Each queue's demand of ``r`` (a parent's: its children's), capped by its
        capability, bottom up."""
        out: dict[str, int] = {}
        for q in reversed(list(self.tree.top_down())):
            a = self.attrs[q]
            kids = self.tree.children.get(q, ())
            want = sum(out[c] for c in kids) if kids else a.demand[r]
            cap = a.queue.capability
            if cap is not None and r in cap:
                want = min(want, cap[r])
            out[q] = want
        return out

    def _floors(self, r: str) -> dict[str, int]:
        """Each queue's floor of ``r``: its guarantee, and at least its children's."""
        out: dict[str, int] = {}
        for q in reversed(list(self.tree.top_down())):
            kids = self.tree.children.get(q, ())
            out[q] = max(self.attrs[q].queue.guarantee[r], sum(out[c] for c in kids))
        return out

    def _fill(
        self,
        parent: str,
        amount: int,
        r: str,
        *,
        capped: dict[str, int],
        floor: dict[str, int],
        deserved: dict[str, dict[str, int]],
    ) -> None:
        """Split ``amount`` of ``r`` among ``parent``'s children, then recurse."""
        kids = self.tree.children.get(parent, ())
        if not kids:
            return
        floors_total = sum(floor[c] for c in kids)
        demands: dict[str, int] = {}
        floors: dict[str, int] = {}
        weights: dict[str, int] = {}
        fixed = 0
        for c in kids:
            queue = self.attrs[c].queue
            want = min(capped[c], max(amount - (floors_total - floor[c]), 0))
            if queue.deserved is not None and r in queue.deserved:
                deserved[c][r] = min(queue.deserved[r], want)
                fixed += deserved[c][r]
                continue
            demands[c] = want
            floors[c] = floor[c]
            weights[c] = queue.weight
        # A floor its queue does not ask for now is still reserved: nobody else gets it.
        withheld = sum(max(floor[c] - capped[c], 0) for c in kids)
        shared = max(amount - fixed - withheld, 0)
        for c, n in water_fill(shared, demands, weights, floors).items():
            deserved[c][r] = n
        for c in kids:
            self._fill(c, deserved[c][r], r, capped=capped, floor=floor, deserved=deserved)

    def _limit(self, q: str, r: str, total: int) -> int:
        """The capabilities on ``q``'s path, less every other queue's floor of ``r``."""
        limit = total - self._others_floors(q, r)
        for name in self._paths[q]:
            cap = self.attrs[name].queue.capability
            if cap is not None and r in cap:
                limit = min(limit, cap[r])
        return max(limit, 0)

    def _others_floors(self, q: str, r: str, *, unused: bool = False) -> int:
        """The floors of ``r`` of every queue beside ``q``'s path (its siblings and its
        ancestors' siblings); with ``unused``, only the part they do not use."""
        out = 0
        for name in self._paths[q]:
            parent = self.tree.parents.get(name, ROOT)
            for sib in self.tree.children.get(parent, ()):
                if sib != name:
                    a = self.attrs[sib]
                    out += max(a.floor[r] - a.allocated[r], 0) if unused else a.floor[r]
        return out

    def close(self) -> None:
        self._requests = {}
        self._charged = {}
        self._dra = None
        self.attrs = {}
        self._jobs = {}
        self._paths = {}
        self.contended = frozenset()

    # Read-only views (tests, other plugins) -----------------------------------------------

    def deserved(self, queue: str) -> Resource:
        return self.attrs[queue].deserved

    def allocated(self, queue: str) -> Resource:
        return self.attrs[queue].allocated

    # Hooks ----------------------------------------------------------------------------

    def queue_key(self, queue: QueueInfo) -> OrderKey:
        """Higher queue priority first; then the lower share (allocated / deserved);
        then, of queues equally far from their shares, the one lacking more of the
        cluster (what it lacks of its share, as a part of the cluster, summed over the
        resources). Three queues on two nodes of 8 GPUs, one holding all 16 and the
        others at zero: served by name, the queue that deserves 2 reclaimed a node it
        could not keep, and the one that deserves 8 the other, leaving the first below
        its share, which then took its node back (the fairness property test)."""
        attr = self.attrs.get(queue.name)
        if attr is None:
            return (-queue.priority, float("inf"), 0.0)
        total = self.total
        lacking = sum(
            (n - attr.allocated[r]) / total[r]
            for r, n in attr.deserved.items()
            if n > attr.allocated[r] and total[r] > 0
        )
        return (-queue.priority, attr.share(), -lacking)

    def queue_share(self, queue: QueueInfo) -> QueueShare | None:
        attr = self.attrs.get(queue.name)
        if attr is None:
            return None
        return QueueShare(attr.deserved, attr.allocated, attr.share())

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Room in the queue's deserved share for ``task``. A nominated task is already
        counted; nominations of lower priority do not hold room against it (KEP-4832)."""
        attr = self.attrs.get(queue.name)
        if attr is None:
            return False
        acc = ResourceSum()
        acc.add(attr.allocated)
        if task.status is not TaskStatus.PIPELINED:
            acc.add(self._request(task))
        after = acc.result()
        if attr.nominated_priorities and min(attr.nominated_priorities) < task.priority:
            for uid, (prio, req) in attr.nominated.items():
                if uid != task.uid and prio < task.priority:
                    after = after - req
        deserved = attr.deserved
        return all(after[r] <= deserved[r] for r in self._request(task))

    def borrowable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``task`` go beyond its queue's share, into room nobody below its share
        could use: within the capabilities of the queue and its ancestors, and leaving
        every other queue's unused floor free. A nominated task is counted already (a
        reclaim nominated a pod larger than what was left of its queue's share: it binds
        once its victims are gone)."""
        attr = self.attrs.get(queue.name)
        if attr is None or queue.state != "Open":
            return False
        req = ZERO if task.status is TaskStatus.PIPELINED else self._request(task)
        for name in self._paths[queue.name]:
            a = self.attrs[name]
            cap = a.queue.capability
            if cap is not None and any(
                r in cap and a.allocated[r] + n > cap[r] for r, n in req.items()
            ):
                return False
        for r, n in req.items():
            used = sum(self.attrs[t].allocated[r] for t in self.tree.children.get(ROOT, ()))
            if used + n + self._others_floors(queue.name, r, unused=True) > self.total[r]:
                return False
        return True

    def overused(self, queue: QueueInfo) -> bool:
        attr = self.attrs.get(queue.name)
        if attr is None:
            return True
        return bool(attr.deserved) and attr.deserved.fits_in(attr.allocated)

    def enqueueable(self, job: JobInfo) -> Vote:
        attr = self.attrs.get(job.queue)
        if attr is None or attr.queue.state != "Open":
            return Vote.REJECT
        need = self._admitted(job)
        if need.is_zero():
            return Vote.PERMIT
        after = attr.allocated + attr.reserved + need
        if not all(after[r] <= attr.limit.get(r, _INF) for r in need):
            return Vote.REJECT
        # every ancestor's capability holds what its whole subtree uses and reserves
        for name in self._paths[job.queue][1:]:
            a = self.attrs[name]
            cap = a.queue.capability
            if cap is None:
                continue
            above = a.allocated + a.reserved + need
            if any(r in cap and above[r] > cap[r] for r in need):
                return Vote.REJECT
        return Vote.PERMIT

    def enqueued(self, job: JobInfo) -> None:
        need = self._admitted(job)
        for name in self._paths.get(job.queue, ()):
            a = self.attrs[name]
            a.reserved = a.reserved + need

    def _admitted(self, job: JobInfo) -> Resource:
        """What admitting ``job`` reserves in its queue: its ``minResources``; for a job
        without any, the DRA devices its pods' claims ask (``deviceclass/NAME``), so that
        a DRA-only job its queue's capability cannot hold waits at the gate, as
        Volcano's capacity plugin keeps it (TestJobEnqueueableChecksDRAWithoutMinResources)."""
        if not job.min_resources.is_zero() or self._dra is None:
            return job.min_resources
        devices = ResourceSum()
        for t in job.tasks.values():
            if t.spec.resource_claims and t.status is TaskStatus.PENDING:
                devices.add((self._request(t) - t.request).clamp())
        return devices.result()

    def reclaims(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """May ``queue`` take room for ``task`` by reclaim: is it below its deserved share
        in a contended resource ``task`` asks for (so that some reclaim for it can be
        fair)? ``task`` may be larger than what is left of the share (it then ends above
        the share by less than itself); its capabilities are judged where it is placed,
        with the victims gone (:meth:`borrowable`)."""
        attr = self.attrs.get(queue.name)
        if attr is None or queue.state != "Open":
            return False
        return any(
            n > 0 and r in self.contended and attr.allocated[r] < attr.deserved[r]
            for r, n in self._request(task).items()
        )

    def reclaimable(
        self, reclaimers: Sequence[TaskInfo], candidates: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Of ``candidates`` (in the order given), those that may be evicted for
        ``reclaimers`` (pods of one job of another queue, placed by the same reclaim):
        each kept while the reclaim of the ones kept so far stays fair, as the session
        stands (:class:`~scheduler.plugins.fair_reclaim.ReclaimBudget`: the queues'
        satisfactions better in the leximin order, or the same with more held within
        the shares; for reclaimers larger than what is left of their queue's share, no
        queue losing anything within its own), keeps every queue it takes from, and each
        ancestor below the branch it shares with the reclaimers' queue, at or above its
        guarantee, and none of them says ``reclaimable: false``."""
        job = self._jobs.get(reclaimers[0].job_id) if reclaimers else None
        mine = self._paths.get(job.queue, ()) if job is not None else ()
        if not mine:
            return []
        total = ResourceSum()
        for t in reclaimers:
            total.add(self._request(t))
        gain = total.result()
        attr = self.attrs[mine[0]]
        fits = all(attr.allocated[r] + n <= attr.deserved[r] for r, n in gain.items())
        budget = ReclaimBudget(self._standing, self.contended, mine, gain, within_share=fits)
        if not budget.gains():
            return []
        out: list[TaskInfo] = []
        for t in candidates:
            owner = self._jobs.get(t.job_id)
            path = self._paths.get(owner.queue) if owner is not None else None
            if path and budget.take(path, self._request(t)):
                out.append(t)
        return out

    def _standing(self, q: str) -> Standing:
        a = self.attrs[q]
        return Standing(a.allocated, a.deserved, a.queue.guarantee, a.queue.reclaimable)

    def on_place(self, task: TaskInfo, node: NodeInfo) -> None:
        path = self._path_of(task)
        for q in path:
            attr = self.attrs[q]
            attr.allocated = attr.allocated + self._request(task)
        if path and task.status is TaskStatus.PIPELINED:
            self.attrs[path[0]].nominate(task.uid, task.priority, self._request(task))

    def on_unplace(self, task: TaskInfo, node: NodeInfo) -> None:
        path = self._path_of(task)
        for q in path:
            attr = self.attrs[q]
            attr.allocated = attr.allocated - self._request(task)
        if path:
            self.attrs[path[0]].unnominate(task.uid)

    def _charge_claims(self, jobs: Mapping[str, JobInfo]) -> dict[str, str]:
        assert self._dra is not None
        out: dict[str, str] = {}
        for job in jobs.values():
            for t in job.tasks.values():
                if t.spec.resource_claims:
                    for key in claims_of_pod(t, self._dra.claims).keys:
                        if key not in out or t.uid < out[key]:
                            out[key] = t.uid
        return out

    def _request(self, task: TaskInfo) -> Resource:
        """``task``'s request, with the devices of its DRA claims counted per DeviceClass
        (``deviceclass/NAME``); memoized per session (claims change between cycles)."""
        if not task.spec.resource_claims or self._dra is None:
            return task.request
        found = self._requests.get(task.uid)
        if found is None:
            claims = self._dra.claims
            keys = [
                k
                for k in claims_of_pod(task, claims).keys
                if self._charged.get(k, task.uid) == task.uid
            ]
            found = task.request + Resource(device_counts([claims[k] for k in keys]))
            self._requests[task.uid] = found
        return found

    def _path_of(self, task: TaskInfo) -> tuple[str, ...]:
        job = self._jobs.get(task.job_id)
        return self._paths.get(job.queue, ()) if job is not None else ()
