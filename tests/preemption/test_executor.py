"""PreemptionExecutor (DESIGN §4, issue 3 point 4) driven directly, on the virtual clock.

A real :class:`SchedulerCache` holds the cluster and a real scheduling queue
(:class:`~scheduler.loop.queue.JobQueue`) the gates and backoffs the executor reports; the
ports are a small fake that records every call in order, can be slowed down (virtual
seconds) and can fail a given call once or always, with ServerError or NotFoundError.
Effects are built as the preempt action builds them (Evict with its preemptor, then
Nominate), on clones of the cache's tasks as a session would hold them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import Snapshot
from scheduler.api.core_objects import task_from_pod
from scheduler.api.errors import AmbiguousError, NotFoundError, ServerError
from scheduler.api.holds import HoldKind, QueueView
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache import SchedulerCache
from scheduler.dispatch import ApiDispatcher
from scheduler.framework.effects import (
    ClearNomination,
    Dissolution,
    Effect,
    Evict,
    EvictReason,
    Nominate,
    Preemption,
    VictimBundle,
)
from scheduler.logging import quiet
from scheduler.loop.queue import JobQueue
from scheduler.loop.queue.job_backoff import FIRST_DELAY
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, ObjectRef, PodState
from scheduler.preemption import PreemptionExecutor
from scheduler.preemption.executor import PreemptionRun, preemptor_message
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, node, pod, pod_group
from tests.dra_builders import claim, claims_spec
from tests.fakes import FakeCluster

Obj = dict[str, Any]
PREEMPTED = EvictReason.PREEMPTED
MESSAGE = "sluice: preempting to accommodate a higher priority pod"
CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": MESSAGE,
}


@pytest.fixture(autouse=True)
def _log_to_the_live_stderr() -> None:
    """``sluice simulate`` (run by tests/test_scenarios.py under capsys) leaves structlog
    printing to a stderr that pytest has closed since; a warning logged by the executor
    would then raise inside its task group. Point the logs at the current stderr."""
    quiet()


# Fakes ----------------------------------------------------------------------------------------


@dataclass
class Rig:
    cache: SchedulerCache
    cluster: FakeCluster
    metrics: Metrics
    executor: PreemptionExecutor
    queue: JobQueue
    wakes: list[float]
    objects: dict[str, Obj]

    def task(self, name: str) -> TaskInfo:
        """The task of pod ``default/name`` as a session holds it (a clone)."""
        return self.cache.tasks[f"default/{name}"].clone()

    def live(self, name: str) -> TaskInfo | None:
        return self.cache.tasks.get(f"default/{name}")

    def preemption(self, preemptor: str, node: str, *victims: str) -> list[Effect]:
        """One Preemption effect, as a statement commits it: ``preemptor`` nominated to
        ``node`` and ``victims`` evicted for it."""
        p = self.task(preemptor)
        evictions = tuple(
            Evict(self.task(v), self.task(v).node_name, PREEMPTED, preemptor=p) for v in victims
        )
        return [Preemption((Nominate(p, node),), evictions)]

    async def handle(self, effects: list[Effect]) -> None:
        """Hand ``effects`` to the executor as the loop does: each assumed through the
        ledger (the cache) in order, then the calls handed on."""
        displaced: dict[str, Sequence[TaskInfo]] = {}
        for e in effects:
            displaced.update(self.cache.assume(e))
        await self.executor.handle(effects, displaced)

    def view(self) -> QueueView:
        """The queue's view as the next cycle would take it now."""
        return self.snapshot().queue

    def snapshot(self) -> Snapshot:
        """The next cycle's snapshot, as the loop takes it (with the queue's view)."""
        snap = self.cache.snapshot()
        snap.queue = self.queue.view(anyio.current_time(), self.cache.generation, set(), snap.jobs)
        return snap

    def delete(self, name: str) -> None:
        """Feed the cache the DELETED event of pod ``default/name``."""
        self.cache.handle("Pod", "DELETED", self.objects[name])

    def gated(self, name: str) -> bool:
        """Is the job of pod ``default/name`` behind a gate, as the next cycle would see?"""
        return self.cache.tasks[f"default/{name}"].job_id in gated(self.view())

    def job(self, name: str) -> str:
        return self.task(name).job_id

    def sample(self, metric: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(metric, labels) or 0.0

    def executions(self, result: str) -> float:
        return self.sample("scheduler_preemption_goroutines_execution_total", result=result)


def rig(
    *objects: Obj, async_enabled: bool = True, concurrency: int = 8, gate_timeout: float = 60.0
) -> Rig:
    cache = cache_with(*objects)
    cluster = FakeCluster()
    metrics = Metrics()
    wakes: list[float] = []
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    queue = JobQueue(
        clock, cluster, metrics, wake=lambda: wakes.append(clock.now()), gate_timeout=gate_timeout
    )
    executor = PreemptionExecutor(
        cache,
        ApiDispatcher(ports, metrics, concurrency=concurrency, on_error=lambda *_: None),
        metrics,
        gates=queue,
        async_enabled=async_enabled,
        concurrency=concurrency,
    )
    cache.on_pod_deleted.append(queue.victim_gone)
    cache.on_devices_released.append(queue.devices_released)
    named = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Pod"}
    return Rig(cache, cluster, metrics, executor, queue, wakes, named)


def gated(view: QueueView) -> frozenset[str]:
    """The jobs ``view`` shows behind a preemption's gate."""
    return frozenset(j for j, h in view.holds.items() if h.kind is HoldKind.EVICTIONS)


def run(body: Callable[[Rig], Awaitable[None]], r: Rig) -> None:
    """Run ``body(r)`` on a virtual-time loop inside a task group the executor is attached
    to; background tasks still running at the end are cancelled."""

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            r.executor.attach(tg)
            await body(r)
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})


