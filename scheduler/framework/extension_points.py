"""One typed Protocol per extension point (layer 1).

Plugins register callables of these types with a :class:`HookSet` when a session opens.
How the answers of several plugins combine is not written here but in
:mod:`scheduler.framework.tiers`, once, in a table. Every hook is called synchronously
from an action, must be deterministic, and must not mutate its arguments unless its
contract says so.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.node_table import (
    BoolVector,
    FloatVector,
    IndexVector,
    IntMatrix,
    NodeTable,
)

if TYPE_CHECKING:
    from scheduler.framework.session import Session

OrderKey = tuple[int | float | str, ...]
"""A sort key; smaller sorts first. Keys of several plugins compare lexicographically."""


class Vote(enum.Enum):
    PERMIT = "permit"
    REJECT = "reject"
    ABSTAIN = "abstain"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Nodes refused for one reason.

    ``nodes[i]`` is True when row ``i`` of the NodeTable is refused. ``resolvable`` is
    True when removing pods from the node could fix it (resources, pod count, host
    ports, anti-affinity): such nodes are preemption candidates.
    """

    reason: str
    nodes: BoolVector
    resolvable: bool


class JobOrder(Protocol):
    def __call__(self, job: JobInfo, /) -> OrderKey:
        """Sort key of ``job`` among the jobs of a queue. Earlier plugins weigh more."""
        ...


class TaskOrder(Protocol):
    def __call__(self, task: TaskInfo, /) -> OrderKey:
        """Sort key of ``task`` among the tasks of its job."""
        ...


class QueueOrder(Protocol):
    def __call__(self, queue: QueueInfo, /) -> OrderKey:
        """Sort key of ``queue``; re-evaluated each time an action picks a queue."""
        ...


class JobValid(Protocol):
    def __call__(self, job: JobInfo, /) -> str | None:
        """None when ``job`` may be scheduled; otherwise the reason it may not."""
        ...


class JobPredicate(Protocol):
    def __call__(self, job: JobInfo, /) -> bool:
        """A yes/no question about ``job`` (ready, pipelined, starving)."""
        ...


class JobEnqueueable(Protocol):
    def __call__(self, job: JobInfo, /) -> Vote:
        """May ``job`` leave Pending for Inqueue? Abstain to let other plugins decide."""
        ...


class NodeFilter(Protocol):
    def __call__(self, task: TaskInfo, table: NodeTable, /) -> Sequence[Rejection]:
        """Which nodes cannot take ``task`` now, and why, for all rows at once.

        Called for each placement attempt; must be cheap (cache what depends only on
        the pod's shape). An empty sequence means every node passes this filter.
        """
        ...


class RowFilter(Protocol):
    def __call__(self, task: TaskInfo, table: NodeTable, row: int, /) -> bool:
        """Does row ``row`` pass the plugin's filter for ``task``? The same answer as the
        plugin's NodeFilter on that row, at the cost of one row: the preemption search
        asks it many times per candidate node."""
        ...


class Shortfall(Protocol):
    def __call__(self, task: TaskInfo, table: NodeTable, rows: IndexVector, /) -> IntMatrix:
        """What must at least be freed on each of ``rows`` (one row of the result per
        row, one column per column of ``table``) before ``task`` can pass the plugin's
        filter there (zeros when nothing).

        A lower bound, never more than the filter asks: the preemption search skips a
        node whose possible victims cannot free that much, and bounds from it how many
        victims a node needs, to leave out nodes that cannot rank first.
        """
        ...


class NodeScorer(Protocol):
    def __call__(self, task: TaskInfo, table: NodeTable, rows: IndexVector, /) -> FloatVector:
        """Scores in [0, 100] of placing ``task`` on each of ``rows`` (higher is better)."""
        ...


class QueueAllocatable(Protocol):
    def __call__(self, queue: QueueInfo, task: TaskInfo, /) -> bool:
        """Does ``queue`` have room for ``task`` now?"""
        ...


class QueueOverused(Protocol):
    def __call__(self, queue: QueueInfo, /) -> bool:
        """Has ``queue`` used all it deserves?"""
        ...


