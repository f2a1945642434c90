"""A plugin that raises on purpose, for the tests of the error boundary (issue 9 point 3,
issue 24 point 2).

``faulty`` registers one hook, at the extension point named ``point`` (any declared one,
or ``open`` to raise while the session opens), that raises ``Boom`` when what it is asked
about is *bad*: a pod whose name starts with ``podPrefix``, a job with such a pod or whose
own name starts with it, a queue whose name starts with it; a point asked about nothing
(``enqueueRoom``) raises when the session has such a job. Otherwise it gives the answer
that changes nothing (no rejection, no key, success, abstain, all candidates...), so every
other pod of the cycle shows whether it was scheduled as usual. :data:`FIRED` counts the
faults raised per point, so a test can tell that the fault really was injected.
``register(registry)`` adds the plugin, as an out-of-tree plugin module does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler.api.job import JobInfo
from scheduler.api.queue import QueueInfo
from scheduler.api.task import TaskInfo
from scheduler.framework.extension_points import POINTS, HookSet, PluginContext, Point, Vote
from scheduler.framework.plugin_status import SUCCESS
from scheduler.framework.registry import PluginSpec, Registry

FIRED: Counter[str] = Counter()
"""Faults raised so far, by point name (tests clear it)."""


def _empty(*_: Any) -> Any:
    return ()


def _candidates(subject: Any, candidates: Any) -> Any:
    return list(candidates)


def _zeros(task: Any, table: Any, rows: Any, releasing: bool = False) -> Any:
    return np.zeros((len(rows), len(table.columns)), dtype=np.int64)


def _scores(task: Any, table: Any, rows: Any) -> Any:
    return np.zeros(len(rows), dtype=np.float64)


NEUTRAL: dict[str, Callable[..., Any]] = {
    "jobOrder": _empty,
    "taskOrder": _empty,
    "queueOrder": _empty,
    "jobValid": lambda *_: SUCCESS,
    "jobReady": lambda *_: SUCCESS,
    "jobPipelined": lambda *_: SUCCESS,
    "jobStarving": lambda *_: True,
    "jobEnqueueable": lambda *_: Vote.ABSTAIN,
    "enqueueRoom": lambda *_: None,
    "filter": _empty,
    "rowFilter": lambda *_: True,
    "shortfall": _zeros,
    "score": _scores,
    "queueAllocatable": lambda *_: True,
    "queueBorrowable": lambda *_: True,
    "queueReclaims": lambda *_: True,
    "queueOverused": lambda *_: False,
    "queueShare": lambda *_: None,
    "preemptable": _candidates,
    "reclaimable": _candidates,
    "onEnqueue": lambda *_: None,
    "onPlace": lambda *_: None,
    "onUnplace": lambda *_: None,
    "bindAnnotations": lambda *_: {},
    "bindClaims": _empty,
    "bindVolumes": lambda *_: None,
    "subsetNodes": lambda *_: None,
    "gangVictimSelector": lambda *_: None,
}
"""The answer of each extension point that changes nothing."""

POINT_NAMES = ("open", *(p.name for p in POINTS))


@dataclass(frozen=True, slots=True)
class FaultyArguments:
    point: str = "filter"
    podPrefix: str = "bad"

    def __post_init__(self) -> None:
        if self.point not in POINT_NAMES:
            raise ValueError(f"point must be one of {', '.join(POINT_NAMES)}")


class Boom(RuntimeError):
    pass


class FaultyPlugin:
    name = "faulty"

    def __init__(self, arguments: FaultyArguments) -> None:
        self.args = arguments
        self._bad_job = False

    def _bad(self, subject: object) -> bool:
        prefix = self.args.podPrefix
        if isinstance(subject, TaskInfo):
            return subject.name.startswith(prefix)
        if isinstance(subject, JobInfo):
            return subject.name.startswith(prefix) or any(
                t.name.startswith(prefix) for t in subject.tasks.values()
            )
        if isinstance(subject, QueueInfo):
            return subject.name.startswith(prefix)
        if isinstance(subject, list | tuple) and subject and isinstance(subject[0], TaskInfo):
            return subject[0].name.startswith(prefix)  # reclaimable: the reclaimers
        return False

    def _hook(self, point: Point[Any, Any]) -> Callable[..., Any]:
        neutral = NEUTRAL[point.name]

        def hook(*args: Any) -> Any:
            # What the point is asked about: a task, a job or a queue, wherever it comes in
            # the arguments (queueAllocatable asks of a queue for a task: either may be bad).
            if (not args and self._bad_job) or any(self._bad(a) for a in args[:2]):
                FIRED[point.name] += 1
                raise Boom(f"boom in {point.name}")
            return neutral(*args)

        return hook

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._bad_job = any(self._bad(job) for job in context.jobs.values())
        if self.args.point == "open":
            FIRED["open"] += 1
            raise Boom("boom in open")
        point = next(p for p in POINTS if p.name == self.args.point)
        hooks.add(point, self._hook(point))

    def close(self) -> None:
        pass


def register(registry: Registry) -> None:
    """Add ``faulty`` to ``registry`` (the entry of an out-of-tree plugin module)."""
    registry.add_plugin(PluginSpec("faulty", FaultyPlugin, FaultyArguments))
