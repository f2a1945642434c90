"""The context plugins get from a session: a read-only handle on its table, nodes, jobs,
queues and the cycle's facts (:class:`~.extension_points.PluginContext`). Plugins never
see the session itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.api.cluster_snapshot import DisruptionBudget, TopologyInfo
from scheduler.api.dra.view import DraView
from scheduler.api.holds import Reservation
from scheduler.api.job import JobInfo
from scheduler.api.label_selectors import LabelSelector
from scheduler.api.node import NodeInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.node_table import TableView

if TYPE_CHECKING:
    from scheduler.framework.session import Session


@dataclass(frozen=True, slots=True)
class SessionContext:
    """The :class:`~.extension_points.PluginContext` of a session: what plugins read."""

    _session: Session

    @property
    def table(self) -> TableView:
        return self._session.table

    @property
    def nodes(self) -> Mapping[str, NodeInfo]:
        return self._session.nodes

    @property
    def jobs(self) -> Mapping[str, JobInfo]:
        return self._session.jobs

    @property
    def queues(self) -> Mapping[str, QueueInfo]:
        return self._session.queues

    @property
    def budgets(self) -> Sequence[DisruptionBudget]:
        return self._session.snapshot.budgets

    @property
    def topologies(self) -> Mapping[str, TopologyInfo]:
        return self._session.snapshot.topologies

    @property
    def now(self) -> float:
        return self._session.snapshot.now

    @property
    def reservation(self) -> Reservation | None:
        return self._session.reservation

    @property
    def dra(self) -> DraView | None:
        return self._session.snapshot.dra

    @property
    def volumes(self) -> VolumeView | None:
        return self._session.snapshot.volumes

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return self._session.snapshot.namespaces

    def spread_selector(self, task: TaskInfo) -> LabelSelector | None:
        return self._session.snapshot.spread_selectors.of(
            task.namespace, task.labels or {}, task.controller
        )

    @property
    def spread_selectors_known(self) -> bool:
        selectors = self._session.snapshot.spread_selectors
        return bool(selectors.services or selectors.controllers)
