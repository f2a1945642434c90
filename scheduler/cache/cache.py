"""SchedulerCache: live cluster state from events; a snapshot per cycle (layer 2).

Backends (``scheduler.kube`` informers, ``scheduler.sim``'s watcher) call
:meth:`SchedulerCache.handle` with every watch event, in order, from one task. The loop
calls :meth:`snapshot` at the start of a cycle, and :meth:`assume` and :meth:`forget` (the
:class:`~scheduler.framework.effects.EffectLedger` port) as it hands effects on and as
their calls fail. Nothing here awaits.

The pod state machine, as kube-scheduler's cache (each arrow an effect assumed, or
forgotten when its call failed, or an event)::

    pending ──assume Bind──▶ assumed (BINDING) ──event with nodeName──▶ bound/running
                                 └──forget Bind (bind failed)──▶ pending
    bound/running ──assume Evict──▶ releasing ──DELETED event──▶ gone
                                 └──forget Evict (eviction failed)──▶ running
    pending ──assume Nominate──▶ nominated (PIPELINED on the node)
                                 └──forget Nominate, assume ClearNomination──▶ pending

An assumed pod uses its node at once, so the next cycle sees the room taken even before
the API call returns. Objects that cannot be converted are not applied: they are kept
in :attr:`rejected` with a one-line reason, and the cache carries on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from scheduler.api import labels as L
from scheduler.api.convert import (
    budget_from_object,
    claim_statuses,
    job_from_pod_group,
    node_from_object,
    parse_time,
    pod_status,
    queue_from_object,
    ref,
    scheduling_gates,
    task_from_pod,
    topology_from_object,
)
from scheduler.api.disruption import pod_ready
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.errors import InvalidInputError
from scheduler.api.foreign import Converted, coscheduling, kubernetes, volcano
from scheduler.api.group_apis import (
    KUBERNETES,
    SCHEDULER_PLUGINS,
    SLUICE,
    VOLCANO,
    GroupApi,
    api_of_job,
    kind_key,
)
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.membership import pod_preemptable, pod_queue, pod_role
from scheduler.api.node import NodeInfo
from scheduler.api.owners import grouper_wait
from scheduler.api.pod import parse_pod_spec
from scheduler.api.queue import QueueInfo
from scheduler.api.resource import MAX_AMOUNT
from scheduler.api.shards import Sharding
from scheduler.api.snapshot import Snapshot, TopologyInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import USES_NODE
from scheduler.cache.dra import KINDS as DRA_KINDS
from scheduler.cache.dra import DraStore
from scheduler.cache.membership import Membership
from scheduler.cache.shard_view import ShardView
from scheduler.cache.snapshots import Copies, budgets_of, jobs_of
from scheduler.cache.specs import SpecMemo
from scheduler.framework.effects import (
    Bind,
    ClearNomination,
    Effect,
    Evict,
    Nominate,
    SetPhase,
)

Obj = Mapping[str, Any]

GroupConverter = Callable[[Obj, Mapping[str, int]], Converted[JobInfo | None]]
"""A PodGroup of some API to its gang (None: its pods are scheduled alone), with what of
it is not honoured."""
QueueConverter = Callable[[Obj], Converted[QueueInfo | None]]


def _sluice_group(obj: Obj, priority_classes: Mapping[str, int]) -> Converted[JobInfo | None]:
    return Converted(job_from_pod_group(obj, priority_classes))


def _sluice_queue(obj: Obj) -> Converted[QueueInfo | None]:
    return Converted(queue_from_object(obj))


GROUP_KINDS: dict[str, tuple[GroupApi, GroupConverter]] = {
    SLUICE.pod_group_key: (SLUICE, _sluice_group),
    VOLCANO.pod_group_key: (VOLCANO, volcano.job_from_pod_group),
    SCHEDULER_PLUGINS.pod_group_key: (SCHEDULER_PLUGINS, coscheduling.job_from_pod_group),
    KUBERNETES.pod_group_key: (KUBERNETES, kubernetes.job_from_pod_group),
}
"""PodGroup kinds by kind key: their API and converter."""
QUEUE_KINDS: dict[str, tuple[GroupApi, QueueConverter]] = {
    SLUICE.queue_key: (SLUICE, _sluice_queue),
    VOLCANO.queue_key: (VOLCANO, volcano.queue_from_queue),
}
"""Queue kinds by kind key, Sluice's first: of two Queues of one name, the first API's
is used."""


@dataclass(frozen=True, slots=True)
class ObjectNotice:
    """An object the cache set aside (``what`` = ``rejected``: not applied) or applied
    with a change (``adjusted``), named ``Kind ns/name``, and why."""

    what: str
    object: str
    reason: str


def _same_metadata(task: TaskInfo, pod: Obj) -> bool:
    """Are the pod's labels and annotations those ``task`` was made from?"""
    meta = pod["metadata"]
    return task.labels == (meta.get("labels") or {}) and task.annotations == (
        meta.get("annotations") or {}
    )


