"""SchedulingBasic through the Kubernetes API emulator over HTTP, with ``sluice run`` as a
subprocess: the in-memory workload's shape, paying the real client path.

The embedded cluster's store is served by :class:`~scheduler.sim.emulator.ApiEmulator`
in this process; the scheduler is a separate ``sluice run --kubeconfig ...`` process that
lists and watches it and binds through the ``binding`` subresource, exactly as in a
cluster. The simulated kubelet (:class:`~scheduler.sim.kubelet.SimKubelet`) works on the
store directly and marks each bound pod Running at once, as in the in-memory workloads.

Setup (not measured): the nodes, the already running pods and the Queue ``default`` are
written to the store, the emulator starts, the scheduler starts and is waited on until
``/readyz`` (its informers have listed everything), then for one more second (first
cycles with nothing to schedule). Then the measured pods are written to the store in one
burst (no await in between). The interval measured runs from the moment the last measured
pod is in the store until the store applied the bind of the last of them (the server side
of the last bind call; the reply is still on its way). It therefore includes delivering
the pods to the scheduler over the watch, which the in-memory figure does not.

The scheduler gets ``--kube-api-qps 5000 --kube-api-burst 5000`` so that the figure is
the cost of the client path rather than kube-scheduler's default rate limit (50 QPS,
which would cap binding at 50 pods/s whatever the scheduler does).

Events are on, as in a cluster: a ``Scheduled`` event per bound pod, written by the
scheduler's background event writer on its own client (``--event-qps`` follows
``--kube-api-qps``), so the figure includes their cost. ``scheduled_events`` counts the
``Scheduled`` Events in the store once the scheduler has stopped (SIGTERM lets it write
those still due), ``events_dropped`` is its ``scheduler_events_dropped_total``.

After the last bind the run waits (up to ``EVENTS_WAIT_SECONDS``) until every measured pod's
``Scheduled`` event is in the store: ``seconds_to_last_event``, ``cpu_seconds_to_last_event``
and ``cpu_ms_per_pod`` (that CPU per bound pod) count the scheduler's whole work per pod,
events included, which the bind interval alone does not when events lag behind binds.

Figures are the same keys as :func:`bench.workloads.run` where the meaning carries over;
``cpu_seconds`` and ``peak_rss_mb`` are those of the scheduler process (``/proc/<pid>``:
utime + stime over the interval, ``VmHWM``), ``emulator_peak_rss_mb`` that of this one.
With ``wrap`` (``--profile``), the scheduler process runs under cProfile and its 40
hottest functions go to stderr (the emulator is not profiled).
"""

from __future__ import annotations

import contextlib
import io
import os
import platform
import pstats
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from bench.workloads import (
    NAMESPACE,
    Workload,
    _quantiles,
    _r,
    node,
    peak_rss_mb,
    pod,
    source_revision,
)
from scheduler.api import labels as L
from scheduler.loop.system_clock import SystemClock
from scheduler.schema import load_crds
from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.kubelet import SimKubelet
from scheduler.sim.store import ObjectStore, WatchEvent

WORKLOADS: dict[str, Workload] = {
    "http-scheduling-basic": Workload(
        "http-scheduling-basic",
        nodes=500,
        pods=2000,
        running=100,
        description=(
            "SchedulingBasic over HTTP: 500 nodes, 100 running pods, 2,000 pending pods of "
            "100m CPU / 500Mi, through the API emulator, `sluice run` as a subprocess"
        ),
    ),
}

KUBE_API_QPS = 5000
KUBE_API_BURST = 5000
SETTLE_SECONDS = 1.0
"""After /readyz, before the burst: the first cycles run with nothing to schedule."""
EVENTS_WAIT_SECONDS = 60.0
"""After the last bind, how long the run waits for every measured pod's Scheduled event."""
TIMEOUT_SECONDS = 600.0
"""How long the measured pods may take to be bound before the run gives up."""
PROFILE_TOP = 40
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def sluice_command() -> list[str]:
    beside = Path(sys.executable).with_name("sluice")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("sluice")
    if found is None:
        raise RuntimeError("no `sluice` command: install the package into this environment")
    return [found]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of ``pid`` (seconds), from /proc; None when unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # fields 14, 15 of stat


