"""Ingest of PodGroups and Queues of every API, which job each pod joins, and which of them
this shard takes (layer 2, cache).

:class:`GroupIngest` is the part of ingest (:mod:`~scheduler.cache.ingest`) that knows
gangs: the handlers of the PodGroup kinds of :data:`GROUP_KINDS` and the Queue kinds of
:data:`QUEUE_KINDS` (each API's reader, from the table of :mod:`scheduler.api.group_apis.
table`, by the kind key of its objects), the re-keying of pods when a PodGroup of the name
they name comes or goes, and the classification by shard pool of PodGroups, queues and
the pods of no PodGroup (:mod:`~scheduler.cache.shard_view`). A handler returns whether
the event may let an unschedulable job fit now (ingest counts a generation). Called from
:class:`~scheduler.cache.ingest.Ingest` only; nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.group_apis import api_of_job, kind_key
from scheduler.api.group_apis.table import BY_GROUP_KIND as GROUP_KINDS
from scheduler.api.group_apis.table import BY_QUEUE_KIND as QUEUE_KINDS
from scheduler.api.membership import pod_queue
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache.cluster_state import ClusterState
from scheduler.cache.ingest_news import IngestNews

Obj = Mapping[str, Any]


def _labels_of(obj: Obj | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def object_key(obj: Obj) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


class GroupIngest:
    def __init__(self, state: ClusterState, news: IngestNews) -> None:
        self._state = state
        self._news = news
        self._queue_specs: dict[str, object] = {}
        self._queue_sources: dict[str, dict[str, Obj]] = {}
        """Queue objects by name, then by kind key (Sluice's and Volcano's may share a
        name: :data:`QUEUE_KINDS` says which is used)."""
        self._named: set[str] = set()
        """Pods of this scheduler's ``schedulerName`` (scheduled if their shard is this)."""

    def keys_of(self, kind: str) -> list[str] | None:
        """The keys of the objects of ``kind`` held (for a relist); None when ``kind`` is
        not a PodGroup or Queue kind."""
        if kind in GROUP_KINDS:
            api = GROUP_KINDS[kind].api
            return [
                job_id.removeprefix(api.prefix)
                for job_id in self._state.pod_group_objects
                if api_of_job(job_id) is api
            ]
        if kind in QUEUE_KINDS:
            return [name for name, by_kind in self._queue_sources.items() if kind in by_kind]
        return None

    # PodGroups of every API, and which job each pod joins ------------------------------

    def group_members(self, job_id: str) -> list[str]:
        """The uids of the pods naming the PodGroup of ``job_id`` (a basic group's pods
        are each a job of their own), sorted."""
        return self._state.membership.members(job_id)

    def on_pod_group(self, kind: str, event: str, obj: Obj) -> bool:
        state = self._state
        group_api = GROUP_KINDS[kind]
        api = group_api.api
        meta = obj["metadata"]
        ns, name = str(meta.get("namespace", "default")), str(meta["name"])
        job_id = api.job_id(ns, name)
        where = api.where("PodGroup", f"{ns}/{name}")
        old = state.pod_group_objects.get(job_id)
        was_basic = job_id in state.basic_groups
        if event == "DELETED":
            state.pod_groups.pop(job_id, None)
            state.pod_group_objects.pop(job_id, None)
            state.basic_groups.discard(job_id)
            self._news.adjusted.pop(where, None)
            state.shards.classify_group(job_id, None, "", None)
            self._rekey(ns, name)
            return True
        state.pod_group_objects[job_id] = obj  # kept even if it does not convert (yet)
        if old is None:
            self._rekey(ns, name)
        converted = group_api.read_group(obj, state.priority_classes)
        if converted.value is None:
            state.basic_groups.add(job_id)
            state.pod_groups.pop(job_id, None)
        else:
            state.basic_groups.discard(job_id)
            state.pod_groups[job_id] = converted.value
        self._news.adjust_all(where, converted.notes)
        if was_basic != (converted.value is None):
            self._rekey(ns, name)
        moved = self._classify_group(job_id)
        # Status-only updates (most are the scheduler's own writes) change no decision.
        return moved or old is None or old.get("spec") != obj.get("spec")

    def reconvert_groups_of(self, priority_class: str) -> None:
        """The PriorityClass ``priority_class`` changed (or came, or went): the PodGroups
        that name it are converted again."""
        state = self._state
        for job_id, pg in list(state.pod_group_objects.items()):
            if (pg.get("spec") or {}).get("priorityClassName") == priority_class:
                kind = kind_key(str(pg.get("apiVersion", "")), str(pg.get("kind", "")))
                converted = GROUP_KINDS[kind].read_group(pg, state.priority_classes)
                if converted.value is not None:
                    state.pod_groups[job_id] = converted.value

    def _rekey(self, namespace: str, name: str) -> None:
        """A PodGroup ``namespace/name`` of some API appeared or went: the pods that name
        that name join the job they resolve to now."""
        state = self._state
        for uid, job_id in state.membership.affected(namespace, name, state).items():
            task = state.tasks.get(uid)
            if task is not None and task.job_id != job_id:
                state.task_changed(uid)
                task.job_id = job_id
                if task.sluice and task.status is TaskStatus.PENDING:
                    self._news.fresh_jobs.add(job_id)

    # Queues of both APIs -------------------------------------------------------------------

    @property
    def queue_sources(self) -> Mapping[str, Mapping[str, Obj]]:
        """Every API's Queue objects as last seen, by name, then by kind key (of two of one
        name, the state's ``queue_objects`` holds the one used; Volcano's root is here
        only). Read-only: the status reporter writes each its status."""
        return self._queue_sources

    def on_queue(self, kind: str, event: str, obj: Obj) -> bool:
        state = self._state
        name = object_key(obj)
        sources = self._queue_sources.setdefault(name, {})
        if event == "DELETED":
            sources.pop(kind, None)
        else:
            sources[kind] = obj
        old_spec = self._queue_specs.get(name)
        winner = next((k for k in QUEUE_KINDS if k in sources), None)
        for k, group_api in QUEUE_KINDS.items():
            where = group_api.api.where("Queue", name)
            if k in sources and winner is not None and k != winner:
                used = QUEUE_KINDS[winner].api.title
                self._news.adjust(where, f"{where}: not used: {used}'s is")
            elif k not in sources:
                self._news.adjusted.pop(where, None)
        chosen = None
        if winner is not None:
            group_api = QUEUE_KINDS[winner]
            converted = group_api.read_queue(sources[winner])
            self._news.adjust_all(group_api.api.where("Queue", name), converted.notes)
            chosen = converted.value
        if winner is None or chosen is None:
            if not sources:
                del self._queue_sources[name]
            state.queues.pop(name, None)
            self._queue_specs.pop(name, None)
            if state.queue_objects.pop(name, None) is not None and state.shards.sharding:
                self._reclassify_queue(name)
            return True
        state.queues[name] = chosen
        before = state.queue_objects.get(name)
        state.queue_objects[name] = sources[winner]
        if state.shards.sharding is not None and _labels_of(before) != _labels_of(sources[winner]):
            self._reclassify_queue(name)
        spec = sources[winner].get("spec")
        self._queue_specs[name] = spec
        state_changed = (sources[winner].get("status") or {}).get("state", "Open") != "Open"
        return old_spec != spec or state_changed

    # Shards ---------------------------------------------------------------------------

    def schedules(self, task: TaskInfo, spec: Obj) -> bool:
        """Does this scheduler (this shard of it) schedule ``task``: its schedulerName,
        and its gang's pool (:mod:`scheduler.cache.shard_view`)? Called by the pod
        handler on every event of a pod that stays."""
        state = self._state
        named = spec.get("schedulerName", "default-scheduler") == state.scheduler_name
        if named:
            self._named.add(task.uid)
        else:
            self._named.discard(task.uid)
        in_group = task.job_id in state.pod_group_objects and task.job_id not in state.basic_groups
        queue = None if in_group else self._queue_of_lone(task)
        return state.shards.schedules(task, named, in_group, queue)

    def pod_gone(self, uid: str) -> None:
        """The pod ``uid`` was deleted."""
        self._named.discard(uid)

    def _queue_of_lone(self, task: TaskInfo) -> Obj | None:
        return self._state.queue_objects.get(pod_queue(task.labels or {}, task.annotations or {}))

    def _classify_group(self, job_id: str) -> bool:
        """(Re)classify the PodGroup of ``job_id`` by pool, and its pods with it; True
        when it changed shard (news for every cycle: generation)."""
        state = self._state
        if state.shards.sharding is None:
            return False
        obj = state.pod_group_objects.get(job_id)
        job = state.pod_groups.get(job_id)
        queue = job.queue if job is not None else ""
        moved = state.shards.classify_group(job_id, obj, queue, state.queue_objects.get(queue))
        if moved:
            for uid in state.membership.members(job_id):
                self._reclassify_task(uid)
        return moved

    def _reclassify_task(self, uid: str) -> None:
        state = self._state
        task = state.tasks.get(uid)
        if task is None:
            return
        named = uid in self._named
        was = task.sluice
        in_group = task.job_id in state.pod_group_objects and task.job_id not in state.basic_groups
        queue = None if in_group else self._queue_of_lone(task)
        task.sluice = state.shards.schedules(task, named, in_group, queue)
        if task.sluice != was:
            state.task_changed(uid)
            if task.sluice and task.status is TaskStatus.PENDING:
                self._news.fresh_jobs.add(task.job_id)

    def _reclassify_queue(self, name: str) -> None:
        """Queue ``name`` changed pool (or came, or went): its PodGroups and the pods of no
        PodGroup that name it are classified again."""
        state = self._state
        for job_id, job in list(state.pod_groups.items()):
            if job.queue == name:
                self._classify_group(job_id)
        for task in list(state.tasks.values()):
            if task.job_id not in state.pod_group_objects and (
                pod_queue(task.labels or {}, task.annotations or {}) == name
            ):
                self._reclassify_task(task.uid)
