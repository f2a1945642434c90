"""nodevolumelimits: CSI attach limits per node, as kube's NodeVolumeLimits (layer 2).

===============  =========================================================================
hook             behaviour
===============  =========================================================================
open             per row, the unique CSI volumes (``driver/handle``) of the pods placed,
                 bound or nominated there, counted per driver; the limits are the node's
                 CSINode ``allocatable.count`` per driver (a node without CSINode, or a
                 driver without a count: no limit)
filter           a pod without claims: ``[]`` at once. A claim it names that does not
                 exist, or an ephemeral volume's claim not made for it: every node,
                 unresolvable, in kube's Filter words (``looking up PVC ns/name: ...``;
                 VolumeBinding's PreFilter tells users the reason first, as in kube).
                 Else its volumes not on the node yet,
                 per driver, added to those there: a node where a driver would go over
                 its limit fails with ``node(s) exceed max volume count``, resolvable
                 (evicting pods detaches their volumes)
row filter       the same for one row
on_place /       keep the counts in step with the session's moves
on_unplace
===============  =========================================================================

A claim's volume is its PV's CSI ``driver/handle``; a claim not bound yet (or whose PV is
missing) counts as one new volume of its class's provisioner, as kube counts it. PVs of
in-tree plugins and inline in-tree volumes are not translated to their CSI drivers, and
VolumeAttachments are not read (docs/concepts/volumes.md): the count is that of the pods'
CSI volumes.
"""

from __future__ import annotations

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import BoolVector, IntVector, TableView

MAX_VOLUME_COUNT = "node(s) exceed max volume count"

EMPTY_VIEW = VolumeView()


