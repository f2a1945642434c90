"""Extended resources served by DRA (KEP-5004) as the dra plugin sees them in one session:
which extended resources a pod asks that a DeviceClass serves, which of them each node
serves through DRA, and the claim of its own a pod gets on such a node. Memoized per
session; made by :class:`~scheduler.plugins.dra.DraPlugin` when the cluster has DRA
objects, dropped when it closes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from scheduler.api.dra.extended import plan as extended_plan
from scheduler.api.dra.model import EXTENDED_SESSION_NAME, ClaimInfo, ExtendedClaim
from scheduler.api.dra.view import DraView
from scheduler.api.task import TaskInfo
from scheduler.framework.node_table import TableView
from scheduler.plugins.dra_device_counts import BoolVector


class ExtendedClaims:
    """The extended-resource side of one session's DRA view and node table."""

    def __init__(self, view: DraView, table: TableView) -> None:
        self._view = view
        self._table = table
        self._asks: dict[str, Mapping[str, str]] = {}
        """Task uid -> the extended resources it asks that a class serves."""
        self._claims: dict[tuple[str, tuple[str, ...]], tuple[ClaimInfo, ExtendedClaim]] = {}
        """(task uid, served resources) -> its extended-resource claim for such nodes."""
        self._rows: dict[tuple[str, ...], list[tuple[BoolVector, tuple[str, ...]]]] = {}
        """Resources asked -> the rows by the subset of them they serve through DRA."""

    def asks(self, task: TaskInfo) -> Mapping[str, str]:
        """The extended resources ``task`` asks that a DeviceClass serves (resource ->
        class)."""
        found = self._asks.get(task.uid)
        if found is None:
            classes = self._view.inventory.resource_classes()
            found = {r: classes[r] for r in sorted(task.request) if r in classes}
            self._asks[task.uid] = found
        return found

    def claim(self, task: TaskInfo, served: tuple[str, ...]) -> ClaimInfo:
        """``task``'s extended-resource claim on a node serving ``served`` through DRA."""
        return self._made(task, served)[0]

    def to_create(self, task: TaskInfo, served: tuple[str, ...]) -> ExtendedClaim:
        """What creating that claim in the API takes (handed on at bind time)."""
        return self._made(task, served)[1]

    def _made(self, task: TaskInfo, served: tuple[str, ...]) -> tuple[ClaimInfo, ExtendedClaim]:
        found = self._claims.get((task.uid, served))
        if found is None:
            asks = self.asks(task)
            made = extended_plan(task.spec.containers, {r: asks[r] for r in served})
            claim = ClaimInfo(
                task.namespace,
                EXTENDED_SESSION_NAME,
                "",
                requests=made.requests,
                owner_pod=task.uid,
                extended=True,
            )
            found = self._claims[(task.uid, served)] = (claim, made)
        return found

    def served(self, asks: Mapping[str, str], node: str) -> tuple[str, ...]:
        """Which of ``asks`` node ``node`` serves through DRA."""
        there = self._view.extended.get(node)
        return tuple(r for r in asks if r in there) if there else ()

    def served_rows(self, asks: Mapping[str, str]) -> list[tuple[BoolVector, tuple[str, ...]]]:
        """The table's rows grouped by which of ``asks`` they serve through DRA."""
        key = tuple(asks)
        found = self._rows.get(key)
        if found is None:
            groups: dict[tuple[str, ...], list[int]] = {}
            for row, node in enumerate(self._table.nodes):
                groups.setdefault(self.served(asks, node.name), []).append(row)
            found = []
            for served, rows in groups.items():
                mask = np.zeros(len(self._table), dtype=np.bool_)
                mask[rows] = True
                found.append((mask, served))
            self._rows[key] = found
        return found