def _vm_hwm_kib(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class _Meter:
    """Watches the store: when the measured pods arrive and when each is bound."""

    def __init__(self, measured: set[str]) -> None:
        self.measured = measured
        self.bound: set[str] = set()
        self.bind_times: list[float] = []
        self.pid: int | None = None
        self.cpu_last_bound: float | None = None
        self.done = anyio.Event()
        self.events: set[str] = set()
        """Measured pods whose Scheduled event is in the store."""
        self.last_event: float | None = None
        self.cpu_last_event: float | None = None
        self.events_done = anyio.Event()

    def on_event(self, ev: WatchEvent) -> None:
        obj = ev.obj
        if ev.type != "ADDED" or obj.get("reason") != "Scheduled":
            return
        regarding = obj.get("regarding") or obj.get("involvedObject") or {}
        key = f"{regarding.get('namespace')}/{regarding.get('name')}"
        if key not in self.measured or key in self.events:
            return
        self.events.add(key)
        if len(self.events) == len(self.measured):
            self.last_event = time.monotonic()
            if self.pid is not None:
                self.cpu_last_event = _cpu_seconds(self.pid)
            self.events_done.set()

    def on_store(self, ev: WatchEvent) -> None:
        if ev.type != "MODIFIED":
            return
        meta = ev.obj["metadata"]
        key = f"{meta.get('namespace')}/{meta['name']}"
        if key not in self.measured or key in self.bound:
            return
        if not (ev.obj.get("spec") or {}).get("nodeName"):
            return
        self.bound.add(key)
        self.bind_times.append(time.monotonic())
        if len(self.bound) == len(self.measured):
            if self.pid is not None:
                self.cpu_last_bound = _cpu_seconds(self.pid)
            self.done.set()


async def _get(
    port: int, path: str, *, tls: bool = False, token: str | None = None
) -> tuple[int, str]:
    """GET ``path`` of ``sluice run``'s port: over TLS (its self-made certificate is not
    checked) with ``token`` as bearer when it is guarded, plain HTTP with
    ``--insecure-serving``."""
    timeout = aiohttp.ClientTimeout(total=5)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    scheme = "https" if tls else "http"
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{scheme}://127.0.0.1:{port}{path}", headers=headers, ssl=False) as resp,
    ):
        return resp.status, await resp.text()


def _metric(text: str, name: str, labels: dict[str, str] | None = None) -> float | None:
    total: float | None = None
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if labels and any(got.get(k) != v for k, v in labels.items()):
            continue
        total = (total or 0.0) + float(m.group(3))
    return total


