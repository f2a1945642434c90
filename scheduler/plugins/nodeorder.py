"""nodeorder: kube-scheduler's node scores, vectorised over the rows being scored (layer 2).

Up to four :class:`~scheduler.framework.extension_points.NodeScorer` hooks, one per
non-zero weight of :class:`NodeOrderArguments`, each returning scores in [0, 100]:

====================  ==========================================================================
scorer                score of a node, from ``requested = used + request`` per resource
====================  ==========================================================================
least allocated       weighted mean of ``(allocatable - requested) / allocatable * 100``
                      (0 when over-requested): spreads pods (kube's LeastAllocated)
most allocated        weighted mean of ``requested / allocatable * 100``, capped at 100:
                      packs pods (kube's MostAllocated, Volcano's binpack)
balanced allocation   ``(1 - std) * 100`` of the fractions ``requested / allocatable`` (capped
                      at 1): prefers nodes whose resources are used evenly
preferred affinity    sum of the weights of the matching preferred node affinity terms,
                      normalised to 0..100 by the maximum among the rows scored
taint toleration      fewer ``PreferNoSchedule`` taints the pod does not tolerate is better:
                      ``(1 - count / max count) * 100`` among the rows scored (kube's
                      TaintToleration score)
====================  ==========================================================================

The resources and their weights are ``NodeOrderArguments.resources``. As in
kube-scheduler, a resource a node does not offer (allocatable 0) scores 0 and is left out
of that node's mean, so a GPU weight does not push CPU-only pods onto GPU nodes; a node
offering none of the resources scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduler.api.pod import PreferredTerm, Taint, Toleration
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import NODE_SCORER, HookSet, PluginContext
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import FloatVector, IndexVector, TableView

FloatMatrix = npt.NDArray[np.float64]

MAX_SCORE = 100.0


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
    taintTolerationWeight: int = 1
    """Weight of the taint toleration score (untolerated ``PreferNoSchedule`` taints)."""
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
    """Node scores by allocation and preferred node affinity. One instance per session.

    What depends only on allocatable (which does not change within a session) is computed
    at ``open``: per row, the inverse of each resource's allocatable, the weights of the
    resources it offers and their inverse sum. A call reads only ``idle`` for its rows.
    """

    name = "nodeorder"

    def __init__(self, arguments: NodeOrderArguments | None = None) -> None:
        self.arguments = arguments if arguments is not None else NodeOrderArguments()
        self._labels = NodeLabelIndex(())
        self._cols: IndexVector = np.zeros(0, dtype=np.intp)
        self._alloc: FloatMatrix = np.zeros((0, 0), dtype=np.float64)
        self._inverse: FloatMatrix = np.zeros((0, 0), dtype=np.float64)
        self._weight_vector: FloatVector = np.zeros(0, dtype=np.float64)
        self._weight_share: FloatVector = np.zeros(0, dtype=np.float64)
        self._any_weight: FloatVector = np.zeros(0, dtype=np.float64)
        self._ones: FloatVector = np.zeros(0, dtype=np.float64)
        self._offered: FloatMatrix = np.zeros((0, 0), dtype=np.float64)
        self._count_share: FloatVector = np.zeros(0, dtype=np.float64)
        self._preferred: dict[tuple[PreferredTerm, ...], FloatVector] = {}
        self._soft_taints: list[tuple[Taint, ...]] = []
        """Per row, the node's ``PreferNoSchedule`` taints."""
        self._untolerated: dict[tuple[Toleration, ...], FloatVector] = {}

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        args = self.arguments
        self._labels = NodeLabelIndex(table.nodes)
        # Resources no column holds are offered by no node: left out of every mean.
        used = [
            (table.col[r], w) for r, w in sorted(args.resources.items()) if w and r in table.col
        ]
        self._cols = np.array([j for j, _ in used], dtype=np.intp)
        alloc = table.allocatable.take(self._cols, axis=1).astype(np.float64)
        offered = alloc > 0
        self._alloc = alloc
        self._offered = offered.astype(np.float64)
        self._inverse = np.divide(1.0, alloc, out=np.zeros_like(alloc), where=offered)
        self._weight_vector = np.array([w for _, w in used], dtype=np.float64)
        total = np.where(offered, self._weight_vector, 0.0).sum(axis=1)
        self._weight_share = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
        self._any_weight = (total > 0).astype(np.float64)
        self._ones = np.ones(len(used), dtype=np.float64)
        self._count_share = 1.0 / np.maximum(offered.sum(axis=1), 1)
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
        self._labels = NodeLabelIndex(())
        self._preferred.clear()
        self._soft_taints = []
        self._untolerated.clear()

    # Allocation ----------------------------------------------------------------------------

    def _fractions(self, task: TaskInfo, table: TableView, rows: IndexVector) -> FloatMatrix:
        """``requested / allocatable`` per (row, resource), within [0, 1]; 0 where a resource
        is not offered. A fresh array the caller may change."""
        fractions: FloatMatrix = self._alloc.take(rows, axis=0)
        fractions -= table.idle.take(rows, axis=0).take(self._cols, axis=1)
        fractions += table.request(task.request).take(self._cols)
        fractions *= self._inverse.take(rows, axis=0)
        np.minimum(fractions, 1.0, out=fractions)
        np.maximum(fractions, 0.0, out=fractions)
        return fractions

    def _weighted_mean(self, fractions: FloatMatrix, rows: IndexVector) -> FloatVector:
        """Per row, the mean of ``fractions`` weighted over the resources the node offers
        (fractions are 0 where it offers none, so a plain dot product sums the right terms)."""
        mean: FloatVector = fractions.dot(self._weight_vector)
        mean *= self._weight_share.take(rows)
        return mean

    def least_allocated(
        self, task: TaskInfo, table: TableView, rows: IndexVector, /
    ) -> FloatVector:
        """Higher for emptier nodes: ``(allocatable - requested) / allocatable * 100``."""
        mean = self._weighted_mean(self._fractions(task, table, rows), rows)
        # The weighted mean of 1 - f is 1 - mean(f) where some resource is offered, else 0.
        out: FloatVector = self._any_weight.take(rows) - mean
        out *= MAX_SCORE
        return out

    def most_allocated(self, task: TaskInfo, table: TableView, rows: IndexVector, /) -> FloatVector:
        """Higher for fuller nodes: ``requested / allocatable * 100``, capped at 100."""
        out = self._weighted_mean(self._fractions(task, table, rows), rows)
        out *= MAX_SCORE
        return out

    def balanced_allocation(
        self, task: TaskInfo, table: TableView, rows: IndexVector, /
    ) -> FloatVector:
        """``(1 - std) * 100`` of the fractions of the offered resources (std 0 for one)."""
        fractions = self._fractions(task, table, rows)
        share = self._count_share.take(rows)
        ones = self._ones
        # Fractions are 0 where not offered: the mean over the offered ones is sum * share.
        # Deviations are taken directly (not E[f^2] - mean^2) so equal fractions give
        # exactly 100 and ties between nodes stay ties.
        mean = fractions.dot(ones) * share
        fractions -= mean[:, None]
        fractions *= self._offered.take(rows, axis=0)
        fractions *= fractions
        std = np.sqrt(fractions.dot(ones) * share)
        # Fractions lie in [0, 1], so std <= 0.5 and the score in [50, 100].
        out: FloatVector = (1.0 - std) * MAX_SCORE
        return out

    # Preferred node affinity ---------------------------------------------------------------

    def node_affinity(self, task: TaskInfo, table: TableView, rows: IndexVector, /) -> FloatVector:
        """Matching preferred terms' weights, scaled so the best of ``rows`` scores 100."""
        terms = task.spec.preferred_terms
        if not terms:
            return np.zeros(len(rows), dtype=np.float64)
        raw = self._preferred.get(terms)
        if raw is None:
            raw = np.zeros(len(table), dtype=np.float64)
            for term in terms:
                raw += term.weight * self._labels.term(term.term)
            raw.flags.writeable = False
            self._preferred[terms] = raw
        sums = raw[rows]
        top = float(sums.max()) if len(sums) else 0.0
        if top <= 0.0:
            return np.zeros(len(rows), dtype=np.float64)
        out: FloatVector = np.clip(sums * (MAX_SCORE / top), 0.0, MAX_SCORE)
        return out

    # Taint toleration ------------------------------------------------------------------------

    def taint_toleration(
        self, task: TaskInfo, table: TableView, rows: IndexVector, /
    ) -> FloatVector:
        """100 where the pod tolerates every ``PreferNoSchedule`` taint, down to 0 on the row
        of ``rows`` with the most it does not tolerate. Registered only when some node has
        such a taint."""
        tolerations = task.spec.tolerations
        raw = self._untolerated.get(tolerations)
        if raw is None:
            raw = np.array(
                [
                    sum(1 for t in taints if not any(x.tolerates(t) for x in tolerations))
                    for taints in self._soft_taints
                ],
                dtype=np.float64,
            )
            raw.flags.writeable = False
            self._untolerated[tolerations] = raw
        counts = raw[rows]
        top = float(counts.max()) if len(counts) else 0.0
        if top <= 0.0:
            return np.full(len(rows), MAX_SCORE, dtype=np.float64)
        out: FloatVector = (1.0 - counts / top) * MAX_SCORE
        return out
