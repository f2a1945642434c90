"""``SchedulingLoop.freeze_heap``: after the first cycle, what is alive is frozen once."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import anyio
import pytest

from scheduler import app
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import node, pod


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize("freeze", [True, False])
@pytest.mark.usefixtures("unfrozen")
def test_the_heap_is_frozen_after_the_first_cycle_only_when_asked(freeze: bool) -> None:
    arrivals = [Arrival(0.0, node("n1"), "test"), Arrival(0.0, pod("p"), "test")]
    resolved = app.resolve()
    counts: list[int] = []
    sim = Simulation(
        Scenario(arrivals=arrivals),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        on_cycle=lambda report, _: counts.append(gc.get_freeze_count()),
    )
    sim.loop.freeze_heap = freeze
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    assert result.bindings == {"default/p": "n1"}
    # observers run inside the cycle: the first sees nothing frozen, the later ones do
    assert counts[0] == 0
    assert (gc.get_freeze_count() > 0) is freeze
