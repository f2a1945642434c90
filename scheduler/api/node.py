"""NodeInfo: a node and the tasks on it (layer 0).

Accounting, all exact integers:

- ``allocatable``: what the node offers;
- ``used``: the sum of the requests of tasks in USES_NODE statuses;
- ``releasing``: the part of ``used`` held by tasks being evicted (RELEASING);
- ``nominated``: the requests of PIPELINED tasks, waiting for room on this node;
- ``idle = allocatable - used``; ``future_idle = idle + releasing - nominated``;
- ``nonzero_pad``: what kube's scores add to ``used`` for containers that name no CPU or
  memory request (100m, 200Mi each): ``used + nonzero_pad`` is kube's *non-zero
  requested* (:mod:`scheduler.api.pod_resources`).

:meth:`add_task` with ``strict=True`` refuses to over-allocate (the session's decisions);
the cache adds what the cluster reports with ``strict=False``, because reality may be
over-committed by others and must still be mirrored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.errors import AllocationError
from scheduler.api.pod import Taint
from scheduler.api.resource import ZERO, Resource
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import USES_NODE


@dataclass(slots=True)
class NodeInfo:
    name: str
    allocatable: Resource
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    used: Resource = ZERO
    releasing: Resource = ZERO
    nominated: Resource = ZERO
    nonzero_pad: Resource = ZERO
    """The ``spec.nonzero_pad`` of the tasks counted in ``used``, summed."""
    tasks: dict[str, TaskInfo] = field(default_factory=dict)
    """Tasks on (or nominated to) this node, by uid."""
    held: dict[str, TaskStatus] = field(default_factory=dict)
    """The status each task had when added: what :meth:`remove_task` undoes."""
    capped: tuple[str, ...] = ()
    """Resources whose allocatable was above what the node table holds, capped to
    :data:`~scheduler.api.resource.MAX_AMOUNT` (the converter's doing; told once)."""

    @property
    def idle(self) -> Resource:
        return self.allocatable - self.used

    @property
    def future_idle(self) -> Resource:
        return self.allocatable - self.used + self.releasing - self.nominated

    def add_task(self, task: TaskInfo, *, strict: bool = False) -> None:
        """Account ``task`` (in its current status) on this node.

        Called by the cache (strict=False) and by the session (strict=True).
        Raises AllocationError if the task is already here, or if ``strict`` and an
        occupying task does not fit in ``idle``.
        """
        if task.uid in self.tasks:
            raise AllocationError(f"{task.key} is already on node {self.name}")
        req = task.request
        if task.status is TaskStatus.PIPELINED:
            self.nominated = self.nominated + req
        elif task.status in USES_NODE:
            if strict and not req.fits_in(self.idle):
                raise AllocationError(
                    f"{task.key} does not fit on node {self.name}: "
                    f"insufficient {', '.join(req.insufficient(self.idle))}"
                )
            self.used = self.used + req
            pad = task.spec.nonzero_pad
            if pad:
                self.nonzero_pad = self.nonzero_pad + pad
            if task.status is TaskStatus.RELEASING:
                self.releasing = self.releasing + req
        self.tasks[task.uid] = task
        self.held[task.uid] = task.status

    def remove_task(self, task: TaskInfo) -> None:
        """Undo :meth:`add_task` for ``task`` in the status it had when added."""
        held = self.tasks.pop(task.uid, None)
        if held is None:
            raise AllocationError(f"{task.key} is not on node {self.name}")
        status = self.held.pop(task.uid, held.status)
        req = held.request
        if status is TaskStatus.PIPELINED:
            self.nominated = self.nominated - req
        elif status in USES_NODE:
            self.used = self.used - req
            pad = held.spec.nonzero_pad
            if pad:
                self.nonzero_pad = self.nonzero_pad - pad
            if status is TaskStatus.RELEASING:
                self.releasing = self.releasing - req

    def clone(self, tasks: Mapping[str, TaskInfo] | None = None) -> NodeInfo:
        """A copy with its own task map. ``tasks`` maps uid to the clones to use."""
        own = {uid: tasks[uid] for uid in self.tasks} if tasks is not None else dict(self.tasks)
        return NodeInfo(
            self.name,
            self.allocatable,
            self.labels,
            self.taints,
            self.unschedulable,
            self.ready,
            self.used,
            self.releasing,
            self.nominated,
            self.nonzero_pad,
            own,
            dict(self.held),
        )

    def __repr__(self) -> str:
        return f"Node({self.name} used={self.used!r} of {self.allocatable!r})"
