"""Shared helpers for the tests of scheduler.kube (not a test module).

A :class:`Cluster` is an ObjectStore served over HTTP by the ApiEmulator, with a
kubeconfig written for it and a KubeClient built from that kubeconfig, as production
builds one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from scheduler.kube import KubeClient
from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.store import ObjectStore


@dataclass
class Cluster:
    store: ObjectStore
    emulator: ApiEmulator
    client: KubeClient
    kubeconfig: Path
    port: int

    async def cut(self) -> None:
        """Stop serving: every watch is cut, new connections are refused."""
        await self.emulator.stop()

    async def resume(self) -> None:
        """Serve again on the same port."""
        self.emulator.port = self.port
        await self.emulator.start()


@asynccontextmanager
async def running_cluster(
    tmp_path: Path,
    *,
    history: int = 100_000,
    bookmark_interval: float = 0.2,
    qps: float = 0.0,
    burst: int = 1,
    timeout: float = 5.0,
) -> AsyncIterator[Cluster]:
    store = ObjectStore(time.time, history=history)
    emulator = ApiEmulator(store, bookmark_interval=bookmark_interval)
    url = await emulator.start()
    try:
        path = write_kubeconfig(tmp_path / "kubeconfig", url)
        client = await KubeClient.connect(path, qps=qps, burst=burst, timeout=timeout)
        async with client:
            yield Cluster(store, emulator, client, path, emulator.served_port)
    finally:
        await emulator.stop()


async def wait_until(
    predicate: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail the test after ``timeout``."""
    with anyio.move_on_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)
        return
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def pod(
    name: str,
    ns: str = "default",
    *,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    running: bool = False,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "sluice",
        "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if node:
        spec["nodeName"] = node
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
        "spec": spec,
    }
    status: dict[str, Any] = {}
    if running:
        status["phase"] = "Running"
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    if conditions:
        status["conditions"] = [*status.get("conditions", []), *conditions]
    if status:
        obj["status"] = status
    return obj


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pdb(name: str, match: dict[str, str], min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": match}, "minAvailable": min_available},
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


class FakeClock:
    """A Clock whose time moves only when something sleeps on it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_767_225_600.0 + self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += max(0.0, seconds)
        await anyio.lowlevel.checkpoint()

    def advance(self, seconds: float) -> None:
        self.t += seconds
