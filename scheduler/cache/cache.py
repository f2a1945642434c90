"""SchedulerCache: live cluster state from events; a snapshot per cycle (layer 2).

The one object the loop holds, composed of the cache's three parts over one
:class:`~scheduler.cache.cluster_state.ClusterState`:

* ingest (:mod:`~scheduler.cache.ingest`, :mod:`~scheduler.cache.group_ingest`): the
  backends call :meth:`SchedulerCache.handle` with every watch event, in order, from one
  task, and :meth:`SchedulerCache.replace` after a relist;
* the ledger (:mod:`~scheduler.cache.ledger`): the loop calls :meth:`SchedulerCache.assume`
  and :meth:`SchedulerCache.forget` (the :class:`~scheduler.framework.effects.EffectLedger`
  port) as it hands effects on and as their calls fail;
* the snapshot builder (:mod:`~scheduler.cache.snapshot_builder`): the loop calls
  :meth:`SchedulerCache.snapshot` at the start of a cycle.

The state's tables are read through the properties below (the status reporter, the live
page). Nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.shards import Sharding
from scheduler.api.task import TaskInfo
from scheduler.cache.cluster_state import ClusterState
from scheduler.cache.dra_store import DraStore
from scheduler.cache.ingest import Ingest
from scheduler.cache.ingest_news import IngestNews, ObjectNotice
from scheduler.cache.ledger import Ledger
from scheduler.cache.shard_view import ShardView
from scheduler.cache.snapshot_builder import SnapshotBuilder
from scheduler.cache.volume_store import VolumeStore
from scheduler.framework.awaited_pods import PlacedPod
from scheduler.framework.effects import Bind, Effect, Part

Obj = Mapping[str, Any]


class SchedulerCache:
    def __init__(
        self,
        scheduler_name: str = L.SCHEDULER_NAME,
        *,
        wait_for_pod_grouper: bool = True,
        sharding: Sharding | None = None,
    ) -> None:
        self.state = ClusterState(scheduler_name, sharding)
        self.news = IngestNews()
        self.ledger = Ledger(self.state)
        self.ingest = Ingest(
            self.state, self.ledger, self.news, wait_for_pod_grouper=wait_for_pod_grouper
        )
        self.builder = SnapshotBuilder(self.state)

    # Ingest ---------------------------------------------------------------------------

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds the cache takes events of."""
        return tuple(self.ingest.handlers)

    def handle(self, kind: str, event: str, obj: Obj) -> None:
        """:meth:`Ingest.handle <scheduler.cache.ingest.Ingest.handle>`: apply one watch
        event of ``kind``. Idempotent; a malformed object is set aside."""
        self.ingest.handle(kind, event, obj)

    def replace(self, kind: str, objects: Iterable[Obj]) -> None:
        """:meth:`Ingest.replace <scheduler.cache.ingest.Ingest.replace>`: a relist."""
        self.ingest.replace(kind, objects)

    def take_notices(self) -> list[ObjectNotice]:
        """Objects rejected or adjusted since the last call, each told once per reason."""
        return self.news.take_notices()

    def take_fresh_jobs(self) -> set[str]:
        """The jobs that got a new pending pod of ours since the last call."""
        return self.news.take_fresh_jobs()

    def take_placed_pods(self) -> tuple[PlacedPod, ...] | None:
        """:meth:`PlacedPods.take <scheduler.cache.placed_pods.PlacedPods.take>`: the pods
        given a node or relabelled on one since the last call (None: too many to tell).
        Called by the loop before each snapshot."""
        return self.state.placed.take()

    def group_members(self, job_id: str) -> list[str]:
        """The uids of the pods naming the PodGroup of ``job_id``, sorted."""
        return self.ingest.groups.group_members(job_id)

    # The EffectLedger port --------------------------------------------------------------

    def assume(self, effect: Effect, /) -> Mapping[str, Sequence[TaskInfo]]:
        """:meth:`Ledger.assume <scheduler.cache.ledger.Ledger.assume>`."""
        return self.ledger.assume(effect)

    def forget(self, effect: Effect | Part, /) -> None:
        """:meth:`Ledger.forget <scheduler.cache.ledger.Ledger.forget>`."""
        self.ledger.forget(effect)

    def bound_elsewhere(self, effect: Bind, node: str, /) -> None:
        """:meth:`Ledger.bound_elsewhere <scheduler.cache.ledger.Ledger.bound_elsewhere>`."""
        self.ledger.bound_elsewhere(effect, node)

    def claim_written(self, binding: ClaimBinding, /) -> None:
        """:meth:`Ledger.claim_written <scheduler.cache.ledger.Ledger.claim_written>`."""
        self.ledger.claim_written(binding)

    def holds(self, uid: str, /) -> bool:
        """:meth:`Ledger.holds <scheduler.cache.ledger.Ledger.holds>`."""
        return self.ledger.holds(uid)

    def holds_devices(self, uid: str, /) -> bool:
        """:meth:`Ledger.holds_devices <scheduler.cache.ledger.Ledger.holds_devices>`."""
        return self.ledger.holds_devices(uid)

    # Snapshots --------------------------------------------------------------------------

    def snapshot(self, *, now: float = 0.0, wall: float = 0.0) -> Snapshot:
        """:meth:`SnapshotBuilder.snapshot
        <scheduler.cache.snapshot_builder.SnapshotBuilder.snapshot>`: the copy the next
        cycle decides on; retires the last one."""
        return self.builder.snapshot(now=now, wall=wall)

    def full_snapshot(self) -> Snapshot:
        """:meth:`SnapshotBuilder.full_snapshot
        <scheduler.cache.snapshot_builder.SnapshotBuilder.full_snapshot>`: a copy sharing
        nothing; leaves the cache as it was."""
        return self.builder.full_snapshot()

    def drop_copies(self) -> None:
        """Make the next snapshot copy everything (after a cycle that failed midway)."""
        self.builder.drop_copies()

    # The state, read-only for callers (the loop's reporter, the live page) -------------

    @property
    def scheduler_name(self) -> str:
        return self.state.scheduler_name

    @property
    def tasks(self) -> dict[str, TaskInfo]:
        return self.state.tasks

    @property
    def nodes(self) -> dict[str, NodeInfo]:
        return self.state.nodes

    @property
    def pod_groups(self) -> dict[str, JobInfo]:
        return self.state.pod_groups

    @property
    def pod_group_objects(self) -> dict[str, Obj]:
        return self.state.pod_group_objects

    @property
    def basic_groups(self) -> set[str]:
        return self.state.basic_groups

    @property
    def queues(self) -> dict[str, QueueInfo]:
        return self.state.queues

    @property
    def queue_objects(self) -> dict[str, Obj]:
        return self.state.queue_objects

    @property
    def queue_sources(self) -> Mapping[str, Mapping[str, Obj]]:
        """:attr:`GroupIngest.queue_sources
        <scheduler.cache.group_ingest.GroupIngest.queue_sources>`: every API's Queue
        objects, by name, then by kind key."""
        return self.ingest.groups.queue_sources

    @property
    def shards(self) -> ShardView:
        return self.state.shards

    @property
    def dra(self) -> DraStore:
        return self.state.dra

    @property
    def volumes(self) -> VolumeStore:
        return self.state.volumes

    @property
    def rejected(self) -> dict[str, str]:
        return self.news.rejected

    @property
    def adjusted(self) -> dict[str, str]:
        return self.news.adjusted

    @property
    def generation(self) -> int:
        """:attr:`ClusterState.generation
        <scheduler.cache.cluster_state.ClusterState.generation>`."""
        return self.state.generation

    @property
    def revision(self) -> int:
        """:attr:`ClusterState.revision <scheduler.cache.cluster_state.ClusterState.revision>`."""
        return self.state.revision

    @property
    def on_change(self) -> Callable[[], None] | None:
        """Called after an event that may let something new be scheduled (the loop sets
        it to its wake-up)."""
        return self.state.on_change

    @on_change.setter
    def on_change(self, callback: Callable[[], None] | None) -> None:
        self.state.on_change = callback

    @property
    def on_pod_deleted(self) -> list[Callable[[str], None]]:
        """Called with the uid of every pod whose deletion is seen."""
        return self.ingest.on_pod_deleted

    @property
    def on_devices_released(self) -> list[Callable[[str], None]]:
        """Called with the uid of a pod no allocated ResourceClaim holds devices for."""
        return self.ingest.on_devices_released
