"""Fakes of the ports (scheduler.ports) for tests that drive the loop or the executor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from scheduler.api.errors import AmbiguousError, ApiError
from scheduler.ports import Event, ObjectRef, PodState


@dataclass
class FakeCluster:
    """Binder, Evictor, StatusWriter and EventRecorder in one, recording every call.

    ``calls`` holds ``(call, pod name, payload)`` in the order the calls were made (when
    they start), ``landed`` those that succeeded in the order they returned.
    ``fail[(call, name)]`` is a list of exceptions raised by the next calls of that kind
    on that pod, one each; ``always[(call, name)]`` is raised by every call.
    ``latency[call]`` is slept on the virtual clock before each call of that kind, and
    ``slow[(call, name)]`` before each call of that kind on that pod.
    ``lose[(call, name)]`` is a list of AmbiguousErrors raised by the next calls of that
    kind on that pod *after* they landed (a lost reply). ``pods[name]`` is what
    :meth:`read_pod` answers for that pod, one answer per read (the last one repeats): a
    PodState, None (gone) or an ApiError to raise; reads are recorded in ``calls`` as
    ``("read", name, None)``.
    """

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    landed: list[tuple[str, str, Any]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    fail: dict[tuple[str, str], list[ApiError]] = field(default_factory=dict)
    always: dict[tuple[str, str], ApiError] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    slow: dict[tuple[str, str], float] = field(default_factory=dict)
    lose: dict[tuple[str, str], list[AmbiguousError]] = field(default_factory=dict)
    pods: dict[str, list[PodState | ApiError | None]] = field(default_factory=dict)
    running: int = 0
    most_running: int = 0

    async def _call(self, call: str, ref: ObjectRef, payload: Any) -> None:
        self.calls.append((call, ref.name, payload))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            delay = self.slow.get((call, ref.name), self.latency.get(call, 0.0))
            if delay:
                await anyio.sleep(delay)
            if (call, ref.name) in self.always:
                raise self.always[(call, ref.name)]
            pending = self.fail.get((call, ref.name))
            if pending:
                raise pending.pop(0)
            self.landed.append((call, ref.name, payload))
            lost = self.lose.get((call, ref.name))
            if lost:
                raise lost.pop(0)
        finally:
            self.running -= 1

    async def bind(self, pod: ObjectRef, node: str, annotations: Mapping[str, str]) -> None:
        await self._call("bind", pod, node)

    async def evict(self, pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        await self._call("evict", pod, grace_period_seconds)

    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        await self._call("patch", pod, dict(patch))

    async def patch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], *, resource_version: str = ""
    ) -> str:
        await self._call("patch_status", ref, dict(status))
        return resource_version

    async def read_pod(self, pod: ObjectRef) -> PodState | None:
        self.calls.append(("read", pod.name, None))
        answers = self.pods.get(pod.name) or [PodState("", False)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def record(self, event: Event) -> None:
        self.events.append(event)

    def of(self, name: str) -> list[tuple[str, Any]]:
        return [(c, p) for c, n, p in self.calls if n == name]


class RecordingDispatcher:
    """An ApiDispatcher that records the calls submitted (never made) and hands events to
    ``events``."""

    def __init__(self, events: Any = None) -> None:
        self.calls: list[Any] = []
        self.events = events

    @property
    def labels(self) -> list[str]:
        """The keys of the calls submitted (``Pod/default/p``, ``PodGroup/default/g``)."""
        return [c.key for c in self.calls]

    def submit(self, call: Any, on_done: Any = None) -> None:
        self.calls.append(call)

    def record(self, event: Event) -> None:
        if self.events is not None:
            self.events.record(event)
