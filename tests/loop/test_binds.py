"""The loop's binds (issue 17): a refusal forgets the assumed pod at once; a bind whose
reply was lost keeps it until the outcome is known; a 409 naming the node chosen is
success, one naming another node holds the pod's room there. Driven on the virtual
clock with a real cache and a fake cluster."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from scheduler.api.errors import (
    AmbiguousError,
    ApiError,
    ConflictError,
    NamespaceTerminatingError,
    NotFoundError,
    ServerError,
)
from scheduler.api.task import TaskStatus
from scheduler.app import builtin_registry
from scheduler.config import SchedulerConfiguration
from scheduler.dispatch import EvictPod, PodStatusPatch
from scheduler.dispatch.outcomes import RetryPolicy
from scheduler.framework.effects import Bind
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.loop.scheduler_loop import SchedulingLoop
from scheduler.ports import ClusterPorts, ObjectRef, PodState
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import cache_with, node, pod
from tests.fakes import FakeCluster

LOST = AmbiguousError("HTTP 504 Timeout: the request did not complete")
DEADLINE = RetryPolicy().deadline


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet()


@dataclass(frozen=True)
class Case:
    lose: ApiError | None = None
    """Raised after the bind landed (a lost reply)."""
    fail: ApiError | None = None
    """Raised instead of the bind (it did not land)."""
    reads: tuple[PodState | ApiError | None, ...] = (PodState("", False),)
    event_at: float | None = None
    """When the watch event showing the pod bound to n1 reaches the cache."""
    status: TaskStatus = TaskStatus.PENDING
    """The pod's status in the cache at the end."""
    node: str = ""
    """Its node in the cache at the end (if not given: n1, or none when pending)."""
    result: str = "error"
    """The ``sluice_bind_total`` result."""
    outcome: str | None = None
    """The ``scheduler_api_ambiguous_resolved_total`` outcome, if ambiguous."""
    reads_made: int | None = None
    said: bool = False
    """The pod's ``PodScheduled`` condition was written (False, SchedulerError) before
    the bind was forgotten: only for a refusal, when the pod is known not to be bound."""
    warned: bool = False
    """A ``FailedScheduling`` Event was recorded for the pod."""


