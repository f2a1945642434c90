"""Snapshot: an immutable-by-convention copy of the cluster for one cycle (layer 0).

The cache builds a snapshot at the start of a cycle; the session mutates its copy, and
records what it changed in ``touched_tasks`` and ``touched_nodes``. The copies of tasks
and nodes that neither the session nor the cluster changed are shared with the next
snapshot, so a snapshot is valid until the cache takes the next one. Nodes are ordered by
name, so iteration is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.selectors import LabelSelector


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the scheduler needs it: which pods, how many may go."""

    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int


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
    gated: frozenset[str] = frozenset()
    """Jobs whose preemption is in flight: enqueue, allocate and preempt skip them."""
    preempt_backoff: dict[str, str] = field(default_factory=dict)
    """Jobs that may not preempt this cycle (a recent preemption failed), with why."""
    touched_tasks: set[str] = field(default_factory=set)
    """Tasks whose copy the session changed (status, node), by uid. Whoever changes a
    task or node of the snapshot records it here or in :attr:`touched_nodes`: the cache
    reuses the copies of everything else in its next snapshot."""
    touched_nodes: set[str] = field(default_factory=set)
    """Nodes whose copy the session changed (tasks added or removed), by name."""
