"""What most gang APIs answer alike, for their modules to inherit (layer 0).

:class:`GroupApiBase` implements :class:`~scheduler.api.group_apis.protocol.
GroupApiProtocol` for an API without queues whose PodGroups are all gangs, shown by
``minMember``, ``status.phase`` and an ``Unschedulable`` condition; an API's module
overrides what its API does otherwise. :func:`spec_queue` is the queue of an API whose
PodGroup names one in ``spec.queue``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.api import labels as L
from scheduler.api.errors import InvariantError
from scheduler.api.group_apis import GroupApi
from scheduler.api.group_apis.objects import Converted, condition_message, labelled_queue
from scheduler.api.group_apis.protocol import LooseReport, QueueReport, Shown, ShownQueue
from scheduler.api.queue import QueueInfo

__all__ = ["GroupApiBase", "spec_queue"]

Obj = Mapping[str, Any]


def spec_queue(obj: Obj) -> str:
    """The queue a PodGroup names in ``spec.queue``, else ``default``."""
    return str((obj.get("spec") or {}).get("queue") or L.DEFAULT_QUEUE)


class GroupApiBase:
    """Defaults of the protocol: no queues (the queue is the PodGroup's label), every
    PodGroup a gang, shown by its ``minMember``, phase and ``Unschedulable`` condition.
    A subclass sets ``api`` and defines ``read_group`` and ``group_status``."""

    api: GroupApi

    def read_queue(self, obj: Obj, /) -> Converted[QueueInfo | None]:
        raise InvariantError(f"{self.api.title} has no queues")

    def queue_of(self, obj: Obj, /) -> str:
        return labelled_queue(obj)

    def loose_status(self, report: LooseReport, /) -> dict[str, Any]:
        del report
        return {}  # every PodGroup of the API is a gang: none is written

    def queue_status(self, report: QueueReport, /) -> dict[str, Any]:
        raise InvariantError(f"{self.api.title} has no queues")

    def shown(self, obj: Obj, /) -> Shown:
        status = obj.get("status") or {}
        return Shown(
            self.queue_of(obj),
            int((obj.get("spec") or {}).get("minMember") or 1),
            str(status.get("phase") or "Pending"),
            condition_message(status, "Unschedulable", "True"),
        )

    def shown_queue(self, obj: Obj, /) -> ShownQueue:
        raise InvariantError(f"{self.api.title} has no queues")
