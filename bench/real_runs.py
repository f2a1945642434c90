"""What one run of ``bench real`` needs besides its cluster: the bench's options, the
context handed to every run (:class:`RunContext`), and the scheduler processes a run
starts and stops. Shared by the runs of :mod:`bench.real` and those of
:mod:`bench.failover`."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from bench.http_workload import sluice_command
from bench.real_base import Base
from bench.real_cluster import ControlPlane
from scheduler.kube import KubeClient


@dataclass(slots=True)
class Options:
    kube_api_qps: float = 5000.0
    kube_api_burst: int = 5000
    event_qps: float = 50.0
    """``--event-qps`` of the ``sluice-event-qps`` runs (kube-scheduler's default QPS)."""
    event_burst: int = 100
    creators: int = 32
    """Measured pods created at once."""
    raw_binds: int = 64
    """Binds at once in a raw run (Sluice's bind pool: ``bindConcurrency`` 64)."""
    setup_concurrency: int = 32
    timeout: float = 900.0
    """How long the measured pods of one run may take to be bound."""
    events_wait: float = 120.0
    """After the last bind, how long the bench waits for the Scheduled events of every
    measured pod before it stops the scheduler (a run cut short is ``binds only``)."""
    profile: bool = False
    """Run ``sluice run`` under cProfile (its figures are then inflated)."""


@dataclass
class RunContext:
    api: KubeClient
    plane: ControlPlane
    opts: Options
    workdir: Path
    port_token: str | None = None
    """The bearer token the bench reads ``sluice run``'s guarded port with
    (:func:`bench.real_cluster.port_reader_token`)."""
    bases: dict[str, Base] = field(default_factory=dict)
    """The shared bases made (or found) so far, by shape name (:mod:`bench.real_base`)."""


async def start_process(argv: list[str], log_path: Path) -> anyio.abc.Process:
    """Start ``argv`` in a session of its own, its output (both streams) to ``log_path``."""
    with open(log_path, "wb") as log:
        return await anyio.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def sluice_argv(ctx: RunContext, port: int, extra: list[str]) -> list[str]:
    """``sluice run`` against the run's cluster, serving ``port`` on 127.0.0.1 (guarded, as
    deployed: TLS, reviews), with the bench's client rate limits, then ``extra``."""
    return [
        *sluice_command(),
        "run",
        "--kubeconfig",
        str(ctx.plane.kubeconfig),
        "--port",
        str(port),
        "--bind-address",
        "127.0.0.1",
        "--kube-api-qps",
        f"{ctx.opts.kube_api_qps:g}",
        "--kube-api-burst",
        str(ctx.opts.kube_api_burst),
        *extra,
    ]


async def stop_process(proc: anyio.abc.Process) -> int | None:
    """SIGTERM (Sluice then writes the events still due), SIGKILL after 30 s."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(30):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode
