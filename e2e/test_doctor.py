"""``sluice doctor`` against the real API server (issue 40 item 2), run as a user runs it
(a subprocess, as the kubeconfig's user; ``kubectl sluice doctor`` once through kubectl):

* a healthy install: the CRDs and the RBAC of ``manifests/`` in place, ``sluice
  controller`` serving the webhook registered as ``manifests/webhook.yaml`` registers it
  (by URL: the controller runs outside the cluster), ``sluice run`` holding the Lease:
  nothing fails, and the webhook is proven end to end by a dry run it refuses;
* a CRD missing and a CRD changed: each named, with what to apply;
* a rule missing from the scheduler's ClusterRole: the access named, and the file;
* another scheduler answering to a schedulerName (the stock kube-scheduler with a profile
  of that name, binding a pod): found by the Events it writes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import KUBECONFIG, SCHEDULER_NAME, _as_service_accounts
from control_plane import (
    SYSTEM_NAMESPACE,
    ControllerProcess,
    apply,
    apply_manifests,
    delete_object,
    load_manifests,
    wait_for_rbac,
)
from harness import (
    ApiFailure,
    Cluster,
    NodeSpec,
    core_path,
    free_port,
    install_crds,
    load_crds,
    node_of,
    sluice_command,
    wait_for,
)
from kubectl import kubectl_binary

from scheduler.serving.certificates import make_certificate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster_only]

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def doctor(*args: str) -> tuple[int, dict[str, dict[str, str]]]:
    """``sluice doctor -o json`` as the kubeconfig's user: exit code, findings by check."""
    assert KUBECONFIG is not None
    command = [*sluice_command(), "doctor", "--kubeconfig", KUBECONFIG, "-o", "json", *args]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, {f["check"]: f for f in json.loads(done.stdout)}


def _fails(found: dict[str, dict[str, str]]) -> dict[str, str]:
    return {c: f["said"] for c, f in found.items() if f["level"] == "fail"}


async def _register_webhook(cluster: Cluster, port: int, ca: bytes) -> dict[str, Any]:
    """``manifests/webhook.yaml`` as is, but calling the controller at 127.0.0.1 by URL."""
    (config,) = load_manifests(["webhook.yaml"])
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{port}{path}",
            "caBundle": base64.b64encode(ca).decode(),
        }
    await apply(cluster.api, config)
    return config


async def test_a_healthy_install(
    cluster: Cluster, start_scheduler: Any, start_controller: Any, tmp_path: Path
) -> None:
    if not _as_service_accounts():
        pytest.skip("needs the ServiceAccounts of manifests/ (SLUICE_E2E_SERVICE_ACCOUNTS=1)")
    certs = make_certificate(tmp_path / "certs")
    controller: ControllerProcess = await start_controller(cert_dir=certs.ca.parent)
    config = await _register_webhook(cluster, controller.webhook_port, certs.ca.read_bytes())
    lease = core_path(
        "leases", SYSTEM_NAMESPACE, "sluice-scheduler", group="coordination.k8s.io/v1"
    )
    try:
        await start_scheduler(leader_elect=True, lease_name="sluice-scheduler")

        async def settled() -> dict[str, dict[str, str]] | None:
            code, found = await doctor("--scheduler-name", SCHEDULER_NAME)
            held = "held by" in found["leader lease"]["said"]
            webhook = found["webhook"]["level"] == "ok"
            return found if code == 0 and held and webhook else None

        found = await wait_for(settled, timeout=60, interval=1, what="a healthy doctor")
        assert _fails(found) == {}
        for check in (
            "api server",
            "crd podgroups.scheduling.sluice.dev",
            "crd queues.scheduling.sluice.dev",
            "crd topologies.scheduling.sluice.dev",
            f"rbac {SYSTEM_NAMESPACE}/sluice-scheduler",
            f"rbac {SYSTEM_NAMESPACE}/sluice-controller",
            "webhook",
            "leader lease",
            "other schedulers",
            "podgroup apis",
            "queue apis",
        ):
            assert found[check]["level"] == "ok", found[check]
        assert "refused an invalid PodGroup in a dry run" in found["webhook"]["said"]
        assert (
            "impersonating the ServiceAccount"
            in found[f"rbac {SYSTEM_NAMESPACE}/sluice-scheduler"]["said"]
        )
        assert found["leader lease"]["said"].startswith("sluice-scheduler held by ")

        kubectl = kubectl_binary()
        if kubectl is not None:  # the same through kubectl's plugin mechanism
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
            command = [str(kubectl), "sluice", "doctor", "--kubeconfig", str(KUBECONFIG)]
            done = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [*command, "--scheduler-name", SCHEDULER_NAME],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=180,
                    check=False,
                )
            )
            assert done.returncode == 0, done.stdout + done.stderr
            lines = done.stdout.splitlines()
            assert lines[-1].endswith(" 0 fail"), done.stdout
            assert any(line.startswith("ok    webhook ") for line in lines), done.stdout
    finally:
        await delete_object(cluster.api, config)
        try:
            await cluster.api.request("DELETE", lease)
        except ApiFailure as exc:
            if exc.status != 404:
                raise


