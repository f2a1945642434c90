"""QueueInfo: a queue of jobs with its share of the cluster (layer 0)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api.resource import ZERO, Resource


@dataclass(slots=True)
class QueueInfo:
    """A Queue. ``capability`` None means unbounded; ``deserved`` None means by weight."""

    name: str
    weight: int = 1
    capability: Resource | None = None
    deserved: Resource | None = None
    guarantee: Resource = ZERO
    reclaimable: bool = True
    priority: int = 0
    parent: str = ""
    state: str = "Open"
    uid: str = ""

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
        )
