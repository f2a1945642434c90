"""``sluice simulate --serve`` keeps scheduling after the scenario's run (issue 15 point
3): a pod created afterwards through the served API, with kubernetes-asyncio (kubectl's
path), is scheduled like the scenario's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client, config

from scheduler import app
from scheduler.logging import quiet
from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import load_scenario

pytestmark = pytest.mark.anyio


def pod(name: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "sluice",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
            ],
        },
    }


async def test_a_pod_created_after_the_run_is_scheduled(tmp_path: Path) -> None:
    quiet()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all([node, pod("first")]))
    resolved = app.resolve()
    sim = Simulation(
        load_scenario([str(path)]),
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        real_time=True,
        until=60.0,
    )
    settled: list[SimulationResult] = []
    sim.serving = True
    sim.on_settled = settled.append
    async with ApiEmulator(sim.store, port=0, wall=sim.clock.wall) as emu:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emu.url)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sim.run)
            with anyio.fail_after(20):
                while not settled:
                    await anyio.sleep(0.05)
            assert settled[0].bindings == {"default/first": "n1"}
            configuration = client.Configuration()
            await config.load_kube_config(str(kubeconfig), client_configuration=configuration)
            async with client.ApiClient(configuration) as api:
                v1 = client.CoreV1Api(api)
                await v1.create_namespaced_pod("default", pod("later"))
                with anyio.fail_after(20):
                    while True:
                        later = await v1.read_namespaced_pod("later", "default")
                        if later.spec.node_name:
                            break
                        await anyio.sleep(0.1)
            assert later.spec.node_name == "n1"
            sim.loop.stop()
    assert sim.result.bindings == {"default/first": "n1", "default/later": "n1"}
