"""Failover through a real API server (``python -m bench real --shapes failover``).

Job: measure how long a scheduler with two replicas under leader election stops
scheduling when its leader dies. One run per runner (``kube-scheduler``, ``sluice``), in
a namespace of its own on the server of :mod:`bench.real`:

1. the shape's nodes and running pods (5,000 and 20,000: the state a standby keeps in
   sync), as every run of ``bench real`` sets them up;
2. replica A starts with leader election on a Lease of the run (``<run>`` in the run's
   namespace), and the bench waits until A holds it; then replica B starts, and the bench
   waits until B is ready (its informers synced: ``/readyz``) and then one lease duration
   more, so that B has seen A renew;
3. A is killed with SIGKILL (time 0), and at once the measured pods are created (32 at a
   time: a few hundred, new work arriving while nobody schedules);
4. figures: ``takeover_after`` (time 0 to the Lease's holder changing, seen by a watch),
   ``failover_seconds`` (time 0 to the first bind of a measured pod: what users wait),
   ``seconds_to_last_bind`` of the measured pods, and the lease duration the replicas ran
   with (both 15 s, kube-scheduler's default); the target is ``failover_seconds`` within
   the lease duration plus 2 s.

Contracts: replicas are processes the bench starts and stops (A is killed, B gets
SIGTERM at the end); the Lease lives in the run's namespace, so :func:`cleanup_run` of
the run leaves nothing behind but the namespace; one JSON object per run, like every run
of ``bench real``.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio

from bench.http_workload import _free_port
from bench.real_cluster import (
    KUBE_SCHEDULER,
    ProcessMeter,
    Shape,
    bind_watch,
    cleanup_run,
    create_pods,
    kube_scheduler_argv,
    measured_pods,
    setup_run,
)
from bench.real_runs import RunContext, sluice_argv, start_process, stop_process
from scheduler.api import labels as L
from scheduler.api.errors import ApiError, NotFoundError
from scheduler.kube.resource_paths import LEASES

LEASE_DURATION: Final = 15.0
"""Seconds: kube-scheduler's default ``--leader-elect-lease-duration``, and Sluice's."""
TARGET_SLACK: Final = 2.0
"""The target: the first bind within the lease duration plus this many seconds."""

FAILOVER: Final = Shape(
    "failover",
    nodes=5000,
    running=20000,
    pods=300,
    description=(
        "5,000 nodes, 20,000 running pods; two replicas with leader election, the "
        "leader killed with SIGKILL, 300 pods created at the kill"
    ),
)


async def _holder(ctx: RunContext, namespace: str, name: str) -> str:
    """The Lease's holderIdentity, "" when none (or no Lease yet)."""
    try:
        lease = await ctx.api.request(
            "GET", LEASES.path(namespace, name), kind="Lease", name=name, timeout=10
        )
    except NotFoundError:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def _wait_for(check: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"failover: {what} not after {timeout:g} s")
        await anyio.sleep(0.1)


async def _ready(port: int, https: bool) -> bool:
    """Does the replica serving ``port`` answer /readyz with 200?"""
    scheme = "https" if https else "http"
    timeout = aiohttp.ClientTimeout(total=3)
    tls: ssl.SSLContext | bool = False
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{scheme}://127.0.0.1:{port}/readyz", ssl=tls) as resp,
        ):
            return resp.status == 200
    return False


def replica_argv(ctx: RunContext, runner: str, run: str, port: int) -> list[str]:
    """The command of one replica of ``runner`` with leader election on the run's Lease."""
    if runner == "kube-scheduler":
        qps, burst = ctx.opts.kube_api_qps, ctx.opts.kube_api_burst
        argv = kube_scheduler_argv(ctx.plane.kubeconfig, qps, burst, port=port)
        argv = [a for a in argv if not a.startswith("--leader-elect")]
        return [
            *argv,
            "--leader-elect=true",
            f"--leader-elect-resource-name={run}",
            f"--leader-elect-resource-namespace={run}",
            f"--leader-elect-lease-duration={LEASE_DURATION:g}s",
        ]
    return sluice_argv(
        ctx,
        port,
        [
            "--leader-elect",
            "--leader-elect-resource-name",
            run,
            "--leader-elect-resource-namespace",
            run,
        ],
    )


