"""``sluice explain`` against a cluster: it lists what the scheduler watches (as the
scheduler's ServiceAccount, where the suite runs as one), explains a pending pod node by
node, and writes nothing."""

from __future__ import annotations

import json
import subprocess

import anyio
import pytest
from harness import Cluster, NodeSpec, sluice_command

pytestmark = pytest.mark.anyio


async def test_explain_a_pending_pod_of_a_cluster(cluster: Cluster) -> None:
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await cluster.create_pods(["big"], cpu="3")  # no node has 3 cpu
    before = await cluster.get_pod("big")
    assert before is not None
    command = [
        *sluice_command(),
        "explain",
        "pod",
        f"{cluster.namespace}/big",
        "--kubeconfig",
        cluster.scheduler_kubeconfig,
        "-o",
        "json",
    ]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    )
    assert done.returncode == 0, done.stderr
    e = json.loads(done.stdout)
    [pod] = e["pods"]
    assert pod["status"] == "Pending"
    assert "Insufficient cpu" in pod["reason"]
    # the run's two nodes are among those refused for cpu (other nodes of the cluster
    # are refused for the run's node selector)
    mine = {n for n in pod["nodes"].get("Insufficient cpu", []) if n.startswith(cluster.run_id)}
    assert len(mine) == 2, pod["nodes"]
    after = await cluster.get_pod("big")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
