"""What the predicates know of the pods held on nodes (layer 2): host ports in use and
the pods matching inter-pod (anti-)affinity terms, per row, kept in step by the placement
handlers; and the checks that read them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.pod import PodAffinityTerm
from scheduler.api.selectors import LabelSelector
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import BoolVector, IntVector, TableView

WILDCARD_IPS = frozenset({"", "0.0.0.0"})


@dataclass(slots=True)
class PortUse:
    """Tasks using one (protocol, port) per row: all of them, and by host IP."""

    any: IntVector
    wildcard: IntVector
    by_ip: dict[str, IntVector] = field(default_factory=dict)


AffinityKey = tuple[LabelSelector, frozenset[str]]
AntiKey = tuple[LabelSelector, frozenset[str], str]


def _namespaces(term: PodAffinityTerm, owner_namespace: str) -> frozenset[str]:
    return frozenset(term.namespaces) if term.namespaces else frozenset((owner_namespace,))


def _matches(selector: LabelSelector, namespaces: frozenset[str], task: TaskInfo) -> bool:
    return task.namespace in namespaces and selector.matches(task.labels or {})


class PodIndex:
    """Ports and affinity terms of the tasks held on the rows of one session's table.

    :meth:`account` is called for every task that enters (+1) or leaves (-1) a row; the
    matchers of a (selector, namespaces) are built on first use by one scan of the nodes.
    """

    def __init__(self, table: TableView, labels: NodeLabelIndex) -> None:
        self._table = table
        self._labels = labels
        self._ports: dict[tuple[str, int], PortUse] = {}
        self._matchers: dict[AffinityKey, IntVector] = {}
        """Held tasks matching a (selector, namespaces), counted per row; built on demand."""
        self._anti: dict[AntiKey, IntVector] = {}
        """Held tasks' required anti-affinity terms, counted per domain code of the key."""
        self._anti_rows: dict[str, int] = {}
        """Row of each held task that has required anti-affinity terms, by uid."""

    @property
    def has_anti_affinity(self) -> bool:
        """Does any held task have required anti-affinity terms?"""
        return bool(self._anti_rows)

    @staticmethod
    def held_row(task: TaskInfo, table: TableView) -> int | None:
        """The row ``task`` itself is held on (its indexes must not count it), if any."""
        if task.status not in COUNTED_FOR_PLUGINS or not task.node_name:
            return None
        row = table.row.get(task.node_name)
        if row is None or task.uid not in table.nodes[row].tasks:
            return None
        return row

    def account(self, task: TaskInfo, row: int, sign: int) -> None:
        spec = task.spec
        n = len(self._labels)
        for port in spec.host_ports:
            use = self._ports.get((port.protocol, port.port))
            if use is None:
                use = PortUse(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
                self._ports[(port.protocol, port.port)] = use
            use.any[row] += sign
            if port.host_ip in WILDCARD_IPS:
                use.wildcard[row] += sign
            else:
                by_ip = use.by_ip.get(port.host_ip)
                if by_ip is None:
                    by_ip = use.by_ip[port.host_ip] = np.zeros(n, dtype=np.int64)
                by_ip[row] += sign
        for (selector, namespaces), counts in self._matchers.items():
            if _matches(selector, namespaces, task):
                counts[row] += sign
        if spec.pod_anti_affinity:
            for term in spec.pod_anti_affinity:
                key = (term.selector, _namespaces(term, task.namespace), term.topology_key)
                col = self._labels.column(term.topology_key)
                per_domain = self._anti.get(key)
                if per_domain is None:
                    per_domain = self._anti[key] = np.zeros(col.missing + 1, dtype=np.int64)
                per_domain[col.codes[row]] += sign
            if sign > 0:
                self._anti_rows[task.uid] = row
            else:
                self._anti_rows.pop(task.uid, None)

    def _matcher(self, key: AffinityKey) -> IntVector:
        """Held tasks matching ``key`` per row; the first use scans every node once."""
        counts = self._matchers.get(key)
        if counts is None:
            selector, namespaces = key
            counts = np.zeros(len(self._table), dtype=np.int64)
            for row, node in enumerate(self._table.nodes):
                for other in node.tasks.values():
                    held = other.status in COUNTED_FOR_PLUGINS
                    if held and _matches(selector, namespaces, other):
                        counts[row] += 1
            self._matchers[key] = counts
        return counts

    # Checks -------------------------------------------------------------------------------

    def port_conflicts(self, task: TaskInfo, own_row: int | None) -> BoolVector:
        bad = np.zeros(len(self._labels), dtype=np.bool_)
        own = task.spec.host_ports
        for port in own:
            use = self._ports.get((port.protocol, port.port))
            if use is None:
                continue
            if port.host_ip in WILDCARD_IPS:
                count = use.any
            else:
                by_ip = use.by_ip.get(port.host_ip)
                count = use.wildcard if by_ip is None else use.wildcard + by_ip
            conflicts = count > 0
            if own_row is not None:
                mine = sum(1 for other in own if port.conflicts(other))
                conflicts[own_row] = count[own_row] - mine > 0
            bad |= conflicts
        return bad

    def affinity_rejected(self, task: TaskInfo, own_row: int | None) -> BoolVector:
        """Rows failing a required pod affinity term of ``task`` (raw, before charging)."""
        bad = np.zeros(len(self._labels), dtype=np.bool_)
        for term in task.spec.pod_affinity:
            namespaces = _namespaces(term, task.namespace)
            counts = self._matcher((term.selector, namespaces))
            itself = _matches(term.selector, namespaces, task)
            if own_row is not None and itself:
                counts = counts.copy()
                counts[own_row] -= 1
            col = self._labels.column(term.topology_key)
            holders = counts > 0
            if holders.any():
                bad |= ~col.rows_in_domains_of(holders)
            elif itself:
                # The first pod of a series with affinity to itself: any node with the key.
                bad |= ~col.present()
            else:
                bad[:] = True
        return bad

    def anti_affinity_rejected(self, task: TaskInfo, own_row: int | None) -> BoolVector:
        """Rows whose domain holds a pod matching a required anti-affinity term of ``task``."""
        bad = np.zeros(len(self._labels), dtype=np.bool_)
        for term in task.spec.pod_anti_affinity:
            namespaces = _namespaces(term, task.namespace)
            counts = self._matcher((term.selector, namespaces))
            if own_row is not None and _matches(term.selector, namespaces, task):
                counts = counts.copy()
                counts[own_row] -= 1
            holders = counts > 0
            if holders.any():
                bad |= self._labels.column(term.topology_key).rows_in_domains_of(holders)
        return bad

    def existing_anti_rejected(self, task: TaskInfo) -> BoolVector | None:
        """Rows in the domain of a held task whose anti-affinity term matches ``task``."""
        own_row = self._anti_rows.get(task.uid)
        own_keys: Counter[AntiKey] = Counter()
        if own_row is not None:
            own_keys.update(
                (t.selector, _namespaces(t, task.namespace), t.topology_key)
                for t in task.spec.pod_anti_affinity
            )
        bad: BoolVector | None = None
        for key, per_domain in self._anti.items():
            selector, namespaces, topology_key = key
            if not _matches(selector, namespaces, task):
                continue
            col = self._labels.column(topology_key)
            held = per_domain > 0
            if own_row is not None and key in own_keys:
                code = col.codes[own_row]
                held[code] = per_domain[code] - own_keys[key] > 0
            held[-1] = False  # the missing code: a node without the key is in no domain
            if held.any():
                rows = held[col.codes]
                bad = rows if bad is None else bad | rows
        return bad
