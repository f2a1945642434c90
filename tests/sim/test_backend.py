"""SimBackend: the scheduler's ports over the embedded cluster."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from sim_builders import condition, node, obj, pdb, pod

from scheduler.api.errors import (
    ApiError,
    ConflictError,
    NotFoundError,
    ServerError,
    TooManyRequestsError,
)
from scheduler.ports import Binder, Event, EventRecorder, Evictor, ObjectRef, StatusWriter
from scheduler.sim.backend import ApiCall, EvictionMode, SimBackend
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.kubelet import RUN_FOR_ANNOTATION, SimKubelet
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualClock, run_virtual


class Cluster:
    def __init__(self, behaviour: ApiBehaviour | None = None, mode: EvictionMode = "delete"):
        self.clock = VirtualClock()
        self.store = ObjectStore(self.clock.wall)
        self.faults = FaultInjector(behaviour or ApiBehaviour(), self.clock)
        self.backend = SimBackend(self.store, self.clock, self.faults, eviction_mode=mode)
        self.calls: list[ApiCall] = []
        self.backend.add_observer(self.calls.append)

    def ref(self, name: str, kind: str = "Pod", ns: str = "default") -> ObjectRef:
        got = self.store.get(kind, ns, name)
        return ObjectRef(kind, ns if kind != "Node" else "", name, got["metadata"]["uid"])

    def summary(self) -> list[tuple[str, str, str | None, bool, float]]:
        return [(c.kind, c.ref.name, c.node, c.ok, c.at) for c in self.calls]


def _run(fn: Callable[[Cluster], Awaitable[None]], **kwargs: Any) -> Cluster:
    async def main() -> Cluster:
        cluster = Cluster(**kwargs)
        await fn(cluster)
        return cluster

    return run_virtual(main)


def test_it_implements_the_ports() -> None:
    backend = Cluster().backend
    ports: list[Any] = [Binder, Evictor, StatusWriter, EventRecorder]
    for port in ports:
        for name in port.__dict__:
            if not name.startswith("_"):
                assert callable(getattr(backend, name)), (port, name)
    binder: Binder = backend
    evictor: Evictor = backend
    writer: StatusWriter = backend
    recorder: EventRecorder = backend
    assert all(p is backend for p in (binder, evictor, writer, recorder))


# ----------------------------------------------------------------------------- bind


@pytest.mark.parametrize(
    ("annotations", "calls"),
    [
        ({}, [("bind", "a", "n1", True, 0.5)]),
        (
            {"sluice.dev/nominated": "x"},
            [("patch", "a", None, True, 0.25), ("bind", "a", "n1", True, 0.75)],
        ),
    ],
    ids=["plain", "with-annotations"],
)
def test_bind(annotations: dict[str, str], calls: list[tuple[Any, ...]]) -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a"))
        await c.backend.bind(c.ref("a"), "n1", annotations)
        bound = c.store.get("Pod", "default", "a")
        assert bound["spec"]["nodeName"] == "n1"
        assert (bound["metadata"].get("annotations") or {}) == annotations

    behaviour = ApiBehaviour(latency={"bind": 0.5, "patch": 0.25})
    assert _run(script, behaviour=behaviour).summary() == calls


@pytest.mark.parametrize(
    ("setup", "ref_uid", "error"),
    [
        (lambda s: s.create(pod("a", node="n0")), None, ConflictError),
        (lambda s: s.create(pod("a")), "stale-uid", ConflictError),
        (lambda s: None, None, NotFoundError),
    ],
    ids=["already-bound", "recreated-pod", "missing"],
)
def test_bind_failures_are_observed(
    setup: Callable[[ObjectStore], Any], ref_uid: str | None, error: type[ApiError]
) -> None:
    async def script(c: Cluster) -> None:
        setup(c.store)
        with pytest.raises(error):
            await c.backend.bind(ObjectRef("Pod", "default", "a", ref_uid or ""), "n1", {})

    [call] = _run(script).calls
    assert (call.kind, call.ok, call.node) == ("bind", False, "n1")
    assert call.error


def test_failed_annotation_patch_skips_the_bind() -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a"))
        with pytest.raises(ServerError, match="injected failure of patch"):
            await c.backend.bind(c.ref("a"), "n1", {"k": "v"})
        assert not c.store.get("Pod", "default", "a")["spec"].get("nodeName")

    cluster = _run(script, behaviour=ApiBehaviour(failure_rate={"patch": 1.0}))
    assert cluster.summary() == [("patch", "a", None, False, 0.0)]


# ----------------------------------------------------------------------------- evict


EVICT_CASES = [
    # id, mode, budget, expected call kind, error
    ("delete-mode", "delete", None, "delete", None),
    ("delete-mode-ignores-budgets", "delete", pdb(min_available="100%"), "delete", None),
    ("evict-mode", "evict", None, "evict", None),
    ("evict-mode-refused", "evict", pdb(min_available="100%"), "evict", TooManyRequestsError),
]


@pytest.mark.parametrize(
    ("mode", "budget", "kind", "error"),
    [c[1:] for c in EVICT_CASES],
    ids=[c[0] for c in EVICT_CASES],
)
def test_evict(
    mode: EvictionMode, budget: dict[str, Any] | None, kind: str, error: type[ApiError] | None
) -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a", node="n1", phase="Running", ready=True, labels={"app": "a"}))
        if budget is not None:
            c.store.create(budget)
        if error is not None:
            with pytest.raises(error):
                await c.backend.evict(c.ref("a"), grace_period_seconds=10)
            return
        await c.backend.evict(c.ref("a"), grace_period_seconds=10)
        meta = c.store.get("Pod", "default", "a")["metadata"]
        assert meta["deletionGracePeriodSeconds"] == 10

    cluster = _run(script, mode=mode, behaviour=ApiBehaviour(latency={kind: 3.0}))
    assert cluster.summary() == [(kind, "a", "n1", error is None, 3.0)]


@pytest.mark.parametrize("mode", ["delete", "evict"], ids=["delete", "evict"])
def test_evict_is_guarded_by_uid(mode: EvictionMode) -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a", node="n1", phase="Running"))
        old = c.ref("a")
        c.store.delete("Pod", "default", "a", grace_period_seconds=0)
        c.store.create(pod("a", node="n1", phase="Running"))
        with pytest.raises(ConflictError):
            await c.backend.evict(old)
        with pytest.raises(NotFoundError):
            await c.backend.evict(ObjectRef("Pod", "default", "gone"))

    _run(script, mode=mode)


def test_unknown_eviction_mode() -> None:
    c = Cluster()
    with pytest.raises(ValueError, match="eviction_mode"):
        SimBackend(c.store, c.clock, c.faults, eviction_mode="drain")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- status


UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


@pytest.mark.parametrize(
    "patch",
    [{"conditions": [UNSCHEDULABLE]}, {"status": {"conditions": [UNSCHEDULABLE]}}],
    ids=["status-content", "whole-object-form"],
)
def test_patch_pod_status_merges_conditions_by_type(patch: dict[str, Any]) -> None:
    async def script(c: Cluster) -> None:
        p = pod("a")
        p["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
        c.store.create(p)
        await c.backend.patch_pod_status(c.ref("a"), patch)
        got = c.store.get("Pod", "default", "a")
        assert condition(got, "Ready") == {"type": "Ready", "status": "False"}
        assert condition(got, "PodScheduled") == patch.get("status", patch)["conditions"][0]

    assert _run(script).summary() == [("patch", "a", None, True, 0.0)]


def test_patch_status_merges_into_custom_object() -> None:
    async def script(c: Cluster) -> None:
        c.store.create(
            obj("PodGroup", "g", spec={"minMember": 2}, status={"phase": "Pending", "running": 0})
        )
        await c.backend.patch_status(
            c.ref("g", kind="PodGroup"), {"phase": "Running", "conditions": [{"type": "A"}]}
        )
        await c.backend.patch_status(c.ref("g", kind="PodGroup"), {"conditions": [{"type": "B"}]})
        got = c.store.get("PodGroup", "default", "g")
        assert got["status"] == {"phase": "Running", "running": 0, "conditions": [{"type": "B"}]}
        with pytest.raises(NotFoundError):
            await c.backend.patch_status(ObjectRef("PodGroup", "default", "nope"), {"phase": "x"})

    _run(script)


def test_status_patches_are_guarded_by_uid() -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a"))
        with pytest.raises(ConflictError):
            await c.backend.patch_pod_status(
                ObjectRef("Pod", "default", "a", "old"), {"phase": "x"}
            )

    _run(script)


# ----------------------------------------------------------------------------- events


def _event(regarding: ObjectRef, reason: str = "Scheduled", message: str = "ok") -> Event:
    return Event(regarding=regarding, type="Normal", reason=reason, message=message)


def test_record_creates_and_aggregates_events() -> None:
    async def script(c: Cluster) -> None:
        c.store.create(pod("a"))
        c.store.create(node("n1"))
        a = c.ref("a")
        c.backend.record(_event(a))
        await c.clock.sleep(1.5)
        c.backend.record(_event(a))
        c.backend.record(_event(a))
        c.backend.record(_event(a, message="other"))
        c.backend.record(_event(c.ref("n1", kind="Node"), reason="NodeFull"))
        related = Event(
            a, "Warning", "Preempted", "by b", "Preempting", ObjectRef("Pod", "default", "b")
        )
        c.backend.record(related)

    c = _run(script)
    events, _ = c.store.list("Event")
    by_name = {e["metadata"]["name"]: e for e in events}
    assert sorted(by_name) == ["a.1", "a.2", "a.4", "n1.3"]
    first = by_name["a.1"]
    assert first["apiVersion"] == "events.k8s.io/v1"
    assert first["metadata"]["namespace"] == "default"
    assert first["regarding"] == {
        "kind": "Pod",
        "namespace": "default",
        "name": "a",
        "uid": c.ref("a").uid,
    }
    assert (first["reason"], first["note"], first["type"], first["action"]) == (
        "Scheduled",
        "ok",
        "Normal",
        "Scheduling",
    )
    assert first["eventTime"] == "2026-01-01T00:00:00.000000Z"
    assert first["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:00:01.500000Z"}
    assert "series" not in by_name["a.2"]
    assert by_name["n1.3"]["metadata"]["namespace"] == "default"
    assert by_name["a.4"]["related"] == {"kind": "Pod", "namespace": "default", "name": "b"}
    assert [k.kind for k in c.calls] == ["event"] * 6


def test_record_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster()
    c.store.create({"kind": "Event", "metadata": {"name": "x.1", "namespace": "default"}})

    def refuse(o: dict[str, Any]) -> dict[str, Any]:
        raise ServerError("storage is full")

    c.store._validator = refuse
    c.backend.record(_event(ObjectRef("Pod", "default", "x")))
    assert "storage is full" in caplog.text
    assert c.calls[-1].ok is False


def test_create_goes_through_faults() -> None:
    async def script(c: Cluster) -> None:
        created = await c.backend.create(pod("a"))
        assert created["metadata"]["uid"]

    assert _run(script, behaviour=ApiBehaviour(latency={"create": 2.0})).summary() == [
        ("create", "a", None, True, 2.0)
    ]


# ----------------------------------------------------------------------------- together


def _simulation(seed: int) -> list[tuple[str, str, str | None, bool, float]]:
    """100 pods bound concurrently with latency and failures; the kubelet runs them."""

    async def main() -> list[tuple[str, str, str | None, bool, float]]:
        c = Cluster(
            ApiBehaviour(
                latency={"bind": 0.2, "delete": 1.0}, failure_rate={"bind": 0.2}, seed=seed
            )
        )
        kubelet = SimKubelet(c.store, c.clock, start_delay=1.0)
        for i in range(100):
            c.store.create(pod(f"p{i:02d}", annotations={RUN_FOR_ANNOTATION: f"{i % 7 + 1}s"}))

        async def bind_until_done(name: str, node_name: str) -> None:
            while True:
                try:
                    await c.backend.bind(c.ref(name), node_name, {})
                    return
                except ServerError:
                    await c.clock.sleep(0.5)

        async with anyio.create_task_group() as tg:
            await tg.start(kubelet.run)
            async with anyio.create_task_group() as binders:
                for i in range(100):
                    binders.start_soon(bind_until_done, f"p{i:02d}", f"n{i % 4}")
            await c.backend.evict(c.ref("p00"))
            while kubelet.pending() or c.faults.in_flight:
                await c.clock.sleep(0.1)
            tg.cancel_scope.cancel()
        phases = {p["status"]["phase"] for p in c.store.list("Pod")[0]}
        assert phases == {"Succeeded"}
        return c.summary()

    return run_virtual(main)


def test_a_simulation_repeats_with_its_seed() -> None:
    first = _simulation(seed=3)
    assert first == _simulation(seed=3)
    assert first != _simulation(seed=4)
    failures = [c for c in first if not c[3]]
    assert failures and all(c[0] == "bind" for c in failures)
    assert sum(1 for c in first if c[0] == "bind" and c[3]) == 100