class NodeVolumeLimitsPlugin:
    """kube's NodeVolumeLimits (CSILimits). No arguments. One instance per session."""

    name = "nodevolumelimits"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._view = EMPTY_VIEW
        self._table: TableView | None = None
        self._limits: dict[str, IntVector] = {}
        """Driver -> per row, its limit (-1: none)."""
        self._counts: dict[str, IntVector] = {}
        """Driver -> per row, the unique volumes of the driver there."""
        self._where: dict[str, dict[int, int]] = {}
        """Volume (``driver/handle``) -> row -> how many pods there use it."""
        self._held: dict[str, dict[str, str]] = {}
        """Task uid -> the volumes it counts for (``driver/handle`` -> driver)."""
        self._departed: dict[str, tuple[TaskInfo, int]] = {}
        """Pods that left the counts in this session (or were leaving at open), and their
        row: those being evicted still hold their volumes."""

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._view = context.volumes or EMPTY_VIEW
        self._table = context.table
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.row_filter)
        view = self._view
        if not view.csi_nodes:
            return
        n = len(context.table)
        for r, node in enumerate(context.table.nodes):
            csi = view.csi_nodes.get(node.name)
            if csi is None:
                continue
            for driver, count in csi.drivers.items():
                if count is None:
                    continue
                limits = self._limits.get(driver)
                if limits is None:
                    limits = self._limits[driver] = np.full(n, -1, dtype=np.int64)
                    self._counts[driver] = np.zeros(n, dtype=np.int64)
                limits[r] = count
        if not self._limits:
            return
        hooks.add_placement_handlers(self._place, self._unplace)
        for node in context.table.nodes:
            for task in node.tasks.values():
                if not task.spec.volumes:
                    continue
                if task.status in COUNTED_FOR_PLUGINS:
                    self._place(task, node)
                elif task.status is TaskStatus.RELEASING:
                    self._departed[task.uid] = (task, context.table.row[node.name])

    def close(self) -> None:
        self._view = EMPTY_VIEW
        self._table = None
        self._limits.clear()
        self._counts.clear()
        self._where.clear()
        self._held.clear()
        self._departed.clear()

    # What a pod counts for ----------------------------------------------------------------

    def volumes_of(self, task: TaskInfo, *, new: bool) -> str | dict[str, str]:
        """``task``'s CSI volumes (``driver/handle`` -> driver); for a ``new`` pod, why no
        node can take it when a claim it names is missing (a pod there already: such a
        claim is not counted)."""
        view = self._view
        out: dict[str, str] = {}
        for v in task.spec.volumes:
            if v.disk is not None:
                continue
            name = v.claim_name(task.name)
            claim = view.claims.get(f"{task.namespace}/{name}")
            where = f"{task.namespace}/{name}"
            if claim is None:
                if new:
                    return f'looking up PVC {where}: persistentvolumeclaims "{name}" not found'
                continue
            if v.ephemeral and claim.controller_uid != task.uid:
                if new:
                    return f"PVC {where} was not created for pod {task.key} (pod is not owner)"
                continue
            pv = view.volumes.get(claim.volume_name) if claim.volume_name else None
            if pv is not None:
                if pv.csi is None or not pv.csi.driver or not pv.csi.handle:
                    continue
                out[f"{pv.csi.driver}/{pv.csi.handle}"] = pv.csi.driver
                continue
            cls = view.classes.get(claim.storage_class) if claim.storage_class else None
            if cls is None or not cls.provisioner:
                continue
            # A volume still to be bound or made: one of its own, of the provisioner.
            out[f"{cls.provisioner}/~{claim.key}"] = cls.provisioner
        return out

    # Counts -------------------------------------------------------------------------------

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if not task.spec.volumes:
            return
        assert self._table is not None
        self._departed.pop(task.uid, None)
        volumes = self.volumes_of(task, new=False)
        assert isinstance(volumes, dict)
        volumes = {k: d for k, d in volumes.items() if d in self._limits}
        if not volumes:
            return
        row = self._table.row[node.name]
        self._held[task.uid] = volumes
        for unique, driver in volumes.items():
            rows = self._where.setdefault(unique, {})
            rows[row] = rows.get(row, 0) + 1
            if rows[row] == 1:
                self._counts[driver][row] += 1

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        assert self._table is not None
        row = self._table.row[node.name]
        if task.spec.volumes:
            self._departed[task.uid] = (task, row)
        volumes = self._held.pop(task.uid, None)
        if volumes is None:
            return
        for unique, driver in volumes.items():
            rows = self._where[unique]
            rows[row] -= 1
            if rows[row] == 0:
                del rows[row]
                self._counts[driver][row] -= 1

    # The filter -----------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row (module docstring)."""
        if not task.spec.volumes:
            return []
        n = len(table)
        volumes = self.volumes_of(task, new=True)
        if isinstance(volumes, str):
            return [Rejection(volumes, np.ones(n, dtype=np.bool_), False)]
        bad = self._over(task, volumes, n, releasing)
        return [Rejection(MAX_VOLUME_COUNT, bad, True)] if bad is not None and bad.any() else []

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """The filter on one row."""
        if not task.spec.volumes:
            return True
        volumes = self.volumes_of(task, new=True)
        if isinstance(volumes, str):
            return False
        bad = self._over(task, volumes, len(table), releasing)
        return bad is None or not bool(bad[row])

    def _over(
        self, task: TaskInfo, volumes: dict[str, str], n: int, releasing: bool
    ) -> BoolVector | None:
        """The rows where ``volumes`` would take a driver over its limit (None: no row)."""
        limited = {u: d for u, d in volumes.items() if d in self._limits}
        if not limited:
            return None
        extra = self._leaving(task, releasing)
        bad = np.zeros(n, dtype=np.bool_)
        for driver in sorted(set(limited.values())):
            mine = [u for u, d in limited.items() if d == driver]
            new = np.full(n, len(mine), dtype=np.int64)
            for unique in mine:
                for row in self._where.get(unique, {}):
                    new[row] -= 1
                for row in extra.get(unique, ()):
                    if row not in self._where.get(unique, {}):
                        new[row] -= 1
            count = self._counts[driver].copy()
            for unique, rows in extra.items():
                if unique.startswith(f"{driver}/"):
                    for row in rows:
                        if row not in self._where.get(unique, {}):
                            count[row] += 1
            limits = self._limits[driver]
            bad |= (limits >= 0) & (count + new > limits)
        return bad

    def _leaving(self, task: TaskInfo, releasing: bool) -> dict[str, set[int]]:
        """The volumes of pods being evicted, per row (they are still attached), unless
        their room counts as free (``releasing``)."""
        out: dict[str, set[int]] = {}
        if releasing:
            return out
        for other, row in self._departed.values():
            if other.status is not TaskStatus.RELEASING or other.uid == task.uid:
                continue
            volumes = self.volumes_of(other, new=False)
            assert isinstance(volumes, dict)
            for unique, driver in volumes.items():
                if driver in self._limits:
                    out.setdefault(unique, set()).add(row)
        return out
