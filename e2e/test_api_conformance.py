"""What the API server refuses, and how: one table, run against the emulator always and
against the real API server when there is one, expecting the same status codes and
reasons. The real server is the judge: where they differ, the emulator changes.

Each case makes one request (after any set-up it needs) and reports the status code and
reason of the refusal: of the HTTP reply, or, for a watch the server accepts and then
ends, of its ``ERROR`` event (as the real server answers a watch from a compacted
resourceVersion).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from control_plane import LocalControlPlane
from harness import (
    API_VERSION,
    JSON,
    RUN_LABEL,
    STRATEGIC_MERGE_PATCH,
    ApiFailure,
    Cluster,
    core_path,
    custom_path,
)

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    body: dict[str, Any]


async def _send(
    cluster: Cluster,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = JSON,
) -> Refusal:
    """The refusal of one request; for a watch accepted with 200, of its first ERROR."""
    resp = await cluster.api._send(
        method,
        path,
        query=query or [],
        body=body,
        content_type=content_type,
        timeout=aiohttp.ClientTimeout(total=15),
    )
    try:
        if resp.status == 200 and any(k == "watch" for k, _ in query or []):
            while line := await resp.content.readline():
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event["object"]
                    return Refusal(int(status.get("code") or 0), str(status.get("reason")), status)
            return Refusal(200, "", {})
        raw = await resp.read()
    finally:
        resp.release()
    doc = json.loads(raw) if raw.strip() else {}
    return Refusal(resp.status, str(doc.get("reason") or ""), doc)


async def _pod(cluster: Cluster, name: str, **options: Any) -> dict[str, Any]:
    return await cluster.create_pod(name, **options)


async def float_timeout_on_a_watch(cluster: Cluster) -> Refusal:
    query = [("watch", "true"), ("timeoutSeconds", "540.0")]
    return await _send(cluster, "GET", core_path("pods", cluster.namespace), query=query)


async def float_limit_on_a_list(cluster: Cluster) -> Refusal:
    return await _send(
        cluster, "GET", core_path("pods", cluster.namespace), query=[("limit", "5.0")]
    )


async def float_grace_period_on_a_delete(cluster: Cluster) -> Refusal:
    await _pod(cluster, "doomed")
    return await _send(
        cluster,
        "DELETE",
        core_path("pods", cluster.namespace, "doomed"),
        query=[("gracePeriodSeconds", "0.0")],
    )


async def second_binding(cluster: Cluster) -> Refusal:
    (node,) = await cluster.create_nodes(1)
    await _pod(cluster, "twice")
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "twice", "namespace": cluster.namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    path = core_path("pods", cluster.namespace, "twice", "binding")
    first = await _send(cluster, "POST", path, body=binding)
    assert first.status == 201, first
    return await _send(cluster, "POST", path, body=binding)


async def unknown_priority_class(cluster: Cluster) -> Refusal:
    body = cluster.pod_manifest("orphan", priority=(cluster.name("no-such-class"), 0))
    return await _send(cluster, "POST", core_path("pods", cluster.namespace), body=body)


async def patch_with_a_plain_json_content_type(cluster: Cluster) -> Refusal:
    await _pod(cluster, "patched")
    return await _send(
        cluster,
        "PATCH",
        core_path("pods", cluster.namespace, "patched"),
        body={"metadata": {"labels": {"x": "y"}}},
        content_type=JSON,
    )


async def strategic_merge_patch_of_a_custom_object(cluster: Cluster) -> Refusal:
    await cluster.create_pod_group("smp", min_member=1)
    return await _send(
        cluster,
        "PATCH",
        custom_path("podgroups", cluster.namespace, "smp"),
        body={"spec": {"minMember": 2}},
        content_type=STRATEGIC_MERGE_PATCH,
    )


async def watch_from_a_compacted_resource_version(cluster: Cluster) -> Refusal:
    """Events: the real server keeps no watch cache for them, so an old resourceVersion
    is looked up in etcd, compacted here as the API server does every 5 minutes (kinds
    with a watch cache answer from memory while its window reaches back)."""
    path = core_path("events", cluster.namespace, group="events.k8s.io/v1")
    since = str((await cluster.api.request("GET", path))["metadata"]["resourceVersion"])
    for name in ("after", "and-after"):  # a watch from `since` starts at since + 1:
        await _pod(cluster, name)  # compacting up to since + 2 leaves it behind
    latest = await cluster.api.request("GET", core_path("pods", cluster.namespace))
    if cluster.emulator is not None:  # push that revision out of its short history
        cluster.emulator.churn(300)
    else:
        state = os.environ.get("SLUICE_E2E_K8S_STATE")
        if not state:
            pytest.skip("compacting etcd needs the local control plane (SLUICE_E2E_K8S_STATE)")
        revision = int(latest["metadata"]["resourceVersion"])
        await LocalControlPlane(Path(state)).compact_etcd(revision)
    return await _send(cluster, "GET", path, query=[("watch", "true"), ("resourceVersion", since)])


async def invalid_custom_object(cluster: Cluster) -> Refusal:
    body = {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "negative", "labels": {RUN_LABEL: cluster.run_id}},
        "spec": {"minMember": -1},
    }
    return await _send(cluster, "POST", custom_path("podgroups", cluster.namespace), body=body)


def _causes(refusal: Refusal) -> list[str]:
    return [str(c.get("field")) for c in (refusal.body.get("details") or {}).get("causes") or ()]


Case = Callable[[Cluster], Awaitable[Refusal]]
CASES: list[Any] = [
    pytest.param(
        float_timeout_on_a_watch, 400, "BadRequest", 'parsing "540.0"', id="float-timeoutSeconds"
    ),
    pytest.param(float_limit_on_a_list, 400, "BadRequest", 'parsing "5.0"', id="float-limit"),
    pytest.param(
        float_grace_period_on_a_delete,
        400,
        "BadRequest",
        'parsing "0.0"',
        id="float-gracePeriodSeconds",
    ),
    pytest.param(second_binding, 409, "Conflict", "already assigned", id="second-binding"),
    pytest.param(unknown_priority_class, 403, "Forbidden", "no-such-class", id="priority-class"),
    pytest.param(
        patch_with_a_plain_json_content_type,
        415,
        "UnsupportedMediaType",
        "Unsupported Media Type",
        id="patch-content-type",
    ),
    pytest.param(
        strategic_merge_patch_of_a_custom_object,
        415,
        "UnsupportedMediaType",
        "accepted media types include",
        id="strategic-merge-on-a-custom-object",
    ),
    pytest.param(
        watch_from_a_compacted_resource_version, 410, "Expired", "too old", id="compacted-watch"
    ),
    pytest.param(invalid_custom_object, 422, "Invalid", "spec.minMember", id="invalid-custom"),
]


@pytest.mark.emulator(history=200)
@pytest.mark.parametrize(("case", "status", "reason", "mention"), CASES)
async def test_the_api_server_refuses(
    cluster: Cluster, case: Case, status: int, reason: str, mention: str
) -> None:
    refusal = await case(cluster)
    assert (refusal.status, refusal.reason) == (status, reason), refusal.body
    assert mention in str(refusal.body.get("message")), refusal.body
    if status == 422:
        assert "spec.minMember" in _causes(refusal), refusal.body
    assert refusal.body.get("kind") == "Status" and refusal.body.get("code") == status


async def test_a_refusal_is_a_status_the_client_reads(cluster: Cluster) -> None:
    """The harness' own client sees the same refusal as an ApiFailure (sanity)."""
    with pytest.raises(ApiFailure) as caught:
        await cluster.api.request(
            "GET", core_path("pods", cluster.namespace), query=[("limit", "x")]
        )
    assert caught.value.status == 400
