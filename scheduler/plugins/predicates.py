"""predicates: which nodes can take a task, kube-scheduler's filters on all nodes at once (layer 2).

One :class:`~scheduler.framework.extension_points.NodeFilter` answers for every row of the
session's :class:`~scheduler.framework.node_table.TableView` with numpy masks. Its checks,
in the order of the rejections it returns:

=====================================  ==========================================  ==========
check                                  reason (kube-scheduler's string)            resolvable
=====================================  ==========================================  ==========
``spec.unschedulable``                 node(s) were unschedulable                  no
node readiness                         node(s) were not ready                      no
nodeSelector, required node affinity   node(s) didn't match Pod's node             no
                                       affinity/selector
NoSchedule / NoExecute taints          node(s) had untolerated taint               no
free = idle - blocking nominations     Insufficient <name> / Too many pods         yes
host ports                             node(s) didn't have free ports for the      yes
                                       requested pod ports
required pod affinity                  node(s) didn't match pod affinity rules     no
required pod anti-affinity             node(s) didn't match pod anti-affinity      yes
                                       rules
existing pods' anti-affinity           node(s) didn't satisfy existing pods        yes
                                       anti-affinity rules
=====================================  ==========================================  ==========

Each check stands for one of kube-scheduler's filter plugins, which stop at the first
failure on a node, so a node is charged to one check only: the first that fails it, except
that a check that cannot be resolved by preemption goes before every check that can. The
node counts of ``Fit.explain()`` then add up as kube-scheduler's do, and
``Fit.candidates()`` excludes exactly the nodes with at least one unresolvable failure.
(The resource check reports every insufficient resource of a node, as NodeResourcesFit.)

Room is ``TableView.free``: idle less the nominations that block the task (its own and
those of lower priority do not, as in KEP-4832), plus releasing room while the session
counts it. The other checks do not count the task itself where it is already held.

Costs. The four static checks depend only on the pod's ``spec.shape`` and on node labels,
taints and flags, which do not change within a session: they are computed once per shape
(per-node Python loops are allowed there) and reused. Host ports and pod (anti-)affinity
keep per-session indexes, updated by placement handlers, so a pod without ports or affinity
pays one dictionary lookup for them. The common pod costs one shape lookup and one
comparison of ``(rows x resources)`` integers, and gets an empty list back.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.pod import PodAffinityTerm, StaticShape, Taint
from scheduler.api.resource import PODS, Resource
from scheduler.api.selectors import LabelSelector
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    SHORTFALL,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_labels import NodeLabelIndex, frozen
from scheduler.framework.node_table import (
    BoolVector,
    IndexVector,
    IntMatrix,
    IntVector,
    TableView,
)

UNSCHEDULABLE = "node(s) were unschedulable"
NOT_READY = "node(s) were not ready"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNTOLERATED_TAINT = "node(s) had untolerated taint"
TOO_MANY_PODS = "Too many pods"
HOST_PORTS = "node(s) didn't have free ports for the requested pod ports"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
"""A pod tolerating this taint may go to a cordoned node, as in kube-scheduler."""

_FILTERING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_WILDCARD_IPS = frozenset({"", "0.0.0.0"})


def insufficient(resource: str) -> str:
    """The reason for a node short of ``resource``: ``Insufficient cpu``, ``Too many pods``."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"


# ------------------------------------------------------------------------------------------
# Per-session state


@dataclass(frozen=True, slots=True)
class _Static:
    """The cached verdict of the static checks for one shape."""

    rejections: tuple[Rejection, ...]
    bad: BoolVector | None  # union of the rejections; None when every node passes


@dataclass(frozen=True, slots=True)
class _ResourceCheck:
    """What the resource check needs for one request: the columns it asks for."""

    cols: IndexVector
    need: IntVector
    reasons: tuple[str, ...]
    unknown: tuple[str, ...]  # requested names that no column holds: no node has them


@dataclass(slots=True)
class _PortUse:
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


