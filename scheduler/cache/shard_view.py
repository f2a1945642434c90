"""What one shard of the scheduler takes from the cluster (layer 2, cache).

Job: apply the rules of :mod:`scheduler.api.shards` to the cache's objects as they come:
which nodes this shard keeps, which PodGroups belong to other shards, which pods it
schedules (``TaskInfo.sluice``), which gangs belong to no shard at all (reported by the
first shard: their pods say so), and which ResourceSlices it may allocate from. Owned by
:class:`~scheduler.cache.SchedulerCache`, which asks it on every event and rebuilds the
classification of the pods concerned when a PodGroup or a queue changes pool. Without
sharding (``sharding`` None) everything is this scheduler's, as before shards existed.
Nothing here awaits; the cache's thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api.membership import pod_queue
from scheduler.api.shards import Pool, Sharding
from scheduler.api.task import TaskInfo

Obj = Mapping[str, Any]


def _labels(obj: Obj | None) -> Mapping[str, str] | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("labels") or {}


class ShardView:
    def __init__(self, sharding: Sharding | None) -> None:
        self.sharding = sharding
        self.foreign_groups: set[str] = set()
        """PodGroups (job ids) of other shards' pools: not this shard's jobs."""
        self.orphans: dict[str, str] = {}
        """Jobs of a pool no shard serves, with what their pods say (first shard only)."""

    # Nodes and devices -----------------------------------------------------------------

    def owns_node(self, node: Obj) -> bool:
        return self.sharding is None or self.sharding.owns_node(_labels(node))

    def keeps_slice(self, resource_slice: Obj) -> bool:
        """Does this shard allocate from ``resource_slice``? Sharded, only a slice of one
        node (``spec.nodeName``): a slice shared by several nodes could be given out by
        two shards at once (a slice of another shard's node is kept, unused: no such node
        here)."""
        return self.sharding is None or bool((resource_slice.get("spec") or {}).get("nodeName"))

    # Gangs -----------------------------------------------------------------------------

    def classify_group(
        self, job_id: str, group: Obj | None, queue: str, queue_obj: Obj | None
    ) -> bool:
        """Note whether the PodGroup ``group`` of ``job_id`` (None: gone) is this
        shard's, another's, or no shard's; True when that changed."""
        if self.sharding is None:
            return False
        before = (job_id in self.foreign_groups, self.orphans.get(job_id))
        self.foreign_groups.discard(job_id)
        self.orphans.pop(job_id, None)
        if group is not None:
            pool = self.sharding.gang_pool(
                group_labels=_labels(group),
                pod_labels=None,
                node_selector=None,
                queue=queue,
                queue_labels=_labels(queue_obj),
            )
            self._place(job_id, pool, group=True)
        return before != (job_id in self.foreign_groups, self.orphans.get(job_id))

    def schedules(self, task: TaskInfo, named: bool, in_group: bool, queue_obj: Obj | None) -> bool:
        """Does this shard schedule ``task``? ``named``: its ``schedulerName`` is this
        scheduler's; ``in_group``: its job is a PodGroup's (classified already, by
        :meth:`classify_group`); ``queue_obj``: its own queue (for a pod of no PodGroup)."""
        if self.sharding is None or not named:
            return named
        if in_group:
            return task.job_id not in self.foreign_groups
        self.orphans.pop(task.job_id, None)
        labels = task.labels or {}
        pool = self.sharding.gang_pool(
            group_labels=None,
            pod_labels=labels,
            node_selector=task.spec.node_selector,
            queue=pod_queue(labels, task.annotations or {}),
            queue_labels=_labels(queue_obj),
        )
        return self._place(task.job_id, pool, group=False)

    def forget(self, job_id: str) -> None:
        """A pod of no PodGroup is gone: its job with it."""
        self.orphans.pop(job_id, None)

    def _place(self, job_id: str, pool: Pool, *, group: bool) -> bool:
        """Note where the job of ``job_id`` of ``pool`` goes; is it kept here?"""
        assert self.sharding is not None
        if self.sharding.owns(pool):
            return True
        if self.sharding.serving(pool.value) is None and self.sharding.reports_orphans:
            self.orphans[job_id] = self.sharding.orphan_reason(pool)
            return True  # kept, to say why it is not scheduled
        if group:
            self.foreign_groups.add(job_id)
        return False

    # Queues ----------------------------------------------------------------------------

    def writes_queue(self, queue_obj: Obj | None) -> bool:
        """Does this shard write the status of the queue ``queue_obj``?"""
        return self.sharding is None or self.sharding.writes_queue(_labels(queue_obj))
