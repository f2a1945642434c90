"""Idle cycles (issue 25 point 4): a cycle is skipped while nothing changed since one that
decided nothing with no pod of Sluice waiting; anything that could change a decision runs
the next one."""

from __future__ import annotations

import anyio
import pytest

from scheduler.api.errors import ServerError
from scheduler.app import builtin_registry
from scheduler.config import SchedulerConfiguration
from scheduler.loop.idle import IdleCycles, settled
from scheduler.loop.scheduler_loop import SchedulingLoop
from scheduler.ports import ClusterPorts
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, node, pod
from tests.fakes import FakeCluster


@pytest.mark.parametrize(
    ("objects", "decided", "deferred", "failed", "expected"),
    [
        ([], False, 0, False, True),
        ([node("n1"), pod("p", node="n1")], False, 0, False, True),
        ([node("n1"), pod("p")], False, 0, False, False),
        ([node("n1"), pod("p", scheduler="default-scheduler")], False, 0, False, True),
        ([node("n1"), pod("p", node="n1")], True, 0, False, False),
        ([node("n1"), pod("p", node="n1")], False, 3, False, False),
        ([node("n1"), pod("p", node="n1")], False, 0, True, False),
    ],
    ids=[
        "empty", "all-bound", "a-pod-of-ours-pending", "another-schedulers-pod-pending",
        "decided-something", "deferred-jobs", "failed",
    ],
)  # fmt: skip
def test_a_cycle_is_settled_when_it_decided_nothing_and_nothing_of_ours_waits(
    objects: list[dict[str, object]], decided: bool, deferred: int, failed: bool, expected: bool
) -> None:
    jobs = cache_with(*objects).snapshot().jobs.values()
    assert settled(jobs, decided=decided, deferred=deferred, failed=failed) is expected


@pytest.mark.parametrize(
    ("was_settled", "revision", "in_flight", "disturbed", "skip"),
    [
        (True, 7, 0, False, True),
        (True, 8, 0, False, False),
        (True, 7, 1, False, False),
        (True, 7, 0, True, False),
        (False, 7, 0, False, False),
    ],
    ids=["nothing-changed", "cache-changed", "calls-in-flight", "a-write-failed", "not-settled"],
)
def test_when_a_cycle_may_be_skipped(
    was_settled: bool, revision: int, in_flight: int, disturbed: bool, skip: bool
) -> None:
    idle = IdleCycles()
    assert not idle.may_skip(7, 0)  # no cycle ran yet
    idle.after_cycle(7, settled=was_settled)
    if disturbed:
        idle.disturbed()
    assert idle.may_skip(revision, in_flight) is skip


def test_a_quiet_cluster_costs_no_cycle_until_something_changes() -> None:
    """One pod bound, then 20 s of quiet: one settled cycle after the bind, then only
    skipped ones. A new pod wakes a cycle at once and is bound; a failed status write
    runs the next cycle although the cache did not change."""
    clock = VirtualClock()
    cluster = FakeCluster()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock)
    config = SchedulerConfiguration(schedule_period=1.0)
    cache = cache_with(node("n1"), pod("a"))
    loop = SchedulingLoop(cache, builtin_registry().resolve(config), ports)
    loop.skip_idle = True
    seen: dict[str, float] = {}

    def idle_cycles() -> float:
        value = loop.metrics.registry.get_sample_value("sluice_cycles_idle_total")
        return value or 0.0

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await clock.sleep(20.5)
            seen["cycles_quiet"] = loop.cycles
            seen["idle_quiet"] = idle_cycles()
            cache.handle("Pod", "ADDED", pod("b"))
            await clock.sleep(0.5)
            seen["cycles_after_pod"] = loop.cycles
            await clock.sleep(5.0)
            seen["cycles_settled_again"] = loop.cycles
            loop._failed_call("patch", ServerError("the server is slow"))
            await clock.sleep(1.5)
            seen["cycles_after_failure"] = loop.cycles
            loop.stop()

    anyio.run(main, backend_options={"loop_factory": VirtualTimeLoop})
    assert [c for c, _, _ in cluster.landed if c == "bind"] == ["bind", "bind"]
    assert seen["cycles_quiet"] == 2  # the bind, then one that found nothing to do
    assert seen["idle_quiet"] >= 18
    assert seen["cycles_after_pod"] == 3  # woken at once by the new pod
    assert seen["cycles_settled_again"] == 4
    assert seen["cycles_after_failure"] == 5
