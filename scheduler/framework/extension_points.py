"""The extension points: one typed Protocol each, declared once, with its rule (layer 1).

An extension point is a :class:`Point`: a name, the Protocol of its hooks, the type of
its combined answer, the :class:`Rule` that combines the answers of several plugins, and
its :class:`Scope` (asked for one job, or for the whole cycle). Plugins register hooks in
a :class:`HookSet` when a session opens (``hooks.add(JOB_READY, fn)``); the framework asks
every point through :func:`scheduler.framework.tiers.bind`, which takes the rule from the
declaration and writes each rule once. Declaring a new extension point is a Protocol and
a :class:`Point` here, and the session's typed method that asks it
(:mod:`~scheduler.framework.plugin_questions`, typed by the point's answer): actions call
that method, inside the job's boundary when its scope is JOB.

Every hook is called synchronously from an action, must be deterministic, and must not
mutate its arguments unless its contract says so. A hook that raises is blamed by name:
the framework wraps what it raised in :class:`~scheduler.api.errors.PluginError`, and the
job's boundary (:meth:`~scheduler.framework.session.Session.job_scope`) confines the
failure to that job. The session refuses to ask a JOB point outside any job's boundary,
so no action can leave a hole in it.

Plugins see the session through :class:`PluginContext`, a read-only handle, never the
mutable Session: state changes reach them only through their placement handlers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from scheduler.api.cluster_snapshot import DisruptionBudget, TopologyInfo
from scheduler.api.dra.model import ClaimBinding
from scheduler.api.dra.view import DraView
from scheduler.api.holds import Reservation
from scheduler.api.job import JobInfo
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.resource import Resource
from scheduler.api.task import TaskInfo
from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.effects import VictimBundle
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets
from scheduler.framework.node_table import (
    BoolVector,
    FloatVector,
    IndexVector,
    IntMatrix,
    TableView,
)
from scheduler.framework.plugin_status import Status

OrderKey = tuple[int | float | str, ...]
"""A sort key; smaller sorts first. Keys of several plugins compare lexicographically."""


class Vote(enum.Enum):
    PERMIT = "permit"
    REJECT = "reject"
    ABSTAIN = "abstain"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Nodes refused for one reason: a Status for many nodes at once.

    ``nodes[i]`` is True when row ``i`` of the NodeTable is refused. ``resolvable`` is
    True when removing pods from the node could fix it (resources, pod count, host
    ports, anti-affinity; code UNSCHEDULABLE): such nodes are preemption candidates.
    Otherwise the code is UNRESOLVABLE. ``whole``: the pod itself is refused, whatever
    the node (kube-scheduler's PreFilter: a claim missing, say); every row is refused,
    and the reason is told alone, not counted per node (``0/5 nodes are available:
    persistentvolumeclaim "data" not found.``).
    """

    reason: str
    nodes: BoolVector
    resolvable: bool
    whole: bool = False


class PluginContext(Protocol):
    """What a plugin may read of the session it is opened on. Read-only by contract.

    ``table`` changes only through placements (which the plugin hears of through its
    placement handlers); the maps must not be mutated.
    """

    @property
    def table(self) -> TableView: ...

    @property
    def nodes(self) -> Mapping[str, NodeInfo]: ...

    @property
    def jobs(self) -> Mapping[str, JobInfo]: ...

    @property
    def queues(self) -> Mapping[str, QueueInfo]: ...

    @property
    def budgets(self) -> Sequence[DisruptionBudget]: ...

    @property
    def topologies(self) -> Mapping[str, TopologyInfo]: ...

    @property
    def now(self) -> float:
        """The clock time (seconds, the loop's clock) at which the cycle began."""
        ...

    @property
    def reservation(self) -> Reservation | None:
        """The starving job elected and the nodes reserved for it, as it stands now (the
        ``elect`` and ``reserve`` actions change it during the cycle)."""
        ...

    @property
    def dra(self) -> DraView | None:
        """DRA devices and claims of the snapshot (None: the cluster has none)."""
        ...

    @property
    def volumes(self) -> VolumeView | None:
        """PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSI objects of the
        snapshot (None: the cluster has none)."""
        ...

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        """The labels of each namespace, by name (what namespace selectors match)."""
        ...

    def spread_selector(self, task: TaskInfo) -> LabelSelector | None:
        """What ``task``'s Services and controller select it by (kube's default spreading),
        or None when nothing does."""
        ...

    @property
    def spread_selectors_known(self) -> bool:
        """Does the snapshot know any Service or controller selector at all (else no pod
        has a default spreading selector)?"""
        ...


