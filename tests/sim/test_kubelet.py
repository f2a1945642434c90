"""SimKubelet: pod lifecycle timings under the virtual clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from sim_builders import condition, pod

from scheduler.api.errors import InvalidObjectError
from scheduler.sim.kubelet import RUN_FOR_ANNOTATION, SimKubelet
from scheduler.sim.store import ObjectStore, WatchEvent
from scheduler.sim.virtual_time import VirtualClock, run_virtual

Timeline = list[tuple[float, str, str, str]]


def _simulate(
    script: Callable[[ObjectStore, VirtualClock, SimKubelet], Awaitable[None]],
    *,
    start_delay: float = 0.0,
    until: float = 1000.0,
    setup: Callable[[ObjectStore], None] | None = None,
    validator: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Timeline:
    """Run ``script`` next to a kubelet; the timeline holds (time, event, pod, phase)."""

    async def main() -> Timeline:
        clock = VirtualClock()
        store = ObjectStore(clock.wall, validator=validator)
        if setup is not None:
            setup(store)
        timeline: Timeline = []

        def record(ev: WatchEvent) -> None:
            phase = (ev.obj.get("status") or {}).get("phase", "")
            extra = "terminating" if ev.obj["metadata"].get("deletionTimestamp") else ""
            timeline.append((clock.now(), ev.type, ev.obj["metadata"]["name"], phase + extra))

        store.subscribe(record, kinds=["Pod"])
        kubelet = SimKubelet(store, clock, start_delay=start_delay)
        with anyio.move_on_after(until):
            async with anyio.create_task_group() as tg:
                await tg.start(kubelet.run)
                await script(store, clock, kubelet)
                while kubelet.pending():
                    await clock.sleep(0.5)
                tg.cancel_scope.cancel()
        return timeline

    return run_virtual(main)


Script = Callable[[ObjectStore, VirtualClock, SimKubelet], Awaitable[None]]


def _bind_at(t: float, name: str = "a", **pod_kwargs: Any) -> Script:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        store.create(pod(name, **pod_kwargs))
        await clock.sleep(t)
        store.bind("default", name, "n1")

    return script


@pytest.mark.parametrize(
    ("start_delay", "running_at"),
    [(0.0, 3.0), (2.5, 5.5), (60.0, 63.0)],
    ids=["immediately", "after-2.5s", "after-a-minute"],
)
def test_bound_pod_starts_after_start_delay(start_delay: float, running_at: float) -> None:
    timeline = _simulate(_bind_at(3.0), start_delay=start_delay)
    assert timeline == [
        (0.0, "ADDED", "a", "Pending"),
        (3.0, "MODIFIED", "a", "Pending"),
        (running_at, "MODIFIED", "a", "Running"),
    ]


def test_running_pod_has_kubelet_status() -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        store.create(pod("a"))
        await clock.sleep(61)
        store.bind("default", "a", "n1")
        await clock.sleep(1.5)
        running = store.get("Pod", "default", "a")
        assert running["status"]["phase"] == "Running"
        assert running["status"]["startTime"] == "2026-01-01T00:01:02Z"
        for type_ in ("Ready", "ContainersReady", "Initialized", "PodScheduled"):
            assert (condition(running, type_) or {}).get("status") == "True", type_

    _simulate(script, start_delay=1.0)


@pytest.mark.parametrize(
    ("start_delay", "run_for", "finished_at"),
    [(0.0, "10s", 13.0), (1.5, "1m", 64.5), (0.5, "250ms", 3.75)],
    ids=["10s", "1m-after-delay", "sub-second"],
)
def test_run_for_annotation_finishes_pod(
    start_delay: float, run_for: str, finished_at: float
) -> None:
    timeline = _simulate(
        _bind_at(3.0, annotations={RUN_FOR_ANNOTATION: run_for}), start_delay=start_delay
    )
    assert timeline[-1] == (finished_at, "MODIFIED", "a", "Succeeded")
    assert [t[3] for t in timeline] == ["Pending", "Pending", "Running", "Succeeded"]


@pytest.mark.parametrize(
    ("grace", "deleted_at", "second", "gone_at"),
    [
        (None, 10.0, None, 40.0),
        (5, 10.0, None, 15.0),
        (30, 10.0, (12.0, 4), 14.0),
        (30, 10.0, (12.0, 0), 12.0),
    ],
    ids=["default-30s", "spec-grace-5s", "shortened-to-4s", "forced"],
)
def test_terminating_pod_is_removed_after_grace(
    grace: int | None, deleted_at: float, second: tuple[float, int] | None, gone_at: float
) -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        store.create(pod("a", grace=grace))
        store.bind("default", "a", "n1")
        await clock.sleep(deleted_at)
        store.delete("Pod", "default", "a")
        if second is not None:
            await clock.sleep(second[0] - deleted_at)
            store.delete("Pod", "default", "a", grace_period_seconds=second[1])

    timeline = _simulate(script)
    assert timeline[-1] == (gone_at, "DELETED", "a", "Runningterminating")
    assert (deleted_at, "MODIFIED", "a", "Runningterminating") in timeline


def test_pending_and_next_due() -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        assert (kubelet.pending(), kubelet.next_due()) == (0, None)
        store.create(pod("a", annotations={RUN_FOR_ANNOTATION: "100s"}))
        store.create(pod("b"))
        assert kubelet.pending() == 0  # not bound: nothing to do
        store.bind("default", "a", "n1")
        store.bind("default", "b", "n1")
        assert (kubelet.pending(), kubelet.next_due()) == (2, 2.0)
        await clock.sleep(2.5)
        assert (kubelet.pending(), kubelet.next_due()) == (1, 102.0)  # a's finish; b runs on
        store.delete("Pod", "default", "a", grace_period_seconds=7)
        assert (kubelet.pending(), kubelet.next_due()) == (1, 9.5)  # finish replaced by removal
        store.delete("Pod", "default", "b", grace_period_seconds=0)
        assert kubelet.pending() == 1
        await clock.sleep(7.5)
        assert (kubelet.pending(), kubelet.next_due()) == (0, None)
        assert store.count("Pod") == 0

    _simulate(script, start_delay=2.0)


def test_deleting_a_pod_cancels_its_timers() -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        store.create(pod("a"))
        store.bind("default", "a", "n1")
        assert kubelet.pending() == 1
        store.delete("Pod", "default", "a", grace_period_seconds=0)
        assert kubelet.pending() == 0
        store.create(pod("a"))  # a new pod with the same name: a new uid, untouched
        await clock.sleep(100)
        assert store.get("Pod", "default", "a")["status"]["phase"] == "Pending"

    _simulate(script, start_delay=50)


def _existing(store: ObjectStore) -> None:
    store.create(pod("bound", node="n1"))
    running = pod("running", node="n1", phase="Running", annotations={RUN_FOR_ANNOTATION: "30s"})
    running["status"]["startTime"] = "2026-01-01T00:00:00Z"
    store.create(running)
    store.create(pod("going", node="n1", phase="Running", grace=20))
    store.delete("Pod", "default", "going")
    store.create(pod("done", node="n1", phase="Succeeded"))
    store.create(pod("unbound"))


def test_pods_present_at_start_are_taken_in() -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        await clock.sleep(1)
        # "bound" started at 0; "going" (deleted at 0, grace 20) and "running" remain
        assert (kubelet.pending(), kubelet.next_due()) == (2, 20.0)

    timeline = _simulate(script, setup=_existing)
    assert timeline == [
        (0.0, "MODIFIED", "bound", "Running"),
        (20.0, "DELETED", "going", "Runningterminating"),
        (30.0, "MODIFIED", "running", "Succeeded"),
    ]


def test_bad_annotation_is_logged_and_ignored(caplog: pytest.LogCaptureFixture) -> None:
    timeline = _simulate(_bind_at(1.0, annotations={RUN_FOR_ANNOTATION: "forever"}))
    assert timeline[-1] == (1.0, "MODIFIED", "a", "Running")
    assert "invalid duration 'forever'" in caplog.text


def test_failure_on_one_pod_does_not_stop_the_kubelet(caplog: pytest.LogCaptureFixture) -> None:
    def validator(o: dict[str, Any]) -> dict[str, Any]:
        if o["metadata"]["name"] == "cursed" and (o.get("status") or {}).get("phase") == "Running":
            raise InvalidObjectError("cursed pods never run")
        return o

    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        for name in ("cursed", "fine"):
            store.create(pod(name))
            store.bind("default", name, "n1")
        await clock.sleep(5)
        assert store.get("Pod", "default", "cursed")["status"]["phase"] == "Pending"
        assert store.get("Pod", "default", "fine")["status"]["phase"] == "Running"

    _simulate(script, start_delay=1, validator=validator)
    assert "cursed pods never run" in caplog.text


def test_many_pods_with_equal_deadlines_keep_bind_order() -> None:
    async def script(store: ObjectStore, clock: VirtualClock, kubelet: SimKubelet) -> None:
        for i in range(300):
            store.create(pod(f"p{i:03d}", annotations={RUN_FOR_ANNOTATION: "5s"}))
        for i in reversed(range(300)):
            store.bind("default", f"p{i:03d}", "n1")

    timeline = _simulate(script, start_delay=1)
    running = [t[2] for t in timeline if t[3] == "Running"]
    assert running == [f"p{i:03d}" for i in reversed(range(300))]
    assert {t[0] for t in timeline if t[3] == "Succeeded"} == {6.0}
