"""`run_controller` as a real process: kopf against the Kubernetes API emulator.

The controller runs in a subprocess (kopf takes over the signals and the event loop), with a
kubeconfig pointing at an ApiEmulator served from this test's event loop and a self-signed
webhook certificate made with openssl. The test then plays the API server's part in
admission: it POSTs AdmissionReviews to the webhook over TLS.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import anyio
import pytest

from scheduler.sim.emulator import ApiEmulator
from scheduler.sim.kubeconfig import write_kubeconfig
from scheduler.sim.store import ObjectStore

pytestmark = pytest.mark.anyio

T = TypeVar("T")
QUEUES = "/apis/scheduling.sluice.dev/v1alpha1/queues"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_certificate(directory: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(directory / "tls.key"),
            "-out",
            str(directory / "tls.crt"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


@dataclass
class Running:
    api: str
    webhook: str
    health: str
    http: aiohttp.ClientSession
    tls: ssl.SSLContext
    process: anyio.abc.Process
    log: Path

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.http.get(self.api + path) as resp:
            return resp.status, await resp.json()

    async def send(self, method: str, path: str, body: Any = None) -> int:
        async with self.http.request(method, self.api + path, json=body) as resp:
            return resp.status

    async def review(self, handler: str, resource: str, obj: dict[str, Any], **request: Any) -> Any:
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {
                    "group": "scheduling.sluice.dev",
                    "version": "v1alpha1",
                    "kind": obj["kind"],
                },
                "resource": {
                    "group": "scheduling.sluice.dev",
                    "version": "v1alpha1",
                    "resource": resource,
                },
                "operation": "CREATE",
                "userInfo": {"username": "tester"},
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                **request,
            },
        }
        async with self.http.post(f"{self.webhook}/{handler}", json=review, ssl=self.tls) as resp:
            assert resp.status == 200, await resp.text()
            return (await resp.json())["response"]


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 20) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = await probe()
        except (aiohttp.ClientError, OSError):
            result = None
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await anyio.sleep(0.1)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    make_certificate(tmp_path)
    store = ObjectStore(time.time)
    webhook_port, health_port = free_port(), free_port()
    async with ApiEmulator(store, bookmark_interval=1.0) as emulator:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", emulator.url)
        code = (
            "import sys\n"
            "from scheduler.controllers.main import run_controller\n"
            f"sys.exit(run_controller(kubeconfig={str(kubeconfig)!r}, namespace=None, dev=False,"
            f" verbose=2, webhook_port={webhook_port}, cert_dir={str(tmp_path)!r},"
            f" health_port={health_port}))\n"
        )
        log = tmp_path / "controller.log"
        with log.open("wb") as sink:
            process = await anyio.open_process(
                [sys.executable, "-c", code], stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT
            )
        tls = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
        try:
            async with aiohttp.ClientSession() as http:
                yield Running(
                    emulator.url,
                    f"https://127.0.0.1:{webhook_port}",
                    f"http://127.0.0.1:{health_port}",
                    http,
                    tls,
                    process,
                    log,
                )
        finally:
            if process.returncode is None:
                process.terminate()
                with anyio.move_on_after(15):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


async def test_controller_end_to_end(running: Running) -> None:
    with anyio.fail_after(90):
        # The default queue appears, as the controller creates it.
        async def default_queue() -> dict[str, Any] | None:
            code, body = await running.get(f"{QUEUES}/default")
            return body if code == 200 else None

        first = await eventually(default_queue, "the default queue")
        assert first["spec"]["weight"] == 1

        # The webhook answers over TLS: a refusal names the field, a valid object passes.
        async def webhook_up() -> Any:
            return await running.review("validate-queue", "queues", queue("ok", weight=2))

        assert (await eventually(webhook_up, "the webhook"))["allowed"] is True
        refused = await running.review("validate-queue", "queues", queue("a", parent="nope"))
        assert refused["allowed"] is False
        assert refused["status"]["code"] == 422
        assert refused["status"]["message"] == (
            'Queue "a" is invalid: spec.parent: queue nope does not exist'
        )
        gang = {
            "apiVersion": "scheduling.sluice.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "default"},
            "spec": {"minMember": 3, "minTaskMember": {"ps": 2, "worker": 3}},
        }
        refused = await running.review("validate-podgroup", "podgroups", gang)
        assert refused["allowed"] is False
        assert refused["status"]["message"] == (
            'PodGroup "gang" is invalid: spec.minTaskMember: sum 5 exceeds spec.minMember 3'
        )

        # A cycle through queues the controller learnt from the API server (index or lookup).
        assert await running.send("POST", QUEUES, queue("training")) == 201
        assert await running.send("POST", QUEUES, queue("team", parent="training")) == 201
        update = await running.review(
            "validate-queue",
            "queues",
            queue("training", parent="team"),
            operation="UPDATE",
            oldObject=queue("training"),
        )
        assert update["allowed"] is False
        assert (
            "spec.parent: queue training -> team -> training forms a cycle"
            in (update["status"]["message"])
        )

        # Deleted, the default queue comes back.
        assert await running.send("DELETE", f"{QUEUES}/default") == 200

        async def recreated() -> dict[str, Any] | None:
            body = await default_queue()
            if body is None or body["metadata"]["uid"] == first["metadata"]["uid"]:
                return None
            return body

        await eventually(recreated, "the default queue to be created again")

        # kopf wrote nothing onto the Queues it watched.
        code, listing = await running.get(QUEUES)
        assert code == 200
        for item in listing["items"]:
            meta = item["metadata"]
            assert not meta.get("finalizers"), meta
            assert not meta.get("annotations"), meta
            assert "status" not in item or "kopf" not in item["status"]

        # The pod grouper: a Job's pod joins a PodGroup made from the Job, owned by it; a pod
        # whose owner's kind is not served is left a gang of one, saying so. kopf writes
        # nothing else onto the pods.
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"parallelism": 2, "template": {"spec": {"containers": []}}},
        }
        assert await running.send("POST", "/apis/batch/v1/namespaces/default/jobs", job) == 201
        _, made = await running.get("/apis/batch/v1/namespaces/default/jobs/train")
        widget = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": "u"}
        for name, owner in (("train-0", made), ("w-0", None)):
            ref = (
                widget
                if owner is None
                else {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": owner["metadata"]["uid"],
                }
            )
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "ownerReferences": [{**ref, "controller": True}],
                },
                "spec": {
                    "schedulerName": "sluice",
                    "containers": [{"name": "main", "image": "pause"}],
                },
            }
            assert await running.send("POST", "/api/v1/namespaces/default/pods", body) == 201

        async def marked(name: str, key: str) -> dict[str, Any] | None:
            _, got = await running.get(f"/api/v1/namespaces/default/pods/{name}")
            meta = got["metadata"]
            found = (meta.get("labels") or {}).get(key) or (meta.get("annotations") or {}).get(key)
            return meta if found else None

        grouped = await eventually(
            lambda: marked("train-0", "scheduling.sluice.dev/pod-group"), "the Job's pod grouped"
        )
        group = grouped["labels"]["scheduling.sluice.dev/pod-group"]
        code, pg = await running.get(
            f"/apis/scheduling.sluice.dev/v1alpha1/namespaces/default/podgroups/{group}"
        )
        assert code == 200 and pg["spec"] == {"minMember": 2, "queue": "default"}
        assert pg["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]
        alone = await eventually(
            lambda: marked("w-0", "scheduling.sluice.dev/gang-of-one"), "the Widget's pod alone"
        )
        assert (
            "serves no example.com/v1 Widget"
            in (alone["annotations"]["scheduling.sluice.dev/gang-of-one"])
        )
        for meta in (grouped, alone):
            assert not meta.get("finalizers"), meta
            assert set(meta.get("annotations") or {}) <= {"scheduling.sluice.dev/gang-of-one"}

        # kopf's liveness endpoint answers.
        async with running.http.get(f"{running.health}/healthz") as resp:
            assert resp.status == 200

        # SIGTERM ends it cleanly.
        running.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await running.process.wait()
        log = running.log.read_text(errors="replace")
        assert code == 0, log
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert records, log
