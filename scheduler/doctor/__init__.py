"""Layer 5: ``sluice doctor`` (and ``kubectl sluice doctor``): checks a cluster before and
after Sluice is installed, one :class:`~scheduler.doctor.findings.Finding` per check.

* :mod:`.server_checks`: the API server's version, the features Sluice uses (Workload
  API, DRA v1, pod-level resources, scheduling gates), the PodGroup and Queue APIs served;
* :mod:`.install_checks`: Sluice's CRDs against ``crds/``, what its ServiceAccounts may do
  against ``manifests/``' RBAC, the admission webhook end to end;
* :mod:`.running_checks`: who holds Sluice's Lease, another scheduler answering to the
  same ``schedulerName``;
* :mod:`.manifests`, :mod:`.crds`, :mod:`.feature_gates`: what those read, pure;
* :mod:`.findings`: the lines it prints.

Only reads, except dry runs (``dryRun=All``: nothing is stored) and access reviews.
"""

from __future__ import annotations

import datetime

from scheduler.doctor.findings import Finding, Level
from scheduler.doctor.install_checks import check_crds, check_rbac, check_webhook
from scheduler.doctor.manifests import load_install
from scheduler.doctor.running_checks import check_lease, check_other_schedulers
from scheduler.doctor.server_checks import (
    Probe,
    check_apis,
    check_dra,
    check_gates,
    check_pod_level_resources,
    check_scheduling_gates,
    check_server,
    check_workload_api,
)
from scheduler.kube import KubeClient

__all__ = ["Finding", "Level", "run_checks"]


async def run_checks(
    client: KubeClient,
    *,
    namespace: str,
    scheduler_name: str,
    now: datetime.datetime | None = None,
) -> list[Finding]:
    """Every check, in order; only the first when the API server cannot be reached.
    ``namespace``: where Sluice is (or will be) installed."""
    probe = Probe(client, namespace)
    server = await check_server(probe)
    if server.level is Level.FAIL:
        return [server]
    install = load_install(namespace)
    findings = [server, await check_gates(probe)]
    for check in (check_workload_api, check_dra, check_pod_level_resources, check_scheduling_gates):
        findings.append(await check(probe))
    findings += await check_apis(probe)
    findings += await check_crds(probe)
    findings += await check_rbac(probe, install)
    findings.append(await check_webhook(probe, install))
    when = now or datetime.datetime.now(datetime.UTC)
    findings.append(await check_lease(probe, install, when))
    findings.append(await check_other_schedulers(probe, install, scheduler_name))
    return findings