async def settle() -> None:
    """Let every task that can run without time passing run."""
    for _ in range(50):
        await anyio.sleep(0)


def now() -> float:
    return anyio.current_time()


def one_victim(**kw: Any) -> Rig:
    """n1 (2 CPU) full with ``low`` (priority 1); ``high`` (priority 100) pending."""
    return rig(
        node("n1", cpu="2"),
        pod("low", cpu="2", node="n1", priority=1),
        pod("high", cpu="2", priority=100),
        **kw,
    )


def two_victims(**kw: Any) -> Rig:
    """n1 (2 CPU) full with ``low-a`` and ``low-b``; ``high`` (2 CPU) pending."""
    return rig(
        node("n1", cpu="2"),
        pod("low-a", cpu="1", node="n1", priority=1),
        pod("low-b", cpu="1", node="n1", priority=1),
        pod("high", cpu="2", priority=100),
        **kw,
    )


# The protocol, step by step -------------------------------------------------------------------


def test_cache_assumes_and_gate_closes_before_any_call() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.latency["patch"] = 1.0
        await r.handle(r.preemption("high", "n1", "low"))
        # handle returned without awaiting a single API call
        assert now() == 0.0
        assert r.gated("high")
        assert r.executor.in_flight >= 1
        low, high = r.live("low"), r.live("high")
        assert low is not None and low.status is TaskStatus.RELEASING
        assert high is not None
        assert (high.status, high.node_name, high.nominated_node) == (
            TaskStatus.PIPELINED,
            "n1",
            "n1",
        )
        # the next cycle's snapshot already accounts for both
        snap = r.snapshot()
        assert r.job("high") in gated(snap.queue)
        n1 = snap.nodes["n1"]
        assert n1.releasing.to_dict().get("cpu") == 2000
        assert n1.nominated.to_dict().get("cpu") == 2000

    run(body, r)


def test_victim_gets_disruption_target_then_is_deleted_then_preemptor_nominated() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        assert r.cluster.calls == [
            ("patch", "low", {"conditions": [CONDITION]}),
            ("evict", "low", None),
            ("patch", "high", {"nominatedNodeName": "n1"}),
        ]
        event, preempting = r.cluster.events
        assert (preempting.type, preempting.reason) == ("Normal", "Preempting")
        assert preempting.regarding == ObjectRef("Pod", "default", "high", "default/high")
        assert preempting.message == (
            "preempting 1 pod(s) to run on node n1: default/low; no gang broken"
        )
        assert (event.type, event.reason) == ("Normal", "Preempted")
        assert event.regarding == ObjectRef("Pod", "default", "low", "default/low")
        assert event.related == ObjectRef("Pod", "default", "high", "default/high")
        assert "default/high" in event.message and "n1" in event.message
        assert r.executions("success") == 1
        assert r.executions("error") == 0
        assert r.sample("scheduler_preemption_attempts_total") == 1
        assert r.sample("scheduler_preemption_victims_count", bundle="pod") == 1
        assert r.sample("scheduler_preemption_victims_sum", bundle="pod") == 1

    run(body, r)


