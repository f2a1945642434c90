"""The simulated kubelet of the embedded cluster (layer 4).

One :class:`SimKubelet` plays the kubelet of every node. It watches Pods in the
:class:`~scheduler.sim.store.ObjectStore` and moves them through their lifecycle on the
simulation clock:

* a bound pod (``spec.nodeName`` set, phase Pending, not terminating) becomes Running
  ``start_delay`` seconds later: phase Running, ``startTime``, conditions Initialized,
  Ready and ContainersReady True (one strategic status patch);
* a Running pod with the annotation ``sim.sluice.dev/run-for: <duration>`` becomes
  Succeeded that long after it started (Ready and ContainersReady False, reason
  PodCompleted);
* a terminating pod on a node is removed (``finalize_delete``) when its grace period,
  counted from the moment its deletion was seen, is over.

All timers live in one heap served by the task of :meth:`SimKubelet.run`; a timer is
cancelled as soon as the pod it is about changes so that it no longer applies (deleted,
finished, recreated), so :meth:`SimKubelet.pending` and :meth:`SimKubelet.next_due` tell
a simulation exactly what the kubelet still has to do. A failure while handling one pod
is logged and does not stop the kubelet.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from scheduler.api.errors import ApiError
from scheduler.ports import Clock
from scheduler.sim.api_conventions import parse_rfc3339, rfc3339
from scheduler.sim.durations import parse_duration
from scheduler.sim.store import ObjectStore, WatchEvent

__all__ = ["RUN_FOR_ANNOTATION", "SimKubelet"]

log = logging.getLogger(__name__)

#: How long a pod runs before it succeeds (a Go duration); without it, it runs forever.
RUN_FOR_ANNOTATION: Final[str] = "sim.sluice.dev/run-for"

_Action = Literal["start", "finish", "finalize"]
_EMPTY: Final[Mapping[str, Any]] = {}
_TERMINAL: Final[frozenset[str]] = frozenset({"Succeeded", "Failed"})
_CHECKPOINT_EVERY: Final[int] = 128


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(slots=True)
class _Timer:
    due: float
    seq: int
    action: _Action
    namespace: str
    name: str
    uid: str
    cancelled: bool = False


@dataclass(slots=True)
class _PodTimers:
    uid: str
    timers: dict[_Action, _Timer] = field(default_factory=dict)
    #: clock time at which this kubelet started the pod (exact; startTime is in seconds)
    started_at: float | None = None
    #: clock time at which the pod's deletion was first seen
    deleting_since: float | None = None


class SimKubelet:
    """Plays the kubelet of every node of the embedded cluster.

    ``start_delay`` is the time between a pod's binding and it running. The clock must
    be the one the running asyncio event loop measures (a VirtualClock under
    ``run_virtual``, or a SystemClock), because the timer task waits with loop timers.

    :meth:`run` is the one long-lived task; start it in a task group with
    ``await tg.start(kubelet.run)``, which returns once the kubelet has subscribed to the
    store and taken in the pods already there. Cancel the task group to stop it.
    """

    def __init__(self, store: ObjectStore, clock: Clock, *, start_delay: float = 0.0) -> None:
        if start_delay < 0:
            raise ValueError("start_delay must not be negative")
        self._store = store
        self._clock = clock
        self._start_delay = start_delay
        self._heap: list[tuple[float, int, _Timer]] = []  # (due, seq, timer)
        self._pods: dict[tuple[str, str], _PodTimers] = {}
        self._live = 0
        self._seq = 0
        self._waiter: asyncio.Future[None] | None = None
        self._bad_run_for: set[str] = set()

    # ----------------------------------------------------------------- queries

    def pending(self) -> int:
        """Timers not fired yet (0 means the kubelet has nothing left to do on its own)."""
        return self._live

    def next_due(self) -> float | None:
        """Clock time of the earliest pending timer, or None."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    # ----------------------------------------------------------------- the task

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the kubelet until cancelled. Reports started after the initial sync."""
        unsubscribe = self._store.subscribe(self._on_event, kinds=("Pod",))
        try:
            for pod in self._store.list("Pod")[0]:
                self._guarded(self._observe, pod, False)
            task_status.started()
            fired = 0
            while True:
                self._drop_cancelled()
                if not self._heap:
                    await self._wait(None)
                    continue
                due = self._heap[0][0]
                if due > self._clock.now():
                    await self._wait(due)
                    continue
                timer = heapq.heappop(self._heap)[2]
                self._forget(timer)
                self._guarded(self._fire, timer)
                fired += 1
                if fired % _CHECKPOINT_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
        finally:
            unsubscribe()

    async def _wait(self, due: float | None) -> None:
        """Sleep until clock time ``due`` (None: forever) or until an earlier timer is set.

        A bare asyncio future and loop timer: a cancel scope per wait would cost more than
        the rest of the kubelet's work in a 10,000-pod run. The timer is set at the
        absolute time ``due`` so that virtual time lands on it exactly.
        """
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        handle = loop.call_at(due, _wake, waiter) if due is not None else None
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
            if handle is not None:
                handle.cancel()

    # ----------------------------------------------------------------- events

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.type == "DELETED":
            meta = ev.obj["metadata"]
            self._guarded(self._drop_pod, (meta.get("namespace", ""), meta["name"]))
        elif ev.type in ("ADDED", "MODIFIED"):
            self._guarded(self._observe, ev.obj, True)

    def _observe(self, pod: Mapping[str, Any], live: bool) -> None:
        """Bring the timers of ``pod`` in line with its state. ``live``: seen as it happened
        (else found at start-up, so timestamps tell when things happened)."""
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        uid = meta.get("uid", "")
        state = self._pods.get(key)
        if state is not None and state.uid != uid:
            self._drop_pod(key)
            state = None
        spec = pod.get("spec") or _EMPTY
        status = pod.get("status") or _EMPTY
        node = spec.get("nodeName")
        phase = status.get("phase") or "Pending"
        now = self._clock.now()

        if meta.get("deletionTimestamp"):
            if state is not None:
                self._cancel(state, "start")
                self._cancel(state, "finish")
            grace = meta.get("deletionGracePeriodSeconds")
            if not node or not grace:
                return  # not on a node, or waiting for finalizers: not the kubelet's job
            if state is None:
                state = self._pods[key] = _PodTimers(uid)
            if state.deleting_since is None:
                if live:
                    state.deleting_since = now
                else:
                    deadline = parse_rfc3339(meta["deletionTimestamp"])
                    state.deleting_since = now + (deadline - self._clock.wall()) - grace
            due = max(now, state.deleting_since + float(grace))
            current = state.timers.get("finalize")
            if current is None or due < current.due:
                self._cancel(state, "finalize")
                self._schedule(state, key, "finalize", due)
            return

        if phase in _TERMINAL or not node:
            if state is not None:
                self._drop_pod(key)
            return

        if phase == "Pending":
            if state is None:
                state = self._pods[key] = _PodTimers(uid)
            if "start" not in state.timers:
                self._schedule(state, key, "start", now + self._start_delay)
            return

        if phase == "Running":
            if state is None:
                state = self._pods[key] = _PodTimers(uid)
            self._cancel(state, "start")
            if "finish" in state.timers:
                return
            run_for = self._run_for(pod)
            if run_for is None:
                return
            if state.started_at is not None:
                started = state.started_at
            elif status.get("startTime"):
                started = now + (parse_rfc3339(status["startTime"]) - self._clock.wall())
            else:
                started = now
            state.started_at = started
            self._schedule(state, key, "finish", max(now, started + run_for))

    def _run_for(self, pod: Mapping[str, Any]) -> float | None:
        annotations = pod["metadata"].get("annotations") or _EMPTY
        text = annotations.get(RUN_FOR_ANNOTATION)
        if text is None:
            return None
        try:
            return parse_duration(str(text))
        except ValueError as exc:
            uid = pod["metadata"].get("uid", "")
            if uid not in self._bad_run_for:
                self._bad_run_for.add(uid)
                log.warning(
                    "pod %s/%s: ignoring annotation %s: %s",
                    pod["metadata"].get("namespace", ""),
                    pod["metadata"]["name"],
                    RUN_FOR_ANNOTATION,
                    exc,
                )
            return None

    # ----------------------------------------------------------------- actions

    def _fire(self, timer: _Timer) -> None:
        pod = self._store.try_get("Pod", timer.namespace, timer.name)
        if pod is None or pod["metadata"].get("uid", "") != timer.uid:
            return
        meta = pod["metadata"]
        status = pod.get("status") or _EMPTY
        if timer.action == "finalize":
            if meta.get("deletionTimestamp"):
                self._store.finalize_delete("Pod", timer.namespace, timer.name)
            return
        if meta.get("deletionTimestamp"):
            return
        phase = status.get("phase") or "Pending"
        now = rfc3339(self._clock.wall())
        if timer.action == "start" and phase == "Pending":
            state = self._pods.get((timer.namespace, timer.name))
            if state is not None:
                state.started_at = self._clock.now()
            patch = {
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
            }
        elif timer.action == "finish" and phase == "Running":
            patch = {
                "phase": "Succeeded",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "PodCompleted",
                        "lastTransitionTime": now,
                    },
                    {
                        "type": "ContainersReady",
                        "status": "False",
                        "reason": "PodCompleted",
                        "lastTransitionTime": now,
                    },
                ],
            }
        else:
            return
        self._store.patch(
            "Pod",
            timer.namespace,
            timer.name,
            {"metadata": {"uid": timer.uid}, "status": patch},
            patch_type="strategic",
            subresource="status",
        )

    # ----------------------------------------------------------------- timers

    def _schedule(
        self, state: _PodTimers, key: tuple[str, str], action: _Action, due: float
    ) -> None:
        self._seq += 1
        timer = _Timer(due, self._seq, action, key[0], key[1], state.uid)
        state.timers[action] = timer
        heapq.heappush(self._heap, (due, timer.seq, timer))
        self._live += 1
        if self._waiter is not None and self._heap[0][2] is timer:
            _wake(self._waiter)

    def _cancel(self, state: _PodTimers, action: _Action) -> None:
        timer = state.timers.pop(action, None)
        if timer is not None and not timer.cancelled:
            timer.cancelled = True
            self._live -= 1

    def _drop_pod(self, key: tuple[str, str]) -> None:
        state = self._pods.pop(key, None)
        if state is not None:
            for action in list(state.timers):
                self._cancel(state, action)

    def _forget(self, timer: _Timer) -> None:
        """``timer`` was popped to fire: it is no longer pending."""
        self._live -= 1
        timer.cancelled = True
        state = self._pods.get((timer.namespace, timer.name))
        if state is not None and state.timers.get(timer.action) is timer:
            del state.timers[timer.action]

    def _drop_cancelled(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except ApiError as exc:
            log.warning("sim kubelet: %s failed: %s", getattr(fn, "__name__", fn), exc)
        except Exception:
            log.exception("sim kubelet: %s failed", getattr(fn, "__name__", fn))