CASES = {
    "bound-reply-lost-read-shows-it": Case(
        lose=LOST,
        reads=(PodState("n1", False),),
        status=TaskStatus.BINDING,
        result="ok",
        outcome="took_effect",
        reads_made=1,
    ),
    "bound-reply-lost-event-shows-it": Case(
        lose=LOST,
        reads=(ServerError("cannot reach the API server"),),
        event_at=1.0,
        status=TaskStatus.RUNNING,
        result="ok",
        outcome="took_effect",
    ),
    "not-bound-read-shows-it-unbound": Case(
        fail=LOST, status=TaskStatus.PENDING, outcome="did_not", reads_made=1
    ),
    "not-bound-read-shows-it-elsewhere": Case(  # another replica's bind: its room held there
        fail=AmbiguousError("connection reset"),
        reads=(PodState("n2", False),),
        status=TaskStatus.BINDING,
        node="n2",
        result="elsewhere",
        outcome="did_not",
    ),
    "not-bound-read-shows-it-gone": Case(fail=LOST, reads=(None,), outcome="did_not"),
    "unknown-at-the-deadline": Case(
        lose=LOST, reads=(ServerError("cannot reach the API server"),), outcome="unknown"
    ),
    "409-naming-the-node-chosen": Case(
        fail=ConflictError(
            'Operation cannot be fulfilled on pods/binding "p": pod default/p is already '
            'assigned to node "n1"'
        ),
        status=TaskStatus.BINDING,
        result="ok",
        reads_made=0,
    ),
    "409-naming-another-node": Case(  # another replica's bind: its room held there
        fail=ConflictError('pod default/p is already assigned to node "n2"'),
        status=TaskStatus.BINDING,
        node="n2",
        result="elsewhere",
        reads_made=0,
    ),
    "409-of-a-changed-pod": Case(
        fail=ConflictError(
            'Operation cannot be fulfilled on pods "p": the object has been modified'
        ),
        reads_made=0,
    ),
    "refused": Case(
        fail=ServerError("injected failure of bind"), reads_made=0, said=True, warned=True
    ),
    "refused-its-namespace-being-deleted": Case(  # nothing said: the pod's deletion follows
        fail=NamespaceTerminatingError(
            'HTTP 403 Forbidden: pods "p" is forbidden: unable to create new content in '
            "namespace default because it is being terminated"
        ),
        reads_made=0,
    ),
    "gone": Case(fail=NotFoundError('pods "p" not found'), result="gone", reads_made=0),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bind_outcomes(case: Case) -> None:
    cache = cache_with(node("n1", cpu="2"), node("n2", cpu="2"), pod("p", cpu="1"))
    cluster = FakeCluster(pods={"p": list(case.reads)})
    if case.lose is not None:
        cluster.lose[("bind", "p")] = [case.lose]
    if case.fail is not None:
        cluster.fail[("bind", "p")] = [case.fail]
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    config = SchedulerConfiguration(actions=())
    loop = SchedulingLoop(cache, builtin_registry().resolve(config), ports)
    task = cache.tasks["default/p"].clone()
    during: list[TaskStatus] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            await loop._apply([Bind(task, "n1")], CycleReport(1, 0.0))
            await anyio.sleep(0.1)  # the call has failed; no read yet
            during.append(cache.tasks["default/p"].status)
            if case.event_at is not None:
                await anyio.sleep(case.event_at)
                cache.handle("Pod", "MODIFIED", pod("p", cpu="1", node="n1"))
            await loop.binds.drain()

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
    live = cache.tasks.get("default/p")
    assert live is not None and live.status is case.status
    patches = [payload for call, name, payload in cluster.landed if call == "patch"]
    if case.said:
        [patch] = patches
        [condition] = patch["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PodScheduled",
            "False",
            "SchedulerError",
        )
        assert condition["message"] == f"Binding rejected: {case.fail}"
    else:
        assert patches == []
    warnings = [e for e in cluster.events if e.reason == "FailedScheduling"]
    assert len(warnings) == int(case.warned)
    where = case.node or ("" if case.status is TaskStatus.PENDING else "n1")
    assert live.node_name == where
    assert cache.nodes["n1"].used.get("cpu") == (1000 if where == "n1" else 0)
    registry = loop.metrics.registry
    assert registry.get_sample_value("sluice_bind_total", {"result": case.result}) == 1
    if case.outcome is not None:
        # The assumption was kept while the outcome was unknown.
        assert during == [TaskStatus.BINDING]
        assert registry.get_sample_value("scheduler_api_ambiguous_total", {"call": "bind"}) == 1
        resolved = registry.get_sample_value(
            "scheduler_api_ambiguous_resolved_total", {"call": "bind", "outcome": case.outcome}
        )
        assert resolved == 1
    if case.reads_made is not None:
        assert sum(1 for c in cluster.calls if c[0] == "read") == case.reads_made
    if case.outcome == "unknown":
        assert clock.now() >= DEADLINE
    scheduled = [e for e in cluster.events if e.reason == "Scheduled"]
    assert len(scheduled) == (1 if case.result == "ok" else 0)


REFUSED = ServerError("HTTP 403 Forbidden: admission webhook denied the binding")


def _binds_tried(cluster: FakeCluster, seconds: float) -> list[float]:
    """Run the loop (default actions) on the virtual clock for ``seconds`` with one node
    and one pending pod ``p``; the times its binds were tried."""
    cache = cache_with(node("n1", cpu="2"), pod("p", cpu="1"))
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    loop = SchedulingLoop(cache, builtin_registry().resolve(SchedulerConfiguration()), ports)
    tried: list[float] = []
    bind = cluster.bind

    async def timed(ref: Any, node_name: str, annotations: Any) -> None:
        tried.append(round(clock.now(), 3))
        await bind(ref, node_name, annotations)

    cluster.bind = timed  # type: ignore[method-assign]

    async def main() -> None:
        # (a bound on cycles too: a loop that retries at once never lets virtual time pass)
        await loop.run(should_stop=lambda r: clock.now() >= seconds or r.number >= 1000)

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
    return tried


def test_a_pod_whose_binds_are_refused_backs_off() -> None:
    """A refused bind (a webhook's denial, RBAC, a namespace being deleted) is not tried
    again in the next cycle, milliseconds later, but after the job's backoff: 1 s,
    doubling with each refusal in a row, as kube-scheduler backs off a pod whose bind
    failed."""
    cluster = FakeCluster(always={("bind", "p"): REFUSED})
    tried = _binds_tried(cluster, 20.0)
    gaps = [round(b - a) for a, b in itertools.pairwise(tried)]
    assert gaps == [1, 2, 4, 8], tried


def test_a_bind_refused_once_is_tried_again_after_a_second() -> None:
    cluster = FakeCluster(fail={("bind", "p"): [REFUSED]})
    tried = _binds_tried(cluster, 5.0)
    assert len(tried) == 2 and round(tried[1] - tried[0]) == 1, tried
    assert [name for call, name, _ in cluster.landed if call == "bind"] == ["p"]


ASSIGNED_TO_N2 = ConflictError(
    'Operation cannot be fulfilled on pods/binding "p": pod default/p is already assigned '
    'to node "n2"'
)


@pytest.mark.parametrize(
    "events_show_it",
    [False, True],
    ids=["the-events-have-not-shown-it", "the-events-showed-it-after-the-snapshot"],
)
def test_a_pod_bound_elsewhere_keeps_its_room_there_and_is_not_bound_again(
    events_show_it: bool,
) -> None:
    """Another replica bound p to n2 (a leader that outlived its Lease). This one's cycle
    decided p on n1, from a snapshot that showed p pending; its bind is answered 409
    naming n2. That is knowledge: p holds n2's room from then on (q and r, coming next,
    both go to n1, neither to n2) and is not bound again. Either the events have not
    shown p bound yet (the 409 is all there is to know), or they showed it after the
    cycle's snapshot (the bind decided on the older view must not move p off n2)."""
    cache = cache_with(node("n1", cpu="2"), node("n2", cpu="1"), pod("p", cpu="1"))
    stale = cache.tasks["default/p"].clone()  # as the cycle's snapshot showed it
    if events_show_it:
        cache.handle("Pod", "MODIFIED", pod("p", cpu="1", node="n2"))
    cluster = FakeCluster(always={("bind", "p"): ASSIGNED_TO_N2})
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    loop = SchedulingLoop(cache, builtin_registry().resolve(SchedulerConfiguration()), ports)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            await loop._apply([Bind(stale, "n1")], CycleReport(1, 0.0))
            await loop.binds.drain()
        for name in ("q", "r"):
            cache.handle("Pod", "ADDED", pod(name, cpu="1"))
        await loop.run(should_stop=lambda r: clock.now() >= 5.0 or r.number >= 100)

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
    binds = [(name, to) for call, name, to in cluster.calls if call == "bind"]
    assert [to for name, to in binds if name == "p"] == ["n1"], binds  # never again
    landed = sorted((name, to) for call, name, to in cluster.landed if call == "bind")
    assert landed == [("q", "n1"), ("r", "n1")]  # n2's room is p's
    live = cache.tasks["default/p"]
    assert live.node_name == "n2" and cache.nodes["n2"].used.get("cpu") == 1000
    assert live.status is (TaskStatus.RUNNING if events_show_it else TaskStatus.BINDING)


def test_a_binding_an_eviction_of_its_pod_took_the_place_of_is_forgotten() -> None:
    """The binding of p waits in p's line behind a status patch in flight; an eviction of
    p comes and takes its place (the dispatcher's relevances). The binding is never sent:
    p is forgotten (pending, n1's room free), not taken for bound, nor for bound on no
    node."""
    cache = cache_with(node("n1", cpu="2"), pod("p", cpu="1"))
    cluster = FakeCluster()
    cluster.slow[("patch", "p")] = 1.0
    clock = VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    loop = SchedulingLoop(cache, builtin_registry().resolve(SchedulerConfiguration()), ports)
    task = cache.tasks["default/p"].clone()
    ref = ObjectRef.of_pod(task)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            loop.dispatcher.attach(tg)
            loop.dispatcher.submit(PodStatusPatch(ref, {"nominatedNodeName": ""}))
            await anyio.sleep(0.1)
            await loop._apply([Bind(task, "n1")], CycleReport(1, 0.0))
            await anyio.sleep(0.1)
            await loop.dispatcher.call(EvictPod(ref, shown=lambda: False))
            await loop.binds.drain()

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": VirtualTimeLoop})
    assert [call for call, _, _ in cluster.calls] == ["patch", "evict"]
    live = cache.tasks["default/p"]
    assert (live.status, live.node_name) == (TaskStatus.PENDING, "")
    assert cache.nodes["n1"].used.get("cpu") == 0
    registry = loop.metrics.registry
    assert registry.get_sample_value("sluice_bind_total", {"result": "superseded"}) == 1
    assert registry.get_sample_value("sluice_bind_total", {"result": "ok"}) is None
