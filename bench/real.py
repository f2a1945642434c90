"""``python -m bench real``: Sluice and kube-scheduler side by side through a real API
server, and the server's raw bind limit (bench/README.md describes options and figures).

Job: for each runner and each shape (SchedulingBasic, PreemptionBasic, a gang shape),
one **run** on one real API server (``../shared/k8s``, v1.36), in a namespace of its own:

* ``kube-scheduler``: the stock scheduler (``schedulerName: default-scheduler``), a
  process started for the run at Sluice's QPS and stopped after it;
* ``sluice``: ``sluice run`` as a subprocess (``schedulerName: sluice``), the same way;
  ``sluice-event-qps``: with ``--event-qps`` limiting its Scheduled events;
* ``raw``: no scheduler: the bench binds every measured pod round-robin over the nodes,
  with no decision and no event: the server's bind limit.

Every run's nodes carry the label ``bench.sluice.dev/run=<run>`` and its pods a
``nodeSelector`` on it, so a scheduler only places pods on its own run's nodes; after
the run its pods (grace period 0), nodes, PodGroups and events are deleted, so the next
run starts on an empty server.

Setup (not measured): the namespace, the nodes (created, then their status patched),
the running pods (created bound, then marked Running), the PodGroups (Sluice's gang
runs), then every measured pod (**a backlog**: created while no scheduler runs, since
on 2 cores the server creates pods about as fast as a scheduler binds them). Measured:
the bench watches the namespace's bound pods and Scheduled events, starts the scheduler
process (time 0) and notes when each pod is first seen bound and when its event is first
seen. After the last bind it waits (up to ``events_wait``) for every pod's event, so
every scheduler is stopped only once it did the same work (``--event-qps`` included); a
run whose events were not all seen by then says ``work: binds only``. Each shape's
runners go ``--rounds`` times, every other round in reverse (A B, B A). With a
kube-scheduler the bench did not start, its runs are **live**:
the pods are created while it runs, and time 0 is the first create.

Contracts: one JSON line per run, then one per shape comparing the runners; CPU and peak
RSS from ``/proc/<pid>`` (a new process per run: its whole CPU counts); the control plane
this command started is stopped (``down``) however it ends, SIGTERM included."""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import secrets
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio

from bench.failover import FAILOVER, run_failover
from bench.http_workload import _free_port, _get
from bench.placement_check import check_placement
from bench.real_base import delete_base, ensure_base
from bench.real_cluster import (
    KUBE_SCHEDULER,
    RAW_SCHEDULER,
    ControlPlane,
    ProcessMeter,
    Shape,
    bind_all,
    bind_watch,
    cleanup_run,
    cmdline,
    count_scheduled_events,
    create_pods,
    dra_devices_used_twice,
    ensure_cluster_objects,
    event_watch,
    kube_scheduler_argv,
    measured_pods,
    pid_file,
    port_reader_token,
    setup_run,
    start_control_plane,
    stop_control_plane,
    throughput,
)
from bench.real_cluster import (
    SHAPES as REAL_SHAPES,
)
from bench.real_runs import (
    Options,
    RunContext,
    sluice_argv,
    start_process,
    stop_process,
)
from bench.real_volumes import LOCAL as LOCAL_PVS
from bench.real_volumes import volume_figures
from bench.workloads import source_revision
from scheduler.api import labels as L
from scheduler.api.errors import (
    ApiError,
)
from scheduler.kube import KubeClient

SETTLE_SECONDS: Final = 1.0
RUNNERS: Final = ("kube-scheduler", "raw", "sluice", "sluice-event-qps")
FAILOVER_RUNNERS: Final = ("kube-scheduler", "sluice")
"""The runners of the failover shape (two replicas each; no raw binds to fail over)."""
SHAPES = {**REAL_SHAPES, FAILOVER.name: FAILOVER}
WORK_ALL: Final = "binds and events"
"""A run's ``work``: every pod bound and its Scheduled event seen."""
WORK_BINDS_ONLY: Final = "binds only"
"""A run's ``work`` when some Scheduled events were still unwritten ``events_wait`` after
the last bind: its figures compare with another run's binds only."""


