"""The ``overcommit`` plugin (layer 2): admit gangs against the cluster times a factor.

Volcano's ``overcommit`` plugin, counted as its ``pkg/scheduler/plugins/overcommit`` counts
(read at the commit named in tests/conformance/README.md). It measures the room the
``enqueue`` action admits PodGroups into (``ENQUEUE_ROOM``), in place of the action's own
measure (the idle resources of ready nodes):

    room = allocatable of every node x ``overcommitFactor`` - used - inqueue

* *allocatable*: of every node of the snapshot, cordoned and not-ready ones too (Volcano's
  cache counts every Node it has);
* *used*: what the pods on the nodes request, of every scheduler, those being evicted
  included and nominated ones not (``node.used``);
* *inqueue*: what admitted gangs still reserve: for an ``Inqueue`` PodGroup, its whole
  ``minResources`` (the pods it already placed count in *used* too, as in Volcano); for a
  ``Running`` one with at least ``minMember`` pods placed, the part of its
  ``minResources`` its placed pods do not cover, in ``cpu``, ``memory``, ``pods`` and
  extended resources only (Volcano's ``GetInqueueResource``); each less what its pods
  held by scheduling gates request (``DeductSchGatedResources``: a gated pod reserves
  nothing), Volcano's own queue-allocation gate excepted.

A gang is admitted when its ``minResources`` fits the room in every resource it names;
each gang admitted takes its ``minResources`` off the room. A PodGroup without
``minResources`` is always admitted. The plugin's other answers are the other plugins'
(``proportion`` still checks the queue's limits).

Where it differs from Volcano: an ``overcommitFactor`` below 1 is refused when the
configuration loads (Volcano logs a warning and uses 1.2 instead); resources are integers
(milli-CPU, bytes), and allocatable times the factor is rounded down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.resource import CPU, MEMORY, PODS, Resource, ResourceSum
from scheduler.api.task import TaskStatus
from scheduler.api.task_states import HOLDS_ROOM
from scheduler.framework.extension_points import (
    ENQUEUE_ROOM,
    AdmissionRoom,
    HookSet,
    PluginContext,
)

NAME: Final = "overcommit"
VOLCANO_QUEUE_GATE: Final = "scheduling.volcano.sh/queue-allocation-gate"
"""Volcano's own scheduling gate, which Volcano counts in ``inqueue`` all the same."""


@dataclass(frozen=True, slots=True)
class OvercommitArguments:
    """The arguments of ``overcommit``; field names are the YAML keys (Volcano's
    ``overcommit-factor`` is converted to ``overcommitFactor``)."""

    overcommitFactor: float = 1.2
    """How many times the cluster's allocatable gangs may be admitted against (>= 1)."""

    def __post_init__(self) -> None:
        if not self.overcommitFactor >= 1.0:  # NaN too
            raise ValueError(f"overcommitFactor must be 1 or more, got {self.overcommitFactor}")


def reserved_by_running(min_resources: Resource, placed: Resource) -> Resource:
    """What a Running gang still reserves of its ``min_resources`` once ``placed`` is
    placed: the uncovered part, in ``cpu``, ``memory``, ``pods`` and Kubernetes' scalar
    resources (extended, hugepages, attachable volumes) only, as Volcano's
    ``GetInqueueResource``; quota names (``count/...``, ``requests....``) and other native
    resources (``ephemeral-storage``) reserve nothing."""
    return Resource(
        {
            name: amount - placed[name]
            for name, amount in min_resources.items()
            if _reservable(name) and amount > placed[name]
        }
    )


def _reservable(name: str) -> bool:
    if name in (CPU, MEMORY, PODS):
        return True
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    return "/" in name and not name.startswith(("count/", "requests."))


def less_gated(job: JobInfo, reserved: Resource) -> Resource:
    """``reserved`` less what ``job``'s gated pods request, never below zero per resource
    (Volcano's ``DeductSchGatedResources``; a pod held only by Volcano's own queue gate is
    not deducted)."""
    gated = ResourceSum()
    for t in job.tasks.values():
        if t.status is TaskStatus.GATED and t.scheduling_gates != (VOLCANO_QUEUE_GATE,):
            gated.add(t.request)
    held = gated.result()
    if held.is_zero():
        return reserved
    return Resource({name: max(n - held[name], 0) for name, n in reserved.items()})


def inqueue(job: JobInfo) -> Resource:
    """What ``job`` reserves in the room (see the module's docstring); zero for a job
    without a PodGroup or ``minResources``."""
    if not job.has_pod_group or job.min_resources.is_zero():
        return Resource()
    if job.phase is PodGroupPhase.INQUEUE:
        return less_gated(job, job.min_resources)
    if job.phase is PodGroupPhase.RUNNING:
        placed = [t for t in job.tasks.values() if t.status in HOLDS_ROOM]
        if len(placed) >= job.min_member:
            total = ResourceSum()
            for t in placed:
                total.add(t.request)
            return less_gated(job, reserved_by_running(job.min_resources, total.result()))
    return Resource()


def overcommitted(allocatable: Mapping[str, int], factor: float) -> Resource:
    """``allocatable`` times ``factor``, each amount rounded down (the factor read as the
    decimal it was written as: 1.2 is 6/5, not the nearest binary fraction)."""
    exact = Fraction(repr(factor))
    return Resource({name: int(n * exact) for name, n in allocatable.items()})


class OvercommitPlugin:
    name = NAME

    def __init__(self, arguments: OvercommitArguments) -> None:
        self.factor = arguments.overcommitFactor
        self._room: AdmissionRoom | None = None

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        allocatable = ResourceSum()
        used = ResourceSum()
        for node in context.nodes.values():
            allocatable.add(node.allocatable)
            used.add(node.used)
        reserved = ResourceSum()
        for job in context.jobs.values():
            reserved.add(inqueue(job))
        room = overcommitted(allocatable.result(), self.factor) - used.result()
        self._room = AdmissionRoom(
            room - reserved.result(),
            f"the cluster's allocatable times the overcommit factor {self.factor:g}, less "
            "what is used and what admitted gangs reserve",
        )
        hooks.add(ENQUEUE_ROOM, self.room)

    def room(self) -> AdmissionRoom | None:
        return self._room

    def close(self) -> None:
        self._room = None
