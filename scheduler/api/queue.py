"""QueueInfo: a queue of jobs with its share of the cluster (layer 0).

Limits (``capability``, ``deserved``) are plain maps of resource name to canonical amount
and keep explicit zeros: ``capability: {cpu: "0"}`` closes the queue for CPU, where a
missing name means unbounded. :class:`QueueShare` is what the fair-share plugin says of a
queue in a cycle, for ordering, reclaim and status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.resource import ZERO, Resource


@dataclass(slots=True)
class QueueInfo:
    """A Queue. ``capability`` None means unbounded (and a resource it does not name is
    unbounded too); ``deserved`` None means by weight. ``parent`` "" is the root."""

    name: str
    weight: int = 1
    capability: Mapping[str, int] | None = None
    deserved: Mapping[str, int] | None = None
    guarantee: Resource = ZERO
    reclaimable: bool = True
    priority: int = 0
    parent: str = ""
    state: str = "Open"
    uid: str = ""
    conditions: tuple[tuple[str, str, str, str], ...] = field(default=())
    """The Queue's status conditions as last seen: (type, status, reason, message)."""

    def clone(self) -> QueueInfo:
        return QueueInfo(
            self.name,
            self.weight,
            self.capability,
            self.deserved,
            self.guarantee,
            self.reclaimable,
            self.priority,
            self.parent,
            self.state,
            self.uid,
            self.conditions,
        )


@dataclass(frozen=True, slots=True)
class QueueShare:
    """A queue's fair share in one cycle: what it ``deserved`` (water-filled down the
    hierarchy) and has ``allocated`` (placed or nominated), and ``share``, the largest
    ratio of allocated to deserved over its resources (inf when it holds what it does not
    deserve at all). Below 1: it may reclaim; above 1: it holds room that can be
    reclaimed."""

    deserved: Resource
    allocated: Resource
    share: float
