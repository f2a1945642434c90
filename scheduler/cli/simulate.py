"""``sluice simulate``: run a scenario and print what happened (layer 5).

Settings come from the flags, else from the scenario's Simulation document:
``--api-latency``, ``--api-failures``, ``--api-lost-replies``, ``--seed`` and ``--until``
(the horizon; a positive duration, checked here, before anything is loaded). The run
itself, what stops it (``stoppedBy``: idle, cycles, until) and the meaning of every key
of ``--output json`` are described in :mod:`scheduler.sim.runner`; text output is
per-cycle lines and a summary that names what stopped the run and the clock time it took.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import anyio

from scheduler import app
from scheduler.api.errors import ConfigError
from scheduler.config import (
    SchedulerConfiguration,
    load_configuration_file,
    parse_feature_gates,
    with_feature_gates,
)
from scheduler.live import LivePage
from scheduler.live.page_server import serve_page
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.durations import parse_duration
from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.report import RunRecorder, render
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import Scenario, load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop

PROGRESS_AFTER = 50
"""Cycles after which text output shows a progress bar instead of every cycle."""

STOP_REASONS = {
    "idle": "nothing more could change",
    "cycles": "--cycles reached",
    "until": "the horizon was reached",
}
"""How the text summary explains ``stoppedBy``."""


def _behaviour(args: argparse.Namespace, scenario_behaviour: ApiBehaviour | None) -> ApiBehaviour:
    base = scenario_behaviour or ApiBehaviour()
    flags = ApiBehaviour.parse(
        args.api_latency, args.api_failures, args.seed or 0, args.api_lost_replies
    )
    return ApiBehaviour(
        latency={**base.latency, **flags.latency},
        failure_rate={**base.failure_rate, **flags.failure_rate},
        seed=base.seed if args.seed is None else args.seed,
        lost_reply_rate={**base.lost_reply_rate, **flags.lost_reply_rate},
    )


def _until(text: str | None) -> float | None:
    """Seconds of ``--until``; None when not given."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise ConfigError("--until", None, str(exc)) from exc
    if not seconds > 0:
        raise ConfigError(
            "--until", None, f"must be a positive duration, like 90s or 1h; got {text!r}"
        )
    return seconds


def simulation(
    scenario: Scenario,
    config: SchedulerConfiguration,
    resolved: app.ResolvedConfiguration,
    **options: Any,
) -> Simulation:
    """``scenario`` to run with the scheduler of ``config`` (resolved as ``resolved``):
    its name, grouper wait and shard; ``options`` are :class:`Simulation`'s others."""
    return Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        scheduler_name=config.scheduler_name,
        wait_for_pod_grouper=config.wait_for_pod_grouper,
        sharding=config.sharding(),
        **options,
    )


def simulate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.cycles is not None and args.cycles < 1:
        raise ConfigError("--cycles", None, "must be at least 1")
    until = _until(args.until)
    scenario = load_scenario(args.files)
    if until is None:
        until = scenario.until
    config: SchedulerConfiguration = scenario.config or SchedulerConfiguration()
    if args.config:
        config = load_configuration_file(args.config)
    config = with_feature_gates(config, parse_feature_gates(args.feature_gates))
    resolved = app.resolve(config)
    behaviour = _behaviour(args, scenario.behaviour)
    quiet()
    printer = TextPrinter(out) if args.output == "text" else None
    if args.serve is not None:
        args.real_time = True  # a served cluster talks to real clients on the real clock
    sim = simulation(
        scenario,
        config,
        resolved,
        behaviour=behaviour,
        max_cycles=args.cycles,
        until=until,
        real_time=args.real_time,
        on_cycle=printer.cycle if printer else None,
    )
    if printer is not None:
        printer.origin = sim.origin
    recorder = _record(sim) if args.report else None
    if args.serve is not None:
        result = anyio.run(_serve, sim, args, printer)
    elif args.real_time:
        result = anyio.run(sim.run)
    else:
        result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    if printer is not None:
        printer.summary(result)
    else:
        json.dump(result.to_json(), out, indent=2, sort_keys=False)
        out.write("\n")
    if recorder is not None:
        title = f"sluice simulate {' '.join(args.files)}"
        target = Path(args.report)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(title, result, recorder), encoding="utf-8")
        print(f"report: {args.report}", file=sys.stderr)
    return 0


