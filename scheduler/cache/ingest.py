"""The cache's ingest (layer 2): watch events into the cache's state, one handler per kind.

Backends (``scheduler.kube`` informers, ``scheduler.sim``'s watcher) call
:meth:`Ingest.handle` (through :class:`~scheduler.cache.SchedulerCache`) with every watch
event, in order, from one task, and :meth:`Ingest.replace` after a relist. Each kind has
its handler in :attr:`Ingest.handlers`: pods, nodes, priority classes, disruption
budgets, topologies and the DRA kinds here; PodGroups and Queues of every API in
:mod:`~scheduler.cache.group_ingest`. A handler returns whether the event may let an
unschedulable job fit now (a generation is counted and the loop woken). A pod event
keeps what the ledger assumed and the event does not show yet
(:meth:`~scheduler.cache.ledger.Ledger.keep_assumptions`).

Objects that cannot be converted are not applied: they are kept in
:attr:`IngestNews.rejected <scheduler.cache.ingest_news.IngestNews.rejected>` with a
one-line reason, and the cache carries on. Nothing here awaits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.api.core_objects import (
    budget_from_object,
    claim_statuses,
    node_from_object,
    parse_time,
    pod_status,
    ref,
    scheduling_gates,
    task_from_pod,
    topology_from_object,
)
from scheduler.api.disruption import pod_ready
from scheduler.api.errors import InvalidInputError
from scheduler.api.group_apis.table import BY_GROUP_KIND, BY_QUEUE_KIND
from scheduler.api.membership import pod_preemptable, pod_role
from scheduler.api.owners import grouper_wait
from scheduler.api.pod import parse_pod_spec
from scheduler.api.resource import MAX_AMOUNT
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache.cluster_state import ClusterState
from scheduler.cache.dra_store import KINDS as DRA_KINDS
from scheduler.cache.group_ingest import GroupIngest, object_key
from scheduler.cache.ingest_news import IngestNews
from scheduler.cache.ledger import Ledger
from scheduler.cache.placement_objects import KINDS as PLACEMENT_KINDS
from scheduler.cache.specs import SpecMemo
from scheduler.cache.volume_store import KINDS as VOLUME_KINDS

Obj = Mapping[str, Any]
Handler = Callable[[str, Obj], bool]
"""A kind's handler: ``(event, object) -> may it let a job fit now?``"""


def _where(kind: str, obj: Obj) -> str:
    """``Kind namespace/name`` of ``obj``: what a rejection is kept and told under."""
    return ref({"kind": kind, "metadata": obj.get("metadata") or {}})


def _same_metadata(task: TaskInfo, pod: Obj) -> bool:
    """Are the pod's labels and annotations those ``task`` was made from?"""
    meta = pod["metadata"]
    return task.labels == (meta.get("labels") or {}) and task.annotations == (
        meta.get("annotations") or {}
    )


