"""``sluice run`` as a subprocess: its log, probes, metrics and signals.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc

from harness.waiting import free_port, wait_for


def sluice_command() -> list[str]:
    """How to start ``sluice``: ``$SLUICE_E2E_COMMAND`` (split on spaces), else the
    ``sluice`` script next to this Python, else the one on PATH."""
    override = os.environ.get("SLUICE_E2E_COMMAND")
    if override:
        return override.split()
    beside = Path(sys.executable).with_name("sluice")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("sluice")
    if found is None:
        raise RuntimeError(
            "no `sluice` command found (install the package, or set SLUICE_E2E_COMMAND)"
        )
    return [found]


_counter = itertools.count()


class SchedulerProcess:
    """``sluice run`` as a subprocess of the test; stdout and stderr go to ``log_path``.

    Its port is guarded as in a cluster (TLS with a self-made certificate, TokenReview,
    SubjectAccessReview) when ``port_token`` is given: the harness then reads ``/metrics``
    and the live page with that bearer token (a ServiceAccount allowed by
    ``manifests/clusterrole-port.yaml``). Without one (the emulator answers no reviews) it
    runs with ``--insecure-serving`` and is read over plain HTTP."""

    def __init__(
        self,
        kubeconfig: str | None,
        log_dir: Path,
        *,
        leader_elect: bool = False,
        lease_namespace: str = "",
        lease_name: str = "sluice-scheduler",
        feature_gates: str = "",
        config: Path | None = None,
        extra_args: Sequence[str] = (),
        verbosity: int = 2,
        port_token: str | None = None,
    ) -> None:
        self.port = free_port()
        self.index = next(_counter)
        self.log_path = log_dir / f"sluice-run-{self.index}.log"
        self.port_token = port_token
        argv = [*sluice_command(), "run", "--port", str(self.port), "--bind-address", "127.0.0.1"]
        if port_token is None:
            argv.append("--insecure-serving")
        if kubeconfig and os.pathsep not in kubeconfig:
            argv += ["--kubeconfig", kubeconfig]
        if leader_elect:
            argv += [
                "--leader-elect",
                "--leader-elect-resource-namespace",
                lease_namespace,
                "--leader-elect-resource-name",
                lease_name,
            ]
        if feature_gates:
            argv += ["--feature-gates", feature_gates]
        if config is not None:
            argv += ["--config", str(config)]
        argv += [*extra_args, "-v", str(verbosity)]
        self.argv = argv
        self.proc: anyio.abc.Process | None = None
        self.peak_rss_kib = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def start(self) -> SchedulerProcess:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.proc = await anyio.open_process(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for ``/readyz`` to answer 200 (the informers have synced)."""

        async def ready() -> bool:
            if self.returncode is not None:
                raise AssertionError(
                    f"sluice run exited with {self.returncode} before it was ready\n{self.tail()}"
                )
            try:
                return (await self.http_get("/readyz"))[0] == 200
            except (aiohttp.ClientError, OSError, TimeoutError):
                return False

        await wait_for(ready, timeout=timeout, what="sluice run /readyz", detail=self.tail)

    @property
    def url(self) -> str:
        """The port's address: https when it is guarded."""
        scheme = "https" if self.port_token is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    async def http_get(self, path: str, *, token: str | bool | None = True) -> tuple[int, str]:
        """GET ``path`` of the port; ``token``: True sends :attr:`port_token` (if any), a
        string sends that bearer token, None or False sends none. The self-made
        certificate is not verified (it cannot be: its CA is thrown away)."""
        bearer = self.port_token if token is True else (token or None)
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{self.url}{path}", headers=headers, ssl=False) as resp,
        ):
            return resp.status, await resp.text()

    async def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """A sample of ``/metrics`` (the sum over series when ``labels`` match several)."""
        _, text = await self.http_get("/metrics")
        total: float | None = None
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not match or match.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            if labels and any(got.get(k) != v for k, v in labels.items()):
                continue
            total = (total or 0.0) + float(match.group(3))
        return total

    def sample_rss(self) -> int:
        """Read VmHWM (peak resident set, KiB) of the process from /proc; 0 if unknown."""
        if self.proc is None or self.returncode is not None:
            return self.peak_rss_kib
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
        return self.peak_rss_kib

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; SIGKILL after ``timeout`` (then raise). Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.returncode is None:
            self.sample_rss()
            self.proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(timeout):
            return await self.proc.wait()
        self.proc.kill()
        await self.proc.wait()
        raise AssertionError(
            f"sluice run did not stop within {timeout} s of SIGTERM\n{self.tail()}"
        )

    async def kill(self) -> None:
        """SIGKILL (no chance to release anything) and reap."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def aclose(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(AssertionError):
                await self.terminate(timeout=10)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines (others, such as tracebacks, skipped)."""
        out = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def identity(self) -> str | None:
        """The Lease identity this process led with, from its log (None: never led)."""
        for r in self.log_records():
            if r.get("event") == "became leader":
                return str(r.get("identity"))
        return None

    def tail(self, lines: int = 40) -> str:
        text = self.log_text().splitlines()[-lines:]
        return (
            f"--- {self.log_path} (pid {self.proc.pid if self.proc else '-'}, "
            f"exit {self.returncode}) ---\n" + "\n".join(text)
        )


def rebinds_in_log(proc: SchedulerProcess) -> list[str]:
    """Log lines of binds refused because the pod was already bound (a 409)."""
    return [
        json.dumps(r)
        for r in proc.log_records()
        if r.get("call") == "bind" and "already assigned" in str(r.get("error", ""))
    ]