def test_gate_opens_only_when_the_last_victims_deletion_is_seen() -> None:
    r = two_victims()

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low-a", "low-b"))
        await settle()
        assert len(r.cluster.calls) == 5  # two conditions, two deletes, one nomination
        assert r.gated("high"), "calls done, but no deletion seen yet"
        assert r.wakes == []
        r.delete("low-a")
        assert r.gated("high"), "one victim still there"
        assert r.wakes == []
        r.delete("low-b")
        assert not r.gated("high")
        assert not r.queue.gates()
        assert len(r.wakes) == 1
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PIPELINED
        await settle()
        assert r.executor.in_flight == 0

    run(body, r)


@pytest.mark.parametrize("extended", [False, True], ids=["its-claim", "its-extended-claim"])
def test_gate_waits_for_the_victims_devices_to_be_released(extended: bool) -> None:
    """A victim holding DRA devices: its deletion is not enough, the claim controller must
    have released its claim (reservation removed) before the preemptor goes on. The claim
    made for a victim's extended resources (KEP-5004) goes with the pod (the garbage
    collector deletes it): its deletion releases the devices."""
    held = claim("c", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["low"])
    victim = pod("low", cpu="2", node="n1", priority=1, resourceClaims=claims_spec("c"))
    if extended:
        held = claim(
            "low-extended-resources-abcde",
            allocated=[("container-0-request-1", "gpu-0")],
            node="n1",
            reserved_for=["low"],
            owner_pod="low",
        )
        held["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
        requests = {"cpu": "2", "example.com/gpu": "1"}
        victim = pod(
            "low",
            node="n1",
            priority=1,
            containers=[{"name": "main", "resources": {"requests": requests}}],
        )
    r = rig(node("n1", cpu="2"), held, victim, pod("high", cpu="2", priority=100))

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        r.delete("low")
        assert r.gated("high"), "the victim's claim still holds its device"
        if extended:
            r.cache.handle("ResourceClaim", "DELETED", held)
        else:
            released = {**held, "status": {"allocation": None}}
            r.cache.handle("ResourceClaim", "MODIFIED", released)
        assert not r.gated("high")
        assert len(r.wakes) == 1

    run(body, r)


def test_deletion_seen_before_the_calls_end_opens_the_gate_when_they_end() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.latency["patch"] = 1.0  # the nomination patch is slow
        await r.handle(r.preemption("high", "n1", "low"))
        await anyio.sleep(1.5)  # condition patched, victim deleted; nomination patch running
        assert [c for c, _, _ in r.cluster.calls] == ["patch", "evict", "patch"]
        r.delete("low")
        assert r.gated("high"), "the calls have not ended"
        await anyio.sleep(1.0)
        assert not r.gated("high")
        assert len(r.wakes) == 1

    run(body, r)


def test_gate_opens_after_the_timeout_when_the_deletion_is_never_seen() -> None:
    r = one_victim(gate_timeout=5.0)

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        assert r.queue.next_deadline(now()) == 5.0, "the loop is woken when it is due"
        await anyio.sleep(4.9)
        assert r.gated("high")
        await anyio.sleep(0.2)
        assert not r.gated("high")
        assert r.wakes == [], "no event opened it: the loop woke at the deadline"
        assert r.executor.in_flight == 0
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PIPELINED, (
            "the timeout opens the gate; it does not withdraw the nomination"
        )

    run(body, r)


@pytest.mark.parametrize("call", ["patch", "evict"])
def test_victim_not_found_counts_as_done(call: str) -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.always[(call, "low")] = NotFoundError('pods "low" not found')
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        assert ("patch", "high", {"nominatedNodeName": "n1"}) in r.cluster.calls
        assert r.executions("success") == 1
        assert r.executions("error") == 0
        # the victim is gone: nothing more to wait for
        assert not r.gated("high")
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PIPELINED

    run(body, r)


def test_failed_delete_opens_the_gate_reverts_and_clears_the_nomination() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "low")] = ServerError("injected failure of delete")
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        assert not r.gated("high")
        assert not r.queue.gates()
        assert len(r.wakes) == 1
        high, low = r.live("high"), r.live("low")
        assert high is not None and low is not None
        assert (high.status, high.node_name, high.nominated_node) == (TaskStatus.PENDING, "", "")
        assert low.status is TaskStatus.RUNNING, "the victim holds its room again"
        assert r.cluster.of("high") == [("patch", {"nominatedNodeName": None})]
        assert r.executions("error") == 1
        assert r.executions("success") == 0
        assert [e.reason for e in r.cluster.events] == []
        # nothing of the preemption is left in the next snapshot
        snap = r.snapshot()
        assert gated(snap.queue) == frozenset()
        assert snap.nodes["n1"].nominated.is_zero()
        assert snap.nodes["n1"].releasing.is_zero()
        # the job may not preempt again for a while (a backoff), then may
        assert snap.queue.holds["default/high"].kind is HoldKind.NO_PREEMPTION
        assert r.queue.next_deadline(now()) == now() + FIRST_DELAY
        await anyio.sleep(FIRST_DELAY)
        await settle()
        assert "default/high" not in r.view().holds
        assert "default/high" not in r.queue.backing_off(HoldKind.NO_PREEMPTION)
        assert r.executor.in_flight == 0

    run(body, r)


def test_failure_of_the_second_delete_keeps_the_first_victim_releasing() -> None:
    r = two_victims()

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "low-b")] = ServerError("boom")
        await r.handle(r.preemption("high", "n1", "low-a", "low-b"))
        await settle()
        low_a, low_b, high = r.live("low-a"), r.live("low-b"), r.live("high")
        assert low_a is not None and low_b is not None and high is not None
        assert low_a.status is TaskStatus.RELEASING, "its delete succeeded"
        assert low_b.status is TaskStatus.RUNNING
        assert high.status is TaskStatus.PENDING
        assert not r.gated("high")
        assert r.executions("error") == 1

    run(body, r)


def test_victims_are_evicted_at_once() -> None:
    """Each victim's calls run in order (condition, then delete); victims run side by side,
    so a preemption's calls take one victim's time, not their sum."""
    r = two_victims()

    async def body(r: Rig) -> None:
        r.cluster.latency.update({"patch": 1.0, "evict": 1.0})
        await r.handle(r.preemption("high", "n1", "low-a", "low-b"))
        await settle()
        assert r.executor.calls_in_flight == 1
        await r.executor.calls_drained()
        assert now() == 3.0  # conditions, deletes, nomination
        assert r.cluster.most_running == 2
        for victim in ("low-a", "low-b"):
            assert [c for c, _ in r.cluster.of(victim)] == ["patch", "evict"]
        assert r.executions("success") == 1

    run(body, r)


def test_a_failed_first_victim_does_not_stop_the_second() -> None:
    r = two_victims()

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "low-a")] = ServerError("boom")
        await r.handle(r.preemption("high", "n1", "low-a", "low-b"))
        await settle()
        low_a, low_b = r.live("low-a"), r.live("low-b")
        assert low_a is not None and low_b is not None
        assert low_a.status is TaskStatus.RUNNING, "its delete failed: it holds its room"
        assert low_b.status is TaskStatus.RELEASING, "its delete went through"
        assert ("evict", None) in r.cluster.of("low-b")
        assert r.executions("error") == 1

    run(body, r)


