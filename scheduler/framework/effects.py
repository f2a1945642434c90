"""Effects: what a committed decision asks the cluster to do (layer 1).

Statements produce them on commit; the loop hands them to the backends. They carry the
session's TaskInfo so the cache can assume them without looking anything up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskInfo


@dataclass(frozen=True, slots=True)
class Bind:
    task: TaskInfo
    node: str
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Evict:
    task: TaskInfo
    node: str
    reason: str
    preemptor: TaskInfo | None = None


@dataclass(frozen=True, slots=True)
class Nominate:
    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class ClearNomination:
    """A nominated task no longer fits its node: withdraw the nomination."""

    task: TaskInfo
    node: str


@dataclass(frozen=True, slots=True)
class SetPhase:
    job: JobInfo
    phase: PodGroupPhase


Effect = Bind | Evict | Nominate | ClearNomination | SetPhase
