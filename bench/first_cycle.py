"""``python -m bench.first_cycle [--bound N] [--pending N] [--nodes N] [--rounds N]``:
what a cycle costs when most jobs have nothing to place (issue 39: a restart's first
cycle walked all 140,000 jobs, 28.6 s).

In process, no API server: a cache fed ``--bound`` running pods (gangs of one, spread
over ``--nodes`` nodes) and ``--pending`` pending ones, the scheduling loop of the
default configuration over the embedded cluster's calls on the real clock. Three cycles
each: the first (it places the pending pods), then two with nothing left to place.

Two runners, alternated ``--rounds`` times (fresh cache and loop each time):
``every-job``: each snapshot's index of the jobs with a pod to place
(:attr:`~scheduler.api.cluster_snapshot.Snapshot.to_place`) names every job, so each action
walks them all, as before the index; ``index``: the index as the cache builds it.
Prints one JSON object: each runner's cycle times (median over rounds) and its parts,
the pods bound, and the first cycle's speed-up. Under a minute of CPU at the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import anyio

from bench.common import machine
from bench.workloads import node, pod
from scheduler import app
from scheduler.api.cluster_snapshot import Snapshot
from scheduler.cache import SchedulerCache
from scheduler.framework.effects import Bind
from scheduler.logging import quiet
from scheduler.loop.system_clock import SystemClock
from scheduler.ports import ClusterPorts
from scheduler.sim.backend import SimBackend
from scheduler.sim.faults import ApiBehaviour, FaultInjector
from scheduler.sim.store import ObjectStore

CYCLES = 3
RUNNERS = ("every-job", "index")


def _cache(nodes: int, bound: int, pending: int) -> tuple[SchedulerCache, ObjectStore]:
    cache = SchedulerCache()
    clock = SystemClock()
    store = ObjectStore(clock.wall)
    objects = [
        {
            "apiVersion": "scheduling.sluice.dev/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "default"},
            "spec": {"weight": 1},
        },
        *(node(i) for i in range(nodes)),
        *(pod(f"bound-{i}", node_name=f"node-{i % nodes}", cpu="10m") for i in range(bound)),
        *(pod(f"pending-{i}", cpu="10m") for i in range(pending)),
    ]
    for obj in objects:
        made = store.create(obj)
        cache.handle(_key(made), "ADDED", made)
    return cache, store


def _key(obj: dict[str, Any]) -> str:
    from scheduler.api.group_apis import kind_key

    kind = str(obj["kind"])
    return kind if obj.get("apiVersion") == "v1" else kind_key(str(obj["apiVersion"]), kind)


def _every_job(take: Any) -> Any:
    def snapshot(**kwargs: Any) -> Snapshot:
        snap: Snapshot = take(**kwargs)
        snap.to_place = frozenset(snap.jobs)  # every job "to place": each action walks all
        return snap

    return snapshot


def _run(runner: str, nodes: int, bound: int, pending: int) -> dict[str, Any]:
    cache, store = _cache(nodes, bound, pending)
    clock = SystemClock()
    backend = SimBackend(store, clock, FaultInjector(ApiBehaviour(), clock))
    ports = ClusterPorts(backend, backend, backend, backend, clock, backend, claims=backend)
    loop = app.build_loop(app.resolve(), cache, ports)
    if runner == "every-job":
        cache.snapshot = _every_job(cache.snapshot)  # type: ignore[method-assign]
    seconds: list[float] = []
    parts: list[dict[str, float]] = []
    binds = 0

    async def main() -> None:
        nonlocal binds
        async with anyio.create_task_group() as tg:
            loop.binds.attach(tg)
            loop.dispatcher.attach(tg)
            for _ in range(CYCLES):
                t0 = time.perf_counter()
                report = await loop.run_cycle()
                seconds.append(time.perf_counter() - t0)
                parts.append({k: round(v, 4) for k, v in report.parts.items() if v >= 0.001})
                binds += sum(1 for e in report.effects if isinstance(e, Bind))
            tg.cancel_scope.cancel()

    anyio.run(main)
    return {"seconds": seconds, "parts": parts, "binds": binds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.first_cycle", description=__doc__)
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--bound", type=int, default=20_000)
    p.add_argument("--pending", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    quiet()
    load = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNNERS}
    for i in range(args.rounds):
        order = RUNNERS if i % 2 == 0 else RUNNERS[::-1]  # alternated
        for runner in order:
            runs[runner].append(_run(runner, args.nodes, args.bound, args.pending))
    out: dict[str, Any] = {
        "workload": "first-cycle",
        "nodes": args.nodes,
        "bound": args.bound,
        "pending": args.pending,
        "rounds": args.rounds,
    }
    for runner, results in runs.items():
        out[runner] = {
            "cycle_seconds": [
                round(statistics.median(r["seconds"][c] for r in results), 4) for c in range(CYCLES)
            ],
            "first_cycle_parts": results[-1]["parts"][0],
            "binds": [r["binds"] for r in results],
        }
    first = {r: out[r]["cycle_seconds"][0] for r in RUNNERS}
    steady = {r: out[r]["cycle_seconds"][-1] for r in RUNNERS}
    out["first_cycle_speedup"] = round(first["every-job"] / first["index"], 2)
    out["steady_cycle_speedup"] = round(steady["every-job"] / steady["index"], 2)
    out["machine"] = machine(load)
    print(json.dumps(out))
    ok = all(b == args.pending for r in RUNNERS for b in out[r]["binds"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
