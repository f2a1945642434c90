"""Whole runs of the real loop on the embedded cluster, shared by the tests: objects in,
the finished :class:`~scheduler.sim.runner.Simulation` out (virtual clock)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import yaml

from scheduler import app
from scheduler.config import SchedulerConfiguration
from scheduler.logging import quiet
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

Obj = dict[str, Any]
SCENARIOS = Path(__file__).parent / "scenarios"


def simulate(
    objects: Sequence[Obj],
    *,
    config: SchedulerConfiguration | None = None,
    on_cycle: Any = None,
    until: float | None = None,
    max_cycles: int = 2000,
    quiet_logs: bool = True,
    on_store: Any = None,
) -> Simulation:
    """Load ``objects`` as a scenario (their ``sim.sluice.dev`` annotations apply) and run
    it with ``config`` (the defaults when None) until it settles, ``until`` or
    ``max_cycles``; ``on_cycle(report, fresh_events)`` after every cycle;
    ``on_store(store)`` once, before the run (to subscribe to its every change). Logs are
    silenced unless ``quiet_logs`` is false (the caller configured them)."""
    if quiet_logs:
        quiet()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
        scenario = load_scenario([str(path)])
    resolved = app.resolve(config)
    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        wait_for_pod_grouper=resolved.config.wait_for_pod_grouper,
        sharding=resolved.config.sharding(),
        on_cycle=on_cycle,
        until=until,
        max_cycles=max_cycles,
    )
    if on_store is not None:
        on_store(sim.store)
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim


def scenario_objects(name: str) -> list[Obj]:
    """The objects of ``tests/scenarios/NAME`` (its lists flattened, no Expectation)."""
    items: list[Obj] = []
    for d in yaml.safe_load_all((SCENARIOS / name).read_text()):
        if d and d.get("kind") == "List":
            items.extend(d["items"])
        elif d and d.get("kind") != "Expectation":
            items.append(d)
    return items
