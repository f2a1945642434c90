"""nodeorder: kube-scheduler's node scores, vectorised over the rows being scored (layer 2).

Up to five :class:`~scheduler.framework.extension_points.NodeScorer` hooks, one per
non-zero weight of :class:`NodeOrderArguments`, each returning scores in [0, 100] computed
with kube-scheduler's integer arithmetic (so that its ties are Sluice's ties):

====================  ==========================================================================
scorer                score of a node (kube-scheduler's plugin)
====================  ==========================================================================
least allocated       weighted mean of ``(allocatable - requested) * 100 // allocatable`` (0 when
                      over-requested): spreads pods (NodeResourcesFit, LeastAllocated)
most allocated        weighted mean of ``requested * 100 // allocatable``, requested capped at
                      allocatable: packs pods (MostAllocated, Volcano's binpack)
balanced allocation   ``50 + (50 + balance with the pod - balance without it) // 2``, where a
                      balance is ``int((1 - std) * 100)`` of the fractions ``requested /
                      allocatable`` (capped at 1): prefers placements that even out a node's
                      use of its resources (NodeResourcesBalancedAllocation); a pod that asks
                      none of the resources is not scored by it
preferred affinity    sum of the weights of the matching preferred node affinity terms, ``* 100
                      //`` the largest among the rows scored (NodeAffinity)
taint toleration      ``100 - count * 100 //`` the largest count among the rows scored, of the
                      ``PreferNoSchedule`` taints the pod does not tolerate (TaintToleration)
====================  ==========================================================================

The least and most allocated scores count *non-zero* requests, as kube does: the pods on
a node and the pod placed count 100m CPU and 200Mi memory for each container that names
no request (``NodeInfo.nonzero_pad``, ``PodSpecView.score_pad``), so pods that ask for
nothing still spread. Balanced allocation counts the requests as they are.

The resources and their weights are ``NodeOrderArguments.resources``. As in
kube-scheduler, a resource a node does not offer (allocatable 0) is left out of that
node's mean, and so is an extended resource (any but cpu, memory and
ephemeral-storage) the pod does not ask for, so a GPU weight does not push CPU-only pods
onto or away from GPU nodes; a node left with no resource scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler.api.pod import PodSpecView, PreferredTerm, Taint, Toleration
from scheduler.api.resource import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import NODE_SCORER, HookSet, PluginContext
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import (
    BoolVector,
    FloatMatrix,
    FloatVector,
    IndexVector,
    IntMatrix,
    IntVector,
    TableView,
)

MAX_SCORE = 100.0

EXACT_BELOW = 2**46
"""Amounts (millicores, bytes) below which ``a * 100 // b`` computed in floats is kube's
integer quotient: 64 TiB of memory on one node."""

NATIVE = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE})
"""Resources kube scores for every pod; any other is scored only for pods that ask it."""


@dataclass(frozen=True, slots=True)
class _Asks:
    """A pod spec's request of the scored resources (the scored columns, in order)."""

    scored: IntVector
    """As the least and most allocated scores count it: with kube's non-zero pads."""
    plain: IntVector
    """As balanced allocation counts it: as asked."""
    scored_everywhere: bool
    """Every scored resource counts on every row for ``scored`` (the fast paths apply)."""
    plain_everywhere: bool
    any: bool
    """It asks some scored resource (else balanced allocation does not score it)."""


def _default_resources() -> dict[str, int]:
    return {"cpu": 1, "memory": 1}


