"""Simulation: a scenario run by the real loop on the embedded cluster (layer 4).

Used by ``sluice simulate``, the scenario tests and the benchmarks. The cluster, the
kubelet, the loop, the arrivals and the departures all run in one task group on one
clock: virtual by default (the run never sleeps and repeats exactly), or real for
benchmarks and demos. A run ends, and :attr:`SimulationResult.stopped_by` says why:

* ``idle``: a cycle decided nothing while no API call, kubelet action, arrival or
  departure was still to come (nothing more could change);
* ``cycles``: ``max_cycles`` cycles have run;
* ``until``: the horizon has passed, ``until`` seconds of clock time after the start
  (:data:`DEFAULT_VIRTUAL_HORIZON` on the virtual clock unless told otherwise; no
  horizon by default on the real clock). The loop is woken at the horizon and stops as
  on SIGTERM: API calls already running finish, timers (backoffs, gates) are dropped.
  Without it a run whose API calls keep failing would retry forever.

What the result reports (``sluice simulate --output json`` prints :meth:`to_json`):

* ``bindings`` and ``evictions`` are what took effect in the cluster: pods whose bind
  call succeeded (pod -> node), and pods whose eviction call (``delete`` or ``evict``)
  succeeded, in the order the calls finished, each pod once. A failed call, or one that
  found the pod already gone, does not count; one applied whose reply was then lost
  (``--api-lost-replies``) does, and its timeline entry says ``lostReply: true``;
* ``nominations`` is pod -> node as ``status.nominatedNodeName`` was last written in
  the API; an entry goes when the nomination is cleared on a pod that is not bound;
* ``timeline`` tells decisions from effects: ``preempt`` (pod, node, victims) is the
  decision, at the time and cycle of the cycle that made it (``reclaim`` and
  ``dissolve`` likewise, a dissolution with no pod); ``delete``, ``evict``,
  ``bind`` (and ``-failed`` with ``error``) are the API calls as they finished;
  ``nominate`` and ``nomination-cleared`` the changes of ``status.nominatedNodeName``;
  ``arrive``, ``depart``, ``phase`` (of a PodGroup) and ``completed`` the rest; for
  volumes, ``claim-ref`` (volume) and ``select-node`` (claim, node) are the scheduler's
  writes before a bind (``-failed`` with ``error``), ``provisioned`` (volume, claim) a
  PV made by the embedded provisioner and ``claim-bound`` (claim, volume) the PV
  controller binding a claim. Each entry has ``t`` (seconds from the start) and
  ``cycle`` (the last cycle started);
* ``claims`` is each PersistentVolumeClaim bound at the end: its PV (``volume``) and the
  nodes the PV's node affinity admits (``nodes``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio

from scheduler.api import labels as L
from scheduler.api import reasons
from scheduler.api.core_objects import node_from_object
from scheduler.api.errors import NotFoundError
from scheduler.api.group_apis import APIS
from scheduler.api.reasons import Reason
from scheduler.api.shards import Sharding
from scheduler.api.volumes.model import PROVISIONED_BY
from scheduler.api.volumes.storage_objects import volume_from_object
from scheduler.cache import SchedulerCache
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.decisions import decisions_of
from scheduler.loop.scheduler_loop import SchedulingLoop
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import ClusterPorts
from scheduler.schema import load_crds
from scheduler.sim.backend import ApiCall, SimBackend
from scheduler.sim.claim_controller import SimClaimController
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.kubelet import SimKubelet
from scheduler.sim.scenario import Arrival, Departure, Scenario, Ungate
from scheduler.sim.store import ObjectStore, WatchEvent
from scheduler.sim.virtual_time import DEFAULT_EPOCH, VirtualClock
from scheduler.sim.volume_controller import SimVolumeController

LoopFactory = Callable[[SchedulerCache, ClusterPorts], SchedulingLoop]
StopReason = Literal["idle", "cycles", "until"]

DEFAULT_VIRTUAL_HORIZON: Final[float] = 3600.0
"""Seconds of simulated time after which a run on the virtual clock stops when no horizon
is given (``sluice simulate --until``, or ``until`` in a Simulation document)."""


@dataclass(slots=True)
class SimulationResult:
    """What a run did; see the module docstring for the meaning of each field."""

    cycles: int = 0
    stopped_by: StopReason = "idle"
    seconds: float = 0.0
    """Clock time from the start to the end of the run."""
    bindings: dict[str, str] = field(default_factory=dict)
    evictions: list[str] = field(default_factory=list)
    nominations: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    pending_codes: dict[str, str] = field(default_factory=dict)
    """The code of each pending pod's reason (:class:`~scheduler.api.reasons.ReasonCode`)."""
    pod_groups: dict[str, str] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each PersistentVolumeClaim bound at the end: its PV and the nodes the PV's node
    affinity admits (every node when it has none)."""
    timeline: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Exactly the keys ``sluice simulate --output json`` promises."""
        return {
            "cycles": self.cycles,
            "stoppedBy": self.stopped_by,
            "seconds": self.seconds,
            "bindings": self.bindings,
            "evictions": self.evictions,
            "nominations": self.nominations,
            "pending": self.pending,
            "pendingCodes": self.pending_codes,
            "podGroups": self.pod_groups,
            "claims": self.claims,
            "timeline": self.timeline,
        }


