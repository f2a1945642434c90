"""The API dispatcher: one line of calls per object, newer calls taking the place of
older ones, one policy for lost replies, and status that never goes back in time
(issue 34 point 2, issue 40 point 3)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from scheduler.api.errors import AmbiguousError, ConflictError, ServerError
from scheduler.dispatch import (
    ApiDispatcher,
    BindPod,
    ObjectStatusPatch,
    PodStatusPatch,
    RetryPolicy,
    Ticket,
)
from scheduler.metrics import Metrics
from scheduler.ports import ClusterPorts, ObjectRef
from scheduler.sim.backend import SimBackend
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualClock, VirtualTimeLoop
from tests.builders import pod_group
from tests.fakes import FakeCluster

POD = ObjectRef("Pod", "default", "p", "uid-p")


def _dispatcher(cluster: Any, clock: Any = None) -> ApiDispatcher:
    clock = clock or VirtualClock()
    ports = ClusterPorts(cluster, cluster, cluster, cluster, clock, cluster)
    policy = RetryPolicy(first=0.25, cap=1.0, deadline=10.0)
    return ApiDispatcher(ports, Metrics(), concurrency=8, on_error=_crash, policy=policy)


def _crash(label: str, exc: BaseException) -> None:
    raise AssertionError(f"{label} crashed: {exc!r}")


def _run(main: Callable[[], Awaitable[None]]) -> None:
    anyio.run(main, backend_options={"loop_factory": VirtualTimeLoop})


def _condition(message: str) -> dict[str, Any]:
    return {"conditions": [{"type": "PodScheduled", "status": "False", "message": message}]}


def test_calls_of_one_object_run_one_at_a_time_in_order_whatever_their_latency() -> None:
    """Three status patches of one pod taking 1 s each, added at 0, 0.1 and 1.5 s (each
    while the one before runs): none starts before the one before it ended, and they land
    in the order they were added (concurrent writes let a quicker later one land first)."""
    cluster = FakeCluster()
    cluster.slow[("patch", "p")] = 1.0
    d = _dispatcher(cluster)
    ends: list[str] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            d.attach(tg)

            async def one(message: str, delay: float) -> None:
                await anyio.sleep(delay)
                await d.call(PodStatusPatch(POD, _condition(message)))
                ends.append(message)

            tg.start_soon(one, "first", 0.0)
            tg.start_soon(one, "second", 0.1)
            tg.start_soon(one, "third", 1.5)

    _run(main)
    assert cluster.most_running == 1
    landed = [p["conditions"][0]["message"] for _, _, p in cluster.landed]
    assert landed == ["first", "second", "third"]


def test_a_burst_of_status_writes_sends_the_first_and_the_last() -> None:
    """While a PodGroup's status write is on its way, four newer ones come: each takes the
    place of the one waiting before it, so two writes reach the server, the first and the
    newest, in that order; the ones replaced end as merged, unsent."""
    cluster = FakeCluster()
    cluster.latency["patch_status"] = 1.0
    d = _dispatcher(cluster)
    ref = ObjectRef("PodGroup", "default", "g", "uid-g")
    ended: list[tuple[str, bool]] = []

    def done(ticket: Ticket) -> None:
        ended.append((ticket.call.status["phase"], ticket.merged))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            d.attach(tg)
            for n in range(5):
                d.submit(ObjectStatusPatch(ref, {"phase": f"v{n}"}), done)
                await anyio.sleep(0.1)
            await d.drained()

    _run(main)
    assert [p["phase"] for _, _, p in cluster.landed] == ["v0", "v4"]
    assert sorted(ended) == [
        ("v0", False),
        ("v1", True),
        ("v2", True),
        ("v3", True),
        ("v4", False),
    ]


def test_a_lost_pod_patch_is_not_written_again_after_a_newer_one_came() -> None:
    """A pod status patch whose reply was lost is written again until known, but not
    once a newer patch of the pod waits: that one carries its content (conditions merged
    by type), so the older one is never sent after it."""
    cluster = FakeCluster()
    cluster.lose[("patch", "p")] = [AmbiguousError("reply lost")]
    d = _dispatcher(cluster)
    got: list[Any] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            d.attach(tg)

            async def older() -> None:
                got.append(await d.call(PodStatusPatch(POD, {"nominatedNodeName": "n1"})))

            async def newer() -> None:
                await anyio.sleep(0.1)  # while the older one's outcome is looked for
                got.append(await d.call(PodStatusPatch(POD, _condition("newer"))))

            tg.start_soon(older)
            tg.start_soon(newer)

    _run(main)
    sent = [p for c, _, p in cluster.calls if c == "patch"]
    assert sent == [
        {"nominatedNodeName": "n1"},
        {"nominatedNodeName": "n1", **_condition("newer")},
    ]
    assert got == [False, True]  # the older one superseded, the newer one written


def test_a_binding_makes_a_waiting_status_patch_of_its_pod_needless() -> None:
    """As kube-scheduler's relevances: a binding added while a status patch of the pod
    waits replaces it; a status patch added while the binding waits or runs is skipped."""
    cluster = FakeCluster()
    cluster.latency["patch"] = 1.0
    d = _dispatcher(cluster)
    results: dict[str, Any] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            d.attach(tg)

            async def call(name: str, delay: float, make: Callable[[], Any]) -> None:
                await anyio.sleep(delay)
                results[name] = await d.call(make())

            tg.start_soon(call, "first", 0.0, lambda: PodStatusPatch(POD, _condition("a")))
            tg.start_soon(call, "waiting", 0.1, lambda: PodStatusPatch(POD, _condition("b")))
            tg.start_soon(call, "bind", 0.2, lambda: BindPod(POD, "n1", {}, lambda: False))
            tg.start_soon(call, "late", 0.3, lambda: PodStatusPatch(POD, _condition("c")))

    _run(main)
    assert [c for c, _, _ in cluster.calls] == ["patch", "bind"]
    assert results == {"first": True, "waiting": None, "bind": "n1", "late": None}


# Status never goes back in time: resourceVersion preconditions ------------------------


def _store_with_group() -> tuple[ObjectStore, SimBackend, str]:
    clock = VirtualClock()
    store = ObjectStore(clock.wall)
    store.create(pod_group("g"))
    backend = SimBackend(store, clock, FaultInjector(ApiBehaviour(), clock))
    version = store.get("PodGroup", "default", "g")["metadata"]["resourceVersion"]
    return store, backend, version


def _ref(store: ObjectStore) -> ObjectRef:
    uid = store.get("PodGroup", "default", "g")["metadata"]["uid"]
    return ObjectRef("PodGroup", "default", "g", uid)


def _phase(store: ObjectStore) -> str:
    return str((store.get("PodGroup", "default", "g").get("status") or {}).get("phase"))


@pytest.mark.parametrize(
    "replica_b_view",
    ["before-a-wrote", "after-a-wrote"],
    ids=["new-leader-behind", "new-leader-caught-up"],
)
def test_a_new_leader_never_writes_over_a_newer_status_from_an_older_view(
    replica_b_view: str,
) -> None:
    """Two replicas across a failover, each with its own dispatcher. The old leader
    wrote Running; the new leader, whose events may lag behind, writes Inqueue against
    the version its view has. From a view before the old leader's write it is refused
    (its writer forgets it and compares again next cycle, with the newer view); from a
    view that has it, it lands."""
    store, backend, version = _store_with_group()
    ref = _ref(store)
    a, b = _dispatcher(backend), _dispatcher(backend)
    errors: list[Exception | None] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            a.attach(tg)
            b.attach(tg)
            await a.call(ObjectStatusPatch(ref, {"phase": "Running"}, version))
            seen = store.get("PodGroup", "default", "g")["metadata"]["resourceVersion"]
            view = version if replica_b_view == "before-a-wrote" else seen
            b.submit(
                ObjectStatusPatch(ref, {"phase": "Inqueue"}, view), lambda t: errors.append(t.error)
            )
            await b.drained()

    _run(main)
    if replica_b_view == "before-a-wrote":
        assert _phase(store) == "Running"
        assert isinstance(errors[0], ConflictError)
    else:
        assert _phase(store) == "Inqueue"
        assert errors == [None]


def test_consecutive_writes_go_against_the_version_the_last_reply_gave() -> None:
    """Two writes from one view (the first one's event not seen yet): the second goes
    against the version the first one's reply gave, not the view's, so it lands instead
    of conflicting with the dispatcher's own write; a write from a view that moved on
    (someone else wrote) goes against that view's."""
    store, backend, version = _store_with_group()
    ref = _ref(store)
    d = _dispatcher(backend)

    async def main() -> None:
        await d.call(ObjectStatusPatch(ref, {"phase": "Inqueue"}, version))
        await d.call(ObjectStatusPatch(ref, {"phase": "Running"}, version))
        assert _phase(store) == "Running"
        store.patch("PodGroup", "default", "g", {"metadata": {"labels": {"x": "y"}}})
        with pytest.raises(ConflictError):  # from the view before someone else's write
            await d.call(ObjectStatusPatch(ref, {"phase": "Inqueue"}, version))
        seen = store.get("PodGroup", "default", "g")["metadata"]["resourceVersion"]
        await d.call(ObjectStatusPatch(ref, {"phase": "Completed"}, seen))

    _run(main)
    assert _phase(store) == "Completed"


def test_a_failed_submitted_call_goes_to_its_submitter_never_raised() -> None:
    cluster = FakeCluster()
    cluster.fail[("patch", "p")] = [ServerError("refused")]
    d = _dispatcher(cluster)
    seen: list[Any] = []

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            d.attach(tg)
            d.submit(PodStatusPatch(POD, _condition("x")), lambda t: seen.append(t.error))
            await d.drained()

    _run(main)
    assert len(seen) == 1 and isinstance(seen[0], ServerError)
    assert d.in_flight == 0
