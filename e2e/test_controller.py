"""``sluice controller``: the default Queue kept, the validating webhook, restarts, --dev.

The webhook tests need a real API server (the emulator calls no webhooks): the test makes
a certificate, the controller serves the webhook on 127.0.0.1 with it, and
``manifests/webhook.yaml`` is registered with a ``url`` clientConfig and its ``caBundle``,
limited to this run's objects (an ``objectSelector`` on the run label).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControllerProcess, apply, delete_object, webhook_configuration
from harness import API_VERSION, RUN_LABEL, ApiFailure, Cluster, custom_path, uid_of, wait_for

from scheduler.serving.certificates import make_certificate

pytestmark = pytest.mark.anyio

StartController = Callable[..., Awaitable[ControllerProcess]]


async def _default_uid(cluster: Cluster) -> str:
    queue = await cluster.get_queue("default")
    return uid_of(queue) if queue else ""


async def test_the_default_queue_is_kept_and_the_controller_restarts_cleanly(
    cluster: Cluster, start_controller: StartController
) -> None:
    controller = await start_controller()
    first = await wait_for(lambda: _default_uid(cluster), timeout=30, what="the default Queue")
    await cluster.api.request("DELETE", custom_path("queues", None, "default"))
    second = await wait_for(
        lambda: (uid := _default_uid(cluster)) and uid != first and uid,
        timeout=30,
        what="the default Queue created again after its deletion",
        detail=controller.tail,
    )
    assert second != first
    assert await controller.terminate() == 0
    # A second start finds the Queue there, serves, and stops cleanly again.
    again = await start_controller()
    assert await _default_uid(cluster) == second
    assert await again.terminate() == 0
    errors = [
        r for p in (controller, again) for r in p.log_records() if r.get("levelname") == "ERROR"
    ]
    assert errors == [], errors


def _pod_group(cluster: Cluster, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {RUN_LABEL: cluster.run_id},
        },
        "spec": spec,
    }


def _queue(cluster: Cluster, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": cluster.name(name), "labels": {RUN_LABEL: cluster.run_id}},
        "spec": spec,
    }


async def _create(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Queue":
        created = await cluster.api.request("POST", custom_path("queues"), body=obj)
        cluster.queues.append(obj["metadata"]["name"])
        return created
    return await cluster.api.request("POST", custom_path("podgroups", cluster.namespace), body=obj)


async def _refused(cluster: Cluster, obj: dict[str, Any], *, update: bool = False) -> ApiFailure:
    try:
        if update:
            path = (
                custom_path("queues", None, obj["metadata"]["name"])
                if obj["kind"] == "Queue"
                else custom_path("podgroups", cluster.namespace, obj["metadata"]["name"])
            )
            current = await cluster.api.request("GET", path)
            body = {
                **obj,
                "metadata": {
                    **obj["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                },
            }
            await cluster.api.request("PUT", path, body=body)
        else:
            await _create(cluster, obj)
    except ApiFailure as exc:
        return exc
    raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} was accepted: {obj['spec']}")


async def _register(cluster: Cluster, port: int, ca: bytes) -> dict[str, Any]:
    """Register the webhook and wait until the API server calls it."""
    config = webhook_configuration(cluster.name("webhook"), port, ca, cluster.run_id)
    await apply(cluster.api, config)
    probe = _pod_group(cluster, "probe", {"minMember": 1, "minTaskMember": {"a": 2}})

    async def called() -> bool:
        try:
            await _create(cluster, probe)
        except ApiFailure as exc:
            return "denied the request" in str(exc)
        await cluster.api.request("DELETE", custom_path("podgroups", cluster.namespace, "probe"))
        return False

    await wait_for(called, timeout=30, what="the API server calling the webhook")
    return config


async def _check_webhook(cluster: Cluster) -> None:
    """Each invalid PodGroup and Queue refused with the field named; valid ones accepted."""
    pod_groups: list[tuple[dict[str, Any], str]] = [
        (
            {"minMember": 2, "minTaskMember": {"a": 2, "b": 1}},
            "spec.minTaskMember: sum 3 exceeds spec.minMember 2",
        ),
        (
            {"minMember": 1, "minTaskMember": {"a": 2}},
            "spec.minTaskMember.a: 2 exceeds spec.minMember 1",
        ),
    ]
    for i, (spec, message) in enumerate(pod_groups):
        refused = await _refused(cluster, _pod_group(cluster, f"bad{i}", spec))
        assert refused.status == 422 and message in str(refused), str(refused)
    await _create(
        cluster, _pod_group(cluster, "good", {"minMember": 3, "minTaskMember": {"a": 1, "b": 2}})
    )
    refused = await _refused(
        cluster,
        _pod_group(cluster, "good", {"minMember": 1, "minTaskMember": {"a": 1, "b": 2}}),
        update=True,
    )
    assert "spec.minTaskMember: sum 3 exceeds spec.minMember 1" in str(refused), str(refused)

    parent = cluster.name("parent")
    queues: list[tuple[dict[str, Any], str]] = [
        (
            {"weight": 1, "capability": {"cpu": "2"}, "guarantee": {"cpu": "4"}},
            "spec.capability.cpu: 2 is below spec.guarantee.cpu 4",
        ),
        (
            {"weight": 1, "parent": cluster.name("nowhere")},
            f"spec.parent: queue {cluster.name('nowhere')} does not exist",
        ),
    ]
    for i, (spec, message) in enumerate(queues):
        refused = await _refused(cluster, _queue(cluster, f"bad{i}", spec))
        assert refused.status == 422 and message in str(refused), str(refused)
    await _create(
        cluster,
        _queue(
            cluster, "parent", {"weight": 1, "capability": {"cpu": "8"}, "guarantee": {"cpu": "4"}}
        ),
    )
    await _create(cluster, _queue(cluster, "child", {"weight": 1, "parent": parent}))
    cycle = _queue(cluster, "parent", {"weight": 1, "parent": cluster.name("child")})
    refused = await _refused(cluster, cycle, update=True)
    assert re.search(r"spec\.parent: queue \S+ -> \S+ -> \S+ forms a cycle", str(refused)), str(
        refused
    )


@pytest.mark.cluster_only
async def test_the_webhook_refuses_invalid_pod_groups_and_queues(
    cluster: Cluster, start_controller: StartController, tmp_path: Path
) -> None:
    certs = make_certificate(tmp_path / "certs", ["127.0.0.1"])
    controller = await start_controller(cert_dir=tmp_path / "certs")
    config = await _register(cluster, controller.webhook_port, certs.ca.read_bytes())
    try:
        await _check_webhook(cluster)
    finally:
        await delete_object(cluster.api, config)


@pytest.mark.cluster_only
async def test_dev_mode_serves_the_webhook_with_its_own_certificate(
    cluster: Cluster, start_controller: StartController
) -> None:
    controller = await start_controller(dev=True)
    found = await wait_for(
        lambda: re.search(r"caBundle of (\S+ca\.crt)", controller.log_text()),
        timeout=10,
        what="the --dev certificate's CA in the log",
        detail=controller.tail,
    )
    ca = Path(found.group(1)).read_bytes()
    await wait_for(lambda: _default_uid(cluster), timeout=30, what="the default Queue")
    config = await _register(cluster, controller.webhook_port, ca)
    try:
        refused = await _refused(
            cluster,
            _queue(
                cluster, "bad", {"weight": 1, "capability": {"cpu": "1"}, "guarantee": {"cpu": "2"}}
            ),
        )
        assert "spec.capability.cpu: 1 is below spec.guarantee.cpu 2" in str(refused)
        await _create(cluster, _queue(cluster, "fine", {"weight": 2}))
    finally:
        await delete_object(cluster.api, config)
    assert await controller.terminate() == 0