# --------------------------------------------------------------------------- one run


async def _wait_ready(
    proc: anyio.abc.Process, port: int, log_path: Path, timeout: float = 120.0
) -> None:
    # /readyz is open: no token; the port is TLS.
    """Until ``sluice run`` answers ``/readyz`` (its informers listed everything), for up
    to ``timeout`` seconds (a run's: a restart's lists take minutes on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.returncode is not None:
            raise RuntimeError(f"sluice run exited with {proc.returncode}; see {log_path}")
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            if (await _get(port, "/readyz", tls=True))[0] == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sluice run not ready after {timeout:g} s; see {log_path}")
        await anyio.sleep(0.1)


async def run_one(ctx: RunContext, shape: Shape, runner: str) -> dict[str, Any]:
    """Set up, measure and clean up one run of ``shape`` by ``runner``; its figures."""
    api, opts, plane = ctx.api, ctx.opts, ctx.plane
    run = f"bench-{shape.name[:4]}-{runner[:6].rstrip('-')}-{secrets.token_hex(3)}"
    scheduler_name = {"kube-scheduler": KUBE_SCHEDULER, "raw": RAW_SCHEDULER}.get(
        runner, L.SCHEDULER_NAME
    )
    is_sluice = runner.startswith("sluice")
    live = runner == "kube-scheduler" and plane.external_kube_scheduler is not None
    t_setup = time.monotonic()
    figures: dict[str, Any] = {
        "shape": shape.name,
        "runner": runner,
        "mode": "live" if live else "backlog",
        "namespace": run,
        "nodes": shape.nodes,
        "running_pods": shape.running,
        "pods": shape.pods,
        "pod_groups": -(-shape.pods // shape.gang_size) if shape.gang_size and is_sluice else 0,
    }
    proc: anyio.abc.Process | None = None
    log_path = ctx.workdir / f"{run}.log"
    nodes_of = ""
    if shape.shared_base:  # made once for the shape's runs, before this run's setup
        base = ctx.bases.get(shape.name)
        if base is None:
            base = ctx.bases[shape.name] = await ensure_base(
                api, shape, concurrency=opts.setup_concurrency
            )
        nodes_of = base.namespace
        figures["base"] = {
            "namespace": base.namespace,
            "setup_seconds": base.setup_seconds,
            "reused": base.reused,
        }
    try:
        await setup_run(
            api,
            shape,
            run,
            scheduler_name=scheduler_name,
            pod_groups=is_sluice,
            concurrency=opts.setup_concurrency,
        )
        pods = measured_pods(shape, run, scheduler_name, nodes_of=nodes_of)
        names = [p["metadata"]["name"] for p in pods]
        uids: dict[str, str] = {}
        if not live:  # the backlog: every measured pod exists before the scheduler starts
            t_create = time.monotonic()
            uids = await create_pods(api, run, pods, opts.creators)
            figures["create_seconds"] = round(time.monotonic() - t_create, 2)
        figures["setup_seconds"] = round(time.monotonic() - t_setup, 1)

        watch = bind_watch(api, run, set(names))
        events = event_watch(api, run, set(names)) if runner != "raw" else None
        apiserver = ProcessMeter(plane.apiserver_pid)
        etcd = ProcessMeter(plane.etcd_pid)
        scheduler = ProcessMeter(None)
        cpu_at_last_bind: dict[str, float | None] = {}
        cpu_at_last_event: dict[str, float | None] = {}

        def on_done() -> None:
            cpu_at_last_bind.update(
                scheduler=scheduler.cpu(), apiserver=apiserver.cpu(), etcd=etcd.cpu()
            )

        def on_events_done() -> None:
            cpu_at_last_event.update(scheduler=scheduler.cpu())

        watch.on_done = on_done
        if events is not None:
            events.on_done = on_events_done
        bench_cpu0 = time.process_time()
        load0 = os.getloadavg()
        port = _free_port()
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run_watch)
            if events is not None:
                await tg.start(events.run_watch)
            apiserver.start()
            etcd.start()
            t_start = time.monotonic()
            t_start_wall = time.time()
            if live:
                scheduler = ProcessMeter(plane.external_kube_scheduler)
                scheduler.start(reset_peak=True)
                await create_pods(api, run, pods, opts.creators)
                figures["create_seconds"] = round(time.monotonic() - t_start, 2)
            elif runner == "raw":
                await bind_all(
                    api, run, uids, nodes=shape.nodes, limit=opts.raw_binds, nodes_of=nodes_of
                )
            else:
                if runner == "kube-scheduler":
                    qps, burst = opts.kube_api_qps, opts.kube_api_burst
                    argv = kube_scheduler_argv(plane.kubeconfig, qps, burst)
                    figures["kube_scheduler_args"] = argv[5:]
                else:
                    extra = []
                    if runner == "sluice-event-qps":
                        extra = ["--event-qps", f"{opts.event_qps:g}"]
                        extra += ["--event-burst", str(opts.event_burst)]
                        figures.update(event_qps=opts.event_qps, event_burst=opts.event_burst)
                    argv = sluice_argv(ctx, port, extra)
                    if opts.profile:  # cProfile of the scheduler process, kept beside its log
                        prof = log_path.with_suffix(".prof")
                        argv = [sys.executable, "-m", "cProfile", "-o", str(prof), *argv]
                        figures["scheduler_profile"] = str(prof)
                proc = await start_process(argv, log_path)
                if plane.state is not None and runner == "kube-scheduler":  # `down` stops it
                    (plane.state / "run" / "kube-scheduler.pid").write_text(f"{proc.pid}\n")
                scheduler = ProcessMeter(proc.pid)
                scheduler.start()
                scheduler.cpu_start = 0.0  # a new process: all of its CPU counts
                if is_sluice:
                    await _wait_ready(proc, port, log_path, opts.timeout)
                    figures["ready_after"] = round(time.monotonic() - t_start, 2)
            with anyio.move_on_after(opts.timeout):
                while not watch.done.is_set():
                    if proc is not None and proc.returncode is not None:
                        raise RuntimeError(
                            f"{runner} exited with {proc.returncode}; see {log_path}"
                        )
                    with anyio.move_on_after(1.0):
                        await watch.done.wait()
            events_at_last_bind = len(events.seen) if events is not None else None
            if events is not None:
                with anyio.move_on_after(opts.events_wait):  # the same work: every event
                    await events.done.wait()
            tg.cancel_scope.cancel()
        bench_cpu = time.process_time() - bench_cpu0
        times = list(watch.seen.values())
        event_times = list(events.seen.values()) if events is not None else []
        last_event = max(event_times) if event_times else None
        all_events = events is not None and events.done.is_set()
        last = max(times) if times else None
        sched_cpu = cpu_at_last_bind.get("scheduler")
        figures.update(
            bound=len(times),
            unbound=shape.pods - len(times),
            **throughput(times, shape.pods),
            seconds_to_last_bind=round(last - t_start, 2) if last is not None else None,
            pods_per_second=round(len(times) / (last - t_start), 1) if last is not None else None,
            first_bind_after=round(min(times) - t_start, 2) if times else None,
            scheduler_cpu_seconds=sched_cpu,
            scheduler_peak_rss_mb=scheduler.peak_rss_mb(),
            cpu_ms_per_pod=round(1000 * sched_cpu / len(times), 2) if sched_cpu and times else None,
            apiserver_cpu_seconds=cpu_at_last_bind.get("apiserver"),
            etcd_cpu_seconds=cpu_at_last_bind.get("etcd"),
            bench_cpu_seconds=round(bench_cpu, 2),
            load_average=[round(load0[0], 2), round(os.getloadavg()[0], 2)],
            scheduled_events_at_last_bind=events_at_last_bind,
            work=WORK_ALL if all_events or events is None else WORK_BINDS_ONLY,
            seconds_to_last_event=(
                round(last_event - t_start, 2) if all_events and last_event else None
            ),
            events_per_second=throughput(event_times, len(event_times))["binds_per_second"],
            scheduler_cpu_seconds_to_last_event=cpu_at_last_event.get("scheduler"),
            watch_restarts=watch.restarts + (events.restarts if events is not None else 0),
        )
        if is_sluice:
            figures["start_phases"] = start_phases(log_path, t_start_wall)
        if is_sluice and proc is not None:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                _, text = await _get(port, "/metrics", tls=True, token=ctx.port_token)
                figures["events_dropped"] = _metric_sum(text, "scheduler_events_dropped_total")
                figures["max_cycle_seconds"] = _metric_sum(
                    text, "sluice_cycle_longest_hold_seconds"
                )
                figures["idle_cycle_cpu_ms"] = await _idle_cycle_cpu_ms(
                    port, scheduler, ctx.port_token
                )
        if proc is not None:
            figures["scheduler_exit_code"] = await stop_process(proc)  # Sluice writes what is due
        if runner != "raw":
            figures["scheduled_events"] = await count_scheduled_events(api, run)
        if shape.devices and runner != "raw":
            used, twice = await dra_devices_used_twice(api, run)
            figures.update(dra_devices_allocated=used, dra_devices_used_twice=twice)
        if shape.volumes and runner != "raw":
            figures.update(await volume_figures(api, run))
        if shape.placement and runner != "raw":  # the raw runs bind round-robin
            figures["placement"] = await check_placement(api, shape, run)
        # kube-scheduler exits with 1 on SIGTERM; Sluice with 0
        if (
            figures["unbound"]
            or opts.profile
            or (is_sluice and figures.get("scheduler_exit_code") != 0)
        ):
            figures["scheduler_log"] = str(log_path)
        else:
            log_path.unlink(missing_ok=True)
    finally:
        if proc is not None:
            with anyio.CancelScope(shield=True):
                await stop_process(proc)
            if plane.state is not None and runner == "kube-scheduler":
                (plane.state / "run" / "kube-scheduler.pid").unlink(missing_ok=True)
        with anyio.CancelScope(shield=True):
            t_clean = time.monotonic()
            try:
                await cleanup_run(api, run)
            except ApiError as exc:
                figures["cleanup_error"] = str(exc)
            figures["cleanup_seconds"] = round(time.monotonic() - t_clean, 1)
    return figures


START_EVENTS: Final = {
    "serving metrics, the live page and probes": "imported",
    "bound pods listed": "bound_pods_listed",
    "ready to schedule": "ready_to_schedule",
    "caches synced": "synced",
    "scheduling": "scheduling",
    "first cycle": "first_cycle",
    "first bind": "first_bind",
}
"""Lines of ``sluice run``'s log that mark its start, and the phase each one ends."""
LISTED: Final = {"Node": "nodes_listed", "Pod": "pods_listed"}
"""The informers whose sync is a phase of the start (``informer synced`` lines)."""