async def run_failover(ctx: RunContext, shape: Shape, runner: str) -> dict[str, Any]:
    """One failover run of ``runner`` (see the module docstring); its figures."""
    api, opts = ctx.api, ctx.opts
    run = f"bench-fail-{runner[:6].rstrip('-')}-{secrets.token_hex(3)}"
    scheduler_name = KUBE_SCHEDULER if runner == "kube-scheduler" else L.SCHEDULER_NAME
    https = True  # both serve their port over TLS (Sluice's guarded as kube-scheduler's)
    figures: dict[str, Any] = {
        "shape": shape.name,
        "runner": runner,
        "mode": "failover",
        "namespace": run,
        "nodes": shape.nodes,
        "running_pods": shape.running,
        "pods": shape.pods,
        "lease_duration_seconds": LEASE_DURATION,
    }
    procs: list[anyio.abc.Process] = []
    logs = [ctx.workdir / f"{run}-a.log", ctx.workdir / f"{run}-b.log"]
    t_setup = time.monotonic()
    try:
        await setup_run(
            api,
            shape,
            run,
            scheduler_name=scheduler_name,
            pod_groups=False,
            concurrency=opts.setup_concurrency,
        )
        figures["setup_seconds"] = round(time.monotonic() - t_setup, 1)
        ports = [_free_port(), _free_port()]
        a = await start_process(replica_argv(ctx, runner, run, ports[0]), logs[0])
        procs.append(a)

        async def a_leads() -> bool:
            if a.returncode is not None:
                raise RuntimeError(f"replica A exited with {a.returncode}; see {logs[0]}")
            return bool(await _holder(ctx, run, run))

        await _wait_for(a_leads, 180, "replica A holding the Lease")
        leader = await _holder(ctx, run, run)
        b = await start_process(replica_argv(ctx, runner, run, ports[1]), logs[1])
        procs.append(b)
        t_b = time.monotonic()

        async def b_ready() -> bool:
            if b.returncode is not None:
                raise RuntimeError(f"replica B exited with {b.returncode}; see {logs[1]}")
            return await _ready(ports[1], https)

        await _wait_for(b_ready, 300, "replica B ready")
        figures["standby_ready_after"] = round(time.monotonic() - t_b, 2)
        await anyio.sleep(LEASE_DURATION)  # B has seen A renew for a whole lease
        if await _holder(ctx, run, run) != leader:
            raise RuntimeError("failover: the leader changed before the kill")
        standby = ProcessMeter(b.pid)
        standby.start()
        pods = measured_pods(shape, run, scheduler_name)
        watch = bind_watch(api, run, {p["metadata"]["name"] for p in pods})
        taken: list[float] = []
        async with anyio.create_task_group() as tg:
            await tg.start(watch.run_watch)
            t_kill = time.monotonic()
            a.send_signal(signal.SIGKILL)
            tg.start_soon(_note_takeover, ctx, run, leader, taken)
            await create_pods(api, run, pods, opts.creators)
            figures["create_seconds"] = round(time.monotonic() - t_kill, 2)
            with anyio.move_on_after(opts.timeout):
                await watch.done.wait()
            tg.cancel_scope.cancel()
        times = sorted(watch.seen.values())
        figures.update(
            bound=len(times),
            unbound=shape.pods - len(times),
            takeover_after=round(taken[0] - t_kill, 2) if taken else None,
            failover_seconds=round(times[0] - t_kill, 2) if times else None,
            seconds_to_last_bind=round(times[-1] - t_kill, 2) if times else None,
            standby_cpu_seconds=standby.cpu(),
            standby_peak_rss_mb=standby.peak_rss_mb(),
            target_seconds=LEASE_DURATION + TARGET_SLACK,
        )
        first = figures["failover_seconds"]
        figures["within_target"] = first is not None and first <= LEASE_DURATION + TARGET_SLACK
    finally:
        with anyio.CancelScope(shield=True):
            for proc in procs:
                await stop_process(proc)
            t_clean = time.monotonic()
            try:
                await cleanup_run(api, run)
            except ApiError as exc:
                figures["cleanup_error"] = str(exc)
            figures["cleanup_seconds"] = round(time.monotonic() - t_clean, 1)
    if figures.get("unbound") or not figures.get("within_target"):
        figures["scheduler_logs"] = [str(p) for p in logs]
    else:
        for path in logs:
            Path(path).unlink(missing_ok=True)
    return figures


async def _note_takeover(ctx: RunContext, run: str, leader: str, taken: list[float]) -> None:
    """Append when the Lease's holder stops being ``leader`` (polled every 50 ms)."""
    while True:
        holder = await _holder(ctx, run, run)
        if holder and holder != leader:
            taken.append(time.monotonic())
            return
        await anyio.sleep(0.05)