class PlacementHandler(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> None:
        """Told after a task is placed on (or removed from) a node in the session.

        Plugins with state (queue usage, devices, affinity counts) keep it in step here.
        Called in placement order; a rollback calls the opposite handler in reverse.
        """
        ...


class VictimFilter(Protocol):
    def __call__(
        self, preemptor: TaskInfo, candidates: Sequence[TaskInfo], /
    ) -> Sequence[TaskInfo]:
        """Which of ``candidates`` may be evicted to make room for ``preemptor``.

        Returns the subset it allows, never a task outside ``candidates``.
        """
        ...


class JobHandler(Protocol):
    def __call__(self, job: JobInfo, /) -> None:
        """Told when a job changes phase in the session (enqueued)."""
        ...


class Plugin(Protocol):
    """A plugin instance lives for one session. ``name`` is its registered name."""

    name: str

    def open(self, session: Session, hooks: HookSet, /) -> None:
        """Register hooks and build per-session state. Called once, in tier order."""
        ...

    def close(self, session: Session, /) -> None:
        """Release per-session state. Called once when the session closes."""
        ...


H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Registration(Generic[H]):
    plugin: str
    tier: int
    hook: H
    weight: float = 1.0


class HookSet:
    """What plugins register into, per extension point, with their tier and name.

    The session owns one HookSet; :mod:`scheduler.framework.tiers` reads it.
    """

    def __init__(self) -> None:
        self.tier = 0
        self.plugin = ""
        self.job_order: list[Registration[JobOrder]] = []
        self.task_order: list[Registration[TaskOrder]] = []
        self.queue_order: list[Registration[QueueOrder]] = []
        self.job_valid: list[Registration[JobValid]] = []
        self.job_ready: list[Registration[JobPredicate]] = []
        self.job_pipelined: list[Registration[JobPredicate]] = []
        self.job_starving: list[Registration[JobPredicate]] = []
        self.job_enqueueable: list[Registration[JobEnqueueable]] = []
        self.node_filter: list[Registration[NodeFilter]] = []
        self.row_filter: list[Registration[RowFilter]] = []
        self.shortfall: list[Registration[Shortfall]] = []
        self.node_scorer: list[Registration[NodeScorer]] = []
        self.queue_allocatable: list[Registration[QueueAllocatable]] = []
        self.queue_overused: list[Registration[QueueOverused]] = []
        self.preemptable: list[Registration[VictimFilter]] = []
        self.on_enqueue: list[Registration[JobHandler]] = []
        self.on_place: list[Registration[PlacementHandler]] = []
        self.on_unplace: list[Registration[PlacementHandler]] = []

    def _reg(self, hook: H, weight: float = 1.0) -> Registration[H]:
        return Registration(self.plugin, self.tier, hook, weight)

    def add_job_order(self, fn: JobOrder) -> None:
        self.job_order.append(self._reg(fn))

    def add_task_order(self, fn: TaskOrder) -> None:
        self.task_order.append(self._reg(fn))

    def add_queue_order(self, fn: QueueOrder) -> None:
        self.queue_order.append(self._reg(fn))

    def add_job_valid(self, fn: JobValid) -> None:
        self.job_valid.append(self._reg(fn))

    def add_job_ready(self, fn: JobPredicate) -> None:
        self.job_ready.append(self._reg(fn))

    def add_job_pipelined(self, fn: JobPredicate) -> None:
        self.job_pipelined.append(self._reg(fn))

    def add_job_starving(self, fn: JobPredicate) -> None:
        self.job_starving.append(self._reg(fn))

    def add_job_enqueueable(self, fn: JobEnqueueable) -> None:
        self.job_enqueueable.append(self._reg(fn))

    def add_node_filter(self, fn: NodeFilter) -> None:
        self.node_filter.append(self._reg(fn))

    def add_row_filter(self, fn: RowFilter) -> None:
        """The one-row form of this plugin's NodeFilter (optional; used by ``fits_on``)."""
        self.row_filter.append(self._reg(fn))

    def add_shortfall(self, fn: Shortfall) -> None:
        """What this plugin's filter needs freed on given rows (optional; used by preempt)."""
        self.shortfall.append(self._reg(fn))

    def add_node_scorer(self, fn: NodeScorer, weight: float = 1.0) -> None:
        self.node_scorer.append(self._reg(fn, weight))

    def add_queue_allocatable(self, fn: QueueAllocatable) -> None:
        self.queue_allocatable.append(self._reg(fn))

    def add_queue_overused(self, fn: QueueOverused) -> None:
        self.queue_overused.append(self._reg(fn))

    def add_preemptable(self, fn: VictimFilter) -> None:
        self.preemptable.append(self._reg(fn))

    def add_on_enqueue(self, fn: JobHandler) -> None:
        self.on_enqueue.append(self._reg(fn))

    def add_placement_handlers(
        self, on_place: PlacementHandler, on_unplace: PlacementHandler
    ) -> None:
        self.on_place.append(self._reg(on_place))
        self.on_unplace.append(self._reg(on_unplace))
