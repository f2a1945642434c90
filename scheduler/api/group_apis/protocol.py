"""The protocol every gang API implements, and what its methods are given (layer 0).

Four questions, one method (or two) each, answered the way that API's own project answers
them: **read** (an object to the domain's :class:`~scheduler.api.job.JobInfo` and
:class:`~scheduler.api.queue.QueueInfo`), **membership** (which pods belong: the data of
its :class:`~scheduler.api.group_apis.GroupApi` row, read by
:mod:`scheduler.api.membership`), **status** (the patch of its PodGroup and Queue status in
that API's own shape, and the events its scheduler records) and **queue** (where a group's
queue comes from). The cache calls the readers on each watch event; the status reporter
calls the writers after each cycle, with what the cycle said. Every method is a pure
function of its arguments: no I/O, no clock (the time comes in the report), and a bad
object raises :class:`~scheduler.api.errors.InvalidInputError` naming it and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.api.group_apis import GroupApi
from scheduler.api.group_apis.objects import Converted
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.queue import QueueInfo, QueueShare
from scheduler.api.queue_tree import QueueTree
from scheduler.api.reasons import Reason
from scheduler.api.task import TaskInfo

__all__ = [
    "GroupApiProtocol",
    "GroupEvent",
    "GroupReport",
    "GroupStatus",
    "LooseReport",
    "QueueReport",
    "Shown",
    "ShownQueue",
]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GroupReport:
    """What a cycle says of one gang with a PodGroup: why it is not placed (``reason``,
    None when there is nothing to say; ``error`` when that is a scheduler error), when
    (``now``, RFC 3339), the PodGroup's status as last seen (``observed``), the node set
    it was placed in this cycle (``placed_in``) and what starvation protection holds for
    it (``reserved``)."""

    job: JobInfo
    reason: Reason | None
    now: str
    observed: Obj
    error: bool = False
    placed_in: str = ""
    reserved: str = ""

    @property
    def message(self) -> str | None:
        """What ``reason`` says (None when there is none)."""
        return self.reason.message if self.reason is not None else None


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """An event on a PodGroup, as that API's scheduler records it."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A PodGroup's status to write, the phase Sluice acts on from now, and the events to
    record when that status is written (a status not written records none)."""

    status: dict[str, Any]
    phase: PodGroupPhase
    events: tuple[GroupEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class LooseReport:
    """A group whose pods are scheduled alone (its read gave no gang): its members' tasks,
    why those not placed wait (by task uid), when, its status as last seen."""

    tasks: Sequence[TaskInfo]
    reasons: Mapping[str, str]
    now: str
    observed: Obj
    error: bool = False


@dataclass(frozen=True, slots=True)
class QueueReport:
    """What a cycle says of one queue: its state, the jobs it holds (its leaves' for a
    parent; every job for the root of the tree), the phase each PodGroup was given this
    cycle, why the scheduler keeps it closed (``closed``, None when it does not), its
    share, and its status as last seen."""

    name: str
    state: str
    jobs: Sequence[JobInfo]
    phases: Mapping[str, PodGroupPhase]
    observed: Obj
    closed: str | None = None
    share: QueueShare | None = None

    @staticmethod
    def of(
        name: str,
        tree: QueueTree,
        *,
        state: str,
        jobs: Mapping[str, Sequence[JobInfo]],
        phases: Mapping[str, PodGroupPhase],
        observed: Obj | None = None,
        share: QueueShare | None = None,
    ) -> QueueReport:
        """The report of queue ``name`` of ``tree``, given every queue's own jobs
        (``jobs``, by queue name): a parent holds its leaves' jobs, a queue the scheduler
        keeps closed its own only."""
        closed = tree.closed.get(name)
        leaves = [name] if closed is not None else tree.leaves(name)
        held = [j for leaf in leaves for j in jobs.get(leaf, ())]
        return QueueReport(name, state, held, phases, observed or {}, closed, share)


@dataclass(frozen=True, slots=True)
class Shown:
    """A PodGroup object as ``kubectl sluice jobs`` shows it: its queue, its minimum, its
    phase, and why it waits (its condition's message; "" when it says nothing)."""

    queue: str
    minimum: int
    phase: str
    waiting: str


@dataclass(frozen=True, slots=True)
class ShownQueue:
    """A Queue object as ``kubectl sluice queues`` shows it: its parent ("" for a
    top-level queue), whether it is the root of the tree (whose children are the
    top-level queues), its guarantee (a resource list, None when it has none)."""

    parent: str
    root: bool
    guarantee: Mapping[str, Any] | None


class GroupApiProtocol(Protocol):
    """One API of gangs. Implemented once per API (a module of this package), held in
    :mod:`scheduler.api.group_apis.table`."""

    @property
    def api(self) -> GroupApi:
        """Its row: kinds, job-id prefix, how a pod names a group."""
        ...

    def read_group(
        self, obj: Obj, priority_classes: Mapping[str, int], /
    ) -> Converted[JobInfo | None]:
        """The gang of PodGroup ``obj`` (None: its pods are scheduled alone), and what of it
        is not honoured. Called by the cache on each event of the object and when a
        PriorityClass changes."""
        ...

    def read_queue(self, obj: Obj, /) -> Converted[QueueInfo | None]:
        """The queue of Queue ``obj`` (None: not a queue of its own, such as the root of
        the tree). Only called for APIs with a ``queue_kind``."""
        ...

    def queue_of(self, obj: Obj, /) -> str:
        """The queue PodGroup ``obj`` names (its own field, or the label
        ``scheduling.sluice.dev/queue`` for an API without queues)."""
        ...

    def group_status(self, report: GroupReport, /) -> GroupStatus:
        """The status of the gang's PodGroup after a cycle. The reporter writes it only
        when it differs from what was last written."""
        ...

    def loose_status(self, report: LooseReport, /) -> dict[str, Any]:
        """The status of a group whose pods are scheduled alone ({} to write nothing)."""
        ...

    def queue_status(self, report: QueueReport, /) -> dict[str, Any]:
        """The status of a Queue of this API (a JSON merge patch's content; keys it had and
        this has not are removed by the reporter)."""
        ...

    def shown(self, obj: Obj, /) -> Shown:
        """What ``kubectl sluice jobs`` prints of PodGroup ``obj`` (read without the
        cluster's PriorityClasses: never raises)."""
        ...

    def shown_queue(self, obj: Obj, /) -> ShownQueue:
        """Where ``kubectl sluice queues`` draws Queue ``obj`` (an API with queues)."""
        ...