async def _run(w: Workload, profile: bool) -> dict[str, Any]:
    t_build = time.monotonic()
    catalog = load_crds()

    def validate(obj: dict[str, Any]) -> dict[str, Any]:
        return catalog.check(obj) if catalog.is_custom(str(obj.get("kind"))) else obj

    store = ObjectStore(time.time, validator=validate)
    store.create(
        {
            "apiVersion": L.API_VERSION,
            "kind": "Queue",
            "metadata": {"name": L.DEFAULT_QUEUE},
            "spec": {"weight": 1},
        }
    )
    for i in range(w.nodes):
        store.create(node(i))
    for i in range(w.running):
        store.create(pod(f"running-{i}", node_name=f"node-{i % w.nodes}"))
    measured_pods = [pod(f"pod-{i}") for i in range(w.pods)]
    measured = {f"{NAMESPACE}/{p['metadata']['name']}" for p in measured_pods}
    meter = _Meter(measured)
    store.subscribe(meter.on_store, kinds=("Pod",))
    store.subscribe(meter.on_event, kinds=("Event",))

    workdir = Path(tempfile.mkdtemp(prefix="sluice-http-bench-"))
    log_path = workdir / "sluice-run.log"
    emulator = ApiEmulator(store, catalog=catalog, bookmark_interval=5.0)
    port = _free_port()
    figures: dict[str, Any] = {}
    async with emulator, anyio.create_task_group() as tg:
        kubeconfig = write_kubeconfig(workdir / "kubeconfig", emulator.url)
        await tg.start(SimKubelet(store, SystemClock()).run)
        argv = [
            *sluice_command(),
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--port",
            str(port),
            "--bind-address",
            "127.0.0.1",
            "--insecure-serving",  # the emulator answers no TokenReview
            "--kube-api-qps",
            str(KUBE_API_QPS),
            "--kube-api-burst",
            str(KUBE_API_BURST),
        ]
        prof_path = workdir / "sluice-run.prof"
        if profile:
            argv = [sys.executable, "-m", "cProfile", "-o", str(prof_path), *argv]
        with open(log_path, "wb") as log:
            proc = await anyio.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        meter.pid = proc.pid
        peak_kib = 0
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"sluice run exited with {proc.returncode}; see {log_path}")
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    if (await _get(port, "/readyz"))[0] == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sluice run not ready after 120 s; see {log_path}")
                await anyio.sleep(0.05)
            await anyio.sleep(SETTLE_SECONDS)
            _, text = await _get(port, "/metrics")
            cycles_before = _metric(
                text, "scheduler_cycle_duration_seconds_count", {"action": "all"}
            )
            setup_seconds = time.monotonic() - t_build

            cpu_start = _cpu_seconds(proc.pid)
            t_first = time.monotonic()
            for p in measured_pods:
                store.create(p)
            t_start = time.monotonic()
            with anyio.move_on_after(TIMEOUT_SECONDS):
                while not meter.done.is_set():
                    peak_kib = max(peak_kib, _vm_hwm_kib(proc.pid))
                    with anyio.move_on_after(0.5):
                        await meter.done.wait()
            with anyio.move_on_after(EVENTS_WAIT_SECONDS):
                await meter.events_done.wait()
            peak_kib = max(peak_kib, _vm_hwm_kib(proc.pid))
            _, text = await _get(port, "/metrics")
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with anyio.move_on_after(30):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            tg.cancel_scope.cancel()

    last = meter.bind_times[-1] if meter.bind_times else None
    seconds = (last - t_start) if last is not None and meter.done.is_set() else None
    cpu = None
    if cpu_start is not None and meter.cpu_last_bound is not None:
        cpu = meter.cpu_last_bound - cpu_start
    cpu_events = None
    if cpu_start is not None and meter.cpu_last_event is not None:
        cpu_events = meter.cpu_last_event - cpu_start
    cycles_after = _metric(text, "scheduler_cycle_duration_seconds_count", {"action": "all"})
    bound = len(meter.bound)
    events, _ = store.list("Event")
    scheduled_events = sum(1 for e in events if e.get("reason") == "Scheduled")
    if profile and prof_path.exists():
        _print_profile(prof_path, w.name)
    figures = {
        "workload": w.name,
        "nodes": w.nodes,
        "pods": w.pods,
        "running_pods": w.running,
        "pod_groups": 0,
        "transport": "http (API emulator, sluice run subprocess)",
        "bound": bound,
        "unbound": w.pods - bound,
        "bind_failures": int(_metric(text, "sluice_bind_total", {"result": "error"}) or 0),
        "scheduled_events": scheduled_events,
        "events_dropped": int(_metric(text, "scheduler_events_dropped_total") or 0),
        "seconds": _r(seconds),
        "pods_per_second": _r(bound / seconds, 1) if seconds else None,
        "cpu_seconds": _r(cpu),
        "pods_per_cpu_second": _r(bound / cpu, 1) if cpu else None,
        "seconds_to_last_event": (
            _r(meter.last_event - t_start) if meter.last_event is not None else None
        ),
        "cpu_seconds_to_last_event": _r(cpu_events),
        "cpu_ms_per_pod": _r(1000 * cpu_events / bound, 3) if cpu_events and bound else None,
        "interval": (
            "from the moment the last measured pod is in the emulator's store until the "
            "store applied the bind of the last measured pod"
        ),
        "cycles": (
            int(cycles_after - cycles_before)
            if cycles_after is not None and cycles_before is not None
            else None
        ),
        "max_cycle_seconds": _r(_metric(text, "sluice_cycle_longest_hold_seconds")),
        "bound_by_seconds": _quantiles(meter.bind_times, t_start, w.pods),
        "create_seconds": _r(t_start - t_first),
        "setup_seconds": _r(setup_seconds),
        "kube_api_qps": KUBE_API_QPS,
        "kube_api_burst": KUBE_API_BURST,
        "peak_rss_mb": round(peak_kib / 1024, 1),
        "emulator_peak_rss_mb": peak_rss_mb(),
        "scheduler_exit_code": proc.returncode,
        "scheduler_log": str(log_path),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
        "revision": source_revision(),
    }
    if profile and prof_path.exists():
        figures["scheduler_profile"] = str(prof_path)  # kept, for pstats' callers
    elif bound == w.pods and proc.returncode == 0:
        shutil.rmtree(workdir, ignore_errors=True)
        figures["scheduler_log"] = None
    return figures


def _print_profile(path: Path, name: str) -> None:
    for order in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(str(path), stream=buf).sort_stats(order).print_stats(PROFILE_TOP)
        sys.stderr.write(f"=== {name} (sluice run): top {PROFILE_TOP} by {order} ===\n")
        sys.stderr.write(buf.getvalue() + "\n")
    sys.stderr.flush()


def run(w: Workload, *, wrap: Callable[[Callable[[], Any]], Any] | None = None) -> dict[str, Any]:
    """Run ``w`` once and return its figures (the signature of :func:`bench.workloads.run`).
    ``wrap`` given (``--profile``): profile the scheduler process, not this one."""
    return anyio.run(_run, w, wrap is not None)


if __name__ == "__main__":  # python -m bench.http_workload: the default shape, one JSON line
    import json

    sys.stdout.write(json.dumps(run(WORKLOADS["http-scheduling-basic"])) + "\n")
