"""Which rows of the node table a storage object admits, for a whole session (layer 2).

:class:`StorageRows` answers, once per object and session (node labels do not change
within one), the questions the volume plugins ask of every node at once: the rows a PV's
node affinity admits (as row indices: a local PV admits one row, and thousands of them
must cost thousands, not thousands times the nodes), the rows a class's
``allowedTopologies`` admits, and the rows on which some CSIStorageCapacity of a class
has room for a volume of a given size. Terms read node labels only, as kube's
CheckNodeAffinity does (it builds a node of labels alone: ``matchFields`` see an empty
name). Used by one plugin instance, from one thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from scheduler.api.label_selectors import LabelSelector
from scheduler.api.node import NodeInfo
from scheduler.api.pod import NodeSelectorTerm
from scheduler.api.volumes.model import CapacityInfo, PvInfo, StorageClassInfo
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import BoolVector, IndexVector

_NO_NAME = {"metadata.name": ""}


class StorageRows:
    """See the module docstring."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._n = len(nodes)
        self._labels = NodeLabelIndex(nodes)
        self._by_value: dict[str, dict[str, IndexVector]] = {}
        self._terms: dict[tuple[NodeSelectorTerm, ...], IndexVector | None] = {}
        self._classes: dict[str, BoolVector] = {}
        self._capacity: dict[tuple[str, int], BoolVector] = {}
        self._selectors: dict[LabelSelector, BoolVector] = {}
        self._all = np.arange(self._n, dtype=np.intp)
        self._all.flags.writeable = False

    def __len__(self) -> int:
        return self._n

    # PV node affinity ------------------------------------------------------------------

    def of_volume(self, pv: PvInfo) -> IndexVector | None:
        """The rows ``pv``'s node affinity admits, sorted; None when it admits every row
        (no affinity). Read-only, shared."""
        terms = pv.node_affinity
        if terms is None:
            return None
        found = self._terms.get(terms, _UNSET)
        if found is _UNSET:
            found = self._rows_of_terms(terms)
            self._terms[terms] = found
        return found  # type: ignore[return-value]

    def _rows_of_terms(self, terms: tuple[NodeSelectorTerm, ...]) -> IndexVector | None:
        hits: list[IndexVector] = []
        for term in terms:
            rows = self._rows_of_term(term)
            if rows is None:
                return None
            hits.append(rows)
        if not hits:
            out = np.zeros(0, dtype=np.intp)
        elif len(hits) == 1:
            out = hits[0]
        else:
            out = np.unique(np.concatenate(hits))
        out.flags.writeable = False
        if len(out) == self._n:
            return None
        return out

    def _rows_of_term(self, term: NodeSelectorTerm) -> IndexVector | None:
        """Rows matching one term (None: all); an empty term matches none."""
        if not term.labels and not term.fields:
            return np.zeros(0, dtype=np.intp)
        if term.fields and not all(r.matches(_NO_NAME) for r in term.fields):
            return np.zeros(0, dtype=np.intp)
        if not term.labels:
            return None
        first, *rest = term.labels
        if first.operator == "In":
            rows = self._rows_with(first.key, first.values)
            if rest:
                mask = np.ones(len(rows), dtype=np.bool_)
                for req in rest:
                    mask &= self._labels.requirement(req)[rows]
                rows = rows[mask]
            return rows
        mask = np.ones(self._n, dtype=np.bool_)
        for req in term.labels:
            mask &= self._labels.requirement(req)
        return np.flatnonzero(mask)

    def _rows_with(self, key: str, values: Sequence[str]) -> IndexVector:
        """The rows whose label ``key`` is one of ``values``, through an inverted index of
        the key (built once: a lookup per value afterwards)."""
        index = self._by_value.get(key)
        if index is None:
            col = self._labels.column(key)
            order = np.argsort(col.codes, kind="stable")
            bounds = np.searchsorted(col.codes[order], np.arange(len(col.values) + 1))
            index = {value: order[bounds[j] : bounds[j + 1]] for j, value in enumerate(col.values)}
            self._by_value[key] = index
        parts = [index[v] for v in values if v in index]
        if not parts:
            return np.zeros(0, dtype=np.intp)
        if len(parts) == 1:
            return parts[0]
        return np.sort(np.concatenate(parts))

    def admits(self, rows: IndexVector | None, row: int) -> bool:
        """Is ``row`` among ``rows`` (None: every row)?"""
        if rows is None:
            return True
        i = int(np.searchsorted(rows, row))
        return i < len(rows) and int(rows[i]) == row

    def mask(self, rows: IndexVector | None) -> BoolVector:
        """``rows`` as a mask over every row."""
        out = np.ones(self._n, dtype=np.bool_)
        if rows is not None:
            out[:] = False
            out[rows] = True
        return out

    # Classes and capacity ----------------------------------------------------------------

    def of_class(self, cls: StorageClassInfo) -> BoolVector:
        """The rows where a PV of ``cls`` may be provisioned: it has a provisioner, and
        its ``allowedTopologies`` admit the row. Read-only, shared."""
        found = self._classes.get(cls.name)
        if found is None:
            if not cls.provisions:
                found = np.zeros(self._n, dtype=np.bool_)
            elif not cls.allowed_topologies:
                found = np.ones(self._n, dtype=np.bool_)
            else:
                found = np.zeros(self._n, dtype=np.bool_)
                for term in cls.allowed_topologies:
                    found |= self._labels.term(term)
            found.flags.writeable = False
            self._classes[cls.name] = found
        return found

    def with_capacity(
        self, storage_class: str, size: int, capacities: Mapping[str, CapacityInfo]
    ) -> BoolVector:
        """The rows where some CSIStorageCapacity of ``storage_class`` allows a volume of
        ``size`` bytes (kube's hasEnoughCapacity: its limit is at least the size and its
        ``nodeTopology`` selects the row). Read-only, shared."""
        key = (storage_class, size)
        found = self._capacity.get(key)
        if found is None:
            found = np.zeros(self._n, dtype=np.bool_)
            for cap in capacities.values():
                limit = cap.limit
                if cap.storage_class != storage_class or limit is None or limit < size:
                    continue
                if cap.node_topology is not None:
                    found |= self._selected(cap.node_topology)
            found.flags.writeable = False
            self._capacity[key] = found
        return found

    def _selected(self, selector: LabelSelector) -> BoolVector:
        found = self._selectors.get(selector)
        if found is None:
            found = np.zeros(self._n, dtype=np.bool_)
            if not selector.match_nothing:
                found[:] = True
                for req in selector.requirements:
                    found &= self._labels.requirement(req)
            self._selectors[selector] = found
        return found


_UNSET = object()
