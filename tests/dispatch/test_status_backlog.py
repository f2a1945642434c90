"""Status writes slower than the cycles do not pile up (issue 26: the soak's status
writes came faster than the API server took them and 2,000 tasks piled up, 45 for one
Queue): the API dispatcher keeps one call per object in its line, the newest."""

from __future__ import annotations

import pytest


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
