"""Fit: which nodes can take a task, and why the others cannot (layer 1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.framework.extension_points import Rejection
from scheduler.framework.node_table import BoolVector


@dataclass(frozen=True, slots=True)
class Fit:
    """The outcome of every node filter for one task.

    ``feasible[i]`` is True when row ``i`` passes every filter. ``groups`` keeps each
    plugin's rejections, in filter order, for :meth:`explain` and :meth:`candidates`.
    ``releasing``: the filters counted the room of pods being evicted as free (the nodes
    are then scored as they will be once those pods are gone).
    """

    feasible: BoolVector
    groups: Sequence[tuple[str, Sequence[Rejection]]]
    releasing: bool = False

    @staticmethod
    def of(
        n: int, groups: Sequence[tuple[str, Sequence[Rejection]]], *, releasing: bool = False
    ) -> Fit:
        feasible: BoolVector = np.ones(n, dtype=np.bool_)
        for _, rejections in groups:
            for r in rejections:
                feasible &= ~r.nodes
        return Fit(feasible, groups, releasing)

    def restricted(self, rows: BoolVector) -> Fit:
        """The same verdict with only ``rows`` feasible (a node set)."""
        return Fit(self.feasible & rows, self.groups, self.releasing)

    @property
    def any(self) -> bool:
        return bool(self.feasible.any())

    def reasons(self) -> Counter[str]:
        """Nodes per reason, kube-scheduler style: a node is charged to the first plugin
        that rejects it, with every reason that plugin gave for it."""
        counts: Counter[str] = Counter()
        unexplained = ~self.feasible
        for _, rejections in self.groups:
            if not unexplained.any():
                break
            hit = np.zeros_like(unexplained)
            for r in rejections:
                mine = r.nodes & unexplained
                n = int(mine.sum())
                if n:
                    counts[r.reason] += n
                    hit |= mine
            unexplained &= ~hit
        return counts

    def explain(self) -> str:
        """``0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint.``;
        for a pod refused whatever the node (a ``whole`` rejection, the first in filter
        order), ``0/5 nodes are available: <its reason>.``, as kube-scheduler words a
        PreFilter's refusal."""
        total = len(self.feasible)
        for _, rejections in self.groups:
            for r in rejections:
                if r.whole:
                    return f"0/{total} nodes are available: {r.reason}."
        available = int(self.feasible.sum())
        counts = self.reasons()
        if not counts:
            return f"{available}/{total} nodes are available."
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
        return f"{available}/{total} nodes are available: {parts}."

    def candidates(self) -> BoolVector:
        """Infeasible nodes whose every rejection could be fixed by removing pods."""
        ok = ~self.feasible
        for _, rejections in self.groups:
            for r in rejections:
                if not r.resolvable:
                    ok &= ~r.nodes
        return ok
