"""Pods held on nodes that match label selectors, counted per row and per topology domain
(layer 1): what topology spread and inter-pod affinity count, kept in step with the
session's placements.

A :data:`MatchKey` is a conjunction of (selector, namespaces) pairs; a pod matches it when
it matches every pair (its namespace among the pair's, or any namespace for ``None``, and
its labels the selector). :class:`PodCounts` counts, per row of a session's table, the
held pods (statuses in ``COUNTED_FOR_PLUGINS``) matching a key: built by one scan of the
nodes the first time a key is asked, then kept in step by :meth:`PodCounts.account`, which
the owning plugin calls from its placement handlers. :class:`DomainSum` is the same count
summed per domain of a label column over the rows a mask keeps (the eligible nodes of a
spread constraint), kept in step likewise. Both are a plugin's per-session state: a
rollback calls the opposite handlers, so they follow it exactly.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from scheduler.api.label_selectors import LabelSelector
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.node_labels import LabelColumn
from scheduler.framework.node_table import BoolVector, IntVector, TableView

Scope = frozenset[str] | None
"""Namespaces a selector applies in; None: every namespace."""
MatchKey = tuple[tuple[LabelSelector, Scope], ...]
"""A conjunction: a pod matches when it matches every (selector, namespaces) pair."""


def matches(key: MatchKey, task: TaskInfo) -> bool:
    """Does ``task`` match every pair of ``key``?"""
    labels = task.labels or {}
    for selector, scope in key:
        if scope is not None and task.namespace not in scope:
            return False
        if not selector.matches(labels):
            return False
    return True


@dataclass(slots=True)
class DomainSum:
    """Matching pods summed per domain (code) of ``column`` over the rows ``eligible``
    keeps; ``present[code]`` says some eligible row is in that domain. The missing code
    (rows without the label) is never present."""

    column: LabelColumn
    eligible: BoolVector
    counts: IntVector
    present: BoolVector

    def account(self, row: int, sign: int) -> None:
        if self.eligible[row]:
            self.counts[self.column.codes[row]] += sign


class PodCounts:
    """Per-row counts of held pods matching keys, for one session's table."""

    def __init__(self, table: TableView) -> None:
        self._table = table
        self._counts: dict[MatchKey, IntVector] = {}
        self._sums: dict[MatchKey, dict[Hashable, DomainSum]] = {}

    def __bool__(self) -> bool:
        """Is any key counted (so that placements must be accounted)?"""
        return bool(self._counts)

    def rows(self, key: MatchKey) -> IntVector:
        """Held pods matching ``key`` on each row (the live array: read, never write)."""
        counts = self._counts.get(key)
        if counts is None:
            counts = np.zeros(len(self._table), dtype=np.int64)
            for row, node in enumerate(self._table.nodes):
                for task in node.tasks.values():
                    if task.status in COUNTED_FOR_PLUGINS and matches(key, task):
                        counts[row] += 1
            self._counts[key] = counts
        return counts

    def domains(
        self, key: MatchKey, column: LabelColumn, eligible: BoolVector, cache_key: Hashable
    ) -> DomainSum:
        """Pods matching ``key`` summed per domain of ``column`` over the ``eligible`` rows;
        ``cache_key`` names (column, eligible) for reuse within the session."""
        sums = self._sums.setdefault(key, {})
        found = sums.get(cache_key)
        if found is None:
            rows = self.rows(key)
            size = column.missing + 1
            kept = np.flatnonzero(eligible)
            codes = column.codes[kept]
            counts = np.bincount(codes, weights=rows[kept], minlength=size).astype(np.int64)
            present = np.zeros(size, dtype=np.bool_)
            present[codes] = True
            present[column.missing] = False
            found = sums[cache_key] = DomainSum(column, eligible, counts, present)
        return found

    def account(self, task: TaskInfo, row: int, sign: int) -> None:
        """``task`` entered (+1) or left (-1) ``row``: every count it matches follows."""
        for key, counts in self._counts.items():
            if matches(key, task):
                counts[row] += sign
                for found in self._sums.get(key, {}).values():
                    found.account(row, sign)