def test_a_crash_in_the_calls_is_handled_as_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a call (not an ApiError) reverts and opens the gate like a failed call; the
    task group that owns the executor carries on."""
    r = two_victims()

    async def broken(pod: ObjectRef, grace_period_seconds: int | None = None) -> None:
        if pod.name == "low-b":
            raise RuntimeError("bug")

    monkeypatch.setattr(r.cluster, "evict", broken)

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low-a", "low-b"))
        await settle()
        low_a, low_b, high = r.live("low-a"), r.live("low-b"), r.live("high")
        assert low_a is not None and low_b is not None and high is not None
        assert low_a.status is TaskStatus.RELEASING
        assert low_b.status is TaskStatus.RUNNING
        assert high.status is TaskStatus.PENDING
        assert not r.gated("high")
        assert r.executions("error") == 1
        assert r.executor.calls_in_flight == 0

    run(body, r)


def test_only_the_first_delete_fails_then_the_retry_succeeds() -> None:
    """What ``--api-failures`` cannot say: the first delete fails, the next one works."""
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.fail[("evict", "low")] = [ServerError("once")]
        effects = r.preemption("high", "n1", "low")
        await r.handle(effects)
        await settle()
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PENDING
        assert not r.gated("high")
        # the next cycle decides the same preemption again
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PIPELINED
        assert r.gated("high")
        assert [c for c, _, _ in r.cluster.calls] == [
            "patch",
            "evict",
            "patch",  # condition, failed delete, condition back to False
            "patch",  # cleared nomination
            "patch",
            "evict",
            "patch",  # condition, delete, nomination
        ]
        assert r.cluster.calls[-1] == ("patch", "high", {"nominatedNodeName": "n1"})
        assert (r.executions("error"), r.executions("success")) == (1, 1)
        r.delete("low")
        assert not r.gated("high")

    run(body, r)


def test_failed_nomination_patch_reverts_too() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.fail[("patch", "high")] = [ServerError("boom")]
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PENDING
        assert not r.gated("high")
        assert r.cluster.of("high")[-1] == ("patch", {"nominatedNodeName": None})
        assert r.executions("error") == 1

    run(body, r)


# Lost replies (issue 17) ----------------------------------------------------------------------

LOST = AmbiguousError("HTTP 500 InternalError")


@pytest.mark.parametrize(
    ("landed", "read", "evicted"),
    [
        (True, None, True),
        (True, PodState("n1", True), True),
        (False, PodState("n1", False), False),
    ],
    ids=["deleted-read-shows-it-gone", "deleted-read-shows-it-terminating", "not-deleted"],
)
def test_a_delete_whose_reply_was_lost_is_judged_by_what_took_effect(
    landed: bool, read: PodState | None, evicted: bool
) -> None:
    """A victim whose delete took effect, though its reply was lost, counts as evicted:
    not evicted again, no revert, the nomination written; one whose delete did not is a
    failure like any other."""
    r = one_victim()

    async def body(r: Rig) -> None:
        if landed:
            r.cluster.lose[("evict", "low")] = [LOST]
        else:
            r.cluster.fail[("evict", "low")] = [LOST]
        r.cluster.pods["low"] = [read]
        await r.handle(r.preemption("high", "n1", "low"))
        await anyio.sleep(1.0)  # past the resolver's first read
        await settle()
        evicts = [c for c in r.cluster.calls if c[0] == "evict"]
        assert len(evicts) == 1
        high, low = r.live("high"), r.live("low")
        assert high is not None and low is not None
        resolved = r.sample(
            "scheduler_api_ambiguous_resolved_total",
            call="evict",
            outcome="took_effect" if evicted else "did_not",
        )
        assert (r.sample("scheduler_api_ambiguous_total", call="evict"), resolved) == (1, 1)
        if evicted:
            assert high.status is TaskStatus.PIPELINED
            assert low.status is TaskStatus.RELEASING
            assert r.gated("high"), "waits for the deletion to be seen"
            assert r.cluster.calls[-1] == ("patch", "high", {"nominatedNodeName": "n1"})
            assert (r.executions("success"), r.executions("error")) == (1, 0)
            assert [e.reason for e in r.cluster.events] == ["Preempted", "Preempting"]
            r.delete("low")
            assert not r.gated("high")
        else:
            assert high.status is TaskStatus.PENDING
            assert low.status is TaskStatus.RUNNING, "the victim holds its room again"
            assert not r.gated("high")
            assert (r.executions("success"), r.executions("error")) == (0, 1)
            assert r.cluster.of("low")[-1][1]["conditions"][0]["status"] == "False"

    run(body, r)


@pytest.mark.parametrize("pod", ["low", "high"], ids=["disruption-target", "nomination"])
def test_a_status_patch_whose_reply_was_lost_is_written_again(pod: str) -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cluster.lose[("patch", pod)] = [LOST]
        await r.handle(r.preemption("high", "n1", "low"))
        await anyio.sleep(1.0)
        await settle()
        patches = [p for c, p in r.cluster.of(pod) if c == "patch"]
        assert len(patches) == 2 and patches[0] == patches[1]
        assert (r.executions("success"), r.executions("error")) == (1, 0)
        assert r.cluster.calls[-1] == ("patch", "high", {"nominatedNodeName": "n1"})
        assert (
            r.sample("scheduler_api_ambiguous_resolved_total", call="patch", outcome="took_effect")
            == 1
        )
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PIPELINED

    run(body, r)


# Async off ------------------------------------------------------------------------------------


def test_async_off_awaits_the_calls_inside_handle() -> None:
    r = one_victim(async_enabled=False)

    async def body(r: Rig) -> None:
        r.cluster.latency["evict"] = 2.0
        await r.handle(r.preemption("high", "n1", "low"))
        assert now() == 2.0, "handle waited for the delete"
        assert [c for c, _, _ in r.cluster.calls] == ["patch", "evict", "patch"]
        assert r.executions("success") == 1
        assert r.gated("high"), "the gate still waits for the deletion to be seen"
        r.delete("low")
        assert not r.gated("high")

    run(body, r)


def test_async_off_failure_is_reverted_before_handle_returns() -> None:
    r = one_victim(async_enabled=False)

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "low")] = ServerError("boom")
        await r.handle(r.preemption("high", "n1", "low"))
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PENDING
        assert not r.gated("high")
        assert r.executions("error") == 1
        await settle()
        assert r.cluster.of("high") == [("patch", {"nominatedNodeName": None})]

    run(body, r)


# Preemptor deleted, concurrency, several preemptions -------------------------------------------


def test_preemptor_deleted_while_its_preemption_runs_wedges_nothing() -> None:
    r = one_victim(gate_timeout=30.0)

    async def body(r: Rig) -> None:
        r.cluster.latency["evict"] = 2.0
        r.cluster.always[("patch", "high")] = NotFoundError('pods "high" not found')
        await r.handle(r.preemption("high", "n1", "low"))
        await anyio.sleep(1.0)
        job = r.job("high")
        r.delete("high")
        assert "default/high" not in r.cache.tasks
        await anyio.sleep(2.0)
        assert r.executions("success") == 1, "NotFound on the preemptor's patch is no failure"
        r.delete("low")
        assert job not in gated(r.view())
        assert not r.queue.gates()
        await settle()
        assert r.executor.in_flight == 0
        snap = r.snapshot()
        assert snap.nodes["n1"].nominated.is_zero()
        assert snap.nodes["n1"].tasks == {}

    run(body, r)


def test_preemptor_deleted_and_victim_never_seen_gone_gate_times_out() -> None:
    r = one_victim(gate_timeout=10.0)

    async def body(r: Rig) -> None:
        await r.handle(r.preemption("high", "n1", "low"))
        job = r.job("high")
        r.delete("high")
        await anyio.sleep(10.5)
        assert job not in gated(r.view())
        assert r.executor.in_flight == 0

    run(body, r)


def test_concurrency_is_bounded() -> None:
    objects: list[Obj] = [node("n1", cpu="3")]
    for i in range(3):
        objects.append(pod(f"low-{i}", cpu="1", node="n1", priority=1))
        objects.append(pod(f"high-{i}", cpu="1", priority=100))
    r = rig(*objects, concurrency=1)

    async def body(r: Rig) -> None:
        r.cluster.latency["evict"] = 1.0
        effects: list[Effect] = []
        for i in range(3):
            effects += r.preemption(f"high-{i}", "n1", f"low-{i}")
        await r.handle(effects)
        assert all(r.gated(f"high-{i}") for i in range(3))
        await anyio.sleep(3.5)
        assert r.cluster.most_running == 1
        assert r.executions("success") == 3
        evicts = [n for c, n, _ in r.cluster.calls if c == "evict"]
        assert evicts == ["low-0", "low-1", "low-2"], "in decision order"

    run(body, r)


def test_a_gang_gate_waits_for_every_preemption_of_the_job() -> None:
    r = rig(
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        pod_group("g", min_member=2),
        pod("low-1", cpu="1", node="n1", priority=1),
        pod("low-2", cpu="1", node="n2", priority=1),
        pod("g-0", cpu="1", priority=100, group="g"),
        pod("g-1", cpu="1", priority=100, group="g"),
    )

    async def body(r: Rig) -> None:
        assert r.job("g-0") == r.job("g-1")
        r.cluster.latency["evict"] = 1.0
        effects = r.preemption("g-0", "n1", "low-1") + r.preemption("g-1", "n2", "low-2")
        await r.handle(effects)
        assert len(r.queue.gates()) == 1
        await anyio.sleep(5.0)
        r.delete("low-1")
        assert r.gated("g-0")
        r.delete("low-2")
        assert not r.gated("g-0")
        assert len(r.wakes) == 1

    run(body, r)


def test_lower_priority_nominations_on_the_node_are_cleared() -> None:
    r = rig(
        node("n1", cpu="4"),
        pod("low", cpu="2", node="n1", priority=1),
        pod("other", cpu="2", node="n1", priority=1000),
        pod("lower", cpu="2", priority=10),
        pod("equal", cpu="2", priority=100),
        pod("high", cpu="2", priority=100),
    )

    async def body(r: Rig) -> None:
        r.cache.ledger.assume_nomination("default/lower", "n1")
        r.cache.ledger.assume_nomination("default/equal", "n1")
        await r.handle(r.preemption("high", "n1", "low"))
        await settle()
        assert r.cluster.of("lower") == [("patch", {"nominatedNodeName": None})]
        assert r.cluster.of("equal") == []
        lower, equal = r.live("lower"), r.live("equal")
        assert lower is not None and lower.status is TaskStatus.PENDING
        assert equal is not None and equal.status is TaskStatus.PIPELINED
        # the clearing comes before the victim's condition and delete
        assert r.cluster.calls[0] == ("patch", "lower", {"nominatedNodeName": None})

    run(body, r)


def test_clear_nomination_effect() -> None:
    r = one_victim()

    async def body(r: Rig) -> None:
        r.cache.ledger.assume_nomination("default/high", "n1")
        await r.handle([ClearNomination(r.task("high"), "n1")])
        high = r.live("high")
        assert high is not None and high.status is TaskStatus.PENDING
        await settle()
        assert r.cluster.calls == [("patch", "high", {"nominatedNodeName": None})]
        assert not r.queue.gates()

    run(body, r)


def test_constants_match_the_issue() -> None:
    assert L.DISRUPTION_TARGET == "DisruptionTarget"
    assert L.REASON_PREEMPTION == "PreemptionByScheduler"


def test_a_gang_gate_reopened_after_a_failure_is_not_miscounted_by_older_calls() -> None:
    """g-0's preemption fails at once, which opens the job's gate while g-1's preemption
    (same cycle) is still deleting (5 s). The next cycle preempts again for g-0 (its
    nomination patch takes 10 s) and closes a new gate. When every call has ended and the
    new victim's deletion is seen, the gate must open; it stays closed until the timeout."""
    r = rig(
        node("n1", cpu="1"),
        node("n2", cpu="1"),
        node("n3", cpu="1"),
        pod_group("g", min_member=2),
        pod("low-1", cpu="1", node="n1", priority=1),
        pod("low-2", cpu="1", node="n2", priority=1),
        pod("low-3", cpu="1", node="n3", priority=1),
        pod("g-0", cpu="1", priority=100, group="g"),
        pod("g-1", cpu="1", priority=100, group="g"),
        gate_timeout=60.0,
    )

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "low-1")] = ServerError("boom")
        r.cluster.slow[("evict", "low-2")] = 5.0
        first = r.preemption("g-0", "n1", "low-1") + r.preemption("g-1", "n2", "low-2")
        await r.handle(first)
        await settle()
        assert not r.gated("g-0"), "the failure opened the gate"
        # the next cycle: g-0 preempts low-3 on n3
        r.cluster.slow[("patch", "g-0")] = 10.0
        await r.handle(r.preemption("g-0", "n3", "low-3"))
        assert r.gated("g-0")
        await anyio.sleep(11.0)  # every call has ended: g-1's at 5 s, g-0's at 10 s
        assert r.cluster.of("g-0")[-1] == ("patch", {"nominatedNodeName": "n3"})
        assert r.executions("success") == 2
        r.delete("low-2")
        r.delete("low-3")
        assert not r.gated("g-0"), "calls ended and the victim is gone"

    run(body, r)


