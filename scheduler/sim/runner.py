"""Simulation: a scenario run by the real loop on the embedded cluster (layer 4).

Used by ``sluice simulate``, the scenario tests and the benchmarks. The cluster, the
kubelet, the loop and the arrivals all run in one task group on one clock: virtual by
default (the run never sleeps and repeats exactly), or real for benchmarks and demos.
A run ends after ``max_cycles`` cycles, or as soon as a cycle decides nothing while no
API call, kubelet action or arrival is still to come.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from scheduler.api import labels as L
from scheduler.api.openapi import load_crds
from scheduler.cache import SchedulerCache
from scheduler.framework.effects import Evict, Nominate
from scheduler.loop.scheduler_loop import CycleReport, SchedulingLoop
from scheduler.ports import ClusterPorts
from scheduler.sim.backend import ApiCall, SimBackend
from scheduler.sim.clock import RealClock, VirtualClock
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.kubelet import SimKubelet
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.store import ObjectStore, WatchEvent

LoopFactory = Callable[[SchedulerCache, ClusterPorts], SchedulingLoop]


@dataclass(slots=True)
class SimulationResult:
    cycles: int = 0
    bindings: dict[str, str] = field(default_factory=dict)
    evictions: list[str] = field(default_factory=list)
    nominations: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    pod_groups: dict[str, str] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Exactly the keys ``sluice simulate --output json`` promises."""
        return {
            "cycles": self.cycles,
            "bindings": self.bindings,
            "evictions": self.evictions,
            "nominations": self.nominations,
            "pending": self.pending,
            "podGroups": self.pod_groups,
            "timeline": self.timeline,
        }


