"""The checks that depend only on a pod's shape and on the nodes (layer 2): cordoned,
not ready, node selector and required node affinity, taints. Computed once per shape per
session (node labels, taints and flags do not change within a session) and reused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.pod import StaticShape, Taint
from scheduler.framework.extension_points import Rejection
from scheduler.framework.node_labels import NodeLabelIndex, frozen
from scheduler.framework.node_table import BoolVector
from scheduler.plugins.predicates.kube_reasons import (
    NODE_AFFINITY,
    NOT_READY,
    UNSCHEDULABLE,
    UNSCHEDULABLE_TAINT,
    UNTOLERATED_TAINT,
)

FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Static:
    """The cached verdict of the static checks for one shape."""

    rejections: tuple[Rejection, ...]
    bad: BoolVector | None  # union of the rejections; None when every node passes


class StaticChecks:
    """The static verdicts over the rows of one session's table, cached per shape."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._labels = NodeLabelIndex(nodes)
        self._statics: dict[StaticShape, Static] = {}
        self._unschedulable = frozen(np.array([n.unschedulable for n in nodes], dtype=np.bool_))
        self._not_ready = frozen(np.array([not n.ready for n in nodes], dtype=np.bool_))
        taints: dict[Taint, BoolVector] = {}
        for i, node in enumerate(nodes):
            for taint in node.taints:
                if taint.effect in FILTERING_EFFECTS:
                    taints.setdefault(taint, np.zeros(len(nodes), dtype=np.bool_))[i] = True
        self._taints = taints

    @property
    def labels(self) -> NodeLabelIndex:
        return self._labels

    def verdict(self, shape: StaticShape) -> Static:
        """The static rejections of a pod of ``shape`` (cached)."""
        static = self._statics.get(shape)
        return static if static is not None else self._static(shape)

    def _static(self, shape: StaticShape) -> Static:
        tolerations = shape.tolerations
        checks: list[tuple[str, BoolVector]] = []
        if not any(t.tolerates(UNSCHEDULABLE_TAINT) for t in tolerations):
            checks.append((UNSCHEDULABLE, self._unschedulable))
        checks.append((NOT_READY, self._not_ready))
        checks.append(
            (NODE_AFFINITY, ~self._labels.affinity(shape.node_selector, shape.required_terms))
        )
        untolerated = np.zeros(len(self._labels), dtype=np.bool_)
        for taint, nodes in self._taints.items():
            if not any(t.tolerates(taint) for t in tolerations):
                untolerated |= nodes
        checks.append((UNTOLERATED_TAINT, untolerated))
        seen = np.zeros(len(self._labels), dtype=np.bool_)
        rejections: list[Rejection] = []
        for reason, nodes in checks:
            mine = nodes & ~seen
            if mine.any():
                rejections.append(Rejection(reason, frozen(mine), False))
                seen |= mine
        static = Static(tuple(rejections), frozen(seen) if seen.any() else None)
        self._statics[shape] = static
        return static