@pytest.mark.parametrize("async_enabled", [True, False])
@pytest.mark.parametrize("patch_latency", [0.0, 5.0])
def test_a_new_nomination_is_written_after_the_clear_decided_before_it(
    async_enabled: bool, patch_latency: float
) -> None:
    """A cycle withdraws ``mid``'s nomination to n1 and nominates it to n2 (a higher
    pod took n1): whatever the latency of each call, the API ends with n2, because the
    writes of one pod's nominatedNodeName land in the order they were decided."""
    r = rig(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod("low", cpu="2", node="n2", priority=1),
        pod("mid", cpu="2", priority=10),
        async_enabled=async_enabled,
    )
    r.cluster.latency["patch"] = patch_latency  # status patches slow, deletes fast

    async def body(r: Rig) -> None:
        r.cache.ledger.assume_nomination("default/mid", "n1")
        mid = r.task("mid")
        await r.handle([ClearNomination(mid, "n1"), *r.preemption("mid", "n2", "low")])
        await anyio.sleep(30)
        landed = [payload for call, name, payload in r.cluster.landed if name == "mid"]
        assert landed == [{"nominatedNodeName": None}, {"nominatedNodeName": "n2"}]

    run(body, r)


def _evict(name: str, bundle: str, *, group: str | None = None, reason: str = "preempted") -> Evict:
    task = task_from_pod(pod(name, node="n1", group=group))
    return Evict(task, "n1", EvictReason(reason), bundle=VictimBundle(bundle or "pod"))


