"""interpodaffinity: kube-scheduler's InterPodAffinity score, over the node table (layer 2).

A node's raw score is a sum over the topology domains it is in, as kube's plugin sums it:

- for each preferred pod affinity term of the pod placed, its weight times the pods of
  that domain the term selects (anti-affinity: minus);
- for each pod of that domain, each of its terms that selects the pod placed: its
  preferred affinity terms' weights, minus its preferred anti-affinity terms' weights,
  and ``hardPodAffinityWeight`` for each of its *required* affinity terms (so a pod goes
  near the pods that need it).

Normalised over the nodes scored as kube does: ``int(100 * (score - min) / (max - min))``,
0 for all when they are equal. The pods counted are the held ones (placed, bound,
running or nominated, not being evicted), as they stand in the session: pods placed
earlier in the cycle count. Required (anti-)affinity is a filter of ``predicates``.

Costs: the score is registered only when a pod waiting has preferred terms or a held pod
has terms toward other pods; a pod without preferred terms, in a cluster whose pods have
none, pays nothing. The counts per selector and the existing pods' terms per domain are
kept by the placement handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.pod import PodAffinityTerm
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.affinity_terms import NamespaceLabels, scope_of, selects
from scheduler.framework.extension_points import NODE_SCORER, HookSet, PluginContext
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import FloatVector, IndexVector, IntVector, TableView
from scheduler.framework.pod_counts import PodCounts

MAX_SCORE = 100
WAITING = frozenset((TaskStatus.PENDING, TaskStatus.PIPELINED))


@dataclass(frozen=True, slots=True)
class InterPodAffinityArguments:
    """The arguments of ``interpodaffinity``; field names are the YAML keys (kube's
    InterPodAffinityArgs, and the score's weight)."""

    hardPodAffinityWeight: int = 1
    """What a held pod's required affinity term that selects the pod placed adds to the
    score of the nodes of its domain (0..100; 0: nothing)."""
    ignorePreferredTermsOfExistingPods: bool = False
    """Leave out the held pods' preferred terms (score by the pod's own terms only)."""
    weight: int = 2
    """Weight of the score among the scores (kube's default weight: 2); 0 turns it off."""

    REFUSED: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        if not 0 <= self.hardPodAffinityWeight <= 100:
            raise ValueError(
                f"hardPodAffinityWeight must be within 0..100, got {self.hardPodAffinityWeight}"
            )
        if self.weight < 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")


TermKey = tuple[PodAffinityTerm, str]
"""A held pod's term and the namespace of the pod that has it."""


class InterPodAffinityPlugin:
    """The preferred inter-pod affinity score. One instance per session."""

    name = "interpodaffinity"

    def __init__(self, arguments: InterPodAffinityArguments | None = None) -> None:
        self.arguments = arguments if arguments is not None else InterPodAffinityArguments()
        self._table: TableView | None = None
        self._labels = NodeLabelIndex(())
        self._namespaces: NamespaceLabels = {}
        self._counts: PodCounts | None = None
        self._held: dict[TermKey, IntVector] = {}
        """Held pods' terms toward other pods: the weight they give, per domain code of the
        term's topology key."""

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        self._table = table
        self._labels = NodeLabelIndex(table.nodes)
        self._namespaces = context.namespaces
        self._counts = PodCounts(table)
        for row, node in enumerate(table.nodes):
            for task in node.tasks.values():
                if task.status in COUNTED_FOR_PLUGINS and task.spec.has_pod_affinity:
                    self._terms_of(task, row, +1)
        wanted = bool(self._held) or any(
            t.spec.preferred_pod_affinity or t.spec.preferred_pod_anti_affinity
            for job in context.jobs.values()
            for t in job.tasks.values()
            if t.status in WAITING
        )
        if self.arguments.weight and wanted:
            hooks.add(NODE_SCORER, self.score, self.arguments.weight)
        hooks.add_placement_handlers(self._place, self._unplace)

    def close(self) -> None:
        self._table = None
        self._labels = NodeLabelIndex(())
        self._namespaces = {}
        self._counts = None
        self._held = {}

    # The held pods' terms ------------------------------------------------------------------

    def _weighted_terms(self, task: TaskInfo) -> list[tuple[PodAffinityTerm, int]]:
        """``task``'s terms toward other pods and the weight each gives them."""
        spec = task.spec
        out: list[tuple[PodAffinityTerm, int]] = []
        hard = self.arguments.hardPodAffinityWeight
        if hard:
            out.extend((term, hard) for term in spec.pod_affinity)
        if not self.arguments.ignorePreferredTermsOfExistingPods:
            out.extend((w.term, w.weight) for w in spec.preferred_pod_affinity)
            out.extend((w.term, -w.weight) for w in spec.preferred_pod_anti_affinity)
        return out

    def _terms_of(self, task: TaskInfo, row: int, sign: int) -> None:
        for term, weight in self._weighted_terms(task):
            column = self._labels.column(term.topology_key)
            code = column.codes[row]
            if code == column.missing:
                continue
            key = (term, task.namespace)
            per_domain = self._held.get(key)
            if per_domain is None:
                per_domain = self._held[key] = np.zeros(column.missing + 1, dtype=np.int64)
            per_domain[code] += sign * weight

    # The score -------------------------------------------------------------------------------

    def score(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> FloatVector:
        """kube's InterPodAffinity score of ``rows`` for ``task`` (module docstring). Pods
        being evicted are already not counted, so ``releasing`` changes nothing."""
        del table, releasing
        raw = np.zeros(len(rows), dtype=np.int64)
        own = self._own_row(task)
        spec = task.spec
        counts = self._pod_counts()
        for weighted, sign in (
            (spec.preferred_pod_affinity, 1),
            (spec.preferred_pod_anti_affinity, -1),
        ):
            for w in weighted:
                term = w.term
                key = ((term.selector, scope_of(term, task.namespace, self._namespaces)),)
                per_row = counts.rows(key)
                if own is not None and selects(term, task.namespace, task, self._namespaces):
                    per_row = per_row.copy()
                    per_row[own] -= 1
                raw += sign * w.weight * self._by_domain(term.topology_key, per_row, rows)
        mine = self._own_terms(task, own)
        for (term, namespace), per_domain in self._held.items():
            if not selects(term, namespace, task, self._namespaces):
                continue
            weights = per_domain
            adjust = mine.get((term, namespace))
            if adjust is not None:
                weights = per_domain - adjust
            column = self._labels.column(term.topology_key)
            codes = column.codes[rows]
            raw += np.where(codes == column.missing, 0, weights[codes])
        return _normalise(raw)

    def _by_domain(self, key: str, per_row: IntVector, rows: IndexVector) -> IntVector:
        """The sum of ``per_row`` over each scored row's domain of label ``key`` (0 for a
        row without the label)."""
        column = self._labels.column(key)
        size = column.missing + 1
        sums = np.bincount(column.codes, weights=per_row, minlength=size).astype(np.int64)
        sums[column.missing] = 0
        out: IntVector = sums[column.codes[rows]]
        return out

    def _own_row(self, task: TaskInfo) -> int | None:
        table = self._table
        if table is None or task.status not in COUNTED_FOR_PLUGINS or not task.node_name:
            return None
        row = table.row.get(task.node_name)
        if row is None or task.uid not in table.nodes[row].tasks:
            return None
        return row

    def _own_terms(self, task: TaskInfo, own: int | None) -> dict[TermKey, IntVector]:
        """What ``task`` itself, held on row ``own``, adds to the held pods' terms."""
        if own is None or not task.spec.has_pod_affinity:
            return {}
        out: dict[TermKey, IntVector] = {}
        for term, weight in self._weighted_terms(task):
            column = self._labels.column(term.topology_key)
            code = column.codes[own]
            if code == column.missing:
                continue
            key = (term, task.namespace)
            vec = out.setdefault(key, np.zeros(column.missing + 1, dtype=np.int64))
            vec[code] += weight
        return out

    def _pod_counts(self) -> PodCounts:
        assert self._counts is not None, "interpodaffinity used outside an open session"
        return self._counts

    # Placement handlers -----------------------------------------------------------------

    def _row(self, node: NodeInfo) -> int:
        assert self._table is not None, "interpodaffinity used outside an open session"
        return self._table.row[node.name]

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._account(task, self._row(node), +1)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._account(task, self._row(node), -1)

    def _account(self, task: TaskInfo, row: int, sign: int) -> None:
        counts = self._pod_counts()
        if counts:
            counts.account(task, row, sign)
        if task.spec.has_pod_affinity:
            self._terms_of(task, row, sign)


def _normalise(raw: IntVector) -> FloatVector:
    """kube's NormalizeScore: ``int(100 * (score - min) / (max - min))``; 0 when equal."""
    if not len(raw):
        return np.zeros(0, dtype=np.float64)
    low, high = int(raw.min()), int(raw.max())
    if high == low:
        return np.zeros(len(raw), dtype=np.float64)
    out: FloatVector = np.trunc(MAX_SCORE * ((raw - low) / (high - low)))
    return out
