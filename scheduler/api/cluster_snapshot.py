"""Snapshot: the cluster as one cycle decides on it (layer 0).

The cache builds a snapshot at the start of a cycle and hands it to the session, which
changes it as it decides (tasks move, nodes fill) and records what it changed in
``touched_tasks`` and ``touched_nodes``. The copies of tasks and nodes that neither the
session nor the cluster changed are shared with the next snapshot, so a snapshot is valid
until the cache takes the next one. Nodes are ordered by name, so iteration is
deterministic.

What the scheduler itself holds back (preemption gates, backoffs after a failure, parked
jobs, the reservation of starvation protection) is not cluster state: the loop's
scheduling queue keeps it, and the loop attaches its read-only view
(:class:`~scheduler.api.holds.QueueView`) to each snapshot as :attr:`Snapshot.queue`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.dra.view import DraView
from scheduler.api.holds import EMPTY_QUEUE, QueueView
from scheduler.api.job import JobInfo
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.spread_selectors import EMPTY_SELECTORS, SpreadSelectors
from scheduler.api.volumes.view import VolumeView


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the scheduler needs it: which pods, how many may go."""

    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int
    unhealthy_evictable: bool = False
    """May an unhealthy pod of it be evicted without costing a disruption
    (:func:`scheduler.api.disruption.unhealthy_evictable`)?"""
    disrupted: frozenset[str] = frozenset()
    """Its ``status.disruptedPods``: pods whose eviction the API server has processed and
    already counted; evicting one again costs the budget nothing (kube-scheduler's
    ``filterPodsWithPDBViolation``)."""


@dataclass(frozen=True, slots=True)
class TopologyInfo:
    """A Topology: node label keys from the widest level to the narrowest."""

    name: str
    levels: tuple[str, ...]


@dataclass(slots=True)
class Snapshot:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    queues: dict[str, QueueInfo] = field(default_factory=dict)
    budgets: tuple[DisruptionBudget, ...] = ()
    topologies: dict[str, TopologyInfo] = field(default_factory=dict)
    priority_classes: dict[str, int] = field(default_factory=dict)
    now: float = 0.0
    """The loop's clock when the cycle began (seconds; only differences mean anything)."""
    wall: float = 0.0
    """The wall clock when the cycle began (Unix seconds, as API timestamps are read:
    :func:`scheduler.api.core_objects.parse_time`); 0 when the taker gave none."""
    queue: QueueView = EMPTY_QUEUE
    """What the scheduler holds back this cycle: every hold on a job, and starvation
    protection's state (:mod:`scheduler.api.holds`); attached by the loop."""
    touched_tasks: set[str] = field(default_factory=set)
    """Tasks whose copy the session changed (status, node), by uid. Whoever changes a
    task or node of the snapshot records it here or in :attr:`touched_nodes`: the cache
    reuses the copies of everything else in its next snapshot."""
    touched_nodes: set[str] = field(default_factory=set)
    """Nodes whose copy the session changed (tasks added or removed), by name."""
    dra: DraView | None = None
    """DRA devices and claims (None when the cluster has no DRA object at all)."""
    to_place: frozenset[str] | None = None
    """The uids of the jobs with a pod of Sluice's still to place (a task in
    :data:`~scheduler.api.task_states.TO_PLACE`), as the cache's snapshot builder found
    them from the tasks; None for a snapshot built otherwise (then the session finds them
    by walking the jobs). At 140,000 running pods it spares each cycle's actions a walk
    of every job (:meth:`~scheduler.framework.session.Session.jobs_to_place`)."""
    volumes: VolumeView | None = None
    """Claims, PVs, StorageClasses and CSI objects (None when the cluster has none)."""
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """The labels of each namespace, by name: what pod affinity terms' namespace
    selectors match."""
    spread_selectors: SpreadSelectors = EMPTY_SELECTORS
    """The selectors of Services and controllers: what pods without spread constraints
    of their own are spread by (kube's default constraints)."""