def _queue_where(name: str, api: GroupApi) -> str:
    return f"Queue {name}" if api is SLUICE else f"Queue {name} ({api.api_version})"


def _labels_of(obj: Obj | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class SchedulerCache:
    def __init__(
        self,
        scheduler_name: str = L.SCHEDULER_NAME,
        *,
        wait_for_pod_grouper: bool = True,
        sharding: Sharding | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.shards = ShardView(sharding)
        """What this shard of the scheduler takes (everything when not sharded):
        :mod:`scheduler.cache.shard_view`."""
        self.wait_for_pod_grouper = wait_for_pod_grouper
        """Pods made by a controller wait until the pod grouper has grouped them
        (:func:`~scheduler.api.owners.grouper_wait`; the configuration's
        ``waitForPodGrouper``)."""
        self.nodes: dict[str, NodeInfo] = {}
        self.tasks: dict[str, TaskInfo] = {}
        self.pod_groups: dict[str, JobInfo] = {}
        """The gangs of the PodGroups of every API, by job id."""
        self.pod_group_objects: dict[str, Obj] = {}
        """Every PodGroup object of every API as last seen, by job id."""
        self.basic_groups: set[str] = set()
        """PodGroups (job ids) whose pods are scheduled alone: not gangs."""
        self.queues: dict[str, QueueInfo] = {}
        self._queue_specs: dict[str, object] = {}
        self.queue_objects: dict[str, Obj] = {}
        """The Queue objects as last seen, of the API each name is taken from (their
        status is what the reporter diffs)."""
        self._queue_sources: dict[str, dict[str, Obj]] = {}
        """Queue objects by name, then by kind key (Sluice's and Volcano's may share a
        name: :data:`QUEUE_KINDS` says which is used)."""
        self._membership = Membership()
        self.priority_classes: dict[str, int] = {}
        self.budgets: dict[str, Obj] = {}
        self.topologies: dict[str, TopologyInfo] = {}
        self.rejected: dict[str, str] = {}
        """Objects not applied because they do not convert: ``Kind ns/name`` -> reason."""
        self.adjusted: dict[str, str] = {}
        """Objects applied with a change (a node's absurd allocatable capped): ``Kind
        ns/name`` -> what was changed."""
        self._news: list[ObjectNotice] = []
        """Entries of :attr:`rejected` and :attr:`adjusted` new or changed since the last
        :meth:`take_notices`."""
        self.on_change: Callable[[], None] | None = None
        self.generation = 0
        """Watch events that could let an unschedulable job fit now (room freed; nodes,
        queues, PodGroups, budgets changed), and binds that failed, counted: a job parked
        at an older generation is tried again (:mod:`scheduler.loop.queue.parking`). A new
        pending pod of ours is not counted: it is news for its own job only
        (:meth:`take_fresh_jobs`)."""
        self.revision = 0
        """Every change of what a snapshot would show, counted: each watch event and
        relist, each assumption and forgetting (:class:`~scheduler.loop.idle.IdleCycles`
        skips a cycle while it has not moved since a cycle that had nothing to do)."""
        self._fresh_jobs: set[str] = set()
        self._fresh_only = False
        """Called after an event that may let something new be scheduled (wakes the loop)."""
        self.on_pod_deleted: list[Callable[[str], None]] = []
        """Called with the uid of every pod whose deletion is seen (the preemption gates of
        the loop's scheduling queue)."""
        self._spec_src: dict[str, bytes | tuple[object, ...]] = {}
        """The key (:meth:`SpecMemo.key`) of the spec each task was made from."""
        self._specs = SpecMemo()
        """Parsed specs, one per distinct spec (:mod:`scheduler.cache.specs`)."""
        self._assumed_annotations: dict[str, tuple[str, ...]] = {}
        """Annotation keys assumed written on a binding pod, to drop if the bind fails."""
        self._evicting: set[str] = set()
        """Pods assumed releasing whose deletion has not shown in their events yet."""
        self._nominating: dict[str, str] = {}
        """Pods assumed nominated (uid -> node) whose nominatedNodeName has not shown yet."""
        self.dra = DraStore()
        """ResourceSlices, DeviceClasses, ResourceClaims and their templates (DRA)."""
        self.on_devices_released: list[Callable[[str], None]] = []
        """Called with the uid of a pod that no allocated ResourceClaim is reserved for any
        more (the preemption gate waits for its victims' devices)."""
        self.dra.on_released = self._devices_released
        self._named: set[str] = set()
        """Pods of this scheduler's ``schedulerName`` (scheduled if their shard is this)."""
        self._off_node: dict[str, set[str]] = {}
        """Tasks whose node is not in :attr:`nodes` (not listed yet, gone, another
        shard's), by node name: attached when it comes."""
        self._copies = Copies()
        """The last snapshot's copies, and what changed since (told at each change)."""
        self._below_minimum_since: dict[str, float] = {}
        """Gangs seen running below their minimum at every snapshot since then: job uid ->
        the loop's clock at the first (:meth:`JobInfo.runs_below_minimum`)."""
        self._handlers: dict[str, Callable[[str, Obj], bool]] = {
            "Pod": self._on_pod,
            "Node": self._on_node,
            "PriorityClass": self._on_priority_class,
            "PodDisruptionBudget": self._on_budget,
            "Topology": self._on_topology,
        }
        for key in GROUP_KINDS:
            self._handlers[key] = functools.partial(self._on_pod_group, key)
        for key in QUEUE_KINDS:
            self._handlers[key] = functools.partial(self._on_queue, key)
        for kind in DRA_KINDS:
            self._handlers[kind] = self._dra_handler(kind)

    # Events ---------------------------------------------------------------------------

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._handlers)

    def handle(self, kind: str, event: str, obj: Obj) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of ``kind``.

        Idempotent for a repeated event. A malformed object is recorded in
        :attr:`rejected` and otherwise ignored.
        """
        handler = self._handlers.get(kind)
        if handler is None:
            return
        self.revision += 1
        where = ref({"kind": kind, "metadata": obj.get("metadata") or {}})
        self._fresh_only = False
        try:
            wake = handler(event, obj)
        except InvalidInputError as exc:
            self._note(self.rejected, "rejected", where, str(exc))
            return
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._note(self.rejected, "rejected", where, f"{where}: malformed object ({exc!r})")
            return
        self.rejected.pop(where, None)
        if wake and not self._fresh_only:
            self.generation += 1
        if wake and self.on_change is not None:
            self.on_change()

    def _note(self, table: dict[str, str], what: str, where: str, reason: str) -> None:
        if table.get(where) != reason:
            table[where] = reason
            self._news.append(ObjectNotice(what, where, reason))

    def take_notices(self) -> list[ObjectNotice]:
        """Objects rejected or adjusted since the last call, each told once per reason
        (the loop logs them). Called by the loop before each cycle."""
        news, self._news = self._news, []
        return news

    def take_fresh_jobs(self) -> set[str]:
        """The jobs that got a new pending pod of ours since the last call (their parking
        ends: a gang may now have all its members). Called by the loop before each
        snapshot."""
        fresh, self._fresh_jobs = self._fresh_jobs, set()
        return fresh

    def replace(self, kind: str, objects: Iterable[Obj]) -> None:
        """Make the state of ``kind`` equal to ``objects`` (a relist after a lost watch).

        Pods are matched by uid: a pod deleted and created again under the same name while
        the watch was down is a new pod, and the old one's usage goes.
        """
        self.revision += 1
        objs = list(objects)
        if kind == "Pod":
            uids = {str((o.get("metadata") or {}).get("uid") or _key(o)) for o in objs}
            for task in [t for t in self.tasks.values() if t.uid not in uids]:
                meta = {"name": task.name, "namespace": task.namespace, "uid": task.uid}
                self.handle(kind, "DELETED", {"kind": kind, "metadata": meta})
        else:
            present = {_key(o) for o in objs}
            for stale in [k for k in self._keys_of(kind) if k not in present]:
                ns, _, name = stale.rpartition("/")
                meta = {"name": name}
                if ns:
                    meta["namespace"] = ns
                self.handle(kind, "DELETED", {"kind": kind, "metadata": meta})
        for o in objs:
            self.handle(kind, "MODIFIED", o)

    def _keys_of(self, kind: str) -> list[str]:
        if kind in GROUP_KINDS:
            api = GROUP_KINDS[kind][0]
            return [
                job_id.removeprefix(api.prefix)
                for job_id in self.pod_group_objects
                if api_of_job(job_id) is api
            ]
        if kind in QUEUE_KINDS:
            return [name for name, by_kind in self._queue_sources.items() if kind in by_kind]
        table: dict[str, Iterable[str]] = {
            "Node": self.nodes,
            "PriorityClass": self.priority_classes,
            "PodDisruptionBudget": self.budgets,
            "Topology": self.topologies,
        }
        if kind in DRA_KINDS:
            return self.dra.keys(kind)
        return list(table.get(kind, ()))

    def _on_pod(self, event: str, pod: Obj) -> bool:
        meta = pod["metadata"]
        uid = str(meta.get("uid") or _key(pod))
        old = self.tasks.get(uid)
        self._copies.task_changed(uid)
        if event == "DELETED":
            if old is not None:
                self._detach(old)
                del self.tasks[uid]
                self._spec_src.pop(uid, None)
                self.shards.forget(old.job_id)
            self._named.discard(uid)
            self._membership.forget(uid)
            self._evicting.discard(uid)
            self._nominating.pop(uid, None)
            self._assumed_annotations.pop(uid, None)
            for listener in self.on_pod_deleted:
                listener(uid)
            return True
        spec = pod.get("spec") or {}
        src = self._specs.key(spec)
        if old is not None and _same_metadata(old, pod):  # the usual event: a status change
            job_id = old.job_id  # which groups exist changes it through _rekey
        else:
            job_id = self._membership.job_of(uid, pod, self)
        task = (
            task_from_pod(
                pod,
                scheduler_name=self.scheduler_name,
                job_id=job_id,
                parse=lambda spec, where: self._specs.view(
                    src, lambda: parse_pod_spec(spec, obj=where)
                ),
            )
            if (old is None or self._spec_src.get(uid) != src)
            else self._refresh(old, pod)
        )
        task.job_id = job_id
        self._spec_src[uid] = src
        task.sluice = self._schedules(task, spec)
        if task.sluice and self.wait_for_pod_grouper:
            task.awaits_grouper = grouper_wait(pod)
        if not task.sluice and task.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED):
            if old is not None:
                self._detach(old)
                del self.tasks[uid]
            self._membership.forget(uid)
            return True
        self._keep_assumptions(old, task)
        if old is not None:
            self._detach(old)
        self.tasks[uid] = task
        self._attach(task)
        ungated = old is not None and old.status is TaskStatus.GATED
        if old is None or ungated:
            # A new pending pod, or one whose last scheduling gate was removed: news for
            # its own job (a gang may now have all its members), tried in the next cycle.
            if task.sluice and task.status is TaskStatus.PENDING:
                self._fresh_jobs.add(task.job_id)
                self._fresh_only = True
                return True
            return old is None and not task.sluice
        if (
            task.sluice
            and task.status is TaskStatus.PENDING
            and (
                old.job_id != task.job_id
                or (old.awaits_grouper and not task.awaits_grouper)
                or task.claim_statuses != old.claim_statuses
            )
        ):
            # The pod joined a gang by a label written after its creation (the pod
            # grouper's), or the grouper left it alone, or the claim controller named the
            # claims made from its templates (DRA): news for its job, as a new pod is.
            self._fresh_jobs.add(task.job_id)
            self._fresh_only = True
            return True
        return task.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED) or (
            task.terminating and not old.terminating
        )

    def _keep_assumptions(self, old: TaskInfo | None, task: TaskInfo) -> None:
        """What the cache assumed and the events do not show yet still holds."""
        if task.node_name or task.status is not TaskStatus.PENDING:
            self._nominating.pop(task.uid, None)
        if task.node_name:
            self._assumed_annotations.pop(task.uid, None)
        if task.terminating or task.status not in (TaskStatus.BOUND, TaskStatus.RUNNING):
            self._evicting.discard(task.uid)
        if (
            old is not None
            and old.status is TaskStatus.BINDING
            and not task.node_name
            and task.status is TaskStatus.PENDING
        ):
            task.status, task.node_name = TaskStatus.BINDING, old.node_name  # still assumed
            keys = self._assumed_annotations.get(task.uid, ())
            if keys and old.annotations:
                kept = {k: old.annotations[k] for k in keys if k in old.annotations}
                task.annotations = {**(task.annotations or {}), **kept}
        elif task.uid in self._evicting:
            task.status = TaskStatus.RELEASING
        elif task.status is TaskStatus.PENDING and task.sluice:
            node = task.nominated_node or self._nominating.get(task.uid, "")
            if node in self.nodes:  # a nomination to a node that is gone holds nothing
                task.nominated_node = node
                task.status, task.node_name = TaskStatus.PIPELINED, node

    def _refresh(self, old: TaskInfo, pod: Obj) -> TaskInfo:
        """A new TaskInfo from ``pod`` reusing ``old``'s parsed spec (unchanged)."""
        meta = pod["metadata"]
        status = pod.get("status") or {}
        task = old.clone()
        task.status = pod_status(pod)
        task.node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        task.nominated_node = str(status.get("nominatedNodeName") or "")
        task.terminating = bool(meta.get("deletionTimestamp"))
        task.ready = pod_ready(status)
        task.start_time = parse_time(status.get("startTime"))
        task.scheduling_gates = scheduling_gates(pod)
        if not _same_metadata(old, pod):
            # What derives from labels and annotations may change after creation (the job
            # too: the caller resolves it).
            task.labels = dict(meta.get("labels") or {})
            task.annotations = dict(meta.get("annotations") or {})
            task.preemptable = pod_preemptable(task.labels, task.annotations)
            task.role = pod_role(task.labels, task.annotations)
        task.claim_statuses = claim_statuses(status)
        return task

    def _attach(self, task: TaskInfo) -> None:
        if not task.node_name:
            return
        self._copies.node_changed(task.node_name)
        node = self.nodes.get(task.node_name)
        if node is None:  # not known (yet): attached when it comes (_on_node)
            self._off_node.setdefault(task.node_name, set()).add(task.uid)
        elif task.status in USES_NODE or task.status is TaskStatus.PIPELINED:
            node.add_task(task)

    def _detach(self, task: TaskInfo) -> None:
        if not task.node_name:
            return
        self._copies.node_changed(task.node_name)
        node = self.nodes.get(task.node_name)
        if node is not None and task.uid in node.tasks:
            node.remove_task(task)
        waiting = self._off_node.get(task.node_name)
        if waiting is not None:
            waiting.discard(task.uid)
            if not waiting:
                del self._off_node[task.node_name]

    def _on_node(self, event: str, obj: Obj) -> bool:
        name = str(obj["metadata"]["name"])
        where = f"Node {name}"
        old = self.nodes.pop(name, None)
        self._copies.node_changed(name)
        if event == "DELETED" or not self._owns_node(obj):
            self.adjusted.pop(where, None)
            # A nomination to a node that is gone holds nothing: the pods are pending.
            for task in list(old.tasks.values()) if old is not None else ():
                if task.status is TaskStatus.PIPELINED:
                    self._move(task.uid, TaskStatus.PENDING, "")
                else:  # still there by their events: counted again if the node comes back
                    self._off_node.setdefault(name, set()).add(task.uid)
            return old is not None or event == "DELETED"
        node = node_from_object(obj)
        if node.capped:
            self._note(
                self.adjusted,
                "adjusted",
                where,
                f"{where}: status.allocatable of {', '.join(node.capped)} above {MAX_AMOUNT} "
                "units is capped to that (the node table holds no more)",
            )
        else:
            self.adjusted.pop(where, None)
        self.nodes[name] = node
        if old is not None:
            node.tasks, node.held = old.tasks, old.held
            node.used, node.releasing, node.nominated = old.used, old.releasing, old.nominated
        else:
            for uid in sorted(self._off_node.pop(name, ())):
                waiting = self.tasks.get(uid)
                if waiting is not None and waiting.node_name == name:
                    self._attach(waiting)
        return True

    # Shards ---------------------------------------------------------------------------

    def _owns_node(self, obj: Obj) -> bool:
        return self.shards.owns_node(obj)

    def _schedules(self, task: TaskInfo, spec: Obj) -> bool:
        """Does this scheduler (this shard of it) schedule ``task``: its schedulerName,
        and its gang's pool (:mod:`scheduler.cache.shard_view`)?"""
        named = spec.get("schedulerName", "default-scheduler") == self.scheduler_name
        if named:
            self._named.add(task.uid)
        else:
            self._named.discard(task.uid)
        in_group = task.job_id in self.pod_group_objects and task.job_id not in self.basic_groups
        queue = None if in_group else self._queue_of_lone(task)
        return self.shards.schedules(task, named, in_group, queue)

    def _queue_of_lone(self, task: TaskInfo) -> Obj | None:
        return self.queue_objects.get(pod_queue(task.labels or {}, task.annotations or {}))

    def _classify_group(self, job_id: str) -> bool:
        """(Re)classify the PodGroup of ``job_id`` by pool, and its pods with it; True
        when it changed shard (news for every cycle: generation)."""
        if self.shards.sharding is None:
            return False
        obj = self.pod_group_objects.get(job_id)
        job = self.pod_groups.get(job_id)
        queue = job.queue if job is not None else ""
        moved = self.shards.classify_group(job_id, obj, queue, self.queue_objects.get(queue))
        if moved:
            for uid in self._membership.members(job_id):
                self._reclassify_task(uid)
        return moved

    def _reclassify_task(self, uid: str) -> None:
        task = self.tasks.get(uid)
        if task is None:
            return
        named = uid in self._named
        was = task.sluice
        in_group = task.job_id in self.pod_group_objects and task.job_id not in self.basic_groups
        queue = None if in_group else self._queue_of_lone(task)
        task.sluice = self.shards.schedules(task, named, in_group, queue)
        if task.sluice != was:
            self._copies.task_changed(uid)
            if task.sluice and task.status is TaskStatus.PENDING:
                self._fresh_jobs.add(task.job_id)

    def _reclassify_queue(self, name: str) -> None:
        """Queue ``name`` changed pool (or came, or went): its PodGroups and the pods of no
        PodGroup that name it are classified again."""
        for job_id, job in list(self.pod_groups.items()):
            if job.queue == name:
                self._classify_group(job_id)
        for task in list(self.tasks.values()):
            if task.job_id not in self.pod_group_objects and (
                pod_queue(task.labels or {}, task.annotations or {}) == name
            ):
                self._reclassify_task(task.uid)

    # PodGroups of every API, and which job each pod joins ------------------------------

    def has_group(self, job_id: str, /) -> bool:
        """:meth:`GroupIndex.has_group <scheduler.api.membership.GroupIndex.has_group>`."""
        return job_id in self.pod_group_objects

    def is_basic(self, job_id: str, /) -> bool:
        """:meth:`GroupIndex.is_basic <scheduler.api.membership.GroupIndex.is_basic>`."""
        return job_id in self.basic_groups

    def group_members(self, job_id: str) -> list[str]:
        """The uids of the pods naming the PodGroup of ``job_id`` (a basic group's pods
        are each a job of their own), sorted."""
        return self._membership.members(job_id)

    def _on_pod_group(self, kind: str, event: str, obj: Obj) -> bool:
        api, convert = GROUP_KINDS[kind]
        meta = obj["metadata"]
        ns, name = str(meta.get("namespace", "default")), str(meta["name"])
        job_id = api.job_id(ns, name)
        where = ref({"kind": "PodGroup", "metadata": meta})
        if api is not SLUICE:
            where += f" ({api.api_version})"
        old = self.pod_group_objects.get(job_id)
        was_basic = job_id in self.basic_groups
        if event == "DELETED":
            self.pod_groups.pop(job_id, None)
            self.pod_group_objects.pop(job_id, None)
            self.basic_groups.discard(job_id)
            self.adjusted.pop(where, None)
            self.shards.classify_group(job_id, None, "", None)
            self._rekey(ns, name)
            return True
        self.pod_group_objects[job_id] = obj  # kept even if it does not convert (yet)
        if old is None:
            self._rekey(ns, name)
        converted = convert(obj, self.priority_classes)
        if converted.value is None:
            self.basic_groups.add(job_id)
            self.pod_groups.pop(job_id, None)
        else:
            self.basic_groups.discard(job_id)
            self.pod_groups[job_id] = converted.value
        self._note_all(where, converted.notes)
        if was_basic != (converted.value is None):
            self._rekey(ns, name)
        moved = self._classify_group(job_id)
        # Status-only updates (most are the scheduler's own writes) change no decision.
        return moved or old is None or old.get("spec") != obj.get("spec")

    def _rekey(self, namespace: str, name: str) -> None:
        """A PodGroup ``namespace/name`` of some API appeared or went: the pods that name
        that name join the job they resolve to now."""
        for uid, job_id in self._membership.affected(namespace, name, self).items():
            task = self.tasks.get(uid)
            if task is not None and task.job_id != job_id:
                self._copies.task_changed(uid)
                task.job_id = job_id
                if task.sluice and task.status is TaskStatus.PENDING:
                    self._fresh_jobs.add(job_id)

    def _note_all(self, where: str, notes: tuple[str, ...]) -> None:
        if notes:
            self._note(self.adjusted, "adjusted", where, "; ".join(notes))
        else:
            self.adjusted.pop(where, None)

    def _on_queue(self, kind: str, event: str, obj: Obj) -> bool:
        name = _key(obj)
        sources = self._queue_sources.setdefault(name, {})
        if event == "DELETED":
            sources.pop(kind, None)
        else:
            sources[kind] = obj
        old_spec = self._queue_specs.get(name)
        winner = next((k for k in QUEUE_KINDS if k in sources), None)
        for k, (api, _) in QUEUE_KINDS.items():
            where = _queue_where(name, api)
            if k in sources and winner is not None and k != winner:
                used = QUEUE_KINDS[winner][0].title
                self._note(self.adjusted, "adjusted", where, f"{where}: not used: {used}'s is")
            elif k not in sources:
                self.adjusted.pop(where, None)
        chosen = None
        if winner is not None:
            api, convert = QUEUE_KINDS[winner]
            converted = convert(sources[winner])
            self._note_all(_queue_where(name, api), converted.notes)
            chosen = converted.value
        if winner is None or chosen is None:
            if not sources:
                del self._queue_sources[name]
            self.queues.pop(name, None)
            self._queue_specs.pop(name, None)
            if self.queue_objects.pop(name, None) is not None and self.shards.sharding:
                self._reclassify_queue(name)
            return True
        self.queues[name] = chosen
        before = self.queue_objects.get(name)
        self.queue_objects[name] = sources[winner]
        if self.shards.sharding is not None and _labels_of(before) != _labels_of(sources[winner]):
            self._reclassify_queue(name)
        spec = sources[winner].get("spec")
        self._queue_specs[name] = spec
        state_changed = (sources[winner].get("status") or {}).get("state", "Open") != "Open"
        return old_spec != spec or state_changed

    def _on_priority_class(self, event: str, obj: Obj) -> bool:
        name = _key(obj)
        if event == "DELETED":
            self.priority_classes.pop(name, None)
        else:
            value = obj.get("value", 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidInputError(
                    f"PriorityClass {name}", "value", f"must be an integer, got {value!r}"
                )
            self.priority_classes[name] = value
        for job_id, pg in list(self.pod_group_objects.items()):
            if (pg.get("spec") or {}).get("priorityClassName") == name:
                kind = kind_key(str(pg.get("apiVersion", "")), str(pg.get("kind", "")))
                converted = GROUP_KINDS[kind][1](pg, self.priority_classes)
                if converted.value is not None:
                    self.pod_groups[job_id] = converted.value
        return False

    def _on_budget(self, event: str, obj: Obj) -> bool:
        key = _key(obj)
        if event == "DELETED":
            self.budgets.pop(key, None)
        else:
            budget_from_object(obj, 0)  # validate the selector now
            self.budgets[key] = obj
        return False

    def _devices_released(self, uid: str) -> None:
        for listener in self.on_devices_released:
            listener(uid)

    def _dra_handler(self, kind: str) -> Callable[[str, Obj], bool]:
        def handle(event: str, obj: Obj) -> bool:
            if kind == "ResourceSlice" and not self.shards.keeps_slice(obj):
                event = "DELETED"  # another shard's devices could be these: not ours
            return self.dra.handle(kind, event, obj)

        return handle

    def _on_topology(self, event: str, obj: Obj) -> bool:
        name = _key(obj)
        if event == "DELETED":
            self.topologies.pop(name, None)
        else:
            self.topologies[name] = topology_from_object(obj)
        return True

    # Assume / forget: the EffectLedger port --------------------------------------------

    def assume(self, effect: Effect, /) -> Sequence[TaskInfo]:
        """:meth:`EffectLedger.assume <scheduler.framework.effects.EffectLedger.assume>`:
        the one entry through which the loop (and what it owns) assumes effects."""
        self.revision += 1
        match effect:
            case Bind():
                self.assume_bind(effect.task.uid, effect.node, effect.annotations)
                for binding in effect.claims:
                    self.dra.assume(binding)
            case Evict():
                self.assume_evict(effect.task.uid)
            case Nominate():
                self.assume_nomination(effect.task.uid, effect.node)
                displaced = self._overflowing_below(effect.node, effect.task)
                for t in displaced:
                    self.forget_nomination(t.uid)
                return displaced
            case ClearNomination():
                self.forget_nomination(effect.task.uid)
            case SetPhase():
                self.assume_phase(effect.job.uid, effect.phase)
            case _:
                assert_never(effect)
        return ()

    def forget(self, effect: Effect, /) -> None:
        """:meth:`EffectLedger.forget <scheduler.framework.effects.EffectLedger.forget>`.
        A phase, once written, is not forgotten (the PodGroup's status shows it next)."""
        self.revision += 1
        match effect:
            case Bind():
                for binding in effect.claims:
                    self.dra.forget(binding)
                self.forget_bind(effect.task.uid)
            case Evict():
                self.forget_evict(effect.task.uid)
            case Nominate():
                self.forget_nomination(effect.task.uid)
            case ClearNomination() | SetPhase():
                pass
            case _:
                assert_never(effect)

    def claim_written(self, binding: ClaimBinding, /) -> None:
        """:meth:`EffectLedger.claim_written
        <scheduler.framework.effects.EffectLedger.claim_written>`."""
        self.revision += 1
        self.dra.landed(binding)

    def holds(self, uid: str, /) -> bool:
        """:meth:`EffectLedger.holds <scheduler.framework.effects.EffectLedger.holds>`."""
        return uid in self.tasks

    def holds_devices(self, uid: str, /) -> bool:
        """:meth:`EffectLedger.holds_devices
        <scheduler.framework.effects.EffectLedger.holds_devices>`."""
        return self.dra.holds_devices(uid)

    def _overflowing_below(self, node: str, task: TaskInfo) -> list[TaskInfo]:
        """The pods of lower priority than ``task`` nominated to ``node`` that no longer
        fit there now that ``task`` is (KEP-4832), lowest priority first: taken off until
        the pods nominated to the node fit in what it will have once the pods leaving it
        are gone. None when they all fit: a cycle that nominates several pods to one node
        (a gang and the pods that fill the rest of the room being freed) counted each
        one's room; withdrawing the lower ones there would free room for others to take
        and make the gang evict again."""
        info = self.nodes.get(node)
        if info is None:
            return []
        lower = sorted(
            (
                t
                for t in info.tasks.values()
                if t.status is TaskStatus.PIPELINED
                and t.uid != task.uid
                and t.priority < task.priority
            ),
            key=lambda t: (t.priority, -t.creation, t.key),
        )
        room = info.future_idle
        out: list[TaskInfo] = []
        for t in lower:
            if not room.any_negative():
                break
            room = room + t.request
            out.append(t)
        return out

    def _move(self, uid: str, status: TaskStatus, node: str) -> TaskInfo | None:
        task = self.tasks.get(uid)
        if task is None:
            return None
        self._copies.task_changed(uid)
        self._detach(task)
        task.status = status
        task.node_name = node
        self._attach(task)
        return task

    def assume_bind(
        self, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """The pod is being bound to ``node`` with ``annotations`` written on it (a device
        index): count it there, with them, from now on."""
        task = self.tasks.get(uid)
        if task is not None and annotations:
            self._copies.task_changed(uid)
            task.annotations = {**(task.annotations or {}), **annotations}
            self._assumed_annotations[uid] = tuple(annotations)
        self._move(uid, TaskStatus.BINDING, node)

    def forget_bind(self, uid: str) -> None:
        """A bind failed: the assumed pod is pending again (and will be retried). Its room
        is free again, news for the parked jobs as a deleted pod's is (:attr:`generation`;
        kube-scheduler wakes its unschedulable pods when a bind fails, too)."""
        task = self.tasks.get(uid)
        if task is not None and task.status is TaskStatus.BINDING:
            task.nominated_node = ""
            keys = self._assumed_annotations.pop(uid, ())
            if keys and task.annotations:
                task.annotations = {k: v for k, v in task.annotations.items() if k not in keys}
            self._move(uid, TaskStatus.PENDING, "")
            self.generation += 1
            if self.on_change is not None:
                self.on_change()

    def assume_evict(self, uid: str) -> None:
        """The pod is being evicted: its room is releasing."""
        task = self.tasks.get(uid)
        if task is not None and task.status in (
            TaskStatus.BOUND,
            TaskStatus.RUNNING,
            TaskStatus.BINDING,
        ):
            self._evicting.add(uid)
            self._move(uid, TaskStatus.RELEASING, task.node_name)

    def forget_evict(self, uid: str, status: TaskStatus = TaskStatus.RUNNING) -> None:
        """An eviction failed: the pod holds its room again."""
        self._evicting.discard(uid)
        task = self.tasks.get(uid)
        if task is not None and task.eviction_in_flight:
            self._move(uid, status, task.node_name)

    def assume_nomination(self, uid: str, node: str) -> None:
        """The pod waits on ``node`` for room being freed (status.nominatedNodeName)."""
        task = self.tasks.get(uid)
        if (
            task is not None
            and task.status in (TaskStatus.PENDING, TaskStatus.PIPELINED)
            and node in self.nodes
        ):
            self._nominating[uid] = node
            task.nominated_node = node
            self._move(uid, TaskStatus.PIPELINED, node)

    def forget_nomination(self, uid: str) -> None:
        """A nomination is withdrawn: the pod is pending again."""
        self._nominating.pop(uid, None)
        task = self.tasks.get(uid)
        if task is not None and task.status is TaskStatus.PIPELINED:
            task.nominated_node = ""
            self._move(uid, TaskStatus.PENDING, "")

    def assume_phase(self, job_uid: str, phase: PodGroupPhase) -> None:
        """A PodGroup's new phase is being written: act on it from now on."""
        job = self.pod_groups.get(job_uid)
        if job is not None:
            job.phase = phase

    # Snapshot -------------------------------------------------------------------------

    def snapshot(self, *, now: float = 0.0, wall: float = 0.0) -> Snapshot:
        """A copy of what the next cycle decides on, for a session to change freely, taken
        at ``now`` (the loop's clock) and ``wall`` (the wall clock, Unix seconds). What the
        scheduler holds back itself is not in the cache: the loop attaches its scheduling
        queue's view (:attr:`Snapshot.queue`).

        Tasks and nodes are copied only when they changed since the last snapshot, here
        or in the session that used it (:class:`~.snapshots.Copies`); the others' copies
        are shared with the last snapshot. So taking a snapshot retires the last one: the
        session on it must be done. O(nodes + pods) lookups, O(changes) copies; jobs are
        rebuilt each time.
        """
        last_jobs = self._copies.last_jobs
        tasks, nodes = self._copies.take(self.tasks, self.nodes)
        snap = self._build(tasks, nodes, last_jobs)
        snap.now = now
        snap.wall = wall
        self._below_minimum_since = {
            job.uid: self._below_minimum_since.get(job.uid, now)
            for job in snap.jobs.values()
            if job.runs_below_minimum()
        }
        for uid, since in self._below_minimum_since.items():
            snap.jobs[uid].below_minimum_since = since
        snap.dra = self.dra.view()
        self.dra.extend_nodes(snap, self.nodes, self.tasks.values())
        return self._copies.retire(snap)

    def drop_copies(self) -> None:
        """Make the next snapshot copy everything (after a cycle that failed midway)."""
        self._copies.drop_all()

    def full_snapshot(self) -> Snapshot:
        """A snapshot copying everything, sharing nothing with any other (for checks:
        :meth:`snapshot` must equal it). Leaves the cache as it was."""
        tasks = {uid: t.clone() for uid, t in self.tasks.items()}
        nodes = {name: self.nodes[name].clone(tasks) for name in sorted(self.nodes)}
        snap = self._build(tasks, nodes)
        for uid, since in self._below_minimum_since.items():
            if uid in snap.jobs:
                snap.jobs[uid].below_minimum_since = since
        snap.dra = self.dra.view()
        self.dra.extend_nodes(snap, self.nodes, self.tasks.values())
        return snap

    def _build(
        self,
        tasks: dict[str, TaskInfo],
        nodes: dict[str, NodeInfo],
        last_jobs: Mapping[str, JobInfo] | None = None,
    ) -> Snapshot:
        """The snapshot of ``tasks`` and ``nodes`` (copies) with its jobs (gangs of one
        reused from ``last_jobs`` where their task is) and fresh queues."""
        groups = self.pod_groups
        if self.shards.foreign_groups:
            groups = {u: j for u, j in groups.items() if u not in self.shards.foreign_groups}
        jobs = jobs_of(tasks, groups, last_jobs, self._membership.grouped)
        for job_id, reason in self.shards.orphans.items():
            job = jobs.get(job_id)
            if job is not None:
                job.problem = reason  # a pool no shard serves: said, never tried
        return Snapshot(
            nodes=nodes,
            jobs=jobs,
            queues={name: q.clone() for name, q in sorted(self.queues.items())},
            budgets=budgets_of(self.budgets, tasks.values()),
            topologies=dict(self.topologies),
            priority_classes=dict(self.priority_classes),
        )
