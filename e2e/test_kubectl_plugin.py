"""``kubectl sluice`` through the real kubectl of ``../shared/k8s`` (issue 27 point 2): the
plugin installed by the package (``kubectl-sluice`` beside ``sluice``) is found on PATH by
kubectl, and with kubectl's own flags (``--kubeconfig``, ``--context``, ``-n``, ``-A``,
``-o``) it shows the queue tree, the PodGroups of two APIs with their phase, counts and
reason, explains a pending pod, and finds a scheduler-plugins PodGroup by its name; each
as the API shows it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from harness import Cluster, NodeSpec, condition, core_path, wait_for
from kubectl import kubectl_binary

pytestmark = pytest.mark.anyio

KUBECTL = kubectl_binary()
X_K8S = "scheduling.x-k8s.io/v1alpha1"


def _flags(cluster: Cluster) -> list[str]:
    """``--kubeconfig`` and ``--context`` naming the test's cluster explicitly."""
    path = cluster.kubeconfig or os.environ.get("KUBECONFIG", "")
    first = next(p for p in path.split(os.pathsep) if p)
    context = yaml.safe_load(Path(first).read_text())["current-context"]
    return ["--kubeconfig", first, "--context", context]


async def _kubectl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    command = [str(KUBECTL), "sluice", *args]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=120, check=False
        )
    )
    if check:
        assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done


def _rows(table: str) -> dict[str, dict[str, str]]:
    """A kubectl table by its NAME column (leading spaces, the tree's indent, kept)."""
    lines = table.rstrip("\n").split("\n")
    header = re.split(r"\s{3,}", lines[0].strip())
    rows = {}
    for line in lines[1:]:
        cells = re.split(r"(?<=\S)\s{3,}", line)
        row = dict(zip(header, cells, strict=True))
        rows[row["NAME"].strip()] = {
            **row,
            "indent": str(len(row["NAME"]) - len(row["NAME"].lstrip())),
        }
    return rows


def _amounts(m: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in m.items()) if m else "<none>"


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl of ../shared/k8s (set SLUICE_KUBECTL)")
async def test_kubectl_sluice(cluster: Cluster, start_scheduler: Any) -> None:
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    org = await cluster.create_queue("org", weight=2)
    team = await cluster.create_queue("team", parent=org)
    await start_scheduler()
    await cluster.create_pod_group("gang", min_member=3, queue=team)
    gang = ["gang-0", "gang-1", "gang-2"]
    await cluster.create_pods(gang, cpu="2", group="gang")
    body = {
        "apiVersion": X_K8S,
        "kind": "PodGroup",
        "metadata": {"name": "pair"},
        "spec": {"minMember": 2},
    }
    await cluster.api.request(
        "POST", core_path("podgroups", cluster.namespace, group=X_K8S), body=body
    )
    pair = ["pair-0", "pair-1"]
    for name in pair:
        pod = cluster.pod_manifest(name, cpu="1")
        pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pair"
        await cluster.api.request("POST", core_path("pods", cluster.namespace), body=pod)
    await wait_for(lambda: cluster.all_running(pair), timeout=30, what="the pair Running")

    async def gang_says_why() -> dict[str, Any] | None:
        pg = await cluster.get_pod_group("gang") or {}
        for c in (pg.get("status") or {}).get("conditions") or ():
            if c["type"] == "Unschedulable" and c["status"] == "True":
                return pg
        return None

    gang_group = await wait_for(gang_says_why, timeout=30, what="the gang's Unschedulable")
    flags = _flags(cluster)
    ns = ["-n", cluster.namespace]

    listed = json.loads((await _kubectl("jobs", *flags, *ns, "-o", "json")).stdout)
    assert listed["kind"] == "List"
    assert {(o["apiVersion"], o["metadata"]["name"]) for o in listed["items"]} == {
        ("scheduling.sluice.dev/v1alpha1", "gang"),
        (X_K8S, "pair"),
    }

    async def jobs_table() -> tuple[dict[str, dict[str, str]], dict[str, Any]] | None:
        rows = _rows((await _kubectl("jobs", *ns, *flags)).stdout)  # flags after, too
        pair = rows["pair"]
        if (pair["RUNNING"], pair["PHASE"]) != ("2", "Running"):
            return None
        # the gang's reason as the table read it: its text may move after the first one
        # (written when two of its three pods were there), once the gang's backoff passed
        group = await gang_says_why()
        said = _unschedulable_message(group)
        if said is None or not said.startswith(rows["gang"]["REASON"].removesuffix("...")):
            return None
        return rows, group or {}

    rows, gang_group = await wait_for(
        jobs_table, timeout=30, what="kubectl sluice jobs: the pair running"
    )
    message = _unschedulable_message(gang_group) or ""
    assert rows["gang"]["API"] == "sluice" and rows["gang"]["QUEUE"] == team
    assert rows["gang"]["PHASE"] == gang_group["status"]["phase"]
    assert (rows["gang"]["MIN"], rows["gang"]["PENDING"]) == ("3", "3")
    assert message.startswith(rows["gang"]["REASON"].removesuffix("..."))
    assert rows["pair"]["API"] == "scheduler-plugins"
    pair_group = await cluster.api.request(
        "GET", core_path("podgroups", cluster.namespace, "pair", group=X_K8S)
    )
    assert rows["pair"]["PHASE"] == pair_group["status"]["phase"] == "Running"
    everywhere = (await _kubectl("jobs", "-A", *flags)).stdout
    assert everywhere.startswith("NAMESPACE") and cluster.namespace in everywhere

    queues = _rows((await _kubectl(*flags, "queues")).stdout)  # flags before the subcommand
    for name, indent in ((org, "0"), (team, "2")):
        status = (await cluster.get_queue(name) or {}).get("status") or {}
        assert queues[name]["indent"] == indent
        assert queues[name]["DESERVED"] == _amounts(status.get("deserved"))
        assert queues[name]["ALLOCATED"] == _amounts(status.get("allocated"))
        assert queues[name]["PENDING"] == str(status.get("pending", 0))
    assert queues[org]["WEIGHT"] == "2"

    explained = yaml.safe_load(
        (await _kubectl("explain", "pod", "gang-0", *ns, *flags, "-o", "yaml")).stdout
    )
    assert explained["name"] == f"{cluster.namespace}/gang-0"
    gang_0 = cluster.pod("gang-0") or {}
    assert explained["pods"][0]["status"] == "Pending"
    assert explained["reason"] == message or condition(gang_0, "PodScheduled") is not None

    # another API's PodGroup by its name alone, as kubectl names it (issue 35.6)
    pair_explained = yaml.safe_load(
        (await _kubectl("explain", "podgroup", "pair", *ns, *flags, "-o", "yaml")).stdout
    )
    assert pair_explained["name"] == f"scheduler-plugins:{cluster.namespace}/pair"
    missing_group = await _kubectl("explain", "podgroup", "nope", *ns, *flags, check=False)
    assert missing_group.returncode == 2
    assert f"volcano:{cluster.namespace}/nope" in missing_group.stderr

    refused = await _kubectl("explain", "pod", *flags, check=False)
    assert refused.returncode == 2 and "NAME" in refused.stderr
    missing = await _kubectl("explain", "pod", "nope", *ns, *flags, check=False)
    assert missing.returncode == 2
    assert f"pod {cluster.namespace}/nope: not found" in missing.stderr


def _unschedulable_message(group: dict[str, Any] | None) -> str | None:
    """The message of a PodGroup's ``Unschedulable=True`` condition, if it has one."""
    for c in ((group or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == "Unschedulable" and c.get("status") == "True":
            return str(c.get("message") or "")
    return None
