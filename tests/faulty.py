"""A plugin that raises on purpose, for the tests of the error boundary (issue 9 point 3).

``faulty`` raises ``RuntimeError("boom")`` from one extension point, for pods whose name
starts with ``podPrefix`` only, so that every other pod of the cycle shows whether it was
scheduled as usual. ``register(registry)`` adds it, as an out-of-tree plugin module does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduler.api.job import JobInfo
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import (
    BIND_ANNOTATIONS,
    JOB_ORDER,
    JOB_READY,
    JOB_VALID,
    NODE_FILTER,
    SUBSET_NODES,
    HookSet,
    OrderKey,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets
from scheduler.framework.node_table import TableView
from scheduler.framework.registry import PluginSpec, Registry
from scheduler.framework.status import SUCCESS, Status

POINTS = (
    "filter",
    "onPlace",
    "onUnplace",
    "jobReady",
    "jobValid",
    "bindAnnotations",
    "jobOrder",
    "open",
    "subsetNodes",
)


@dataclass(frozen=True, slots=True)
class FaultyArguments:
    point: str = "filter"
    podPrefix: str = "bad"

    def __post_init__(self) -> None:
        if self.point not in POINTS:
            raise ValueError(f"point must be one of {', '.join(POINTS)}")


class Boom(RuntimeError):
    pass


class FaultyPlugin:
    name = "faulty"

    def __init__(self, arguments: FaultyArguments) -> None:
        self.args = arguments

    def _bad_task(self, task: TaskInfo) -> bool:
        return task.name.startswith(self.args.podPrefix)

    def _bad_job(self, job: JobInfo) -> bool:
        return any(self._bad_task(t) for t in job.tasks.values())

    def _raise(self, what: str) -> None:
        raise Boom(f"boom in {what}")

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        del context
        point = self.args.point
        if point == "open":
            self._raise("open")
        if point == "filter":
            hooks.add(NODE_FILTER, self.filter)
        if point in ("onPlace", "onUnplace"):
            hooks.add_placement_handlers(self.on_place, self.on_unplace)
        if point == "jobReady":
            hooks.add(JOB_READY, self.job_status)
        if point == "jobValid":
            hooks.add(JOB_VALID, self.job_status)
        if point == "bindAnnotations":
            hooks.add(BIND_ANNOTATIONS, self.annotations)
        if point == "jobOrder":
            hooks.add(JOB_ORDER, self.job_key)
        if point == "subsetNodes":
            hooks.add(SUBSET_NODES, self.subset)

    def close(self) -> None:
        pass

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> Sequence[Rejection]:
        if self._bad_task(task):
            self._raise("filter")
        return ()

    def on_place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if self.args.point == "onPlace" and self._bad_task(task):
            self._raise("onPlace")

    def on_unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if self.args.point == "onUnplace" and self._bad_task(task):
            self._raise("onUnplace")

    def job_status(self, job: JobInfo, /) -> Status:
        if self._bad_job(job):
            self._raise(self.args.point)
        return SUCCESS

    def annotations(self, task: TaskInfo, node: NodeInfo, /) -> Mapping[str, str]:
        if self._bad_task(task):
            self._raise("bindAnnotations")
        return {}

    def subset(
        self, job: JobInfo, tasks: Sequence[TaskInfo], nodes: NodeSet, purpose: Purpose, /
    ) -> Subsets | None:
        if self._bad_job(job):
            self._raise("subsetNodes")
        return None

    def job_key(self, job: JobInfo, /) -> OrderKey:
        if self._bad_job(job):
            self._raise("jobOrder")
        return ()


def register(registry: Registry) -> None:
    """Add ``faulty`` to ``registry`` (the entry of an out-of-tree plugin module)."""
    registry.add_plugin(PluginSpec("faulty", FaultyPlugin, FaultyArguments))