# The Protocols ------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class AdmissionRoom:
    """What the enqueue action may admit PodGroups' ``minResources`` into this cycle
    (``room``, per resource; it may be negative), and how it was measured, as users read
    it in the reason of a PodGroup left Pending (``measure``: "the cluster's allocatable
    times the overcommit factor 1.2, less what is used and what admitted gangs reserve")."""

    room: Resource
    measure: str


class EnqueueRoom(Protocol):
    def __call__(self) -> AdmissionRoom | None:
        """The room the enqueue action admits gangs into this cycle, or None to leave it
        the action's own (the idle resources of ready nodes, less what admitted gangs
        still reserve). Asked once per enqueue; the action takes each admitted gang's
        ``minResources`` off it."""
        ...


class JobStatus(Protocol):
    def __call__(self, job: JobInfo, /) -> Status:
        """A question about ``job`` answered with a Status: success, or why not.

        ``JOB_VALID``: may ``job`` be tried at all (enough pods)? ``JOB_READY``: is enough
        of it placed to bind? ``JOB_PIPELINED``: is enough placed or nominated? The
        message of a failure is what users read (pod reason, PodGroup condition).
        """
        ...


class JobPredicate(Protocol):
    def __call__(self, job: JobInfo, /) -> bool:
        """A yes/no question about ``job`` (starving: may it preempt?)."""
        ...


class JobEnqueueable(Protocol):
    def __call__(self, job: JobInfo, /) -> Vote:
        """May ``job`` leave Pending for Inqueue? Abstain to let other plugins decide."""
        ...


class NodeFilter(Protocol):
    def __call__(self, task: TaskInfo, table: TableView, releasing: bool, /) -> Sequence[Rejection]:
        """Which nodes cannot take ``task`` now, and why, for all rows at once.

        ``releasing``: count the room of pods being evicted as free (the view of a
        preemptor that will wait for its victims). Called for each placement attempt; must
        be cheap (cache what depends only on the pod's shape). An empty sequence means
        every node passes this filter.
        """
        ...


