"""volumerestrictions: disks one pod at a time, as kube's VolumeRestrictions (layer 2).

===============  =========================================================================
hook             behaviour
===============  =========================================================================
open             indexes who uses what: per claim (``ns/name``), the pods placed, bound
                 or nominated that use it; per row, the inline disks (GCE PD, EBS,
                 iSCSI, RBD) of the pods there. Pods being evicted are kept apart
filter           a pod without claims or disks: ``[]`` at once. A claim it names that
                 does not exist: every node, unresolvable (kube's PreFilter). A disk it
                 names inline that a pod on the node mounts in a conflicting way
                 (``node(s) had no available disk``, resolvable: evicting that pod frees
                 it). A ReadWriteOncePod claim another pod uses, wherever it runs: every
                 node (``node(s) unavailable due to PersistentVolumeClaim with
                 ReadWriteOncePod access mode already in-use by another pod``,
                 resolvable: evicting that pod frees the claim)
row filter       the same for one row
on_place /       keep both indexes in step with the session's moves, so the victim search,
on_unplace       which removes and re-adds pods through them, sees a victim's claims and
                 disks freed
===============  =========================================================================

Pods being evicted still use their claims and disks, except in the preemptor's view
(``releasing``): a pod that evicts the holder of a ReadWriteOncePod claim waits for it to
be gone, as kube-scheduler's preemptor does.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.api.volumes.claims import missing
from scheduler.api.volumes.model import READ_WRITE_ONCE_POD
from scheduler.api.volumes.refs import InlineDisk
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import TableView

DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)

EMPTY_VIEW = VolumeView()


class VolumeRestrictionsPlugin:
    """kube's VolumeRestrictions. No arguments. One instance per session."""

    name = "volumerestrictions"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._view = EMPTY_VIEW
        self._table: TableView | None = None
        self._users: dict[str, dict[str, TaskInfo]] = {}
        """Claim key -> the pods placed, bound or nominated that use it, by uid."""
        self._disks: dict[str, dict[int, dict[str, InlineDisk]]] = {}
        """Disk id -> row -> uid -> the disk as that pod mounts it."""
        self._departed: dict[str, TaskInfo] = {}
        """Pods that left the indexes in this session (or were leaving at open): those
        being evicted still use what they used."""
        self._rows: dict[str, int] = {}
        """Where each departed pod was (its row)."""

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._view = context.volumes or EMPTY_VIEW
        self._table = context.table
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.row_filter)
        hooks.add_placement_handlers(self._place, self._unplace)
        for node in context.table.nodes:
            for task in node.tasks.values():
                if not task.spec.volumes:
                    continue
                if task.status in COUNTED_FOR_PLUGINS:
                    self._place(task, node)
                elif task.status is TaskStatus.RELEASING:
                    self._departed[task.uid] = task
                    self._rows[task.uid] = context.table.row[node.name]

    def close(self) -> None:
        self._view = EMPTY_VIEW
        self._table = None
        self._users.clear()
        self._disks.clear()
        self._departed.clear()
        self._rows.clear()

    # Indexes ------------------------------------------------------------------------------

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if not task.spec.volumes:
            return
        assert self._table is not None
        row = self._table.row[node.name]
        self._departed.pop(task.uid, None)
        self._rows.pop(task.uid, None)
        for v in task.spec.volumes:
            if v.disk is not None:
                self._disks.setdefault(v.disk.id, {}).setdefault(row, {})[task.uid] = v.disk
            else:
                key = f"{task.namespace}/{v.claim_name(task.name)}"
                self._users.setdefault(key, {})[task.uid] = task

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if not task.spec.volumes:
            return
        assert self._table is not None
        row = self._table.row[node.name]
        self._departed[task.uid] = task
        self._rows[task.uid] = row
        for v in task.spec.volumes:
            if v.disk is not None:
                on_row = self._disks.get(v.disk.id, {}).get(row)
                if on_row is not None:
                    on_row.pop(task.uid, None)
            else:
                users = self._users.get(f"{task.namespace}/{v.claim_name(task.name)}")
                if users is not None:
                    users.pop(task.uid, None)

    def _leaving(self, releasing: bool) -> Iterable[TaskInfo]:
        """The pods that still use what they used though they left the indexes: those
        being evicted, unless the filter counts their room as free (``releasing``)."""
        if releasing:
            return ()
        return [t for t in self._departed.values() if t.status is TaskStatus.RELEASING]

    # The filter -----------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row (module docstring)."""
        if not task.spec.volumes:
            return []
        n = len(table)
        why, rwop = self._claims(task)
        if why:
            return [Rejection(why, np.ones(n, dtype=np.bool_), False, whole=True)]
        out = []
        bad = np.zeros(n, dtype=np.bool_)
        for v in task.spec.volumes:
            if v.disk is not None:
                for row in self._conflicting_rows(task, v.disk, releasing):
                    bad[row] = True
        if bad.any():
            out.append(Rejection(DISK_CONFLICT, bad, True))
        if self._in_use(task, rwop, releasing):
            out.append(Rejection(RWOP_CONFLICT, ~bad, True))
        return out

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """The filter on one row."""
        if not task.spec.volumes:
            return True
        why, rwop = self._claims(task)
        if why:
            return False
        for v in task.spec.volumes:
            if v.disk is not None and row in self._conflicting_rows(task, v.disk, releasing):
                return False
        return not self._in_use(task, rwop, releasing)

    def _claims(self, task: TaskInfo) -> tuple[str, list[str]]:
        """Why no node can take ``task`` (a claim it names is missing), or the keys of its
        ReadWriteOncePod claims (kube reads the ``persistentVolumeClaim`` volumes only)."""
        rwop: list[str] = []
        for v in task.spec.volumes:
            if not v.claim:
                continue
            key = f"{task.namespace}/{v.claim}"
            claim = self._view.claims.get(key)
            if claim is None:
                return missing(v.claim), []
            if READ_WRITE_ONCE_POD in claim.access_modes:
                rwop.append(key)
        return "", rwop

    def _in_use(self, task: TaskInfo, rwop: list[str], releasing: bool) -> bool:
        """Is one of ``rwop`` used by another pod (module docstring)? A pod nominated with a
        lower priority than ``task`` does not count (as kube adds only the nominated pods
        of equal or higher priority when it filters)."""
        if not rwop:
            return False
        for key in rwop:
            for uid, user in self._users.get(key, {}).items():
                if uid == task.uid:
                    continue
                if user.status is TaskStatus.PIPELINED and user.priority < task.priority:
                    continue
                return True
        for other in self._leaving(releasing):
            if other.uid == task.uid:
                continue
            for v in other.spec.volumes:
                if not v.disk and f"{other.namespace}/{v.claim_name(other.name)}" in rwop:
                    return True
        return False

    def _conflicting_rows(self, task: TaskInfo, disk: InlineDisk, releasing: bool) -> set[int]:
        """The rows where a pod (not ``task``) mounts ``disk`` in a conflicting way."""
        rows = {
            row
            for row, users in self._disks.get(disk.id, {}).items()
            if any(uid != task.uid and disk.conflicts(d) for uid, d in users.items())
        }
        for other in self._leaving(releasing):
            if other.uid == task.uid:
                continue
            if any(v.disk is not None and disk.conflicts(v.disk) for v in other.spec.volumes):
                rows.add(self._rows[other.uid])
        return rows
