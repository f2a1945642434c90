"""Snapshot: the cluster as one cycle decides on it (layer 0).

The cache builds a snapshot at the start of a cycle and hands it to the session, which
changes it as it decides (tasks move, nodes fill) and records what it changed in
``touched_tasks`` and ``touched_nodes``. The copies of tasks and nodes that neither the
session nor the cluster changed are shared with the next snapshot, so a snapshot is valid
until the cache takes the next one. Nodes are ordered by name, so iteration is
deterministic.

What the scheduler itself holds back (preemption gates, backoffs after a failure, the
reservation of starvation protection) is not cluster state: its owners (the preemption
executor, the loop) hand a read-only view of it to ``cache.snapshot(...)``, typed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.dra.view import DraView
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
    unhealthy_evictable: bool = False
    """May an unhealthy pod of it be evicted without costing a disruption
    (:func:`scheduler.api.disruption.unhealthy_evictable`)?"""


@dataclass(frozen=True, slots=True)
class TopologyInfo:
    """A Topology: node label keys from the widest level to the narrowest."""

    name: str
    levels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Backoff:
    """A job held back after a failure: ``reason`` says what failed, ``delay`` how long
    the wait is in all, ``until`` when it ends (seconds of the loop's clock)."""

    reason: str
    delay: float
    until: float


@dataclass(frozen=True, slots=True)
class PreemptionState:
    """What the preemption executor holds, as a cycle sees it (read-only).

    ``gated``: jobs whose preemption is in flight; enqueue, allocate and preempt skip them.
    ``backoffs``: jobs that may not preempt until their backoff ends (a preemption of
    theirs failed); they are still scheduled normally.
    """

    gated: frozenset[str] = frozenset()
    backoffs: Mapping[str, Backoff] = field(default_factory=dict)
    victims_left: Mapping[str, int] = field(default_factory=dict)
    """Per gated job, its victims whose deletion has not been seen yet."""
    calls_left: Mapping[str, int] = field(default_factory=dict)
    """Per gated job, its preemptions whose API calls have not finished."""


NO_PREEMPTIONS = PreemptionState()


@dataclass(frozen=True, slots=True)
class Parked:
    """A job found unschedulable, not searched again until the cluster changes in a way
    that could help it: what it was told then (its reason, and each pod's), which the
    actions say again while it is parked, so that reasons stay true."""

    job_reason: str
    task_reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Starvation protection, as a cycle sees it: the starving job ``elect`` chose
    (``job``, its uid, of ``priority``), since when it had been waiting, and the nodes
    ``reserve`` holds for it (empty until it picks them; no other job of the target's
    priority or lower is placed on them). Times are the loop clock's seconds."""

    job: str
    priority: int
    waiting_since: float
    nodes: frozenset[str] = frozenset()
    reserved_at: float = 0.0
    """When the nodes were picked (0 while there are none)."""


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
    preemption: PreemptionState = NO_PREEMPTIONS
    """The preemption executor's gates and backoffs (see :class:`PreemptionState`)."""
    error_backoffs: Mapping[str, Backoff] = field(default_factory=dict)
    """Jobs that failed with a SchedulerError (a plugin raised) and wait before the next
    attempt; no action tries them meanwhile."""
    reservation: Reservation | None = None
    """The starving job elected and the nodes reserved for it (the loop keeps it from one
    cycle to the next)."""
    waiting_since: Mapping[str, float] = field(default_factory=dict)
    """Since when (loop clock) each job has waited to start: a PodGroup since it was
    first seen Inqueue with pods pending, a lone pod since it was first seen pending."""
    parked: Mapping[str, Parked] = field(default_factory=dict)
    """Jobs found unschedulable and not tried this cycle: nothing that could help them
    changed since (see :mod:`scheduler.loop.parking`)."""
    overtaken: frozenset[str] = frozenset()
    """Jobs waiting to start that a later job of no higher priority has passed (it was
    placed while they waited): what starvation looks like."""
    touched_tasks: set[str] = field(default_factory=set)
    """Tasks whose copy the session changed (status, node), by uid. Whoever changes a
    task or node of the snapshot records it here or in :attr:`touched_nodes`: the cache
    reuses the copies of everything else in its next snapshot."""
    touched_nodes: set[str] = field(default_factory=set)
    """Nodes whose copy the session changed (tasks added or removed), by name."""
    dra: DraView | None = None
    """DRA devices and claims (None when the cluster has no DRA object at all)."""