@dataclass(frozen=True, slots=True)
class NodeOrderArguments:
    """The arguments of ``nodeorder``; field names are the YAML keys.

    A weight multiplies its scorer's [0, 100] score in the session's weighted sum; 0 turns
    the scorer off. Every weight must be >= 0.
    """

    leastAllocatedWeight: int = 1
    """Weight of the least allocated score (spread)."""
    mostAllocatedWeight: int = 0
    """Weight of the most allocated score (binpack)."""
    balancedAllocationWeight: int = 1
    """Weight of the balanced allocation score."""
    nodeAffinityWeight: int = 2
    """Weight of the preferred node affinity score."""
    taintTolerationWeight: int = 3
    """Weight of the taint toleration score (untolerated ``PreferNoSchedule`` taints); 3,
    kube-scheduler's default weight of TaintToleration."""
    resources: dict[str, int] = field(default_factory=_default_resources)
    """Resource name to weight, for the three allocation scores. Balanced allocation takes
    the names with a non-zero weight and weighs them equally."""

    def __post_init__(self) -> None:
        for name in (
            "leastAllocatedWeight",
            "mostAllocatedWeight",
            "balancedAllocationWeight",
            "nodeAffinityWeight",
            "taintTolerationWeight",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        for resource, weight in self.resources.items():
            if weight < 0:
                raise ValueError(f"resources.{resource} must be >= 0, got {weight}")


class NodeOrderPlugin:
    """Node scores by allocation, preferred node affinity and soft taints. One instance
    per session.

    What depends only on allocatable (which does not change within a session) is taken at
    ``open``: the columns of the weighted resources, their allocatable per row, which are
    extended resources. A call reads ``idle`` and ``nonzero_pad`` for its rows.
    """

    name = "nodeorder"

    def __init__(self, arguments: NodeOrderArguments | None = None) -> None:
        self.arguments = arguments if arguments is not None else NodeOrderArguments()
        self._labels = NodeLabelIndex(())
        self._cols: IndexVector = np.zeros(0, dtype=np.intp)
        self._alloc: IntMatrix = np.zeros((0, 0), dtype=np.int64)
        self._weights: IntVector = np.zeros(0, dtype=np.int64)
        self._scalar: BoolVector = np.zeros(0, dtype=np.bool_)
        self._offered_everywhere = False
        """Every node offers every scored resource (then no mask is needed per call)."""
        self._any_scalar = False
        self._float_floor: FloatMatrix = np.zeros((0, 0), dtype=np.float64)
        """``max(allocatable, 1)`` per (row, scored resource): the divisor of the scores."""
        self._float_weights: FloatVector = np.zeros(0, dtype=np.float64)
        self._total_weight = 0
        self._exact_in_floats = False
        """Allocatable below :data:`EXACT_BELOW` everywhere (the float fast paths apply)."""
        self._asked: dict[int, tuple[PodSpecView, _Asks]] = {}
        """:meth:`_asks` by the spec's identity (the spec kept, so an id is not reused)."""
        self._span: slice | None = None
        """The scored columns as one slice of the table's, when they are contiguous."""
        self._preferred: dict[tuple[PreferredTerm, ...], IntVector] = {}
        self._soft_taints: list[tuple[Taint, ...]] = []
        """Per row, the node's ``PreferNoSchedule`` taints."""
        self._untolerated: dict[tuple[Toleration, ...], IntVector] = {}

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        args = self.arguments
        self._labels = NodeLabelIndex(table.nodes)
        # Resources no column holds are offered by no node: left out of every mean; and a
        # pod slot is no resource kube scores.
        used = [
            (table.col[r], w, r)
            for r, w in sorted(args.resources.items())
            if w and r in table.col and r != PODS
        ]
        self._cols = np.array([j for j, _, _ in used], dtype=np.intp)
        self._alloc = table.allocatable.take(self._cols, axis=1)
        self._weights = np.array([w for _, w, _ in used], dtype=np.int64)
        self._scalar = np.array([r not in NATIVE for _, _, r in used], dtype=np.bool_)
        self._offered_everywhere = bool((self._alloc > 0).all())
        self._any_scalar = bool(self._scalar.any())
        self._float_floor = np.maximum(self._alloc, 1).astype(np.float64)
        self._float_weights = self._weights.astype(np.float64)
        self._total_weight = int(self._weights.sum())
        self._exact_in_floats = int(self._alloc.max(initial=0)) < EXACT_BELOW
        cols = self._cols
        contiguous = len(cols) > 0 and bool((np.diff(cols) == 1).all())
        self._span = slice(int(cols[0]), int(cols[-1]) + 1) if contiguous else None
        if args.leastAllocatedWeight:
            hooks.add(NODE_SCORER, self.least_allocated, args.leastAllocatedWeight)
        if args.mostAllocatedWeight:
            hooks.add(NODE_SCORER, self.most_allocated, args.mostAllocatedWeight)
        if args.balancedAllocationWeight:
            hooks.add(NODE_SCORER, self.balanced_allocation, args.balancedAllocationWeight)
        if args.nodeAffinityWeight:
            hooks.add(NODE_SCORER, self.node_affinity, args.nodeAffinityWeight)
        self._soft_taints = [
            tuple(t for t in node.taints if t.effect == "PreferNoSchedule") for node in table.nodes
        ]
        if args.taintTolerationWeight and any(self._soft_taints):
            hooks.add(NODE_SCORER, self.taint_toleration, args.taintTolerationWeight)

    def close(self) -> None:
        self._asked.clear()
        self._labels = NodeLabelIndex(())
        self._preferred.clear()
        self._soft_taints = []
        self._untolerated.clear()

    # Allocation ----------------------------------------------------------------------------

    def _room(
        self, table: TableView, rows: IndexVector, *, pads: bool, releasing: bool
    ) -> IntMatrix:
        """Per (row of ``rows``, every column): idle, plus the room of pods being evicted
        with ``releasing``, less the non-zero pads with ``pads``; a fresh array (whole rows:
        arithmetic on a strided view of the scored columns is several times slower)."""
        room = table.idle.take(rows, axis=0)
        if pads:
            room -= table.nonzero_pad.take(rows, axis=0)
        if releasing:
            room += table.releasing.take(rows, axis=0)
        return room

    def _scored(self, matrix: IntMatrix) -> IntMatrix:
        """The scored columns of ``matrix`` (a view where they are contiguous)."""
        if self._span is not None:
            view: IntMatrix = matrix[:, self._span]
            return view
        return matrix.take(self._cols, axis=1)

    def _everywhere(self, request: IntVector) -> bool:
        """Does every scored resource count on every row for a pod asking ``request``, with
        amounts small enough for the float fast paths?"""
        if not self._offered_everywhere or not self._exact_in_floats:
            return False
        if int(request.max(initial=0)) >= EXACT_BELOW:
            return False
        return not self._any_scalar or not (self._scalar & (request == 0)).any()

    def _mean_of_all(self, scores: FloatMatrix) -> FloatVector:
        """:meth:`_weighted_mean` of whole-number ``scores`` when every resource counts on
        every row."""
        if self._total_weight == 0:
            return np.zeros(len(scores), dtype=np.float64)
        mean: FloatVector = scores.dot(self._float_weights)
        mean /= self._total_weight
        np.floor(mean, out=mean)
        return mean

    def _floor_divided(self, amounts: IntMatrix, rows: IndexVector) -> FloatMatrix:
        """``amounts * 100 // allocatable`` on ``rows``, in floats: exact while amounts and
        allocatable stay below :data:`EXACT_BELOW` (``open`` checks; a quotient's error is
        then below the distance from a fraction to the next whole number)."""
        scores: FloatMatrix = np.multiply(amounts, MAX_SCORE, dtype=np.float64)
        scores /= self._float_floor.take(rows, axis=0)
        np.floor(scores, out=scores)
        return scores

    def _allocation(
        self,
        table: TableView,
        rows: IndexVector,
        request: IntVector,
        *,
        nonzero: bool,
        releasing: bool,
    ) -> tuple[IntMatrix, IntMatrix, BoolVector | None]:
        """(allocatable, requested before the pod, which resources count) per (row,
        resource): requested is the node's non-zero requested with ``nonzero``, less the
        room of pods being evicted with ``releasing`` (their non-zero pads stay counted). A
        resource counts where the node offers it, unless it is an extended resource the pod
        does not ask for (``request``: the pod's, per resource); None when every one counts
        on every row (the common case, computed without masks)."""
        alloc: IntMatrix = self._alloc.take(rows, axis=0)
        cols = self._cols
        used: IntMatrix = alloc - table.idle.take(rows, axis=0).take(cols, axis=1)
        if releasing:
            used -= table.releasing.take(rows, axis=0).take(cols, axis=1)
        if nonzero:
            used += table.nonzero_pad.take(rows, axis=0).take(cols, axis=1)
        skipped = self._scalar & (request == 0)
        if self._offered_everywhere and not skipped.any():
            return alloc, used, None
        counted = (alloc > 0) & ~skipped
        return alloc, used, counted

    def _weighted_mean(self, scores: IntMatrix, counted: BoolVector | None) -> FloatVector:
        """Per row, ``sum(score * weight) // sum(weight)`` over the counted resources; 0 where
        none counts (kube's integer mean)."""
        if counted is None:
            total = int(self._weights.sum())
            if total == 0:
                return np.zeros(len(scores), dtype=np.float64)
            every: FloatVector = (scores.dot(self._weights) // total).astype(np.float64)
            return every
        weights = np.where(counted, self._weights, 0)
        total = weights.sum(axis=1)
        mean = (scores * weights).sum(axis=1) // np.maximum(total, 1)
        out: FloatVector = np.where(total > 0, mean, 0).astype(np.float64)
        return out

    def _asks(self, task: TaskInfo, table: TableView) -> _Asks:
        """What ``task``'s spec asks of the scored resources, worked out once per distinct
        spec in a session (pods of one template share theirs)."""
        spec = task.spec
        known = self._asked.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
        plain: IntVector = table.request(spec.request).take(self._cols)
        scored = plain
        if spec.score_pad:
            scored = plain + table.vector(spec.score_pad).take(self._cols)
        asks = _Asks(
            scored, plain, self._everywhere(scored), self._everywhere(plain), bool(plain.any())
        )
        self._asked[id(spec)] = (spec, asks)
        return asks

    def least_allocated(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool = False, /
    ) -> FloatVector:
        """Higher for emptier nodes: ``(allocatable - requested) * 100 // allocatable``."""
        asks = self._asks(task, table)
        request = asks.scored
        if asks.scored_everywhere:
            # allocatable - requested = idle (+ releasing) - the pads - the pod's request
            room = self._room(table, rows, pads=True, releasing=releasing)
            free = self._scored(room) - request
            np.maximum(free, 0, out=free)
            return self._mean_of_all(self._floor_divided(free, rows))
        alloc, used, counted = self._allocation(
            table, rows, request, nonzero=True, releasing=releasing
        )
        requested = used + request
        free = np.maximum(alloc - requested, 0)
        scores = free * int(MAX_SCORE) // np.maximum(alloc, 1)
        return self._weighted_mean(scores, counted)

    def most_allocated(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool = False, /
    ) -> FloatVector:
        """Higher for fuller nodes: ``requested * 100 // allocatable``, requested capped."""
        asks = self._asks(task, table)
        request = asks.scored
        if asks.scored_everywhere:
            alloc = self._alloc.take(rows, axis=0)
            room = self._room(table, rows, pads=True, releasing=releasing)
            requested = alloc - self._scored(room)
            requested += request
            np.minimum(requested, alloc, out=requested)
            return self._mean_of_all(self._floor_divided(requested, rows))
        alloc, used, counted = self._allocation(
            table, rows, request, nonzero=True, releasing=releasing
        )
        requested = np.minimum(used + request, alloc)
        scores = requested * int(MAX_SCORE) // np.maximum(alloc, 1)
        return self._weighted_mean(scores, counted)

    def balanced_allocation(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool = False, /
    ) -> FloatVector:
        """``50 + (50 + balance with the pod - balance without it) // 2`` (module docstring);
        0 everywhere for a pod that asks none of the resources (kube skips it)."""
        asks = self._asks(task, table)
        request = asks.plain
        if not asks.any:
            return np.zeros(len(rows), dtype=np.float64)
        if len(self._cols) == 2 and asks.plain_everywhere:
            floor = self._float_floor.take(rows, axis=0)
            room = self._room(table, rows, pads=False, releasing=releasing)
            used = self._alloc.take(rows, axis=0) - self._scored(room)
            fast = _two_balance((used + request) / floor)
            fast -= _two_balance(used / floor)
            fast += 50  # 50 + (50 + with - without) // 2
            fast /= 2
            np.floor(fast, out=fast)
            fast += 50
            return fast
        alloc, used, counted = self._allocation(
            table, rows, request, nonzero=False, releasing=releasing
        )
        with_pod = _balance(used + request, alloc, counted)
        without = _balance(used, alloc, counted)
        out: FloatVector = (50 + (50 + with_pod - without) // 2).astype(np.float64)
        return out

    # Preferred node affinity ---------------------------------------------------------------

    def node_affinity(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool = False, /
    ) -> FloatVector:
        """Matching preferred terms' weights, scaled so the best of ``rows`` scores 100
        (node labels only: ``releasing`` changes nothing)."""
        del releasing
        terms = task.spec.preferred_terms
        if not terms:
            return np.zeros(len(rows), dtype=np.float64)
        raw = self._preferred.get(terms)
        if raw is None:
            raw = np.zeros(len(table), dtype=np.int64)
            for term in terms:
                raw += term.weight * self._labels.term(term.term)
            raw.flags.writeable = False
            self._preferred[terms] = raw
        sums = raw[rows]
        top = int(sums.max()) if len(sums) else 0
        if top <= 0:
            return np.zeros(len(rows), dtype=np.float64)
        out: FloatVector = (np.maximum(sums, 0) * int(MAX_SCORE) // top).astype(np.float64)
        return out

    # Taint toleration ------------------------------------------------------------------------

    def taint_toleration(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool = False, /
    ) -> FloatVector:
        """100 where the pod tolerates every ``PreferNoSchedule`` taint, down to 0 on the row
        of ``rows`` with the most it does not tolerate (``releasing`` changes nothing).
        Registered only when some node has such a taint."""
        del releasing
        tolerations = task.spec.tolerations
        raw = self._untolerated.get(tolerations)
        if raw is None:
            raw = np.array(
                [
                    sum(1 for t in taints if not any(x.tolerates(t) for x in tolerations))
                    for taints in self._soft_taints
                ],
                dtype=np.int64,
            )
            raw.flags.writeable = False
            self._untolerated[tolerations] = raw
        counts = raw[rows]
        top = int(counts.max()) if len(counts) else 0
        if top <= 0:
            return np.full(len(rows), MAX_SCORE, dtype=np.float64)
        out: FloatVector = (int(MAX_SCORE) - counts * int(MAX_SCORE) // top).astype(np.float64)
        return out


def _two_balance(fractions: FloatMatrix) -> FloatVector:
    """kube's ``int((1 - std) * 100)`` of two fractions per row, each capped at 1, the std
    of two being ``|f1 - f2| / 2`` (a fresh vector; ``fractions`` is changed)."""
    np.minimum(fractions, 1.0, out=fractions)
    score: FloatVector = fractions[:, 0] - fractions[:, 1]
    score /= 2
    np.abs(score, out=score)
    np.subtract(1, score, out=score)
    score *= MAX_SCORE
    np.trunc(score, out=score)
    return score


def _balance(requested: IntMatrix, alloc: IntMatrix, counted: BoolVector | None) -> IntVector:
    """Per row, ``int((1 - std) * 100)`` of the fractions ``requested / allocatable`` (capped
    at 1) of the counted resources (None: all), as kube's ``balancedResourceScore``: for two
    resources the std is ``|f1 - f2| / 2``, for one or none 0."""
    fractions = np.minimum(requested / np.maximum(alloc, 1), 1.0)
    if counted is None:
        width = fractions.shape[1]
        if width == 2:
            std = np.abs((fractions[:, 0] - fractions[:, 1]) / 2)
        elif width > 2:
            mean = fractions.sum(axis=1) / width
            std = np.sqrt(((fractions - mean[:, None]) ** 2).sum(axis=1) / width)
        else:
            std = np.zeros(len(fractions), dtype=np.float64)
        fast: IntVector = np.trunc((1 - std) * MAX_SCORE).astype(np.int64)
        return fast
    fractions = np.where(counted, fractions, 0.0)
    count = np.asarray(counted).sum(axis=1)
    std = np.zeros(len(requested), dtype=np.float64)
    two = count == 2
    if two.any():
        # The two counted fractions, in column order.
        order = np.argsort(~np.asarray(counted, dtype=np.bool_), axis=1, kind="stable")
        first = np.take_along_axis(fractions, order[:, :1], axis=1)[:, 0]
        second = np.take_along_axis(fractions, order[:, 1:2], axis=1)[:, 0]
        std = np.where(two, np.abs((first - second) / 2), std)
    more = count > 2
    if more.any():
        n = np.maximum(count, 1)
        mean = fractions.sum(axis=1) / n
        deviations = np.where(counted, (fractions - mean[:, None]) ** 2, 0.0)
        std = np.where(more, np.sqrt(deviations.sum(axis=1) / n), std)
    out: IntVector = np.trunc((1 - std) * MAX_SCORE).astype(np.int64)
    return out
