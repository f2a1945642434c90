"""The ``dissolve`` action's invariants on generated worlds, through the real loop on the
embedded cluster: running gangs lose members (deleted at a random time, a replacement
arriving later or never), pods of higher priority preempt, deletes may fail.

Watched from the store (what the API shows, as the soak's checks do), a gang is *broken*
while some of its members are bound and not being deleted, fewer than its minimum, and
none of its members is nominated to a node. Then:

- no gang is dissolved before it has been broken for the grace (``graceSeconds``);
- with every call succeeding, no gang stays broken longer than the grace and one
  period (a cycle a second);
- when the run ends (nothing more can change), no gang is broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.api import labels as L
from scheduler.api.core_objects import pod_group_name
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Evict, EvictReason, parts
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.scenario import ARRIVAL_ANNOTATION, DEPARTURE_ANNOTATION
from scheduler.sim.store import ObjectStore, WatchEvent
from tests import simulated
from tests.builders import node, pod, pod_group

Obj = dict[str, Any]
PERIOD = 1.0


@dataclass
class World:
    objects: list[Obj]
    minimum: dict[str, int]
    """PodGroup name -> minMember."""
    grace: float
    failures: bool


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Two nodes of 4 CPU; 1-3 gangs (minMember 2-3, as many 1-CPU pods or one more)
    placed first-fit where they fit whole; each running gang may lose a member at 1-20 s,
    whose replacement arrives 1-90 s later or never; 0-2 pods of priority 10 (1 or 2 CPU)
    pending from the start or arriving later; a grace of 0, 10 or 30 s; deletes failing
    at 30 % (seeded) or never."""
    free = {"n0": 4, "n1": 4}
    objects: list[Obj] = [node(n, cpu="4") for n in free]
    minimum: dict[str, int] = {}
    for g in range(draw(st.integers(1, 3), label="gangs")):
        name = f"g{g}"
        m = draw(st.integers(2, 3), label="minMember")
        size = m + draw(st.integers(0, 1), label="spare")
        minimum[name] = m
        objects.append(pod_group(name, min_member=m))
        places: list[str | None] = []
        left = dict(free)
        for _ in range(size):
            where = next((n for n in sorted(left) if left[n] >= 1), None)
            if where is not None:
                left[where] -= 1
            places.append(where)
        if all(places):
            free = left
        else:
            places = [None] * size
        for i, where in enumerate(places):
            annotations = {}
            if where is not None and i == 0 and draw(st.booleans(), label="loses a member"):
                gone = draw(st.integers(1, 20), label="member deleted at")
                annotations[DEPARTURE_ANNOTATION] = f"{gone}s"
                if draw(st.booleans(), label="replaced"):
                    back = gone + draw(st.integers(1, 90), label="replacement after")
                    objects.append(
                        pod(
                            f"{name}-r",
                            cpu="1",
                            group=name,
                            annotations={ARRIVAL_ANNOTATION: f"{back}s"},
                            terminationGracePeriodSeconds=0,
                        )
                    )
            objects.append(
                pod(
                    f"{name}-{i}",
                    cpu="1",
                    node=where,
                    group=name,
                    annotations=annotations or None,
                    terminationGracePeriodSeconds=0,
                )
            )
    for h in range(draw(st.integers(0, 2), label="preemptors")):
        at = draw(st.sampled_from([0, 5, 30]), label="preemptor arrives at")
        objects.append(
            pod(
                f"hi-{h}",
                cpu=draw(st.sampled_from(["1", "2"]), label="preemptor cpu"),
                priority=10,
                annotations={ARRIVAL_ANNOTATION: f"{at}s"} if at else None,
                terminationGracePeriodSeconds=0,
            )
        )
    failures = draw(st.booleans(), label="deletes fail")
    if failures:
        objects.insert(
            0,
            {
                "apiVersion": L.API_VERSION,
                "kind": "Simulation",
                "apiFailures": {"delete": 0.3},
                "seed": draw(st.integers(0, 50), label="seed"),
            },
        )
    grace = float(draw(st.sampled_from([0, 10, 30]), label="grace"))
    return World(objects, minimum, grace, failures)


@dataclass
class Watch:
    """Each gang's broken stretches, from the store's every change (virtual time)."""

    world: World
    pods: dict[str, Obj] = field(default_factory=dict)
    broken_since: dict[str, float] = field(default_factory=dict)
    longest: dict[str, float] = field(default_factory=dict)
    too_early: list[str] = field(default_factory=list)

    def attach(self, store: ObjectStore) -> None:
        store.subscribe(self._on_pod, kinds=["Pod"])

    def _on_pod(self, ev: WatchEvent) -> None:
        name = ev.obj["metadata"]["name"]
        if ev.type == "DELETED":
            self.pods.pop(name, None)
        else:
            self.pods[name] = ev.obj
        self.judge(anyio.current_time())

    def broken(self) -> set[str]:
        bound: dict[str, int] = dict.fromkeys(self.world.minimum, 0)
        nominated: set[str] = set()
        for p in self.pods.values():
            group = pod_group_name(p)
            if group not in bound:
                continue
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
                bound[group] += 1
            elif (p.get("status") or {}).get("nominatedNodeName"):
                nominated.add(group)
        return {g for g, n in bound.items() if 0 < n < self.world.minimum[g] and g not in nominated}

    def judge(self, now: float) -> None:
        broken = self.broken()
        for g in list(self.broken_since):
            if g not in broken:
                self._close(g, now)
        for g in broken:
            self.broken_since.setdefault(g, now)

    def _close(self, g: str, now: float) -> None:
        since = self.broken_since.pop(g)
        self.longest[g] = max(self.longest.get(g, 0.0), now - since)

    def on_cycle(self, report: CycleReport, fresh: list[Obj]) -> None:
        del fresh
        now = anyio.current_time()
        for e in parts(report.effects):
            if isinstance(e, Evict) and e.reason is EvictReason.DISSOLVED:
                group = e.task.job_id.split("/")[-1]
                since = self.broken_since.get(group)
                if since is None or now - since < self.world.grace - 1e-6:
                    self.too_early.append(f"{group} at {now:g} s (broken since {since})")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_a_broken_gang_is_dissolved_after_its_grace_and_not_before(world: World) -> None:
    watch = Watch(world)
    config = SchedulerConfiguration(action_arguments={"dissolve": {"graceSeconds": world.grace}})
    sim = simulated.simulate(
        world.objects, config=config, on_cycle=watch.on_cycle, on_store=watch.attach
    )
    end = sim.result.seconds
    dissolved = sum(1 for e in sim.result.timeline if e["event"] == "dissolve")
    event(f"dissolutions: {min(dissolved, 3)}{'+' if dissolved > 2 else ''}")
    assert sim.result.stopped_by == "idle", sim.result.stopped_by
    assert watch.too_early == []
    assert watch.broken() == set(), f"still broken at the end ({end:g} s): {watch.broken()}"
    if not world.failures:
        worst = max(watch.longest.values(), default=0.0)
        assert worst <= world.grace + PERIOD + 1e-6, watch.longest
