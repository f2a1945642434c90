"""The stock kube-scheduler of ``../shared/k8s`` as a subprocess of a test, under a
scheduler name of its own (so it places only the test's pods, whatever other
kube-scheduler runs beside it).

The binary is the one ``up`` unpacked (``$SLUICE_K8S_CACHE``, else
``~/.cache/sluice-k8s/v1.36.2``); :func:`kube_scheduler_binary` is None when there is none.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import IO

import yaml
from harness import free_port

VERSION = "v1.36.2"


def kube_scheduler_binary() -> Path | None:
    cache = os.environ.get("SLUICE_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-k8s" / VERSION
    )
    path = Path(cache) / "bin" / "kube-scheduler"
    return path if path.is_file() else None


class KubeScheduler:
    """kube-scheduler with its default plugins, serving ``scheduler_name``; its log in
    ``directory``. A context manager: stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, kubeconfig: str, directory: Path, scheduler_name: str) -> None:
        binary = kube_scheduler_binary()
        if binary is None:
            raise RuntimeError("no kube-scheduler binary (run ../shared/k8s/up once)")
        config = directory / "kube-scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": kubeconfig, "qps": 200, "burst": 400},
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": scheduler_name}],
                }
            )
        )
        self.log_path = directory / "kube-scheduler.log"
        self.argv = [
            str(binary),
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=2",
        ]
        self._log: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> KubeScheduler:
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