class Simulation:
    """One run. Build, then ``await run()`` once (or :func:`run_simulation`)."""

    def __init__(
        self,
        scenario: Scenario,
        loop_factory: LoopFactory,
        *,
        scheduler_name: str = L.SCHEDULER_NAME,
        behaviour: ApiBehaviour | None = None,
        max_cycles: int | None = None,
        real_time: bool = False,
        kubelet_delay: float = 0.0,
        on_cycle: Callable[[CycleReport, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock: VirtualClock | RealClock = RealClock() if real_time else VirtualClock()
        catalog = load_crds()

        def validate(obj: dict[str, Any]) -> dict[str, Any]:
            return catalog.check(obj) if catalog.is_custom(str(obj.get("kind"))) else obj

        self.store = ObjectStore(self.clock.wall, validator=validate)
        self.faults = FaultInjector(behaviour or scenario.behaviour or ApiBehaviour(), self.clock)
        self.backend = SimBackend(self.store, self.clock, self.faults)
        self.cache = SchedulerCache(scheduler_name)
        self.store.subscribe(self._deliver)
        ports = ClusterPorts(self.backend, self.backend, self.backend, self.backend, self.clock)
        self.loop = loop_factory(self.cache, ports)
        self.kubelet = SimKubelet(self.store, self.clock, start_delay=kubelet_delay)
        self.max_cycles = max_cycles
        self.origin = self.clock.now()
        """Clock time of the start; the timeline counts from here."""
        self.result = SimulationResult()
        self._on_cycle = on_cycle
        self._fresh: list[dict[str, Any]] = []
        self._reasons: dict[str, str] = {}
        self._arrivals_left = 0
        self.backend.add_observer(self._on_call)
        self.loop.observers.append(self._cycle_done)

    # Feeding the cache and the timeline ----------------------------------------------

    def _deliver(self, ev: WatchEvent) -> None:
        if ev.type in ("ADDED", "MODIFIED", "DELETED"):
            self.cache.handle(ev.kind, ev.type, ev.obj)
        if ev.kind == "PodGroup" and ev.type == "MODIFIED":
            phase = (ev.obj.get("status") or {}).get("phase")
            key = f"{ev.obj['metadata']['namespace']}/{ev.obj['metadata']['name']}"
            if phase and self.result.pod_groups.get(key) != phase:
                self.result.pod_groups[key] = phase
                self._event("phase", podGroup=key, phase=phase)
        elif ev.kind == "Pod" and ev.type == "MODIFIED":
            phase = (ev.obj.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                meta = ev.obj["metadata"]
                self._event("completed", pod=f"{meta['namespace']}/{meta['name']}", phase=phase)

    def _event(self, kind: str, **fields: Any) -> None:
        entry = {
            "t": round(self.clock.now(), 6),
            "cycle": self.loop.cycles,
            "event": kind,
            **fields,
        }
        self.result.timeline.append(entry)
        self._fresh.append(entry)

    def _on_call(self, call: ApiCall) -> None:
        if call.kind not in ("bind", "delete", "evict"):
            return
        fields: dict[str, Any] = {"pod": call.ref.key}
        if call.node:
            fields["node"] = call.node
        if call.ok:
            if call.kind == "bind" and call.node:
                self.result.bindings[call.ref.key] = call.node
                self._reasons.pop(call.ref.key, None)
            self._event(call.kind, **fields)
        else:
            self._event(f"{call.kind}-failed", error=call.error, **fields)

    def _cycle_done(self, report: CycleReport) -> None:
        for effect in report.effects:
            if isinstance(effect, Evict):
                self.result.evictions.append(effect.task.key)
            elif isinstance(effect, Nominate):
                self.result.nominations[effect.task.key] = effect.node
                self._event("nominate", pod=effect.task.key, node=effect.node)
        self._reasons.update(report.task_reasons)
        if self._on_cycle is not None:
            self._on_cycle(report, self._fresh)
        self._fresh = []

    def _should_stop(self, report: CycleReport) -> bool:
        if self.max_cycles is not None and report.number >= self.max_cycles:
            return True
        if report.decided:
            return False
        busy = (
            self.loop.in_flight
            or self.loop.woken
            or self.faults.in_flight
            or self.kubelet.pending()
            or self._arrivals_left
        )
        return not busy

    # Running -------------------------------------------------------------------------

    def _create(self, arrival: Arrival) -> None:
        self.store.create(arrival.obj)
        self._event("arrive", object=_label(arrival.obj))

    async def _arrive_later(self, later: list[Arrival]) -> None:
        for arrival in later:
            delay = arrival.at - self.clock.now()
            if delay > 0:
                await self.clock.sleep(delay)
            self._create(arrival)
            self._arrivals_left -= 1
            self.loop.wake()

    async def run(self) -> SimulationResult:
        self.origin = self.clock.now()
        now = [a for a in self.scenario.arrivals if a.at <= 0]
        later = [a for a in self.scenario.arrivals if a.at > 0]
        if not any(
            a.obj["kind"] == "Queue" and a.obj["metadata"]["name"] == L.DEFAULT_QUEUE
            for a in self.scenario.arrivals
        ):
            self.store.create(
                {
                    "apiVersion": L.API_VERSION,
                    "kind": "Queue",
                    "metadata": {"name": L.DEFAULT_QUEUE},
                    "spec": {"weight": 1},
                }
            )
        for arrival in now:
            self._create(arrival)
        self._arrivals_left = len(later)
        async with anyio.create_task_group() as tg:
            await tg.start(self.kubelet.run)
            tg.start_soon(self._arrive_later, later)
            await self.loop.run(should_stop=self._should_stop)
            tg.cancel_scope.cancel()
        self._finish()
        return self.result

    def _finish(self) -> None:
        self.result.cycles = self.loop.cycles
        pods, _ = self.store.list("Pod")
        scheduler = self.cache.scheduler_name
        for pod in pods:
            spec = pod.get("spec") or {}
            meta = pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if spec.get("schedulerName") != scheduler or spec.get("nodeName"):
                continue
            if meta.get("deletionTimestamp"):
                continue
            self.result.pending[key] = self._reasons.get(key, "not scheduled yet")
        groups, _ = self.store.list("PodGroup")
        self.result.pod_groups = {
            f"{g['metadata']['namespace']}/{g['metadata']['name']}": (g.get("status") or {}).get(
                "phase", "Pending"
            )
            for g in groups
        }


def _label(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    return f"{obj['kind']} {name}"