class PredicatesPlugin:
    """kube-scheduler's filters as one vectorised NodeFilter. No arguments.

    One instance per session. ``open`` indexes the host ports and anti-affinity terms of
    the tasks held on nodes (statuses in ``COUNTED_FOR_PLUGINS``); the placement handlers
    keep the indexes in step with ``Session.move``. ``close`` drops everything.
    """

    name = "predicates"

    def __init__(self, arguments: object = None) -> None:
        self._table: TableView | None = None
        self._labels = NodeLabelIndex(())
        self._statics: dict[StaticShape, _Static] = {}
        self._resources: dict[Resource, _ResourceCheck] = {}
        self._unschedulable: BoolVector = np.zeros(0, dtype=np.bool_)
        self._not_ready: BoolVector = np.zeros(0, dtype=np.bool_)
        self._taints: dict[Taint, BoolVector] = {}
        self._ports: dict[tuple[str, int], _PortUse] = {}
        self._matchers: dict[AffinityKey, IntVector] = {}
        """Held tasks matching a (selector, namespaces), counted per row; built on demand."""
        self._anti: dict[AntiKey, IntVector] = {}
        """Held tasks' required anti-affinity terms, counted per domain code of the key."""
        self._anti_rows: dict[str, int] = {}
        """Row of each held task that has required anti-affinity terms, by uid."""

    # Plugin protocol -----------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        self._table = table
        nodes = table.nodes
        self._labels = NodeLabelIndex(nodes)
        self._unschedulable = frozen(np.array([n.unschedulable for n in nodes], dtype=np.bool_))
        self._not_ready = frozen(np.array([not n.ready for n in nodes], dtype=np.bool_))
        taints: dict[Taint, BoolVector] = {}
        for i, node in enumerate(nodes):
            for taint in node.taints:
                if taint.effect in _FILTERING_EFFECTS:
                    taints.setdefault(taint, np.zeros(len(nodes), dtype=np.bool_))[i] = True
        self._taints = taints
        for node in nodes:
            for task in node.tasks.values():
                if task.status in COUNTED_FOR_PLUGINS:
                    self._place(task, node)
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.filter_row)
        hooks.add(SHORTFALL, self.shortfall)
        hooks.add_placement_handlers(self._place, self._unplace)

    def close(self) -> None:
        self._table = None
        self._labels = NodeLabelIndex(())
        self._statics.clear()
        self._resources.clear()
        self._taints.clear()
        self._ports.clear()
        self._matchers.clear()
        self._anti.clear()
        self._anti_rows.clear()

    # The filter ----------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row of ``table``, in the order of the module table.

        Pure with respect to its arguments; reads the plugin's indexes. Empty when every
        node passes.
        """
        spec = task.spec
        static = self._statics.get(spec.shape)
        if static is None:
            static = self._static(spec.shape)
        check = self._resources.get(spec.request)
        if check is None:
            check = self._resource_check(spec.request, table)
        # Nominations of lower priority and the task's own do not block it (KEP-4832);
        # the room of pods being evicted counts when asked (a preemptor's view).
        free = table.free(task.priority, task.uid, check.cols, releasing=releasing)
        short = free < check.need
        short_any: BoolVector = np.logical_or.reduce(short, axis=1)
        existing = self._existing_anti_rejected(task) if self._anti_rows else None
        if (
            static.bad is None
            and existing is None
            and not spec.host_ports
            and not spec.pod_affinity
            and not spec.pod_anti_affinity
            and not check.unknown
            and not short_any.any()
        ):
            return []
        return self._explain(
            task, table, static, check=check, short=short, short_any=short_any, existing=existing
        )

    def filter_row(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """:meth:`filter` on one row: the static verdict and the resources of that row; pods
        with ports or affinity (or a cluster with anti-affinity pods) take the full path."""
        spec = task.spec
        if spec.host_ports or spec.pod_affinity or spec.pod_anti_affinity or self._anti_rows:
            return not any(bool(r.nodes[row]) for r in self.filter(task, table, releasing))
        static = self._statics.get(spec.shape)
        if static is None:
            static = self._static(spec.shape)
        if static.bad is not None and static.bad[row]:
            return False
        check = self._resources.get(spec.request)
        if check is None:
            check = self._resource_check(spec.request, table)
        if check.unknown:
            return False
        free = table.free_row(task.priority, task.uid, row, check.cols, releasing=releasing)
        return not bool((free < check.need).any())

    def shortfall(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> IntMatrix:
        """How much of each requested resource each of ``rows`` lacks for ``task`` (the
        resource check of :meth:`filter`); zeros elsewhere. The other checks (ports,
        affinity) free no countable room, so they add nothing: a lower bound, as the hook
        asks."""
        check = self._resources.get(task.spec.request)
        if check is None:
            check = self._resource_check(task.spec.request, table)
        free = table.free(task.priority, task.uid, check.cols, rows, releasing=releasing)
        out: IntMatrix = np.zeros((len(rows), len(table.columns)), dtype=np.int64)
        out[:, check.cols] = np.maximum(check.need - free, 0)
        return out

    def _explain(
        self,
        task: TaskInfo,
        table: TableView,
        static: _Static,
        *,
        check: _ResourceCheck,
        short: BoolVector,
        short_any: BoolVector,
        existing: BoolVector | None,
    ) -> list[Rejection]:
        """The slow path: every check, each node charged to its first failing check."""
        spec = task.spec
        n = len(table)
        own_row = self._held_row(task, table)
        out = list(static.rejections)
        seen = np.zeros(n, dtype=np.bool_) if static.bad is None else static.bad.copy()
        # The unresolvable pod affinity is charged before the resolvable checks (it is listed
        # after them), so a node failing it is never taken for a preemption candidate.
        affinity: Rejection | None = None
        if spec.pod_affinity:
            raw = self._affinity_rejected(task, own_row)
            mine = raw & ~seen
            if mine.any():
                affinity = Rejection(POD_AFFINITY, mine, False)
            seen |= raw
        if check.unknown:
            short_any = np.ones(n, dtype=np.bool_)
        mine = short_any & ~seen
        if mine.any():
            for k, reason in enumerate(check.reasons):
                nodes = short[:, k] & mine
                if nodes.any():
                    out.append(Rejection(reason, nodes, True))
            for name in check.unknown:
                out.append(Rejection(insufficient(name), mine.copy(), True))
            seen |= mine
        if spec.host_ports:
            raw = self._port_conflicts(task, own_row)
            mine = raw & ~seen
            if mine.any():
                out.append(Rejection(HOST_PORTS, mine, True))
                seen |= mine
        if affinity is not None:
            out.append(affinity)
        if spec.pod_anti_affinity:
            raw = self._anti_affinity_rejected(task, own_row)
            mine = raw & ~seen
            if mine.any():
                out.append(Rejection(POD_ANTI_AFFINITY, mine, True))
                seen |= mine
        if existing is not None:
            mine = existing & ~seen
            if mine.any():
                out.append(Rejection(EXISTING_ANTI_AFFINITY, mine, True))
        return out

    # Static checks, once per shape -----------------------------------------------------------

    def _static(self, shape: StaticShape) -> _Static:
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
        static = _Static(tuple(rejections), frozen(seen) if seen.any() else None)
        self._statics[shape] = static
        return static

    def _resource_check(self, request: Resource, table: TableView) -> _ResourceCheck:
        names = sorted(name for name, amount in request.items() if amount > 0)
        known = [name for name in names if name in table.col]
        cols = np.array([table.col[name] for name in known], dtype=np.intp)
        need = np.array([request[name] for name in known], dtype=np.int64)
        unknown = tuple(name for name in names if name not in table.col)
        check = _ResourceCheck(cols, need, tuple(insufficient(name) for name in known), unknown)
        self._resources[request] = check
        return check

    # Indexes kept by the placement handlers -------------------------------------------------

    def _row(self, node: NodeInfo) -> int:
        assert self._table is not None, "predicates used outside an open session"
        return self._table.row[node.name]

    @staticmethod
    def _held_row(task: TaskInfo, table: TableView) -> int | None:
        """The row ``task`` itself is held on (its indexes must not count it), if any."""
        if task.status not in COUNTED_FOR_PLUGINS or not task.node_name:
            return None
        row = table.row.get(task.node_name)
        if row is None or task.uid not in table.nodes[row].tasks:
            return None
        return row

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._account(task, self._row(node), +1)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        self._account(task, self._row(node), -1)

    def _account(self, task: TaskInfo, row: int, sign: int) -> None:
        spec = task.spec
        n = len(self._labels)
        for port in spec.host_ports:
            use = self._ports.get((port.protocol, port.port))
            if use is None:
                use = _PortUse(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
                self._ports[(port.protocol, port.port)] = use
            use.any[row] += sign
            if port.host_ip in _WILDCARD_IPS:
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
            assert self._table is not None
            selector, namespaces = key
            counts = np.zeros(len(self._table), dtype=np.int64)
            for row, node in enumerate(self._table.nodes):
                for other in node.tasks.values():
                    held = other.status in COUNTED_FOR_PLUGINS
                    if held and _matches(selector, namespaces, other):
                        counts[row] += 1
            self._matchers[key] = counts
        return counts

    # Dynamic checks ------------------------------------------------------------------------

    def _port_conflicts(self, task: TaskInfo, own_row: int | None) -> BoolVector:
        bad = np.zeros(len(self._labels), dtype=np.bool_)
        own = task.spec.host_ports
        for port in own:
            use = self._ports.get((port.protocol, port.port))
            if use is None:
                continue
            if port.host_ip in _WILDCARD_IPS:
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

    def _affinity_rejected(self, task: TaskInfo, own_row: int | None) -> BoolVector:
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

    def _anti_affinity_rejected(self, task: TaskInfo, own_row: int | None) -> BoolVector:
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

    def _existing_anti_rejected(self, task: TaskInfo) -> BoolVector | None:
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