@pytest.mark.parametrize(
    ("evictions", "expected"),
    [
        pytest.param(
            [_evict("a", "")],
            "preempting 1 pod(s) to run on node n1: default/a; no gang broken",
            id="a pod of its own",
        ),
        pytest.param(
            [_evict("s1", "safe", group="g")],
            "preempting 1 pod(s) to run on node n1: default/s1; no gang broken",
            id="a gang's surplus breaks nothing",
        ),
        pytest.param(
            [_evict("w1", "whole", group="g"), _evict("w2", "whole", group="g")],
            "preempting 2 pod(s) to run on node n1: default/w1, default/w2; "
            "gangs broken: default/g (2 pod(s))",
            id="a gang broken is named once",
        ),
        pytest.param(
            [_evict(f"p{i}", "whole", group=f"g{i % 2}", reason="reclaimed") for i in range(7)],
            "reclaiming 7 pod(s) to run on node n1: default/p0, default/p1, default/p2, "
            "default/p3, default/p4 and 2 more; "
            "gangs broken: default/g0 (4 pod(s)), default/g1 (3 pod(s))",
            id="reclaim, many victims, two gangs",
        ),
    ],
)
def test_preemptor_message_names_its_victims_and_the_gangs_it_broke(
    evictions: list[Evict], expected: str
) -> None:
    preemptor = task_from_pod(pod("high", priority=10))
    p = PreemptionRun(preemptor, "n1", [e.task for e in evictions], evictions)
    assert preemptor_message(p) == expected


