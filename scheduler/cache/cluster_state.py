"""What the cache holds (layer 2): the cluster's objects as the events showed them, with
what the ledger assumed on top, and where each task counts.

:class:`ClusterState` is the one state the cache's three parts share: ingest
(:mod:`~scheduler.cache.ingest`, :mod:`~scheduler.cache.group_ingest`) changes it from
watch events, the ledger (:mod:`~scheduler.cache.ledger`) from effects assumed and
forgotten, and the snapshot builder (:mod:`~scheduler.cache.snapshot_builder`) copies it
out. Its tables are created once and never replaced (``Final``: the parts and the
:class:`~scheduler.cache.SchedulerCache` facade hold them). Every change to a task or to
the tasks of a node is told (:meth:`task_changed`, :meth:`node_changed`; :meth:`move`,
:meth:`attach` and :meth:`detach` do it) so that the next snapshot copies it anew.
Nothing here awaits; the cache's one task only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from scheduler.api.cluster_snapshot import TopologyInfo
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.shards import Sharding
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import USES_NODE
from scheduler.cache.dra_store import DraStore
from scheduler.cache.job_membership import Membership
from scheduler.cache.placed_pods import PlacedPods
from scheduler.cache.placement_objects import PlacementObjects
from scheduler.cache.shard_view import ShardView
from scheduler.cache.volume_store import VolumeStore

Obj = Mapping[str, Any]


class ClusterState:
    """The tables of the cache, the counters the loop reads, and where tasks count."""

    def __init__(self, scheduler_name: str, sharding: Sharding | None) -> None:
        self.scheduler_name: Final = scheduler_name
        self.shards: Final = ShardView(sharding)
        """What this shard of the scheduler takes (everything when not sharded)."""
        self.nodes: Final[dict[str, NodeInfo]] = {}
        self.tasks: Final[dict[str, TaskInfo]] = {}
        self.pod_groups: Final[dict[str, JobInfo]] = {}
        """The gangs of the PodGroups of every API, by job id."""
        self.pod_group_objects: Final[dict[str, Obj]] = {}
        """Every PodGroup object of every API as last seen, by job id."""
        self.basic_groups: Final[set[str]] = set()
        """PodGroups (job ids) whose pods are scheduled alone: not gangs."""
        self.queues: Final[dict[str, QueueInfo]] = {}
        self.queue_objects: Final[dict[str, Obj]] = {}
        """The Queue objects as last seen, of the API each name is taken from (their
        status is what the reporter diffs)."""
        self.priority_classes: Final[dict[str, int]] = {}
        self.budgets: Final[dict[str, Obj]] = {}
        self.topologies: Final[dict[str, TopologyInfo]] = {}
        self.membership: Final = Membership()
        """Which job each pod that names a PodGroup joins."""
        self.dra: Final = DraStore()
        """ResourceSlices, DeviceClasses, ResourceClaims and their templates (DRA)."""
        self.volumes: Final = VolumeStore()
        """PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSI objects."""
        self.placement: Final = PlacementObjects()
        """Namespaces' labels and Services' and controllers' selectors (placement
        plugins read them: affinity namespace selectors, default spreading)."""
        self.placed: Final = PlacedPods()
        """Pods given a node or relabelled on one since the loop last took them (news for
        parked jobs that wait for such a pod: :mod:`scheduler.framework.awaited_pods`);
        noted by ingest and by the ledger."""
        self.off_node: Final[dict[str, set[str]]] = {}
        """Tasks whose node is not in :attr:`nodes` (not listed yet, gone, another
        shard's), by node name: attached when it comes."""
        self.generation = 0
        """Watch events that could let an unschedulable job fit now (room freed; nodes,
        queues, PodGroups, budgets changed), and binds that failed, counted: a job parked
        at an older generation is tried again (:mod:`scheduler.loop.queue.parking`). A new
        pending pod of ours is not counted: it is news for its own job only."""
        self.revision = 0
        """Every change of what a snapshot would show, counted: each watch event and
        relist, each assumption and forgetting (:class:`~scheduler.loop.idle.IdleCycles`
        skips a cycle while it has not moved since a cycle that had nothing to do)."""
        self.on_change: Callable[[], None] | None = None
        """Called after an event that may let something new be scheduled (wakes the loop)."""
        self._changed_tasks: set[str] = set()
        self._changed_nodes: set[str] = set()

    # What the next snapshot must copy anew -----------------------------------------------

    def task_changed(self, uid: str) -> None:
        """Task ``uid`` was changed, replaced or dropped."""
        self._changed_tasks.add(uid)

    def node_changed(self, name: str) -> None:
        """Node ``name`` was changed, or the tasks on it."""
        self._changed_nodes.add(name)

    def take_changes(self) -> tuple[set[str], set[str]]:
        """The tasks and nodes changed since the last call (the snapshot builder's, once
        per snapshot), and start afresh."""
        changed = self._changed_tasks, self._changed_nodes
        self._changed_tasks, self._changed_nodes = set(), set()
        return changed

    def room_freed(self) -> None:
        """Room was freed outside a watch event (a bind failed): news for the parked jobs,
        as a deleted pod's is. Count a generation and wake the loop."""
        self.generation += 1
        if self.on_change is not None:
            self.on_change()

    # Where tasks count ---------------------------------------------------------------------

    def attach(self, task: TaskInfo) -> None:
        """Count ``task`` on its node, if it has one that is known (else it waits in
        :attr:`off_node` for the node)."""
        if not task.node_name:
            return
        self.node_changed(task.node_name)
        node = self.nodes.get(task.node_name)
        if node is None:  # not known (yet): attached when it comes
            self.off_node.setdefault(task.node_name, set()).add(task.uid)
        elif task.status in USES_NODE or task.status is TaskStatus.PIPELINED:
            node.add_task(task)

    def detach(self, task: TaskInfo) -> None:
        """Stop counting ``task`` where :meth:`attach` counted it."""
        if not task.node_name:
            return
        self.node_changed(task.node_name)
        node = self.nodes.get(task.node_name)
        if node is not None and task.uid in node.tasks:
            node.remove_task(task)
        waiting = self.off_node.get(task.node_name)
        if waiting is not None:
            waiting.discard(task.uid)
            if not waiting:
                del self.off_node[task.node_name]

    def move(self, uid: str, status: TaskStatus, node: str) -> TaskInfo | None:
        """Give task ``uid`` ``status`` on ``node`` ("": none), counted there; None when
        there is no such task."""
        task = self.tasks.get(uid)
        if task is None:
            return None
        self.task_changed(uid)
        self.detach(task)
        task.status = status
        task.node_name = node
        self.attach(task)
        return task

    # Which PodGroups exist: the GroupIndex port --------------------------------------------

    def has_group(self, job_id: str, /) -> bool:
        """:meth:`GroupIndex.has_group <scheduler.api.membership.GroupIndex.has_group>`."""
        return job_id in self.pod_group_objects

    def is_basic(self, job_id: str, /) -> bool:
        """:meth:`GroupIndex.is_basic <scheduler.api.membership.GroupIndex.is_basic>`."""
        return job_id in self.basic_groups