class Ingest:
    def __init__(
        self,
        state: ClusterState,
        ledger: Ledger,
        news: IngestNews,
        *,
        wait_for_pod_grouper: bool = True,
    ) -> None:
        self._state = state
        self._ledger = ledger
        self._news = news
        self.groups = GroupIngest(state, news)
        self.wait_for_pod_grouper = wait_for_pod_grouper
        """Pods made by a controller wait until the pod grouper has grouped them
        (:func:`~scheduler.api.owners.grouper_wait`; the configuration's
        ``waitForPodGrouper``)."""
        self.on_pod_deleted: list[Callable[[str], None]] = []
        """Called with the uid of every pod whose deletion is seen (the preemption gates of
        the loop's scheduling queue)."""
        self.on_devices_released: list[Callable[[str], None]] = []
        """Called with the uid of a pod that no allocated ResourceClaim is reserved for any
        more (the preemption gate waits for its victims' devices)."""
        state.dra.on_released = self._devices_released
        self._spec_src: dict[str, bytes | tuple[object, ...]] = {}
        """The key (:meth:`SpecMemo.key`) of the spec each task was made from."""
        self.specs = SpecMemo()
        """Parsed specs, one per distinct spec (:mod:`scheduler.cache.specs`)."""
        self._fresh_only = False
        """Set by a handler whose news is for the pod's own job only (no generation)."""
        self.handlers: dict[str, Handler] = {
            "Pod": self._on_pod,
            "Node": self._on_node,
            "PriorityClass": self._on_priority_class,
            "PodDisruptionBudget": self._on_budget,
            "Topology": self._on_topology,
        }
        for key in BY_GROUP_KIND:
            self.handlers[key] = functools.partial(self.groups.on_pod_group, key)
        for key in BY_QUEUE_KIND:
            self.handlers[key] = functools.partial(self.groups.on_queue, key)
        for kind in DRA_KINDS:
            self.handlers[kind] = self._dra_handler(kind)
        for kind in VOLUME_KINDS:
            self.handlers[kind] = functools.partial(state.volumes.handle, kind)
        for kind in PLACEMENT_KINDS:
            self.handlers[kind] = functools.partial(state.placement.handle, kind)

    # Events ---------------------------------------------------------------------------

    def handle(self, kind: str, event: str, obj: Obj) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of ``kind``.

        Idempotent for a repeated event. A malformed object is recorded as rejected and
        otherwise ignored.
        """
        handler = self.handlers.get(kind)
        if handler is None:
            return
        state = self._state
        state.revision += 1
        self._fresh_only = False
        try:
            wake = handler(event, obj)
        except InvalidInputError as exc:
            self._news.reject(_where(kind, obj), str(exc))
            return
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            where = _where(kind, obj)
            self._news.reject(where, f"{where}: malformed object ({exc!r})")
            return
        if self._news.rejected:  # an object set aside before, now read: no longer
            self._news.rejected.pop(_where(kind, obj), None)
        if wake and not self._fresh_only:
            state.generation += 1
        if wake and state.on_change is not None:
            state.on_change()

    def replace(self, kind: str, objects: Iterable[Obj]) -> None:
        """Make the state of ``kind`` equal to ``objects`` (a relist after a lost watch).

        Pods are matched by uid: a pod deleted and created again under the same name while
        the watch was down is a new pod, and the old one's usage goes.
        """
        self._state.revision += 1
        objs = list(objects)
        if kind == "Pod":
            uids = {str((o.get("metadata") or {}).get("uid") or object_key(o)) for o in objs}
            for task in [t for t in self._state.tasks.values() if t.uid not in uids]:
                meta = {"name": task.name, "namespace": task.namespace, "uid": task.uid}
                self.handle(kind, "DELETED", {"kind": kind, "metadata": meta})
        else:
            present = {object_key(o) for o in objs}
            for stale in [k for k in self._keys_of(kind) if k not in present]:
                ns, _, name = stale.rpartition("/")
                meta = {"name": name}
                if ns:
                    meta["namespace"] = ns
                self.handle(kind, "DELETED", {"kind": kind, "metadata": meta})
        for o in objs:
            self.handle(kind, "MODIFIED", o)

    def _keys_of(self, kind: str) -> list[str]:
        groups = self.groups.keys_of(kind)
        if groups is not None:
            return groups
        if kind in DRA_KINDS:
            return self._state.dra.keys(kind)
        if kind in VOLUME_KINDS:
            return self._state.volumes.keys(kind)
        if kind in PLACEMENT_KINDS:
            return self._state.placement.keys(kind)
        state = self._state
        table: dict[str, Iterable[str]] = {
            "Node": state.nodes,
            "PriorityClass": state.priority_classes,
            "PodDisruptionBudget": state.budgets,
            "Topology": state.topologies,
        }
        return list(table.get(kind, ()))

    # Pods -------------------------------------------------------------------------------

    def _on_pod(self, event: str, pod: Obj) -> bool:
        state = self._state
        meta = pod["metadata"]
        uid = str(meta.get("uid") or object_key(pod))
        old = state.tasks.get(uid)
        state.task_changed(uid)
        if event == "DELETED":
            if old is not None:
                state.detach(old)
                del state.tasks[uid]
                self._spec_src.pop(uid, None)
                state.shards.forget(old.job_id)
            self.groups.pod_gone(uid)
            state.membership.forget(uid)
            self._ledger.pod_gone(uid)
            for listener in self.on_pod_deleted:
                listener(uid)
            return True
        spec = pod.get("spec") or {}
        src = self.specs.key(spec)
        if old is not None and _same_metadata(old, pod):  # the usual event: a status change
            job_id = old.job_id  # which groups exist changes it through the group handlers
        else:
            job_id = state.membership.job_of(uid, pod, state)
        task = (
            task_from_pod(
                pod,
                scheduler_name=state.scheduler_name,
                job_id=job_id,
                parse=lambda spec, where: self.specs.view(
                    src, lambda: parse_pod_spec(spec, obj=where)
                ),
            )
            if (old is None or self._spec_src.get(uid) != src)
            else self._refresh(old, pod)
        )
        task.job_id = job_id
        self._spec_src[uid] = src
        task.sluice = self.groups.schedules(task, spec)
        if task.sluice and self.wait_for_pod_grouper:
            task.awaits_grouper = grouper_wait(pod)
        if not task.sluice and task.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED):
            if old is not None:
                state.detach(old)
                del state.tasks[uid]
            state.membership.forget(uid)
            return True
        self._ledger.keep_assumptions(old, task)
        if old is not None:
            state.detach(old)
        state.tasks[uid] = task
        state.attach(task)
        if task.node_name:
            if old is None or old.node_name != task.node_name:
                state.placed.note(task.namespace, task.labels)
            elif old.labels != task.labels:
                state.placed.note(task.namespace, task.labels, before=old.labels)
        ungated = old is not None and old.status is TaskStatus.GATED
        if old is None or ungated:
            # A new pending pod, or one whose last scheduling gate was removed: news for
            # its own job (a gang may now have all its members), tried in the next cycle.
            if task.sluice and task.status is TaskStatus.PENDING:
                self._news.fresh_jobs.add(task.job_id)
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
            self._news.fresh_jobs.add(task.job_id)
            self._fresh_only = True
            return True
        return task.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED) or (
            task.terminating and not old.terminating
        )

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

    # Nodes ------------------------------------------------------------------------------

    def _on_node(self, event: str, obj: Obj) -> bool:
        state = self._state
        name = str(obj["metadata"]["name"])
        where = f"Node {name}"
        old = state.nodes.pop(name, None)
        state.node_changed(name)
        if event == "DELETED" or not state.shards.owns_node(obj):
            self._news.adjusted.pop(where, None)
            # A nomination to a node that is gone holds nothing: the pods are pending.
            for task in list(old.tasks.values()) if old is not None else ():
                if task.status is TaskStatus.PIPELINED:
                    state.move(task.uid, TaskStatus.PENDING, "")
                else:  # still there by their events: counted again if the node comes back
                    state.off_node.setdefault(name, set()).add(task.uid)
            return old is not None or event == "DELETED"
        node = node_from_object(obj)
        if node.capped:
            self._news.adjust(
                where,
                f"{where}: status.allocatable of {', '.join(node.capped)} above {MAX_AMOUNT} "
                "units is capped to that (the node table holds no more)",
            )
        else:
            self._news.adjusted.pop(where, None)
        state.nodes[name] = node
        if old is not None:
            node.tasks, node.held = old.tasks, old.held
            node.used, node.releasing, node.nominated = old.used, old.releasing, old.nominated
            node.nonzero_pad = old.nonzero_pad
        else:
            for uid in sorted(state.off_node.pop(name, ())):
                waiting = state.tasks.get(uid)
                if waiting is not None and waiting.node_name == name:
                    state.attach(waiting)
        return True

    # The other kinds ----------------------------------------------------------------------

    def _on_priority_class(self, event: str, obj: Obj) -> bool:
        name = object_key(obj)
        if event == "DELETED":
            self._state.priority_classes.pop(name, None)
        else:
            value = obj.get("value", 0)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidInputError(
                    f"PriorityClass {name}", "value", f"must be an integer, got {value!r}"
                )
            self._state.priority_classes[name] = value
        self.groups.reconvert_groups_of(name)
        return False

    def _on_budget(self, event: str, obj: Obj) -> bool:
        key = object_key(obj)
        if event == "DELETED":
            self._state.budgets.pop(key, None)
        else:
            budget_from_object(obj, 0)  # validate the selector now
            self._state.budgets[key] = obj
        return False

    def _on_topology(self, event: str, obj: Obj) -> bool:
        name = object_key(obj)
        if event == "DELETED":
            self._state.topologies.pop(name, None)
        else:
            self._state.topologies[name] = topology_from_object(obj)
        return True

    def _dra_handler(self, kind: str) -> Handler:
        def handle(event: str, obj: Obj) -> bool:
            if kind == "ResourceSlice" and not self._state.shards.keeps_slice(obj):
                event = "DELETED"  # another shard's devices could be these: not ours
            return self._state.dra.handle(kind, event, obj)

        return handle

    def _devices_released(self, uid: str) -> None:
        for listener in self.on_devices_released:
            listener(uid)