# Dissolutions (the dissolve action's evictions, for no preemptor) ----------------------------


def broken_gang() -> Rig:
    """Gang ``g`` (minMember 3) runs ``g-0`` and ``g-1`` on n1; its third member is gone."""
    return rig(
        node("n1", cpu="4"),
        pod_group("g", min_member=3),
        pod("g-0", cpu="1", node="n1", group="g"),
        pod("g-1", cpu="1", node="n1", group="g"),
    )


def dissolution(r: Rig, *names: str) -> list[Effect]:
    """One Dissolution effect, as the dissolve action's statement commits it."""
    evictions = tuple(
        Evict(r.task(n), "n1", EvictReason.DISSOLVED, queue="default", bundle=VictimBundle.WHOLE)
        for n in names
    )
    return [Dissolution(r.job(names[0]), evictions)]


def test_a_dissolution_evicts_every_member_and_gates_the_gang_until_they_are_gone() -> None:
    r = broken_gang()
    dissolved = (
        "sluice: gang default/g ran below its minimum for longer than the grace period; "
        "what is left of it is evicted so that it can start again whole"
    )

    async def body(r: Rig) -> None:
        await r.handle(dissolution(r, "g-0", "g-1"))
        assert r.gated("g-0"), "the gang waits for its members to go before it is placed"
        await settle()
        for name in ("g-0", "g-1"):
            condition = {**CONDITION, "message": dissolved}
            assert r.cluster.of(name) == [("patch", {"conditions": [condition]}), ("evict", None)]
        assert [(e.reason, e.message) for e in r.cluster.events] == [("Dissolved", dissolved)] * 2
        assert r.sample("sluice_gangs_dissolved_total") == 1
        assert r.executions("success") == 0, "a dissolution is no preemption"
        job = r.job("g-0")
        r.delete("g-0")
        assert job in gated(r.view())
        r.delete("g-1")
        assert job not in gated(r.view())
        assert r.executor.in_flight == 0

    run(body, r)


def test_a_failed_dissolution_reverts_what_was_not_evicted_and_backs_off() -> None:
    r = broken_gang()

    async def body(r: Rig) -> None:
        r.cluster.always[("evict", "g-1")] = ServerError("boom")
        await r.handle(dissolution(r, "g-0", "g-1"))
        await settle()
        g0, g1 = r.live("g-0"), r.live("g-1")
        assert g0 is not None and g1 is not None
        assert g0.status is TaskStatus.RELEASING, "its eviction succeeded"
        assert g1.status is TaskStatus.RUNNING, "it holds its room again"
        assert not r.gated("g-1")
        hold = r.view().holds[r.job("g-1")]
        assert hold.kind is HoldKind.NO_PREEMPTION, "not dissolved again before the backoff"
        cancelled = {
            "type": "DisruptionTarget",
            "status": "False",
            "reason": "PreemptionCancelled",
            "message": "sluice: the eviction failed; the pod is not being preempted",
        }
        assert r.cluster.of("g-1")[-1] == ("patch", {"conditions": [cancelled]})

    run(body, r)


def test_dissolutions_and_preemptions_of_one_cycle_go_their_own_ways() -> None:
    r = rig(
        node("n1", cpu="4"),
        pod_group("g", min_member=3),
        pod("g-0", cpu="1", node="n1", group="g"),
        pod("low", cpu="3", node="n1", priority=1),
        pod("high", cpu="3", priority=100),
    )

    async def body(r: Rig) -> None:
        effects = r.preemption("high", "n1", "low") + dissolution(r, "g-0")
        await r.handle(effects)
        assert r.gated("high") and r.gated("g-0")
        await settle()
        assert r.cluster.of("high") == [("patch", {"nominatedNodeName": "n1"})]
        assert ("evict", None) in r.cluster.of("g-0")

    run(body, r)
