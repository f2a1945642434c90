"""What the predicates know of the pods held on nodes (layer 2): host ports in use and
the pods matching inter-pod (anti-)affinity terms, per row, kept in step by the placement
handlers; and the checks that read them, as kube-scheduler's InterPodAffinity filter:

- required affinity: the pods that count are those every one of the pod's terms selects;
  a node passes when, for each term, it has the term's key and a counted pod is in its
  domain; or, when no such pod is in any domain of any term, the pod selects itself by
  every term and the node has every key (the first pod of a series);
- required anti-affinity: a node fails when the domain of one of its terms holds a pod
  the term selects;
- existing pods' required anti-affinity: a node fails when it is in the domain of a held
  pod's term that selects the pod.

Terms select pods in namespaces as :mod:`scheduler.framework.affinity_terms` says."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.pod import PodAffinityTerm
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.affinity_terms import NamespaceLabels, scope_of, selects
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import BoolVector, IntVector, TableView
from scheduler.framework.pod_counts import MatchKey, PodCounts

WILDCARD_IPS = frozenset({"", "0.0.0.0"})


@dataclass(slots=True)
class PortUse:
    """Tasks using one (protocol, port) per row: all of them, and by host IP."""

    any: IntVector
    wildcard: IntVector
    by_ip: dict[str, IntVector] = field(default_factory=dict)


AntiKey = tuple[PodAffinityTerm, str]
"""A held pod's required anti-affinity term and the namespace of that pod."""


class PodIndex:
    """Ports and affinity terms of the tasks held on the rows of one session's table.

    :meth:`account` is called for every task that enters (+1) or leaves (-1) a row; the
    matchers of a (selector, namespaces) are built on first use by one scan of the nodes.
    """

    def __init__(
        self, table: TableView, labels: NodeLabelIndex, namespaces: NamespaceLabels
    ) -> None:
        self._table = table
        self._labels = labels
        self._namespaces = namespaces
        self._ports: dict[tuple[str, int], PortUse] = {}
        self._counts = PodCounts(table)
        """Held tasks matching terms, counted per row; built on demand."""
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
        if self._counts:
            self._counts.account(task, row, sign)
        if spec.pod_anti_affinity:
            for term in spec.pod_anti_affinity:
                key = (term, task.namespace)
                col = self._labels.column(term.topology_key)
                per_domain = self._anti.get(key)
                if per_domain is None:
                    per_domain = self._anti[key] = np.zeros(col.missing + 1, dtype=np.int64)
                per_domain[col.codes[row]] += sign
            if sign > 0:
                self._anti_rows[task.uid] = row
            else:
                self._anti_rows.pop(task.uid, None)

    def _key(self, terms: tuple[PodAffinityTerm, ...], namespace: str) -> MatchKey:
        """The pods every one of ``terms`` (of a pod in ``namespace``) selects."""
        return tuple((t.selector, scope_of(t, namespace, self._namespaces)) for t in terms)

    def _selects(self, term: PodAffinityTerm, owner: str, task: TaskInfo) -> bool:
        return selects(term, owner, task, self._namespaces)

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
        """Rows failing ``task``'s required pod affinity (raw, before charging): the module
        docstring's rule."""
        terms = task.spec.pod_affinity
        counts = self._counts.rows(self._key(terms, task.namespace))
        itself = all(self._selects(t, task.namespace, task) for t in terms)
        if own_row is not None and itself:
            counts = counts.copy()
            counts[own_row] -= 1
        holders = counts > 0
        n = len(self._labels)
        has_keys = np.ones(n, dtype=np.bool_)
        near = np.ones(n, dtype=np.bool_)
        counted_somewhere = False
        for term in terms:
            col = self._labels.column(term.topology_key)
            present = col.present()
            has_keys &= present
            near &= col.rows_in_domains_of(holders)
            counted_somewhere |= bool((holders & present).any())
        ok = has_keys & near
        if itself and not counted_somewhere:
            # The first pod of a series with affinity to itself: any node with the keys.
            ok = has_keys
        out: BoolVector = ~ok
        return out

    def anti_affinity_rejected(self, task: TaskInfo, own_row: int | None) -> BoolVector:
        """Rows whose domain holds a pod matching a required anti-affinity term of ``task``."""
        bad = np.zeros(len(self._labels), dtype=np.bool_)
        for term in task.spec.pod_anti_affinity:
            counts = self._counts.rows(self._key((term,), task.namespace))
            if own_row is not None and self._selects(term, task.namespace, task):
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
            own_keys.update((t, task.namespace) for t in task.spec.pod_anti_affinity)
        bad: BoolVector | None = None
        for key, per_domain in self._anti.items():
            term, owner = key
            if not self._selects(term, owner, task):
                continue
            col = self._labels.column(term.topology_key)
            held = per_domain > 0
            if own_row is not None and key in own_keys:
                code = col.codes[own_row]
                held[code] = per_domain[code] - own_keys[key] > 0
            held[-1] = False  # the missing code: a node without the key is in no domain
            if held.any():
                rows = held[col.codes]
                bad = rows if bad is None else bad | rows
        return bad
