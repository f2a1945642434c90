"""Sluice's image against the real API server, run as ``manifests/`` runs it (issue 40
item 1): ``sluice run`` and ``sluice controller`` in containers of the image built by
``image/build`` (``SLUICE_E2E_IMAGE``), as their ServiceAccounts with the token, CA and
namespace mounted where a pod has them and the in-cluster configuration, non-root, with a
read-only root filesystem, the manifests' volumes and probes (``e2e/container.py`` says
how each field is carried over, and the one departure: ports moved, the network being the
host's). The scheduler binds a gang, answers its probes, serves ``/metrics`` and the live
page behind its guard, and stops cleanly on SIGTERM; the controller answers its probes and
its webhook refuses an invalid PodGroup. Prints the image's size and the time from
``podman run`` to the first bind. Skipped, saying why, without podman or an image."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import KUBECONFIG, SCHEDULER_NAME, _as_service_accounts
from container import IMAGE, PODMAN, ContainerProcess, pod_run_args, podman_problem
from control_plane import (
    CONTROLLER_ACCOUNT,
    SCHEDULER_ACCOUNT,
    SYSTEM_NAMESPACE,
    apply,
    delete_object,
    forbidden_lines,
    load_manifests,
    service_account_token,
    webhook_configuration,
)
from harness import (
    API_VERSION,
    RUN_LABEL,
    ApiFailure,
    Cluster,
    NodeSpec,
    core_path,
    custom_path,
    free_port,
    wait_for,
)

from scheduler.serving.certificates import make_certificate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster_only]


@pytest.fixture(scope="module")
def image() -> str:
    problem = podman_problem()
    if problem is not None:
        pytest.skip(f"the image cannot be run here: {problem}")
    if not _as_service_accounts():
        pytest.skip("runs as the ServiceAccounts of manifests/ (SLUICE_E2E_SERVICE_ACCOUNTS=1)")
    return IMAGE


def _api_server() -> tuple[str, int, bytes]:
    """Host, port and CA (PEM) of the cluster, from the suite's kubeconfig."""
    assert KUBECONFIG is not None
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    context = config.get("current-context") or config["contexts"][0]["name"]
    cluster_name = next(c for c in config["contexts"] if c["name"] == context)["context"]["cluster"]
    cluster = next(c for c in config["clusters"] if c["name"] == cluster_name)["cluster"]
    url = urlsplit(cluster["server"])
    if "certificate-authority-data" in cluster:
        ca = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca = Path(cluster["certificate-authority"]).read_bytes()
    return url.hostname or "127.0.0.1", url.port or 443, ca


def _deployment(path: str) -> dict[str, Any]:
    (deployment,) = [d for d in load_manifests([path]) if d["kind"] == "Deployment"]
    return deployment


def _size_mb(image: str) -> float:
    out = subprocess.run(
        [*PODMAN, "image", "inspect", "--format", "{{.Size}}", image],
        capture_output=True,
        check=True,
        text=True,
    )
    return int(out.stdout.strip()) / 1e6


async def _container(
    cluster: Cluster,
    tmp_path: Path,
    *,
    manifest: str,
    account: str,
    data: dict[str, dict[str, bytes]],
    ports: dict[int, int],
    extra_args: list[str],
) -> ContainerProcess:
    deployment = _deployment(manifest)
    host, port, ca = _api_server()
    name = f"{deployment['metadata']['name']}-{cluster.run_id}"
    args = pod_run_args(
        deployment,
        name=name,
        pod_name=name,
        namespace=SYSTEM_NAMESPACE,
        files=tmp_path / name,
        token=await service_account_token(cluster.api, account, seconds=3600),
        ca_pem=ca,
        api_host=host,
        api_port=port,
        data=data,
        extra_args=extra_args,
    )
    return ContainerProcess(deployment, args, name, tmp_path / f"{name}.log", ports)


def _refused_by_rbac(container: ContainerProcess) -> list[str]:
    return forbidden_lines(container.log_text())