def _record(sim: Simulation) -> RunRecorder:
    """A recorder fed by ``sim``'s store and loop, for ``--report``."""
    recorder = RunRecorder(lambda: sim.origin, now=sim.clock.now)
    sim.store.subscribe(
        recorder.on_store, kinds=("PodGroup", "Pod", "ResourceSlice", "ResourceClaim")
    )
    loop = sim.loop

    def sample(report: CycleReport) -> None:
        recorder.on_cycle(report, loop.metrics.registry, sum(loop.status.pending_by_queue.values()))

    loop.observers.append(sample)
    return recorder


async def _serve(
    sim: Simulation, args: argparse.Namespace, printer: TextPrinter | None
) -> SimulationResult:
    """Run the simulation with its API served; keep serving until interrupted."""
    page = LivePage(sim.loop, title=f"sluice simulate {' '.join(args.files)}: live")
    async with (
        ApiEmulator(sim.store, port=args.serve, wall=sim.clock.wall) as emu,
        serve_page(page, args.ui_port) as ui_url,
    ):
        path = write_kubeconfig(args.kubeconfig_out, emu.url)
        print(
            f"serving the simulated cluster at {emu.url}\n  export KUBECONFIG={path}\n"
            f"the live page: {ui_url}",
            file=sys.stderr,
            flush=True,
        )

        def settled(result: SimulationResult) -> None:
            if printer is not None:
                printer.summary(result)
            else:
                json.dump(result.to_json(), sys.stdout, indent=2)
                print(flush=True)
            print(
                "the scenario's run is over; still serving and scheduling what clients "
                "create (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )

        sim.serving = True
        sim.on_settled = settled
        result = await sim.run()  # until --until, or until interrupted
    return result


class TextPrinter:
    """Per-cycle lines for people; past PROGRESS_AFTER cycles, a progress bar instead."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._bar: Any = None
        self.origin = 0.0
        """Clock time the run started at; cycle times are printed from there."""

    def cycle(self, report: CycleReport, events: list[dict[str, Any]]) -> None:
        if report.number > PROGRESS_AFTER:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(desc="cycles", unit="cycle", file=sys.stderr, leave=False)
            self._bar.update(1)
            return
        counts = Counter(e["event"] for e in events)
        if not counts and not report.decided:
            return
        parts = [f"{n} {kind}" for kind, n in sorted(counts.items())]
        self.out.write(
            f"cycle {report.number} at {report.started - self.origin:.3f}s: {', '.join(parts)}\n"
        )
        for e in events:
            detail = " ".join(
                f"{k}={','.join(v) if isinstance(v, list) else v}"
                for k, v in e.items()
                if k not in ("t", "cycle", "event")
            )
            self.out.write(f"    {e['t']:9.3f}s  {e['event']:<18} {detail}\n")

    def summary(self, result: SimulationResult) -> None:
        if self._bar is not None:
            self._bar.close()
        w = self.out.write
        w(
            f"\n{result.cycles} cycles over {result.seconds:.3f}s; stopped by "
            f"{result.stopped_by} ({STOP_REASONS[result.stopped_by]})\n"
            f"{len(result.bindings)} pods bound, {len(result.evictions)} evicted, "
            f"{len(result.nominations)} nominated, {len(result.pending)} pending\n"
        )
        if result.bindings:
            w("\nbound:\n")
            for pod, node in sorted(result.bindings.items()):
                w(f"  {pod:<40} -> {node}\n")
        if result.pod_groups:
            w("\npod groups:\n")
            for pg, phase in sorted(result.pod_groups.items()):
                w(f"  {pg:<40} {phase}\n")
        if result.pending:
            w("\npending:\n")
            for pod, reason in sorted(result.pending.items()):
                w(f"  {pod:<40} {reason}\n")
