"""Node sets: where a whole gang may be placed (layer 1).

A :class:`NodeSet` is a subset of the session's nodes (a mask over the rows of its node
table) with a name users may read (``rack rb``). Plugins answer the ``SUBSET_NODES``
extension point with the node sets a job should be placed in, in their order of
preference (KAI-Scheduler's node sets; the gang-level search space of Volcano's
gang-aware preemption). Several plugins layer (:func:`layer`): the first splits all nodes
into sets, the next splits each of those, and so on; a node may be in zero or several
sets. A plugin that is not relevant to a job answers None, at no cost.

Allocation asks for every relevant set (:attr:`Purpose.ALLOCATE`) and places the whole
gang inside the first that fits; eviction asks for the best few
(:attr:`Purpose.EVICT`) and clears one domain at a time.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.framework.node_table import BoolVector


class Purpose(enum.Enum):
    ALLOCATE = "allocate"
    """Every relevant set, in order: allocate tries them until the whole gang fits."""
    EVICT = "evict"
    """The best sets to clear, best first: preempt and reclaim try a few of them."""


@dataclass(frozen=True, slots=True)
class NodeSet:
    """The rows of ``rows`` (a read-only mask over the session's node table), named
    ``name`` for users and logs (``rack rb``; ``zone z1, rack rb`` when layered);
    ``level`` is the kind of domain (``rack``), used to say that no such domain fits."""

    name: str
    rows: BoolVector
    level: str = ""

    @property
    def size(self) -> int:
        return int(np.count_nonzero(self.rows))

    def within(self, outer: NodeSet) -> NodeSet:
        """This set restricted to ``outer``, named after both (plugins answer within the
        set they are given; this keeps a careless answer inside it)."""
        rows = self.rows & outer.rows
        rows.flags.writeable = False
        name = f"{outer.name}, {self.name}" if outer.name else self.name
        return NodeSet(name, rows, self.level or outer.level)


@dataclass(frozen=True, slots=True)
class Subsets:
    """A plugin's answer: ``sets`` in order of preference, and ``kind``, what each set is
    (``rack``), to say so when none can take the gang ("no rack has room for ...")."""

    sets: tuple[NodeSet, ...]
    kind: str = ""


def everything(n: int) -> NodeSet:
    """The set of all ``n`` rows, unnamed: what the first plugin splits."""
    rows: BoolVector = np.ones(n, dtype=np.bool_)
    rows.flags.writeable = False
    return NodeSet("", rows)


SplitFn = Callable[[NodeSet], Subsets | None]


def layer(splits: Sequence[tuple[str, SplitFn]], start: NodeSet) -> Subsets | None:
    """Apply each plugin's split to every set the ones before it produced, in order:
    P gives P1, P2, P3; R then gives P1R1, P1R2, P2R1, ... A plugin that answers None for
    a set leaves it whole. None when no plugin was relevant at all (the caller then
    ignores node sets, at no cost); no sets when the job fits none. The kind is the last
    relevant plugin's (the narrowest split)."""
    current = [start]
    kind = ""
    relevant = False
    for _, split in splits:
        out: list[NodeSet] = []
        for outer in current:
            answer = split(outer)
            if answer is None:
                out.append(outer)
                continue
            relevant = True
            kind = answer.kind or kind
            out.extend(s.within(outer) if outer.name else s for s in answer.sets)
        current = out
    return Subsets(tuple(current), kind) if relevant else None
