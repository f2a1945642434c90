"""SchedulingLoop.run: when the next cycle starts, on the virtual clock.

A cycle holds the event loop, and wake-ups come as soon as it yields; the loop then
leaves the event loop to queued background calls (binds, status writes) for up to
BACKGROUND_SHARE times the cycle's duration, or until they are done. The cycles here are
fakes that say how long they took (a clock skewed by their cost: decisions take no
virtual time) and submit binds, or start preemption calls, that take a given time.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import anyio
import pytest
from anyio.abc import TaskGroup

from scheduler import app
from scheduler.app import builtin_registry
from scheduler.config import SchedulerConfiguration
from scheduler.framework.effects import Effect, Evict, parts
from scheduler.framework.session import Session
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.scheduler_loop import BACKGROUND_SHARE, SchedulingLoop
from scheduler.ports import ClusterPorts, ObjectRef
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, node, pod
from tests.fakes import FakeCluster

PERIOD = 1.0


class SkewedClock(VirtualClock):
    """Virtual time plus the time the fake cycles say they took."""

    def __init__(self) -> None:
        super().__init__()
        self.skew = 0.0

    def now(self) -> float:
        return super().now() + self.skew


class FakePreemption:
    """A PreemptionHandler whose calls, started by :meth:`start`, take ``seconds``."""

    def __init__(self) -> None:
        self.calls_in_flight = 0
        self._tg: TaskGroup | None = None
        self._done = anyio.Event()

    @property
    def in_flight(self) -> int:
        return self.calls_in_flight

    def attach(self, tg: TaskGroup) -> None:
        self._tg = tg

    async def handle(self, session: Session, effects: list[Effect]) -> None:
        raise AssertionError("not used")

    def start(self, seconds: float) -> None:
        async def calls() -> None:
            await anyio.sleep(seconds)
            self.calls_in_flight = 0
            self._done.set()

        assert self._tg is not None
        self.calls_in_flight = 1
        self._tg.start_soon(calls)

    async def calls_drained(self) -> None:
        if self.calls_in_flight:
            await self._done.wait()


def gap_after_first_cycle(
    cost: float, binds: int, bind_seconds: float, woken: bool, preemption_seconds: float = 0.0
) -> float:
    """Seconds from the end of a first cycle that took ``cost``, submitted ``binds`` calls
    of ``bind_seconds`` each and (if ``preemption_seconds``) started a preemption whose
    calls take that long, to the start of the second."""
    clock = SkewedClock()
    cluster = FakeCluster(latency={"bind": bind_seconds})
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock)
    config = SchedulerConfiguration(actions=(), schedule_period=PERIOD)
    loop = SchedulingLoop(cache_with(), builtin_registry().resolve(config), ports)
    preemption = FakePreemption()
    loop.preemption = preemption
    starts: list[float] = []

    async def fake_cycle() -> CycleReport:
        loop.cycles += 1
        starts.append(clock.now())
        clock.skew += cost
        if loop.cycles == 1:
            for i in range(binds):
                ref = ObjectRef("Pod", "default", f"p{i}", f"default/p{i}")
                loop.binds.submit(f"bind {i}", partial(cluster.bind, ref, "n", {}))
            if preemption_seconds:
                preemption.start(preemption_seconds)
        if woken:
            loop.wake()
        return CycleReport(loop.cycles, starts[-1])

    loop.run_cycle = fake_cycle  # type: ignore[method-assign]

    async def main() -> None:
        await loop.run(should_stop=lambda report: report.number >= 2)

    anyio.run(main, backend_options={"loop_factory": VirtualTimeLoop})
    return round(starts[1] - (starts[0] + cost), 6)


def test_preemption_calls_count_as_background_calls() -> None:
    assert gap_after_first_cycle(0.5, 0, 0.0, True, preemption_seconds=0.3) == 0.3
    assert gap_after_first_cycle(0.5, 0, 0.0, True, preemption_seconds=9.0) == 0.5
    assert gap_after_first_cycle(0.5, 100, 0.1, True, preemption_seconds=0.3) == 0.3


@pytest.mark.parametrize(
    ("cost", "binds", "bind_seconds", "woken", "gap"),
    [
        # woken, nothing in the background: at once
        (0.5, 0, 0.0, True, 0.0),
        # woken with binds queued: until they are done (100 binds, 64 at once: 2 rounds)...
        (0.5, 100, 0.1, True, 0.2),
        # ...or for BACKGROUND_SHARE times the cycle's duration
        (0.5, 10, 3.0, True, BACKGROUND_SHARE * 0.5),
        # never longer than the period
        (5.0, 10, 30.0, True, PERIOD),
        # not woken: the period, counted from the end of the cycle, whatever ran meanwhile
        (0.5, 0, 0.0, False, PERIOD),
        (0.5, 10, 0.2, False, PERIOD),
    ],
)
def test_when_the_next_cycle_starts(
    cost: float, binds: int, bind_seconds: float, woken: bool, gap: float
) -> None:
    assert gap_after_first_cycle(cost, binds, bind_seconds, woken) == pytest.approx(gap)


class _Recorded:
    """An action that only records that it ran."""

    def __init__(self, name: str, ran: list[str]) -> None:
        self.name = name
        self._ran = ran

    def execute(self, session: Session, /) -> None:
        self._ran.append(self.name)


def test_the_evicting_actions_wait_for_the_whole_view() -> None:
    """``sluice run`` cycles before every pending pod is read (bound pods first): until
    the view is whole, pods are placed on free room but nothing is evicted (a queue's
    share and a preemption's need depend on pods not read yet), and the loop is not
    idle, so the evicting actions run in the first cycle after it is."""
    ran: list[str] = []
    names = ("elect", "allocate", "preempt", "reclaim", "backfill", "dissolve")
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, VirtualClock())
    resolved = builtin_registry().resolve(SchedulerConfiguration(actions=()))
    resolved = replace(resolved, actions=tuple(_Recorded(n, ran) for n in names))
    loop = SchedulingLoop(cache_with(), resolved, ports)
    whole = False
    loop.whole_view = lambda: whole
    assert loop.in_flight == 1

    async def cycle() -> None:
        await loop.run(should_stop=lambda report: True)

    anyio.run(cycle, backend_options={"loop_factory": VirtualTimeLoop})
    assert ran == ["elect", "allocate", "backfill"]
    ran.clear()
    whole = True
    assert loop.in_flight == 0
    anyio.run(cycle, backend_options={"loop_factory": VirtualTimeLoop})
    assert ran == list(names)


def test_a_job_parked_on_the_partial_view_is_tried_again_once_it_is_whole() -> None:
    """A pod that only a preemption can place, pending while ``sluice run`` still reads
    the pending pods: the first cycle places nothing and parks it. Nothing in the cache
    changes when the view becomes whole, so parking alone would hold it for five minutes
    (the snapshot-replay test on the real server found it waiting); the first cycle on
    the whole view preempts for it."""
    objects = [
        node("n1", cpu="1"),
        pod("low", cpu="1", node="n1", priority=0),
        pod("urgent", cpu="1", priority=1000),
    ]
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, VirtualClock())
    resolved = builtin_registry().resolve(SchedulerConfiguration())
    loop = app.build_loop(resolved, cache_with(*objects), ports)
    whole = False
    loop.whole_view = lambda: whole
    reports: list[CycleReport] = []

    def stop(report: CycleReport) -> bool:
        reports.append(report)
        return True

    async def cycle() -> None:
        await loop.run(should_stop=stop)

    anyio.run(cycle, backend_options={"loop_factory": VirtualTimeLoop})
    assert reports[-1].effects == []
    assert loop.queue.parked == 1
    whole = True
    anyio.run(cycle, backend_options={"loop_factory": VirtualTimeLoop})
    evicted = [e.task.name for e in parts(reports[-1].effects) if isinstance(e, Evict)]
    assert evicted == ["low"]
