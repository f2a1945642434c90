"""Node labels as integer columns: vectorised label queries over a session's nodes (layer 1).

Shared by the plugins that ask questions about node labels for all rows at once: node
selectors and affinity (predicates), preferred affinity (nodeorder), topology domains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.label_selectors import Requirement
from scheduler.api.node import NodeInfo
from scheduler.api.pod import NodeSelectorTerm
from scheduler.framework.node_table import BoolVector, IndexVector, IntVector


def frozen(mask: BoolVector) -> BoolVector:
    """``mask``, made read-only (cached masks are shared)."""
    mask.flags.writeable = False
    return mask


@dataclass(frozen=True, slots=True)
class LabelColumn:
    """One label key over every row of a table.

    ``codes[i]`` is the index in ``values`` of row ``i``'s value, or ``len(values)`` (the
    *missing* code) when row ``i`` has no such label. A lookup table of ``len(values) + 1``
    entries indexed by ``codes`` turns a question about values into a mask over rows.
    """

    codes: IntVector
    values: tuple[str, ...]
    index: Mapping[str, int]

    @property
    def missing(self) -> int:
        return len(self.values)

    def present(self) -> BoolVector:
        return self.codes < len(self.values)

    def rows_in_domains_of(self, rows: BoolVector | IndexVector) -> BoolVector:
        """Rows sharing a (present) value with any of ``rows`` (a mask or indices)."""
        hit = np.zeros(len(self.values) + 1, dtype=np.bool_)
        hit[self.codes[rows]] = True
        hit[-1] = False
        return hit[self.codes]


class NodeLabelIndex:
    """Vectorised label and field queries over ``nodes`` (rows of a NodeTable).

    Columns and requirement masks are built on first use with one pass over the nodes and
    cached: node labels do not change within a session. Returned masks are read-only.
    """

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._nodes = nodes
        self._labels: dict[str, LabelColumn] = {}
        self._fields: dict[str, LabelColumn] = {}
        self._requirements: dict[tuple[Requirement, bool], BoolVector] = {}
        self._terms: dict[NodeSelectorTerm, BoolVector] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    @staticmethod
    def _column(values: Iterable[str | None], n: int) -> LabelColumn:
        index: dict[str, int] = {}
        codes = np.empty(n, dtype=np.int64)
        for i, value in enumerate(values):
            codes[i] = -1 if value is None else index.setdefault(value, len(index))
        codes[codes < 0] = len(index)
        codes.flags.writeable = False
        return LabelColumn(codes, tuple(index), index)

    def column(self, key: str) -> LabelColumn:
        """The column of label ``key``."""
        col = self._labels.get(key)
        if col is None:
            col = self._column((n.labels.get(key) for n in self._nodes), len(self._nodes))
            self._labels[key] = col
        return col

    def field_column(self, key: str) -> LabelColumn:
        """The column of node field ``key``; only ``metadata.name`` exists, as in Kubernetes."""
        col = self._fields.get(key)
        if col is None:
            names = (n.name if key == "metadata.name" else None for n in self._nodes)
            col = self._column(names, len(self._nodes))
            self._fields[key] = col
        return col

    def requirement(self, req: Requirement, *, on_fields: bool = False) -> BoolVector:
        """Rows whose labels (or fields) satisfy ``req``, as ``Requirement.matches``."""
        key = (req, on_fields)
        mask = self._requirements.get(key)
        if mask is None:
            col = self.field_column(req.key) if on_fields else self.column(req.key)
            mask = frozen(self._evaluate(req, col))
            self._requirements[key] = mask
        return mask

    @staticmethod
    def _evaluate(req: Requirement, col: LabelColumn) -> BoolVector:
        op = req.operator
        hit = np.zeros(len(col.values) + 1, dtype=np.bool_)
        if op in ("In", "NotIn"):
            for v in req.values:
                j = col.index.get(v)
                if j is not None:
                    hit[j] = True
            mask = hit[col.codes]
            return mask if op == "In" else ~mask
        if op == "Exists":
            return col.present()
        if op == "DoesNotExist":
            return ~col.present()
        try:  # Gt / Lt: values that are not integers match nothing, as Requirement.matches
            want = int(req.values[0])
        except (ValueError, IndexError):
            return hit[col.codes]
        for j, value in enumerate(col.values):
            try:
                have = int(value)
            except ValueError:
                continue
            hit[j] = have > want if op == "Gt" else have < want
        return hit[col.codes]

    def term(self, term: NodeSelectorTerm) -> BoolVector:
        """Rows matching a node selector term: every expression; an empty term matches none."""
        mask = self._terms.get(term)
        if mask is None:
            if not term.labels and not term.fields:
                mask = np.zeros(len(self._nodes), dtype=np.bool_)
            else:
                mask = np.ones(len(self._nodes), dtype=np.bool_)
                for req in term.labels:
                    mask &= self.requirement(req)
                for req in term.fields:
                    mask &= self.requirement(req, on_fields=True)
            mask = frozen(mask)
            self._terms[term] = mask
        return mask

    def affinity(
        self, node_selector: Iterable[tuple[str, str]], terms: Sequence[NodeSelectorTerm] | None
    ) -> BoolVector:
        """Rows matching a nodeSelector (every pair) and required terms (any term; None: no
        required affinity). Not cached: callers cache per shape."""
        mask = np.ones(len(self._nodes), dtype=np.bool_)
        for key, value in node_selector:
            mask &= self.requirement(Requirement(key, "In", (value,)))
        if terms is not None:
            any_term = np.zeros(len(self._nodes), dtype=np.bool_)
            for term in terms:
                any_term |= self.term(term)
            mask &= any_term
        return mask