class Simulation:
    """One run. Build, then ``await run()`` once.

    ``until``: seconds of clock time after which the run stops (positive); None means
    :data:`DEFAULT_VIRTUAL_HORIZON` on the virtual clock and no horizon on the real one;
    ``math.inf``: no horizon at all. ``sharding``: the configuration's shard, when this
    run is one shard of a sharded scheduler (it then takes only its pool's nodes and
    gangs, as ``sluice run --shard`` does). ``wait_for_pod_grouper``: the configuration's
    ``waitForPodGrouper`` (no pod grouper runs in the embedded cluster, so pods with a
    controller owner that name no group wait, saying so, unless it is False).
    """

    def __init__(
        self,
        scenario: Scenario,
        loop_factory: LoopFactory,
        *,
        scheduler_name: str = L.SCHEDULER_NAME,
        wait_for_pod_grouper: bool = True,
        sharding: Sharding | None = None,
        behaviour: ApiBehaviour | None = None,
        max_cycles: int | None = None,
        until: float | None = None,
        real_time: bool = False,
        kubelet_delay: float = 0.0,
        watch_delay: float = 0.0,
        on_cycle: Callable[[CycleReport, list[dict[str, Any]]], None] | None = None,
    ) -> None:
        if until is None:
            until = math.inf if real_time else DEFAULT_VIRTUAL_HORIZON
        if not until > 0:
            raise ValueError(f"until must be positive, got {until}")
        self.scenario = scenario
        self.clock: VirtualClock | SystemClock = (
            SystemClock() if real_time else VirtualClock(scenario.start or DEFAULT_EPOCH)
        )
        catalog = load_crds()

        def validate(obj: dict[str, Any]) -> dict[str, Any]:
            return catalog.check(obj) if catalog.covers(obj) else obj

        self.store = ObjectStore(self.clock.wall, validator=validate)
        self.faults = FaultInjector(behaviour or scenario.behaviour or ApiBehaviour(), self.clock)
        self.backend = SimBackend(self.store, self.clock, self.faults)
        self.cache = SchedulerCache(
            scheduler_name, wait_for_pod_grouper=wait_for_pod_grouper, sharding=sharding
        )
        if not watch_delay >= 0:
            raise ValueError(f"watch_delay must not be negative, got {watch_delay}")
        self.watch_delay = watch_delay
        """Seconds of clock time between a change in the store and its watch event reaching
        the scheduler's cache (0: at once), as a watch over a network lags: a fault the
        tests of lost replies inject (a bind whose reply is lost is not shown yet)."""
        self._in_transit: deque[tuple[float, WatchEvent]] = deque()
        self._arrived = anyio.Event()
        self.store.subscribe(self._deliver)
        ports = ClusterPorts(
            self.backend,
            self.backend,
            self.backend,
            self.backend,
            self.clock,
            self.backend,
            claims=self.backend,
            volumes=self.backend,
        )
        self.loop = loop_factory(self.cache, ports)
        self.kubelet = SimKubelet(self.store, self.clock, start_delay=kubelet_delay)
        self.claim_controller = SimClaimController(self.store)
        """Plays the controller manager's resourceclaim controller (DRA)."""
        self.volume_controller = SimVolumeController(self.store, self.clock)
        """Plays the controller manager's PV controller, and a provisioner."""
        self.max_cycles = max_cycles
        self.until = until
        """Seconds of clock time from the start after which the run stops (inf: never)."""
        self.origin = self.clock.now()
        """Clock time of the start; the timeline counts from here."""
        self.result = SimulationResult()
        self._on_cycle = on_cycle
        self._fresh: list[dict[str, Any]] = []
        self._reasons: dict[str, Reason] = {}
        self._placements: dict[str, str] = {}
        """The node set each pod decided for binding was placed in (its bind event says)."""
        self._timed_left = 0
        self.serving = False
        """Keep scheduling once the scenario's own run is over (``sluice simulate
        --serve``): objects created through the served API afterwards are scheduled like
        the scenario's. The run then ends at ``until`` or when cancelled, never idle."""
        self.on_settled: Callable[[SimulationResult], None] | None = None
        """Called once while serving, the first time nothing of the scenario is left to
        happen, with the result so far."""
        self._settled = False
        """Arrivals, departures and ungatings still to come."""
        self._evicted: set[str] = set()
        self._bound_claims: set[str] = set()
        """Claims shown bound (``claim-bound`` told once per binding)."""
        self._api_nominated: dict[str, str] = {}
        """status.nominatedNodeName of each pod, as the API has it now."""
        self.backend.add_observer(self._on_call)
        self.loop.observers.append(self._cycle_done)

    # Feeding the cache and the timeline ----------------------------------------------

    def _deliver(self, ev: WatchEvent) -> None:
        if ev.type in ("ADDED", "MODIFIED", "DELETED"):
            if self.watch_delay > 0:
                self._in_transit.append((self.clock.now() + self.watch_delay, ev))
                self._arrived.set()
            else:
                self.cache.handle(ev.kind, ev.type, ev.obj)
        if ev.kind in _GROUP_APIS and ev.type == "MODIFIED":
            phase = (ev.obj.get("status") or {}).get("phase")
            meta = ev.obj["metadata"]
            key = _GROUP_APIS[ev.kind].job_id(meta["namespace"], meta["name"])
            if phase and self.result.pod_groups.get(key) != phase:
                self.result.pod_groups[key] = phase
                self._event("phase", podGroup=key, phase=phase)
        elif ev.kind in ("PersistentVolumeClaim", "PersistentVolume") and ev.type != "DELETED":
            self._volume_event(ev)
        elif ev.kind == "Pod":
            meta = ev.obj["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if ev.type == "DELETED":
                self._api_nominated.pop(key, None)
                return
            if ev.type == "MODIFIED":
                phase = (ev.obj.get("status") or {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    self._event("completed", pod=key, phase=phase)
            if ev.type in ("ADDED", "MODIFIED"):
                self._track_nomination(key, ev.obj)

    def _track_nomination(self, key: str, pod: dict[str, Any]) -> None:
        node = (pod.get("status") or {}).get("nominatedNodeName") or None
        before = self._api_nominated.get(key)
        if node == before:
            return
        if node is not None:
            self._api_nominated[key] = node
            self.result.nominations[key] = node
            self._event("nominate", pod=key, node=node)
            return
        del self._api_nominated[key]
        if not (pod.get("spec") or {}).get("nodeName"):
            self.result.nominations.pop(key, None)
        self._event("nomination-cleared", pod=key, node=before)

    def _volume_event(self, ev: WatchEvent) -> None:
        """``claim-bound`` when the PV controller binds a claim, ``provisioned`` when a PV
        is made for a claim."""
        meta = ev.obj["metadata"]
        spec = ev.obj.get("spec") or {}
        if ev.kind == "PersistentVolume":
            if ev.type == "ADDED" and PROVISIONED_BY in (meta.get("annotations") or {}):
                ref = spec.get("claimRef") or {}
                self._event(
                    "provisioned",
                    volume=meta["name"],
                    claim=f"{ref.get('namespace')}/{ref.get('name')}",
                )
            return
        key = f"{meta['namespace']}/{meta['name']}"
        bound = (ev.obj.get("status") or {}).get("phase") == "Bound" and spec.get("volumeName")
        if bound and key not in self._bound_claims:
            self._bound_claims.add(key)
            self._event("claim-bound", claim=key, volume=spec["volumeName"])
        elif not bound:
            self._bound_claims.discard(key)

    def _event(self, kind: str, **fields: Any) -> None:
        entry = {
            "t": round(self.clock.now() - self.origin, 6),
            "cycle": self.loop.cycles,
            "event": kind,
            **fields,
        }
        self.result.timeline.append(entry)
        self._fresh.append(entry)

    def _on_call(self, call: ApiCall) -> None:
        if call.kind == "patch" and call.ref.kind in _VOLUME_WRITES:
            what = _VOLUME_WRITES[call.ref.kind]
            written: dict[str, Any] = {"claim" if what == "select-node" else "volume": call.ref.key}
            if call.node:
                written["node"] = call.node
            if call.applied:
                self._event(what, **written)
            else:
                self._event(f"{what}-failed", error=call.error, **written)
            return
        if call.kind not in ("bind", "delete", "evict"):
            return
        fields: dict[str, Any] = {"pod": call.ref.key}
        if call.node:
            fields["node"] = call.node
        if not call.ok and call.applied:
            fields["lostReply"] = True
        if call.applied:
            if call.kind == "bind" and call.node:
                self.result.bindings[call.ref.key] = call.node
                domain = self._placements.pop(call.ref.key, None)
                if domain:
                    fields["domain"] = domain
                self._reasons.pop(call.ref.key, None)
            elif call.ref.key not in self._evicted:
                self._evicted.add(call.ref.key)
                self.result.evictions.append(call.ref.key)
            self._event(call.kind, **fields)
        else:
            self._event(f"{call.kind}-failed", error=call.error, **fields)

    def _cycle_done(self, report: CycleReport) -> None:
        decisions = _preemptions(report)
        if decisions:
            # With SchedulerAsyncPreemption off the cycle has awaited its calls, whose
            # events are already in; the decision goes before them, at the cycle's start.
            base = {"t": round(report.started - self.origin, 6), "cycle": report.number}
            entries = [{**base, "event": d.pop("event"), **d} for d in decisions]
            for events in (self.result.timeline, self._fresh):
                at = len(events)
                while at > 0 and events[at - 1]["cycle"] == report.number:
                    at -= 1
                events[at:at] = entries
        for change in report.reservation_changes:
            fields = {"job": change.job, "nodes": list(change.nodes)}
            if change.why:
                fields["why"] = change.why
            self._event(change.kind, **fields)
        self._reasons.update(report.task_reasons)
        self._placements.update(report.placements)
        if self._on_cycle is not None:
            self._on_cycle(report, self._fresh)
        self._fresh = []

    def _should_stop(self, report: CycleReport) -> bool:
        if self.max_cycles is not None and report.number >= self.max_cycles:
            self.result.stopped_by = "cycles"
            return True
        busy = (
            report.decided
            or self.loop.in_flight
            or self.loop.woken
            or self.faults.in_flight
            or self.kubelet.pending()
            or self.volume_controller.pending()
            or self._timed_left
            or self._in_transit
        )
        if not busy:
            self.result.stopped_by = "idle"
            if not self.serving:
                return True
            if not self._settled:
                self._settled = True
                self._finish()
                if self.on_settled is not None:
                    self.on_settled(self.result)
            return False
        if self.clock.now() - self.origin >= self.until - _EPSILON:
            # Stop as on SIGTERM: calls already running may finish, and timers still set
            # (backoffs, gates waiting for deletions) are cancelled, not waited for.
            self.loop.stop()
            self.result.stopped_by = "until"
            return True
        return False

    # Running -------------------------------------------------------------------------

    def _create(self, arrival: Arrival) -> None:
        self.store.create(arrival.obj, restore=True)  # as a cluster's snapshot holds it
        self._event("arrive", object=_label(arrival.obj))

    def _delete(self, departure: Departure) -> None:
        """As ``kubectl delete`` would: graceful for a bound pod with a grace period."""
        try:
            self.store.delete(departure.kind, departure.namespace, departure.name)
        except NotFoundError:
            self._event("depart", object=departure.label, gone=True)
        else:
            self._event("depart", object=departure.label)

    def _ungate(self, ungate: Ungate) -> None:
        """Remove the pod's scheduling gates, as Kueue does when it admits its workload."""
        try:
            self.store.patch(
                "Pod", ungate.namespace, ungate.name, {"spec": {"schedulingGates": None}}
            )
        except NotFoundError:
            self._event("ungate", pod=ungate.label, gone=True)
        else:
            self._event("ungate", pod=ungate.label)

    async def _timed(self, later: list[tuple[float, Arrival | Departure | Ungate]]) -> None:
        """Arrivals, departures and ungatings at their time (``later`` is sorted)."""
        for at, item in later:
            delay = self.origin + at - self.clock.now()
            if delay > 0:
                await self.clock.sleep(delay)
            if isinstance(item, Arrival):
                self._create(item)
            elif isinstance(item, Ungate):
                self._ungate(item)
            else:
                self._delete(item)
            self._timed_left -= 1
            self.loop.wake()

    async def _watch(self) -> None:
        """Hand the cache the events in transit, in order, each at its time (``watch_delay``
        after the change)."""
        while True:
            if not self._in_transit:
                self._arrived = anyio.Event()
                await self._arrived.wait()
                continue
            due, ev = self._in_transit[0]
            if due > self.clock.now():
                await self.clock.sleep(due - self.clock.now())
                continue
            self._in_transit.popleft()
            self.cache.handle(ev.kind, ev.type, ev.obj)

    async def _horizon(self) -> None:
        """Wake the loop when the horizon is reached, so that a cycle ends the run there."""
        await self.clock.sleep(max(0.0, self.origin + self.until - self.clock.now()))
        self.loop.wake()

    async def run(self) -> SimulationResult:
        self.origin = self.clock.now()
        now = [a for a in self.scenario.arrivals if a.at <= 0]
        later = [a for a in self.scenario.arrivals if a.at > 0]
        if not any(
            a.obj["kind"] == "Queue" and a.obj["metadata"]["name"] == L.DEFAULT_QUEUE
            for a in self.scenario.arrivals
        ):  # a Volcano Queue named default is the default queue too (queues merge by name)
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
        self.claim_controller.attach()
        timed: list[tuple[float, Arrival | Departure | Ungate]] = [(a.at, a) for a in later]
        timed.extend((u.at, u) for u in self.scenario.ungates)
        timed.extend((d.at, d) for d in self.scenario.departures)
        timed.sort(key=lambda item: (item[0], isinstance(item[1], Departure)))  # stable
        self._timed_left = len(timed)
        async with anyio.create_task_group() as tg:
            await tg.start(self.kubelet.run)
            await tg.start(self.volume_controller.run)
            tg.start_soon(self._timed, timed)
            if self.watch_delay > 0:
                tg.start_soon(self._watch)
            if math.isfinite(self.until):
                tg.start_soon(self._horizon)
            await self.loop.run(should_stop=self._should_stop)
            tg.cancel_scope.cancel()
        self._finish()
        return self.result

    def _claims_bound(self) -> dict[str, dict[str, Any]]:
        """:attr:`SimulationResult.claims` as the store has them now."""
        claims, _ = self.store.list("PersistentVolumeClaim")
        if not claims:
            return {}
        nodes = [(n["metadata"]["name"], n) for n in self.store.list("Node")[0]]
        out: dict[str, dict[str, Any]] = {}
        for claim in claims:
            name = (claim.get("spec") or {}).get("volumeName")
            if not name or (claim.get("status") or {}).get("phase") != "Bound":
                continue
            obj = self.store.try_get("PersistentVolume", "", name)
            if obj is None:
                continue
            pv = volume_from_object(obj)
            admitted = [n for n, node in nodes if pv.allows(node_from_object(node).labels)]
            meta = claim["metadata"]
            out[f"{meta['namespace']}/{meta['name']}"] = {"volume": name, "nodes": admitted}
        return out

    def _finish(self) -> None:
        self.result.cycles = self.loop.cycles
        self.result.seconds = round(self.clock.now() - self.origin, 6)
        self.result.pending = {}  # may be called again (a served run settles, then goes on)
        self.result.pending_codes = {}
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
            told = self._reasons.get(key)
            if told is None and spec.get("schedulingGates"):
                told = reasons.held_by_gates(str(g.get("name")) for g in spec["schedulingGates"])
            self.result.pending[key] = told.message if told is not None else "not scheduled yet"
            if told is not None:
                self.result.pending_codes[key] = told.code.value
        self.result.claims = self._claims_bound()
        self.result.pod_groups = {}
        for kind, api in _GROUP_APIS.items():
            groups, _ = self.store.list(kind)
            for g in groups:
                phase = (g.get("status") or {}).get("phase")
                if phase or api.name != "kubernetes":  # scheduling.k8s.io has no phase
                    meta = g["metadata"]
                    self.result.pod_groups[api.job_id(meta["namespace"], meta["name"])] = (
                        phase or "Pending"
                    )


_VOLUME_WRITES: Final = {"PersistentVolume": "claim-ref", "PersistentVolumeClaim": "select-node"}
"""The scheduler's volume writes (patches) as timeline events."""
_EPSILON: Final[float] = 1e-9
_GROUP_APIS: Final = {api.pod_group_key: api for api in APIS}
"""The PodGroup kinds (kind keys) of every API."""


def _preemptions(report: CycleReport) -> list[dict[str, Any]]:
    """The cycle's preemptions, reclaims and dissolutions (:func:`~scheduler.loop.
    decisions.decisions_of`) as timeline entries: ``preempt``, ``reclaim`` or
    ``dissolve``, with the pod (the preemptor; None for a dissolution), node, victims
    and ``pdbViolations`` (how many victims a PodDisruptionBudget allowed no more
    disruption of, as the scheduler counted). A nomination without victims has
    ``victims: []``."""
    return [
        {
            "event": d.kind,
            "pod": d.pod,
            "node": d.node,
            "victims": list(d.victims),
            "pdbViolations": d.breaking,
        }
        for d in decisions_of(report.effects)
    ]


def _label(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    return f"{obj['kind']} {name}"
