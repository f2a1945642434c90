"""WorkerPool.submit_latest: one write per object at a time, the latest (issue 26: the
soak's status writes came faster than the API server took them and 2,000 tasks piled up,
45 for one Queue)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from scheduler.loop.workers import WorkerPool


def test_writes_of_one_object_are_coalesced_to_the_latest() -> None:
    written: list[str] = []
    errors: list[str] = []
    most = [0]

    async def scenario() -> None:
        pool = WorkerPool("status", 4, lambda label, exc: errors.append(f"{label}: {exc}"))
        release = anyio.Event()

        def write(key: str, value: str) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                if value == "v0":
                    await release.wait()  # the API server is slow
                written.append(f"{key}={value}")

            return call

        async with anyio.create_task_group() as tg:
            pool.attach(tg)
            for i in range(20):  # twenty cycles while the first write hangs
                pool.submit_latest("queue q", write("queue q", f"v{i}"))
                pool.submit_latest("pod p", write("pod p", f"w{i}"))
                most[0] = max(most[0], pool.in_flight)
                await anyio.sleep(0)
            release.set()
            await pool.drain()

    anyio.run(scenario)
    assert most[0] == 2  # one task per object, however many writes came
    assert written[-1] in ("queue q=v19", "pod p=w19")
    assert [w for w in written if w.startswith("queue q")] == ["queue q=v0", "queue q=v19"]
    assert written.count("pod p=w19") == 1 and "pod p=w0" in written
    assert errors == []


def test_a_failing_write_does_not_lose_the_next_one() -> None:
    written: list[str] = []
    errors: list[str] = []

    async def scenario() -> None:
        pool = WorkerPool("status", 1, lambda label, exc: errors.append(label))
        gate = anyio.Event()

        async def boom() -> None:
            await gate.wait()
            raise RuntimeError("refused")

        async def ok() -> None:
            written.append("second")

        async with anyio.create_task_group() as tg:
            pool.attach(tg)
            pool.submit_latest("pod p", boom)
            await anyio.sleep(0)
            pool.submit_latest("pod p", ok)
            gate.set()
            await pool.drain()

    anyio.run(scenario)
    assert errors == ["pod p"]
    assert written == ["second"]


@pytest.mark.parametrize("keys", [["a", "b", "c"], ["a", "a", "a"]], ids=["distinct", "same"])
def test_submit_latest_drains(keys: list[str]) -> None:
    done: list[str] = []

    async def scenario() -> int:
        pool = WorkerPool("status", 2, lambda label, exc: None)
        async with anyio.create_task_group() as tg:
            pool.attach(tg)
            for k in keys:

                async def call(k: str = k) -> None:
                    done.append(k)

                pool.submit_latest(k, call)
            await pool.drain()
        return pool.in_flight

    assert anyio.run(scenario) == 0
    assert set(done) == set(keys)


def test_status_writes_slower_than_the_cycles_do_not_pile_up() -> None:
    """The loop on the embedded cluster, status patches taking 20 s: a pod arrives every
    second for a minute and runs for two (all of them fit), so the Queue's status changes
    every cycle. Its writes in flight stay one instead of one per cycle (21 before)."""
    from tests.builders import node, pod
    from tests.simulated import simulate

    objects: list[dict[str, object]] = [
        {
            "apiVersion": "scheduling.sluice.dev/v1alpha1",
            "kind": "Simulation",
            "apiLatency": {"patch": "20s"},
        },
        node("n1", cpu="2"),
    ]
    for t in range(60):
        p = pod(f"p{t:02d}", cpu="500m", memory=None, terminationGracePeriodSeconds=0)
        p["metadata"]["annotations"] = {
            "sim.sluice.dev/arrival": f"{t}s",
            "sim.sluice.dev/run-for": "2s",
        }
        objects.append(p)
    most = [0]
    box: list[object] = []

    def watch(report: object, fresh: object) -> None:
        del report, fresh
        if box:
            most[0] = max(most[0], box[0].loop.dispatcher.in_flight)  # type: ignore[attr-defined]

    from scheduler.sim import runner

    original = runner.Simulation.__init__

    def keep(self: runner.Simulation, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        box.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner.Simulation, "__init__", keep)
        simulate(objects, on_cycle=watch, until=70.0)
    assert 0 < most[0] <= 2, most[0]