async def test_the_scheduler_image_binds_a_gang_and_serves_its_port(
    cluster: Cluster, image: str, tmp_path: Path
) -> None:
    (config_map,) = load_manifests(["configmap.yaml"])
    config = config_map["data"]["config.yaml"].replace(
        "schedulerName: sluice", f"schedulerName: {SCHEDULER_NAME}"
    )
    metrics_port = free_port()
    scheduler = await _container(
        cluster,
        tmp_path,
        manifest="scheduler/deployment.yaml",
        account=SCHEDULER_ACCOUNT,
        data={config_map["metadata"]["name"]: {"config.yaml": config.encode()}},
        ports={10259: metrics_port},
        extra_args=["--port", str(metrics_port)],
    )
    await cluster.create_nodes(3, NodeSpec(cpu="1"))
    await cluster.create_pod_group("gang", min_member=3)
    members = [f"gang-{i}" for i in range(3)]
    await cluster.create_pods(members, cpu="1", group="gang")
    lease = core_path(
        "leases", SYSTEM_NAMESPACE, "sluice-scheduler", group="coordination.k8s.io/v1"
    )
    try:
        started = time.monotonic()
        await scheduler.start()
        await wait_for(
            lambda: cluster.bound(members),
            timeout=120,
            interval=0.05,
            what="the first member of the gang bound by the image",
            detail=scheduler.tail,
        )
        first_bind = time.monotonic() - started
        await wait_for(
            lambda: cluster.all_bound(members),
            timeout=30,
            what="the whole gang bound",
            detail=lambda: cluster.describe_pods(members) + "\n" + scheduler.tail(),
        )
        said = await scheduler.wait_probe("readinessProbe")
        assert said == "200 ok", said
        assert (await scheduler.probe("livenessProbe"))[0]
        assert len(set(cluster.bound(members).values())) == 3

        # The port: TLS, its probes open, everything else behind the guard.
        url = f"https://127.0.0.1:{metrics_port}"
        get = _Get(url)
        assert (await get("/metrics"))[0] == 401
        status, text = await get("/metrics", cluster.port_token)
        assert status == 200 and "scheduler_schedule_attempts_total" in text
        status, page = await get("/ui")  # the page's HTML: no data, served to anyone
        assert status == 200 and "<title>" in page
        assert (await get("/ui/state"))[0] == 401
        status, text = await get("/ui/state", cluster.port_token)
        assert status == 200
        assert json.loads(text)["scheduler"] == SCHEDULER_NAME

        assert await scheduler.stop() == 0  # SIGTERM: a clean stop, the Lease released
        holder = (await cluster.api.request("GET", lease)).get("spec", {}).get("holderIdentity")
        assert not holder, f"the Lease is still held by {holder}"
        size = _size_mb(image)
        print(f"\nimage {image}: {size:.0f} MB; podman run to first bind {first_bind:.1f} s")
        assert _refused_by_rbac(scheduler) == []
    finally:
        await scheduler.aclose()
        try:
            await cluster.api.request("DELETE", lease)
        except ApiFailure as exc:
            if exc.status != 404:
                raise


async def test_the_controller_image_serves_its_webhook(
    cluster: Cluster, image: str, tmp_path: Path
) -> None:
    certs = make_certificate(tmp_path / "webhook-cert", ["127.0.0.1", "localhost"])
    webhook_port, health_port = free_port(), free_port()
    controller = await _container(
        cluster,
        tmp_path,
        manifest="controller-deployment.yaml",
        account=CONTROLLER_ACCOUNT,
        data={
            "sluice-webhook-cert": {
                "tls.crt": certs.cert.read_bytes(),
                "tls.key": certs.key.read_bytes(),
                "ca.crt": certs.ca.read_bytes(),
            }
        },
        ports={9443: webhook_port, 8080: health_port},
        extra_args=[
            "--webhook-port",
            str(webhook_port),
            "--health-port",
            str(health_port),
            "--scheduler-name",
            SCHEDULER_NAME,
        ],
    )
    registration = webhook_configuration(
        cluster.name("webhook"), webhook_port, certs.ca.read_bytes(), cluster.run_id
    )
    try:
        await controller.start()
        await controller.wait_probe("readinessProbe")
        await controller.wait_probe("livenessProbe")
        await apply(cluster.api, registration)
        invalid = {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": "invalid",
                "namespace": cluster.namespace,
                "labels": {RUN_LABEL: cluster.run_id},
            },
            "spec": {"minMember": 1, "minTaskMember": {"a": 2}},
        }

        async def refused() -> str:
            try:
                await cluster.api.request(
                    "POST", custom_path("podgroups", cluster.namespace), body=invalid
                )
            except ApiFailure as exc:
                return str(exc) if "denied the request" in str(exc) else ""
            await cluster.api.request(
                "DELETE", custom_path("podgroups", cluster.namespace, "invalid")
            )
            return ""

        message = await wait_for(
            refused, timeout=60, what="the image's webhook refusing", detail=controller.tail
        )
        assert "spec.minTaskMember.a: 2 exceeds spec.minMember 1" in message
        assert await controller.stop() == 0
        assert _refused_by_rbac(controller) == []
    finally:
        await delete_object(cluster.api, registration)
        await controller.aclose()


class _Get:
    """GET a path of a port over TLS, without checking its self-made certificate."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def __call__(self, path: str, token: str | None = None) -> tuple[int, str]:
        import aiohttp

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(self.url + path, headers=headers, ssl=False) as resp,
        ):
            return resp.status, await resp.text()
