"""The ``reservation`` plugin (layer 2): nodes reserved for a starving job are not for
others.

Starvation protection (the ``elect`` and ``reserve`` actions) holds a group of nodes for
one starving job. This plugin's node filter keeps every other job of the target's
priority or lower off those nodes, in every action (allocate, backfill, and preempt,
which does not look for victims there for them); the target itself may go anywhere, and
a pod of higher priority is never held back by a reservation (it may even preempt on the
reserved nodes; the reservation then moves). The refusal is not resolvable by evicting
pods: ``node(s) were reserved for starving job default/big``.

It reads the session's reservation through its context, as it stands when asked (the
``elect`` action may change it at the start of a cycle).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.api.holds import Reservation
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import (
    NODE_FILTER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import BoolVector, TableView
from scheduler.framework.registry import NoArguments

NAME = "reservation"


class ReservationPlugin:
    name = NAME

    def __init__(self, arguments: NoArguments) -> None:
        del arguments
        self._context: PluginContext | None = None
        self._mask: tuple[Reservation, BoolVector, str] | None = None

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._context = context
        self._mask = None
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.row_filter)

    def close(self) -> None:
        self._context = None
        self._mask = None

    def _applies(self, task: TaskInfo) -> Reservation | None:
        """The reservation that keeps ``task`` off its nodes, if any."""
        r = self._context.reservation if self._context is not None else None
        if r is None or not r.nodes or task.job_id == r.job or task.priority > r.priority:
            return None
        return r

    def _rows(self, r: Reservation, table: TableView) -> tuple[BoolVector, str]:
        if self._mask is None or self._mask[0] is not r:
            rows: BoolVector = np.zeros(len(table.nodes), dtype=np.bool_)
            for name in r.nodes:
                row = table.row.get(name)
                if row is not None:
                    rows[row] = True
            self._mask = (r, rows, f"node(s) were reserved for starving job {r.job}")
        return self._mask[1], self._mask[2]

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> Sequence[Rejection]:
        del releasing
        r = self._applies(task)
        if r is None:
            return ()
        rows, reason = self._rows(r, table)
        return (Rejection(reason, rows, False),)

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        del releasing
        r = self._applies(task)
        if r is None:
            return True
        return not bool(self._rows(r, table)[0][row])