class RowFilter(Protocol):
    def __call__(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """Does row ``row`` pass the plugin's filter for ``task``? The same answer as the
        plugin's NodeFilter on that row, at the cost of one row: the preemption search
        asks it many times per candidate node."""
        ...


class Shortfall(Protocol):
    def __call__(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> IntMatrix:
        """What must at least be freed on each of ``rows`` (one row of the result per
        row, one column per column of ``table``) before ``task`` can pass the plugin's
        filter there (zeros when nothing).

        A lower bound, never more than the filter asks: the preemption search skips a
        node whose possible victims cannot free that much, and bounds from it how many
        victims a node needs, to leave out nodes that cannot rank first.
        """
        ...


class NodeScorer(Protocol):
    def __call__(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> FloatVector:
        """Scores in [0, 100] of placing ``task`` on each of ``rows`` (higher is better).

        ``releasing``: the rows were found feasible counting the room of pods being evicted
        as free (a preemptor's view): score the nodes as they will be once those pods are
        gone."""
        ...


class QueueAllocatable(Protocol):
    def __call__(self, queue: QueueInfo, task: TaskInfo, /) -> bool:
        """Does ``queue`` have room for ``task`` now?"""
        ...


class QueueBorrowable(Protocol):
    def __call__(self, queue: QueueInfo, task: TaskInfo, /) -> bool:
        """May ``task`` go beyond ``queue``'s deserved share, into room that no queue below
        its share could use (asked by allocate after every queue had its chance)?"""
        ...


class QueueReclaims(Protocol):
    def __call__(self, queue: QueueInfo, task: TaskInfo, /) -> bool:
        """May ``queue`` take room for ``task`` by reclaim (it lacks a share it deserves
        in what ``task`` asks for, though ``task`` may be larger than what is left of it)?
        Asked by the reclaim action before it searches for victims."""
        ...


class QueueShareOf(Protocol):
    def __call__(self, queue: QueueInfo, /) -> QueueShare | None:
        """``queue``'s deserved and allocated share this cycle, or None (not known here)."""
        ...


class QueueOverused(Protocol):
    def __call__(self, queue: QueueInfo, /) -> bool:
        """Has ``queue`` used all it deserves?"""
        ...


class PlacementHandler(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> None:
        """Told after a task is placed on (or removed from) a node in the session.

        Plugins with state (queue usage, devices, affinity) keep it in step here.
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


class ReclaimFilter(Protocol):
    def __call__(
        self, reclaimers: Sequence[TaskInfo], candidates: Sequence[TaskInfo], /
    ) -> Sequence[TaskInfo]:
        """Which of ``candidates`` (pods of other queues, in the order the reclaim search
        prefers them) may be evicted so that ``reclaimers`` (pods of one job, placed by
        the same reclaim: one pod, or the members of a gang the search makes room for
        together) get room, taken in that order: a plugin that counts queue usage keeps
        a prefix-like subset, stopping where the reclaim would no longer be fair.
        Returns a subsequence of ``candidates``."""
        ...


class JobHandler(Protocol):
    def __call__(self, job: JobInfo, /) -> None:
        """Told when a job changes phase in the session (enqueued)."""
        ...


class BindAnnotations(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> Mapping[str, str]:
        """Annotations to write on ``task``'s pod before it is bound to ``node`` (a device
        index), asked when the statement that placed it commits. Empty: none."""
        ...


class BindClaims(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> Sequence[ClaimBinding]:
        """What to write to ``task``'s ResourceClaims before it is bound to ``node`` (the
        allocation chosen in this session, the reservation for the pod), asked when the
        statement that placed it commits. Empty: nothing."""
        ...


class BindVolumes(Protocol):
    def __call__(self, task: TaskInfo, node: NodeInfo, /) -> VolumeBindings | None:
        """What to write to ``task``'s PersistentVolumes and claims before it is bound to
        ``node`` (a PV's claimRef, a claim's selected node), and how long to wait for
        the PV controller to bind them, asked when the statement that placed it commits.
        None: nothing to bind."""
        ...


class SubsetNodes(Protocol):
    def __call__(
        self, job: JobInfo, tasks: Sequence[TaskInfo], nodes: NodeSet, purpose: Purpose, /
    ) -> Subsets | None:
        """The sets of ``nodes`` that ``job``'s ``tasks`` (the pending ones; in an
        eviction, those being evicted too) should be placed in, in order of preference,
        each within ``nodes``, and what kind of set they are; None when the plugin is not
        relevant to ``job`` (the sets are then left whole, at no cost); no sets when none
        can take the gang. For ``Purpose.EVICT``, the best first. Raising makes the job
        unschedulable this cycle with a SchedulerError naming the plugin."""
        ...


class GangVictimSelector(Protocol):
    def __call__(
        self,
        job: JobInfo,
        tasks: Sequence[TaskInfo],
        nodes: NodeSet,
        candidates: Sequence[tuple[JobInfo, VictimBundle, Sequence[TaskInfo]]],
        /,
    ) -> Sequence[str] | None:
        """The jobs (uids) whose tasks among ``candidates`` to evict so that gang ``job``'s
        ``tasks`` fit in ``nodes``; None to leave the choice to the search. ``candidates``
        are the bundles the victim search found there, in its order: (job, SAFE or WHOLE,
        its tasks in ``nodes``). Replaces the default choice."""
        ...


class Plugin(Protocol):
    """A plugin instance lives for one session. ``name`` is its registered name."""

    name: str

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        """Register hooks and build per-session state. Called once, in tier order."""
        ...

    def close(self) -> None:
        """Release per-session state. Called once when the session closes."""
        ...


# The declarations -------------------------------------------------------------------------


class Rule(enum.Enum):
    """How the answers of several plugins to one extension point combine
    (:mod:`scheduler.framework.tiers` implements each once)."""

    __hash__ = object.__hash__

    LEXICOGRAPHIC = "every plugin's key, tier by tier, in plugin order; identity last"
    FIRST_FAILURE = "the first status that is not success (tier, then plugin order) wins"
    ALL_AGREE = "all must say yes (none registered: the point's default)"
    ANY = "any yes suffices (none registered: no)"
    VOTE = "per tier: a REJECT rejects; else a PERMIT permits; else the next tier"
    EVERY_FILTER = "every filter of every tier applies: a node passes if none rejects"
    EVERY_ROW_FILTER = (
        "every filter on one row: a plugin's row filter stands for its node filter there"
    )
    LARGEST = "the largest of every plugin's answers, element by element"
    WEIGHTED_SUM = "the weighted sum of every scorer"
    FIRST_TIER_INTERSECTION = "the intersection of the answers of the first tier with one"
    CHAIN = "every plugin, in order, keeps a subsequence of what the ones before it kept"
    LAYERED = "each plugin splits every set the plugins before it produced, in order"
    FIRST_ANSWER = "the first answer that is not None (tier, then plugin order)"
    NOTIFY = "every handler, in registration order, even after one raises (then re-raised)"
    NOTIFY_REVERSED = "every handler, in reverse registration order (the undo of NOTIFY)"
    MERGE = "the union of every plugin's mapping; a key given twice keeps the first"
    CONCAT = "every plugin's answers, one after the other, in plugin order"


class Scope(enum.Enum):
    """Where an extension point may be asked."""

    JOB = (
        "inside a boundary (a job's, or a queue's for its share): a hook that raises fails "
        "that job (or queue) only"
    )
    CYCLE = "for the whole cycle (an order of jobs or queues): a hook that raises fails it"

    __hash__ = object.__hash__


H = TypeVar("H")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Point(Generic[H, R]):
    """An extension point: hooks of type ``H`` registered under ``name``, their answers
    combined by ``rule`` into an ``R``, asked where ``scope`` says. ``default`` is the
    answer of ALL_AGREE when no plugin registered."""

    name: str
    rule: Rule
    scope: Scope = Scope.JOB
    default: bool = True


FilterGroups = list[tuple[str, Sequence[Rejection]]]
"""Every node filter's rejections, grouped by plugin in registration order."""


_J, _C = Scope.JOB, Scope.CYCLE

JOB_ORDER: Point[JobOrder, OrderKey] = Point("jobOrder", Rule.LEXICOGRAPHIC, _C)
TASK_ORDER: Point[TaskOrder, OrderKey] = Point("taskOrder", Rule.LEXICOGRAPHIC)
QUEUE_ORDER: Point[QueueOrder, OrderKey] = Point("queueOrder", Rule.LEXICOGRAPHIC, _C)
JOB_VALID: Point[JobStatus, Status] = Point("jobValid", Rule.FIRST_FAILURE)
JOB_READY: Point[JobStatus, Status] = Point("jobReady", Rule.FIRST_FAILURE)
JOB_PIPELINED: Point[JobStatus, Status] = Point("jobPipelined", Rule.FIRST_FAILURE)
JOB_STARVING: Point[JobPredicate, bool] = Point("jobStarving", Rule.ALL_AGREE, _J, default=False)
JOB_ENQUEUEABLE: Point[JobEnqueueable, bool] = Point("jobEnqueueable", Rule.VOTE)
ENQUEUE_ROOM: Point[EnqueueRoom, AdmissionRoom | None] = Point("enqueueRoom", Rule.FIRST_ANSWER, _C)
NODE_FILTER: Point[NodeFilter, FilterGroups] = Point("filter", Rule.EVERY_FILTER)
ROW_FILTER: Point[RowFilter, bool] = Point("rowFilter", Rule.EVERY_ROW_FILTER)
"""The one-row form of a plugin's NodeFilter (optional; stands for it on one row)."""
SHORTFALL: Point[Shortfall, IntMatrix] = Point("shortfall", Rule.LARGEST)
NODE_SCORER: Point[NodeScorer, FloatVector] = Point("score", Rule.WEIGHTED_SUM)
QUEUE_ALLOCATABLE: Point[QueueAllocatable, bool] = Point("queueAllocatable", Rule.ALL_AGREE)
QUEUE_BORROWABLE: Point[QueueBorrowable, bool] = Point(
    "queueBorrowable", Rule.ALL_AGREE, _J, default=False
)
QUEUE_OVERUSED: Point[QueueOverused, bool] = Point("queueOverused", Rule.ANY)
QUEUE_RECLAIMS: Point[QueueReclaims, bool] = Point(
    "queueReclaims", Rule.ALL_AGREE, _J, default=False
)
QUEUE_SHARE: Point[QueueShareOf, QueueShare | None] = Point("queueShare", Rule.FIRST_ANSWER)
VICTIMS: Point[VictimFilter, list[TaskInfo]] = Point("preemptable", Rule.FIRST_TIER_INTERSECTION)
RECLAIMABLE: Point[ReclaimFilter, list[TaskInfo]] = Point("reclaimable", Rule.CHAIN)
ON_ENQUEUE: Point[JobHandler, None] = Point("onEnqueue", Rule.NOTIFY)
ON_PLACE: Point[PlacementHandler, None] = Point("onPlace", Rule.NOTIFY)
ON_UNPLACE: Point[PlacementHandler, None] = Point("onUnplace", Rule.NOTIFY_REVERSED)
BIND_ANNOTATIONS: Point[BindAnnotations, dict[str, str]] = Point("bindAnnotations", Rule.MERGE)
BIND_CLAIMS: Point[BindClaims, tuple[ClaimBinding, ...]] = Point("bindClaims", Rule.CONCAT)
BIND_VOLUMES: Point[BindVolumes, VolumeBindings | None] = Point("bindVolumes", Rule.FIRST_ANSWER)
SUBSET_NODES: Point[SubsetNodes, Subsets | None] = Point("subsetNodes", Rule.LAYERED)
GANG_VICTIM_SELECTOR: Point[GangVictimSelector, Sequence[str] | None] = Point(
    "gangVictimSelector", Rule.FIRST_ANSWER
)

POINTS: tuple[Point[Any, Any], ...] = (
    JOB_ORDER,
    TASK_ORDER,
    QUEUE_ORDER,
    JOB_VALID,
    JOB_READY,
    JOB_PIPELINED,
    JOB_STARVING,
    JOB_ENQUEUEABLE,
    ENQUEUE_ROOM,
    NODE_FILTER,
    ROW_FILTER,
    SHORTFALL,
    NODE_SCORER,
    QUEUE_ALLOCATABLE,
    QUEUE_BORROWABLE,
    QUEUE_OVERUSED,
    QUEUE_RECLAIMS,
    QUEUE_SHARE,
    VICTIMS,
    RECLAIMABLE,
    ON_ENQUEUE,
    ON_PLACE,
    ON_UNPLACE,
    BIND_ANNOTATIONS,
    BIND_CLAIMS,
    BIND_VOLUMES,
    SUBSET_NODES,
    GANG_VICTIM_SELECTOR,
)
"""Every extension point, declared above (a test checks none is left out)."""


@dataclass(frozen=True, slots=True)
class Registration(Generic[H]):
    plugin: str
    tier: int
    hook: H
    point: str
    weight: float = 1.0


class HookSet:
    """What plugins register into, per extension point, with their tier and name.

    The session owns one HookSet and sets :attr:`tier` and :attr:`plugin` before opening
    each plugin; :mod:`scheduler.framework.tiers` reads it.
    """

    def __init__(self) -> None:
        self.tier = 0
        self.plugin = ""
        self._by_point: dict[str, list[Registration[Any]]] = {}

    def add(self, point: Point[H, Any], hook: H, weight: float = 1.0) -> None:
        """Register ``hook`` for ``point`` on behalf of the plugin being opened."""
        self._by_point.setdefault(point.name, []).append(
            Registration(self.plugin, self.tier, hook, point.name, weight)
        )

    def add_placement_handlers(
        self, on_place: PlacementHandler, on_unplace: PlacementHandler
    ) -> None:
        """Register the pair of handlers that keep a plugin's state in step with moves."""
        self.add(ON_PLACE, on_place)
        self.add(ON_UNPLACE, on_unplace)

    def __getitem__(self, point: Point[H, Any]) -> Sequence[Registration[H]]:
        """The registrations of ``point``, in tier and plugin order (empty if none)."""
        return self._by_point.get(point.name, ())

    def plugins_of(self, point: Point[Any, Any]) -> list[str]:
        """The names of the plugins that registered for ``point``, in order."""
        return [r.plugin for r in self[point]]
