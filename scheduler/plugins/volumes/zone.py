"""volumezone: pods go to the zone of their bound volumes, as kube's VolumeZone (layer 2).

===============  =========================================================================
hook             behaviour
===============  =========================================================================
filter           a pod without claims: ``[]`` at once. For each ``persistentVolumeClaim``
                 volume: the claim missing, its PV missing, an unbound claim of an
                 Immediate class, or of a class that does not exist: every node,
                 unresolvable, with kube's words (an unbound claim waiting for its first
                 consumer is skipped: VolumeBinding places it). Then each zone or region
                 label of a bound PV (``topology.kubernetes.io/zone``, ``.../region`` and
                 their ``failure-domain.beta`` forms; several values joined by ``__``)
                 must hold on the node, under the same key or its GA form: a node
                 without any zone or region label passes (a cluster of one zone); the
                 others fail with ``node(s) had no available volume zone``, unresolvable
row filter       the same for one row
===============  =========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.api.task import TaskInfo
from scheduler.api.volumes.claims import missing
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_table import BoolVector, TableView

ZONE_CONFLICT = "node(s) had no available volume zone"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
"""The labels kube's VolumeZone reads, in its order."""
GA_LABEL = {BETA_ZONE: ZONE, BETA_REGION: REGION}

EMPTY_VIEW = VolumeView()


@dataclass(frozen=True, slots=True)
class _Topology:
    key: str
    values: frozenset[str]


def zones(value: str) -> frozenset[str] | None:
    """The values of a zone label joined by ``__`` (kube's LabelZonesToSet), or None when
    one is empty (kube ignores such a label)."""
    parts = [p.strip() for p in value.split("__")]
    if any(not p for p in parts):
        return None
    return frozenset(parts)


class VolumeZonePlugin:
    """kube's VolumeZone. No arguments. One instance per session."""

    name = "volumezone"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._view = EMPTY_VIEW
        self._labels: NodeLabelIndex | None = None
        self._pods: dict[str, str | list[_Topology]] = {}

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._view = context.volumes or EMPTY_VIEW
        self._labels = NodeLabelIndex(context.table.nodes)
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.row_filter)

    def close(self) -> None:
        self._view = EMPTY_VIEW
        self._labels = None
        self._pods.clear()

    def _topologies(self, task: TaskInfo) -> str | list[_Topology]:
        """The zone constraints of ``task``'s bound PVs, or why no node can take it
        (memoized per session)."""
        found = self._pods.get(task.uid)
        if found is not None:
            return found
        view = self._view
        out: list[_Topology] = []
        for v in task.spec.volumes:
            if not v.claim:
                continue
            claim = view.claims.get(f"{task.namespace}/{v.claim}")
            if claim is None:
                found = missing(v.claim)
                break
            if not claim.volume_name:
                if not claim.storage_class:
                    found = "PersistentVolumeClaim had no pv name and storageClass name"
                    break
                cls = view.classes.get(claim.storage_class)
                if cls is None:
                    found = f'storageclasses.storage.k8s.io "{claim.storage_class}" not found'
                    break
                if cls.delays_binding:
                    continue
                found = "PersistentVolume had no name"
                break
            pv = view.volumes.get(claim.volume_name)
            if pv is None:
                found = f'persistentvolume "{claim.volume_name}" not found'
                break
            for key in TOPOLOGY_LABELS:
                value = pv.labels.get(key)
                if value is None:
                    continue
                values = zones(value)
                if values is not None:
                    out.append(_Topology(key, values))
        if found is None:
            found = out
        self._pods[task.uid] = found
        return found

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row (module docstring)."""
        if not task.spec.volumes:
            return []
        n = len(table)
        topologies = self._topologies(task)
        if isinstance(topologies, str):
            return [Rejection(topologies, np.ones(n, dtype=np.bool_), False, whole=True)]
        if not topologies:
            return []
        bad = self._bad_rows(topologies, n)
        return [Rejection(ZONE_CONFLICT, bad, False)] if bad.any() else []

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """The filter on one row."""
        if not task.spec.volumes:
            return True
        topologies = self._topologies(task)
        if isinstance(topologies, str):
            return False
        return not topologies or not bool(self._bad_rows(topologies, len(table))[row])

    def _bad_rows(self, topologies: list[_Topology], n: int) -> BoolVector:
        labels = self._labels
        assert labels is not None, "volumezone used outside an open session"
        constrained = np.zeros(n, dtype=np.bool_)
        for key in TOPOLOGY_LABELS:
            constrained |= labels.column(key).present()
        bad = np.zeros(n, dtype=np.bool_)
        for topo in topologies:
            col = labels.column(topo.key)
            ga = labels.column(GA_LABEL.get(topo.key, topo.key))
            hit = np.zeros(len(col.values) + 1, dtype=np.bool_)
            for j, value in enumerate(col.values):
                hit[j] = value in topo.values
            ga_hit = np.zeros(len(ga.values) + 1, dtype=np.bool_)
            for j, value in enumerate(ga.values):
                ga_hit[j] = value in topo.values
            # The key itself when the node has it, else its GA form (kube's fallback).
            ok = np.where(col.present(), hit[col.codes], ga_hit[ga.codes])
            bad |= ~ok
        return bad & constrained
