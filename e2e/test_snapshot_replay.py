"""``sluice snapshot`` of a frozen cluster replays to the decisions the live scheduler
makes (issue 27 point 3).

No scheduler runs while the state is made: nodes, two queues, pods already running (bound
by the test, as if an earlier scheduler had), and pods waiting: a high-priority pod that
must preempt, a gang of another queue that must reclaim, a pod that fits nowhere. The
snapshot is taken; then ``sluice run`` starts on the cluster and ``sluice simulate`` replays
the snapshot on the embedded cluster. The binds, the victims and the pods left pending
(with their reasons) must be the same. Also: ``--anonymize`` replays to the same
decisions under the new names.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from harness import (
    Cluster,
    NodeSpec,
    condition,
    core_path,
    hold_for,
    node_of,
    sluice_command,
    wait_for,
)

pytestmark = pytest.mark.anyio


async def _sluice(*args: str) -> str:
    command = [*sluice_command(), *args]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr}"
    return done.stdout


async def _bind(cluster: Cluster, pod: str, node: str) -> None:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": cluster.namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await cluster.api.request(
        "POST", core_path("pods", cluster.namespace, pod, "binding"), body=binding
    )


async def _frozen_state(cluster: Cluster) -> tuple[list[str], list[str]]:
    """The state, made with no scheduler running; (running pods, waiting pods)."""
    nodes = await cluster.create_nodes(3, NodeSpec(cpu="4"))
    qa = await cluster.create_queue("qa")
    qb = await cluster.create_queue("qb")
    low = await cluster.create_priority_class("low", 100)
    high = await cluster.create_priority_class("high", 10_000)
    running = [f"a-{i}" for i in range(6)]
    await cluster.create_pods(running, cpu="2", priority=low, queue=qa)
    for i, pod in enumerate(running):
        await _bind(cluster, pod, nodes[i % 3])
    await wait_for(lambda: cluster.all_running(running), timeout=30, what="a-* Running")
    await cluster.create_pod("urgent", cpu="2", priority=high, queue=qa)
    await cluster.create_pod("huge", cpu="8", priority=low, queue=qa)
    await cluster.create_pod_group("train", min_member=2, queue=qb)
    await cluster.create_pods(["train-0", "train-1"], cpu="2", group="train")
    return running, ["urgent", "huge", "train-0", "train-1"]


def _live(cluster: Cluster, running: list[str], waiting: list[str]) -> dict[str, Any]:
    ns = cluster.namespace
    bound = {f"{ns}/{p}": node_of(cluster.pod(p) or {}) for p in waiting}
    gone = [p for p in running if (h := cluster.recorder.history(p)) is not None and h.deleted]
    pending = {}
    for p in waiting:
        pod = cluster.pod(p) or {}
        if not node_of(pod):
            pending[f"{ns}/{p}"] = (condition(pod, "PodScheduled") or {}).get("message", "")
    return {
        "bindings": {k: v for k, v in bound.items() if v},
        "evictions": sorted(f"{ns}/{p}" for p in gone),
        "pending": pending,
    }


def _replayed(result: dict[str, Any], ns: str) -> dict[str, Any]:
    mine = lambda key: key.startswith(f"{ns}/")  # noqa: E731
    return {
        "bindings": {k: v for k, v in result["bindings"].items() if mine(k)},
        "evictions": sorted(k for k in result["evictions"] if mine(k)),
        "pending": {k: v for k, v in result["pending"].items() if mine(k)},
    }


async def test_a_snapshot_replays_to_the_live_decisions(
    cluster: Cluster, start_scheduler: Any, tmp_path: Path
) -> None:
    running, waiting = await _frozen_state(cluster)
    state = tmp_path / "state.yaml"
    anonymous = tmp_path / "anonymous.yaml"
    kubeconfig = ["--kubeconfig", cluster.kubeconfig] if cluster.kubeconfig else []
    # the test's scheduler runs with the defaults (or the suite's configuration), not with
    # a ConfigMap some deployment of Sluice may have left in the cluster
    plain = ["snapshot", *kubeconfig, "--scheduler-config", ""]
    await _sluice(*plain, "-o", str(state))
    await _sluice(*plain, "--anonymize", "-o", str(anonymous))
    suite_config = tmp_path / "scheduler-config.yaml"  # start_scheduler's, if any
    config = ["--config", str(suite_config)] if suite_config.exists() else []

    await start_scheduler()

    def settled() -> bool:
        if not node_of(cluster.pod("urgent") or {}):
            return False
        return all(
            node_of(pod) or (condition(pod, "PodScheduled") or {}).get("status") == "False"
            for pod in map(cluster.pod, waiting)
            if pod is not None
        )

    await wait_for(settled, timeout=60, what="the live decisions", detail=cluster.describe_pods)
    await hold_for(settled, seconds=3, what="nothing more changes")  # no later decision
    live = _live(cluster, running, waiting)
    assert live["evictions"], "the state makes the scheduler preempt and reclaim"
    assert live["bindings"], cluster.describe_pods()

    replay = json.loads(await _sluice("simulate", str(state), *config, "--output", "json"))
    assert _replayed(replay, cluster.namespace) == live

    # anonymized: the same decisions under the new names
    text = anonymous.read_text()
    names = [
        o["metadata"]["name"]
        for d in yaml.safe_load_all(text)
        if d.get("kind") == "List"
        for o in d["items"]
    ]
    assert cluster.namespace not in text
    assert not {"urgent", "huge", "train", "train-0", *running} & set(names)
    assert not set(cluster.nodes) & set(names)
    again = json.loads(await _sluice("simulate", str(anonymous), *config, "--output", "json"))
    assert _shape(again) == _shape(replay)


def _shape(result: dict[str, Any]) -> dict[str, Any]:
    """What stays under renaming: how many pods were bound, evicted, left pending, and
    the pending reasons (which name no pod)."""
    return {
        "bindings": len(result["bindings"]),
        "evictions": len(result["evictions"]),
        "pending": sorted(result["pending"].values()),
    }
