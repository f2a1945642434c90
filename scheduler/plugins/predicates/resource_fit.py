"""The resource check: what a request needs, per column of the table (layer 2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.api.resource import Resource
from scheduler.framework.node_table import IndexVector, IntVector, TableView
from scheduler.plugins.predicates.kube_reasons import insufficient


@dataclass(frozen=True, slots=True)
class ResourceCheck:
    """What the resource check needs for one request: the columns it asks for."""

    cols: IndexVector
    need: IntVector
    reasons: tuple[str, ...]
    unknown: tuple[str, ...]  # requested names that no column holds: no node has them


class ResourceChecks:
    """:class:`ResourceCheck` per request, for one session's table (cached)."""

    def __init__(self) -> None:
        self._resources: dict[Resource, ResourceCheck] = {}

    def of(self, request: Resource, table: TableView) -> ResourceCheck:
        check = self._resources.get(request)
        return check if check is not None else self._resource_check(request, table)

    def _resource_check(self, request: Resource, table: TableView) -> ResourceCheck:
        names = sorted(name for name, amount in request.items() if amount > 0)
        known = [name for name in names if name in table.col]
        cols = np.array([table.col[name] for name in known], dtype=np.intp)
        need = np.array([request[name] for name in known], dtype=np.int64)
        unknown = tuple(name for name in names if name not in table.col)
        check = ResourceCheck(cols, need, tuple(insufficient(name) for name in known), unknown)
        self._resources[request] = check
        return check
