"""``sluice run``'s port guarded as kube-scheduler guards its own (issue 40 item 4), on the
real API server: the scheduler runs as its ServiceAccount under the RBAC of
``manifests/`` (which must let it create TokenReviews and SubjectAccessReviews), serves
TLS with a self-made certificate, and answers a request without a token 401, a token the
server does not accept 401, a token whose user RBAC does not allow the path 403 (naming
user, verb and path), a token bound to ``manifests/clusterrole-port.yaml``'s roles 200;
the probes answer anyone, and ``--insecure-serving`` turns all of it off."""

from __future__ import annotations

import json
from typing import Any

import pytest
from control_plane import apply, service_account_token
from harness import Cluster

pytestmark = [pytest.mark.anyio, pytest.mark.cluster_only]


async def _nobody(cluster: Cluster) -> tuple[str, str]:
    """A ServiceAccount of the test's namespace bound to nothing, and its token."""
    name = "nobody"
    await apply(
        cluster.api,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": cluster.namespace},
        },
    )
    token = await service_account_token(cluster.api, name, namespace=cluster.namespace)
    return f"system:serviceaccount:{cluster.namespace}:{name}", token


async def test_who_may_read_the_port(cluster: Cluster, start_scheduler: Any) -> None:
    assert cluster.port_token is not None
    sluice = await start_scheduler()
    assert sluice.url.startswith("https://")
    user, nobody = await _nobody(cluster)

    for path in ("/metrics", "/ui/state", "/ui/explain?kind=pod&name=a/b"):
        status, body = await sluice.http_get(path, token=None)
        assert status == 401, (path, body)
        assert json.loads(body)["reason"] == "Unauthorized"
        status, _ = await sluice.http_get(path, token="not-a-token")
        assert status == 401, path
        status, body = await sluice.http_get(path, token=nobody)
        assert status == 403, (path, body)
        message = json.loads(body)["message"]
        bare = path.split("?")[0]
        assert message.startswith(f'forbidden: User "{user}" cannot get path "{bare}"'), message
    status, metrics = await sluice.http_get("/metrics")  # the port reader's token
    assert status == 200 and "scheduler_schedule_attempts_total" in metrics
    status, state = await sluice.http_get("/ui/state")
    assert status == 200 and json.loads(state)["scheduler"] == cluster.scheduler_name
    status, explained = await sluice.http_get(f"/ui/explain?kind=pod&name={cluster.namespace}/x")
    assert status == 404 and "not found" in explained  # allowed: the page's own answer

    for probe in ("/healthz", "/readyz", "/livez"):
        assert (await sluice.http_get(probe, token=None))[0] == 200, probe
    status, page = await sluice.http_get("/ui", token=None)  # the page's HTML: no data
    assert status == 200 and "<title>" in page


async def test_insecure_serving_opens_the_port(cluster: Cluster, start_scheduler: Any) -> None:
    sluice = await start_scheduler(port_token=None)
    assert sluice.url.startswith("http://")
    assert (await sluice.http_get("/metrics"))[0] == 200
    assert (await sluice.http_get("/ui/state"))[0] == 200