async def test_a_missing_and_a_changed_crd(cluster: Cluster) -> None:
    topologies, queues = "topologies.scheduling.sluice.dev", "queues.scheduling.sluice.dev"
    queue_crd = next(c for c in load_crds() if c["metadata"]["name"] == queues)
    changed = copy.deepcopy(queue_crd)
    changed["spec"]["names"]["shortNames"] = ["q", "sq"]
    try:
        await cluster.api.request("DELETE", f"{CRDS}/{topologies}")
        await install_crds(cluster.api, crds=[changed])

        async def seen() -> dict[str, str] | None:
            code, found = await doctor()
            fails = _fails(found)
            return (
                fails
                if code == 1 and {f"crd {topologies}", f"crd {queues}"} <= fails.keys()
                else None
            )

        fails = await wait_for(seen, timeout=60, interval=1, what="both CRDs failing")
        assert fails[f"crd {topologies}"] == "not installed"
        assert fails[f"crd {queues}"].startswith(
            "differs from this Sluice's crds/queue.yaml at spec.names.shortNames"
        )
        _, found = await doctor()
        assert found[f"crd {queues}"]["fix"] == "kubectl apply --server-side -f crds/queue.yaml"
        assert found[f"crd {topologies}"]["fix"] == "kubectl apply -f crds/topology.yaml"
    finally:
        await install_crds(cluster.api, crds=load_crds())


async def test_a_missing_rbac_rule(cluster: Cluster) -> None:
    if not _as_service_accounts():
        pytest.skip("needs the ServiceAccounts of manifests/ (SLUICE_E2E_SERVICE_ACCOUNTS=1)")
    (role,) = [d for d in load_manifests(["clusterrole.yaml"]) if d["kind"] == "ClusterRole"]
    without = copy.deepcopy(role)
    without["rules"] = [r for r in role["rules"] if r["resources"] != ["pods/binding"]]
    assert len(without["rules"]) == len(role["rules"]) - 1
    check = f"rbac {SYSTEM_NAMESPACE}/sluice-scheduler"
    try:
        await apply(cluster.api, without)

        async def refused() -> dict[str, str] | None:
            code, found = await doctor()
            return found[check] if code == 1 and found[check]["level"] == "fail" else None

        finding = await wait_for(refused, timeout=60, interval=1, what="the binding rule missed")
        assert finding["said"].startswith("may not create pods/binding (1 of "), finding
        assert finding["fix"] == (
            "kubectl apply -k manifests (the rules are in manifests/clusterrole.yaml)"
        )
    finally:
        await apply_manifests(cluster.api, ["clusterrole.yaml"])
        await wait_for_rbac(cluster.api)


def _kube_scheduler() -> Path | None:
    cache = os.environ.get("SLUICE_K8S_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-k8s/v1.36.2"
    )
    binary = Path(cache) / "bin" / "kube-scheduler"
    return binary if binary.is_file() else None


async def test_another_scheduler_of_the_same_name(cluster: Cluster, tmp_path: Path) -> None:
    binary = _kube_scheduler()
    if binary is None or KUBECONFIG is None:
        pytest.skip("no kube-scheduler of ../shared/k8s (its cache of binaries)")
    name = f"other-{cluster.run_id}"
    config = tmp_path / "kube-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {KUBECONFIG}}}\n"
        "leaderElection: {leaderElect: false}\n"
        f"profiles:\n- schedulerName: {name}\n"
    )
    argv = [
        str(binary),
        f"--config={config}",
        f"--authentication-kubeconfig={KUBECONFIG}",
        f"--authorization-kubeconfig={KUBECONFIG}",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
    ]
    with open(tmp_path / "kube-scheduler.log", "wb") as log:
        proc = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        _, found = await doctor("--scheduler-name", name)
        assert found["other schedulers"]["level"] == "ok", found["other schedulers"]
        await cluster.create_node("n0", NodeSpec(cpu="2"))
        await cluster.create_pod("theirs", scheduler_name=name)
        await wait_for(
            lambda: node_of(cluster.pod("theirs") or {}),
            timeout=60,
            what="kube-scheduler binding its pod",
            detail=lambda: (tmp_path / "kube-scheduler.log").read_text()[-2000:],
        )

        async def warned() -> dict[str, str] | None:
            _, found = await doctor("--scheduler-name", name)
            return (
                found["other schedulers"] if found["other schedulers"]["level"] == "warn" else None
            )

        finding = await wait_for(warned, timeout=60, interval=1, what="the other scheduler seen")
        assert finding["said"].startswith(f"another scheduler answers to {name!r}: {name}-"), (
            finding
        )
        assert f"Scheduled {cluster.namespace}/theirs" in finding["said"]
    finally:
        proc.terminate()
        with anyio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
