"""Snapshot: an immutable-by-convention copy of the cluster for one cycle (layer 0).

The cache builds a snapshot at the start of a cycle; the session mutates its own copy
freely. Nodes are ordered by name and jobs by uid, so iteration is deterministic.
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