def start_phases(log_path: Path, t0: float) -> dict[str, float]:
    """Seconds from ``t0`` (wall clock, the process's start) to each phase of Sluice's
    start, read from its log: ``imported`` (its modules loaded, probes served),
    ``nodes_listed``, ``bound_pods_listed`` (the pods bound to a node, listed first) and
    ``pods_listed`` (the pending ones too), ``ready_to_schedule`` (every bound pod and a
    first page of pending ones known: the loop may start), ``synced`` (every informer),
    ``scheduling`` (the loop starts; with leader election, when it leads),
    ``first_cycle`` (the first cycle begins), ``first_bind`` (the first bind's reply, as
    Sluice saw it)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event = entry.get("event")
            phase = START_EVENTS.get(event)
            if event == "informer synced":
                phase = LISTED.get(entry.get("kind"))
            stamp = entry.get("timestamp")
            if phase is None or phase in out or not isinstance(stamp, str):
                continue
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            out[phase] = round(when - t0, 2)
    return out


IDLE_SETTLE: Final = 3.0
IDLE_WINDOW: Final = 10.0
"""Seconds Sluice is left to settle once every pod is bound, and then measured idle."""


async def _idle_cycle_cpu_ms(port: int, scheduler: ProcessMeter, token: str | None) -> float | None:
    """Sluice's CPU per cycle with nothing pending (issue 25's idle cycle): after
    :data:`IDLE_SETTLE` seconds, the process's CPU over :data:`IDLE_WINDOW` seconds over
    the cycles in them (those run, ``scheduler_cycle_duration_seconds_count{action="all"}``,
    and those found idle, ``sluice_cycles_idle_total``), in milliseconds. Everything the
    process does meanwhile counts (its watches, its writes), as it would in a quiet
    cluster."""
    await anyio.sleep(IDLE_SETTLE)
    cpu0 = scheduler.cpu()
    cycles0 = _cycles(await _get(port, "/metrics", tls=True, token=token))
    await anyio.sleep(IDLE_WINDOW)
    cycles1 = _cycles(await _get(port, "/metrics", tls=True, token=token))
    cpu1 = scheduler.cpu()
    if cpu0 is None or cpu1 is None or cycles1 <= cycles0:
        return None
    return round(1000 * (cpu1 - cpu0) / (cycles1 - cycles0), 1)


def _cycles(reply: tuple[int, str]) -> float:
    """The cycles Sluice ran or found idle (:mod:`scheduler.loop.idle`: a cycle skipped
    because nothing changed since one that had nothing to do), from its /metrics."""
    total = 0.0
    for sample in (
        'scheduler_cycle_duration_seconds_count{action="all"} ',
        "sluice_cycles_idle_total ",
    ):
        line = next((x for x in reply[1].splitlines() if x.startswith(sample)), "")
        total += float(line[len(sample) :] or 0)
    return total


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] == name:
                total += float(value)
    return total


SUMMARY_FIGURES: Final = (
    "binds_per_second_10_90",
    "pods_per_second",
    "seconds_to_last_bind",
    "seconds_to_last_event",
    "first_bind_after",
    "scheduler_cpu_seconds",
    "scheduler_cpu_seconds_to_last_event",
    "scheduler_peak_rss_mb",
    "idle_cycle_cpu_ms",
    "takeover_after",
    "failover_seconds",
    "load_average",
    "placement",
)
"""The figures of each run the comparison line repeats (a list per runner: one value
per run, in the order the runs were made)."""


def _mean(values: Sequence[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return sum(nums) / len(nums) if nums else None


def compare(shape: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One shape's runners side by side, and Sluice's ratios to kube-scheduler and raw:
    ``_vs_`` on the bind rate between 10 and 90 % (first to last when missing), and
    ``_vs_..._overall`` on ``pods_per_second`` (pods over the time from the start to the
    last bind: the figure for PreemptionBasic, whose binds come in a burst at the end),
    ``_vs_..._to_last_event`` on the time to the last Scheduled event (theirs over ours:
    above 1 is faster). A runner that ran several times (``--rounds``) has each of its
    figures as a list, one value per run, and its ratios are of the means. ``runs``
    counts a runner's runs, ``work`` says whether every run also saw every Scheduled
    event (``binds and events``) or some were cut short (``binds only``)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        if r["shape"] == shape:
            by.setdefault(r["runner"], []).append(r)

    def rate(r: dict[str, Any]) -> float | None:
        value = r.get("binds_per_second_10_90") or r.get("binds_per_second")
        return float(value) if value is not None else None

    def figure(runner: str, fn: Any) -> float | None:
        return _mean([fn(r) for r in by.get(runner, ())])

    out: dict[str, Any] = {"shape": shape, "summary": True}
    for runner in RUNNERS:
        if runner not in by:
            continue
        mine = by[runner]
        row: dict[str, Any] = {}
        for key in SUMMARY_FIGURES:
            values = [rate(r) if key == "binds_per_second_10_90" else r.get(key) for r in mine]
            if any(v is not None for v in values):
                row[key] = values if len(mine) > 1 else values[0]
        row["runs"] = len(mine)
        row["work"] = sorted({str(r.get("work")) for r in mine})
        out[runner] = row
    for runner in ("sluice", "sluice-event-qps"):
        for other, key in (("kube-scheduler", "kube_scheduler"), ("raw", "raw")):
            for suffix, fn, theirs_over_mine in (
                ("", rate, False),
                ("_overall", lambda r: r.get("pods_per_second"), False),
                ("_to_last_event", lambda r: r.get("seconds_to_last_event"), True),
            ):
                mine, theirs = figure(runner, fn), figure(other, fn)
                if mine and theirs:
                    ratio = theirs / mine if theirs_over_mine else mine / theirs
                    out[f"{runner}_vs_{key}{suffix}"] = round(ratio, 2)
    return out


# --------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench real",
        description=(
            "Sluice and kube-scheduler side by side through a real API server; JSON lines."
        ),
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="use this cluster (default: start ../shared/k8s/up and stop it at the end)",
    )
    p.add_argument(
        "--state",
        type=Path,
        help="state dir of `up`: used if it holds a kubeconfig (its kube-scheduler, "
        "kube-apiserver and etcd pids are read from it), else `up` starts there",
    )
    p.add_argument(
        "--kube-scheduler-pid", type=int, help="pid of the cluster's kube-scheduler (CPU, RSS)"
    )
    p.add_argument(
        "--shapes",
        default="scheduling-basic,preemption-basic,gang",
        help=f"comma-separated, of {', '.join(SHAPES)} (default: all)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="runs of each runner per shape, every other round in reverse order "
        "(default 2: A B, B A)",
    )
    p.add_argument(
        "--runners",
        default=",".join(RUNNERS),
        help=f"comma-separated, of {', '.join(RUNNERS)} (default: all, in that order in the "
        "first round)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every shape's nodes and pods by this (e.g. 0.1 for a quick look)",
    )
    p.add_argument("--kube-api-qps", type=float, default=5000.0)
    p.add_argument("--kube-api-burst", type=int, default=5000)
    p.add_argument("--event-qps", type=float, default=50.0, help="of the sluice-event-qps runs")
    p.add_argument("--event-burst", type=int, default=100)
    p.add_argument("--creators", type=int, default=32, help="measured pods created at once")
    p.add_argument("--raw-binds", type=int, default=64, help="binds at once in the raw runs")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    p.add_argument("--keep", action="store_true", help="leave the control plane running")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run sluice under cProfile; the profile's path is in scheduler_profile",
    )
    return p


def _shapes(args: argparse.Namespace) -> list[Shape]:
    out = []
    for name in (s.strip() for s in args.shapes.split(",") if s.strip()):
        if name not in SHAPES:
            raise SystemExit(f"--shapes: unknown shape {name!r} (known: {', '.join(SHAPES)})")
        s = SHAPES[name]
        if args.scale != 1.0:
            if not 0 < args.scale <= 10:
                raise SystemExit("--scale must be in (0, 10]")
            pods = max(int(s.pods * args.scale), 10)
            if s.gang_size:
                pods = max(pods // s.gang_size, 1) * s.gang_size
            s = replace(
                s,
                nodes=max(int(s.nodes * args.scale), 1),
                running=int(s.running * args.scale),
                pods=pods,
            )
        out.append(s)
    return out


def _runners(args: argparse.Namespace) -> list[str]:
    """The runners in their fixed order (the order of the first round; :func:`run_order`
    reverses every other round, A B B A, so that what drifts on a shared machine over the
    runs weighs on every runner alike)."""
    names = [r.strip() for r in args.runners.split(",") if r.strip()]
    for name in names:
        if name not in RUNNERS:
            raise SystemExit(f"--runners: unknown runner {name!r} (known: {', '.join(RUNNERS)})")
    return [r for r in RUNNERS if r in names]


def run_order(
    shapes: Sequence[Any], runners: Sequence[str], rounds: int
) -> list[tuple[Any, str, int]]:
    """(shape, runner, position in its round) of every run: each shape's runners ``rounds``
    times, every other round in reverse (A B, B A, A B...), so that on a shared machine
    no runner always goes first or last; the rounds of one shape run back to back."""
    out = []
    for shape in shapes:
        for r in range(rounds):
            order = list(runners) if r % 2 == 0 else list(reversed(runners))
            out += [(shape, runner, i) for i, runner in enumerate(order)]
    return out


def compile_sluice() -> None:
    """Byte-compile the scheduler's modules (into ``__pycache__``, as ``pip install``
    does for the image) before any run: a checkout run with ``PYTHONDONTWRITEBYTECODE=1``
    would otherwise compile every module again at each start (0.11 s of a 0.64 s import,
    measured), which no installed Sluice does; kube-scheduler's binary has nothing to
    compile. Modules changed later are compiled in memory at import, as usual."""
    import scheduler

    compileall.compile_dir(Path(scheduler.__file__).parent, quiet=1)


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _main(args: argparse.Namespace, plane: ControlPlane, opts: Options) -> int:
    shapes, runners = _shapes(args), _runners(args)
    workdir = Path(tempfile.mkdtemp(prefix="sluice-real-bench-"))
    api = await KubeClient.connect(plane.kubeconfig, qps=0, burst=1, timeout=60)
    status = 0
    results: list[dict[str, Any]] = []
    common = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "revision": source_revision(),
        "kube_api_qps": opts.kube_api_qps,
        "kube_api_burst": opts.kube_api_burst,
        "external_kube_scheduler": cmdline(plane.external_kube_scheduler) or None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    async with api:
        await ensure_cluster_objects(api)
        ctx = RunContext(api, plane, opts, workdir, port_token=await port_reader_token(api))
        for shape, runner, position in run_order(shapes, runners, args.rounds):
            if shape.name == FAILOVER.name:
                if runner not in FAILOVER_RUNNERS:
                    continue
                figures = await run_failover(ctx, shape, runner)
            else:
                figures = await run_one(ctx, shape, runner)
            figures["position_in_round"] = position
            ks = plane.external_kube_scheduler
            figures["kube_scheduler_running"] = ks is not None and Path(f"/proc/{ks}").exists()
            figures.update(common)
            results.append(figures)
            _emit(figures)
            if figures.get("unbound"):
                status = 1
        for shape in shapes:
            _emit(compare(shape.name, results))
        if not args.keep:  # kept with the control plane, for the next invocation
            for base in ctx.bases.values():
                await delete_base(api, base)
    with contextlib.suppress(OSError):
        workdir.rmdir()  # unless it holds a log or a profile worth keeping
    return status


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    opts = Options(
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        event_qps=args.event_qps,
        event_burst=args.event_burst,
        creators=args.creators,
        raw_binds=args.raw_binds,
        timeout=args.timeout,
        profile=args.profile,
    )
    _shapes(args), _runners(args)  # check them before starting anything
    if args.rounds < 1:
        raise SystemExit(f"--rounds: must be at least 1, got {args.rounds}")
    compile_sluice()
    if args.kubeconfig is not None or (args.state and (args.state / "kubeconfig").exists()):
        kubeconfig = args.kubeconfig or args.state / "kubeconfig"
        plane = ControlPlane(kubeconfig, args.state, started=False)
        plane.external_kube_scheduler = args.kube_scheduler_pid or pid_file(
            args.state, "kube-scheduler"
        )
    else:
        state = args.state or Path(tempfile.mkdtemp(prefix="sluice-real-k8s-"))
        plane = start_control_plane(
            state, controller_manager=any(s.volumes == LOCAL_PVS for s in _shapes(args))
        )
        if args.keep:
            plane.started = False
            sys.stderr.write(f"bench real: control plane kept in {state}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still run `down` below
    try:
        return anyio.run(_main, args, plane, opts)
    finally:
        stop_control_plane(plane)
