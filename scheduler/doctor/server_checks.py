"""``sluice doctor``'s checks of the API server itself (layer 5, doctor): its version,
the features Sluice uses, and the PodGroup and Queue APIs it serves.

What is served is read from discovery (``/apis/GROUP/VERSION``); the feature gates from
the API server's own ``/metrics`` (:mod:`.feature_gates`); a gate that cannot be read there is
inferred from what the server does: an API served, or a pod field kept by a server-side
dry run (``PodLevelResources``). Each check makes its calls through :class:`Probe`, which
remembers discovery answers for the other checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from scheduler.api.errors import ApiError, NotFoundError
from scheduler.api.group_apis import APIS
from scheduler.doctor.feature_gates import feature_gates, minor_version
from scheduler.doctor.findings import Finding, Level
from scheduler.kube import KubeClient

__all__ = [
    "TESTED",
    "Probe",
    "check_apis",
    "check_dra",
    "check_gates",
    "check_pod_level_resources",
    "check_scheduling_gates",
    "check_server",
    "check_workload_api",
]

TESTED: Final = (1, 36)
"""The Kubernetes version Sluice is tested on (../shared/k8s)."""
OLDEST: Final = (1, 34)
"""Before it, ``resource.k8s.io/v1`` (DRA) and pod-level resources' beta are missing."""


@dataclass
class Probe:
    """The client and what the checks learnt so far (discovery, gates, version)."""

    client: KubeClient
    namespace: str
    version: tuple[int, int] | None = None
    gates: dict[str, bool] | None = None
    gates_error: str = ""
    _served: dict[str, dict[str, str]] = field(default_factory=dict)

    async def served(self, group_version: str) -> dict[str, str]:
        """Kind -> plural of what ``group_version`` serves ({} when it is not served)."""
        if group_version not in self._served:
            path = f"/apis/{group_version}" if "/" in group_version else "/api/v1"
            try:
                reply = await self.client.request("GET", path)
            except NotFoundError:
                reply = {}
            self._served[group_version] = {
                str(r["kind"]): str(r["name"])
                for r in reply.get("resources") or ()
                if "/" not in str(r.get("name", ""))
            }
        return self._served[group_version]

    def gate(self, name: str) -> bool | None:
        return None if self.gates is None else self.gates.get(name)


async def check_server(probe: Probe) -> Finding:
    """The API server answers, and its version. A failure here ends the doctor's run."""
    host = probe.client.host
    try:
        version = await probe.client.request("GET", "/version")
    except ApiError as exc:
        return Finding(
            "api server",
            Level.FAIL,
            f"{host} cannot be reached: {exc}",
            "check --kubeconfig and --context (kubectl get --raw /version must answer)",
        )
    probe.version = minor_version(version)
    text = str(version.get("gitVersion") or version)
    said = f"{text} at {host}"
    if probe.version is None or probe.version < OLDEST:
        return Finding(
            "api server",
            Level.WARN,
            f"{said}: Sluice is tested on v{TESTED[0]}.{TESTED[1]}; before v{OLDEST[0]}."
            f"{OLDEST[1]} resource.k8s.io/v1 (DRA) is not served",
            "upgrade the cluster, or expect DRA claims to be left unscheduled",
        )
    return Finding("api server", Level.OK, f"{said} (Sluice is tested on v1.36)")


async def check_gates(probe: Probe) -> Finding:
    """Read the feature gates from the API server's /metrics."""
    try:
        text = (await probe.client.request_bytes("GET", "/metrics")).decode(errors="replace")
    except ApiError as exc:
        probe.gates_error = str(exc)
        return Finding(
            "feature gates",
            Level.WARN,
            f"cannot read the API server's /metrics ({exc}): the features below are "
            "judged by what it serves",
            "run as a user who may get /metrics (cluster-admin, or system:monitoring)",
        )
    probe.gates = feature_gates(text)
    if not probe.gates:
        return Finding(
            "feature gates",
            Level.WARN,
            "the API server's /metrics has no kubernetes_feature_enabled (before v1.26?)",
        )
    return Finding(
        "feature gates", Level.OK, f"{len(probe.gates)} read from the API server's /metrics"
    )


def _gates_text(probe: Probe, names: tuple[str, ...]) -> str:
    known = [(n, probe.gate(n)) for n in names]
    shown = [f"{n} {'on' if on else 'off'}" for n, on in known if on is not None]
    return f" ({', '.join(shown)})" if shown else ""


async def check_workload_api(probe: Probe) -> Finding:
    """The alpha Workload API of v1.36 (``scheduling.k8s.io/v1alpha2``)."""
    served = await probe.served("scheduling.k8s.io/v1alpha2")
    gates = _gates_text(probe, ("GenericWorkload", "GangScheduling", "WorkloadWithJob"))
    if {"Workload", "PodGroup"} <= served.keys():
        return Finding(
            "workload api",
            Level.OK,
            f"scheduling.k8s.io/v1alpha2 Workload and PodGroup served{gates}",
        )
    return Finding(
        "workload api",
        Level.WARN,
        f"scheduling.k8s.io/v1alpha2 is not served{gates}: its PodGroups (and gangs of "
        "Jobs with WorkloadWithJob) are not seen; Sluice's own and other APIs' work",
        "optional, alpha in v1.36: kube-apiserver --runtime-config "
        "scheduling.k8s.io/v1alpha2=true --feature-gates GenericWorkload=true",
    )


async def check_dra(probe: Probe) -> Finding:
    """DRA v1 (``resource.k8s.io/v1``): claims, slices, device classes."""
    served = await probe.served("resource.k8s.io/v1")
    gates = _gates_text(probe, ("DynamicResourceAllocation", "DRAExtendedResource"))
    if {"ResourceClaim", "ResourceSlice", "DeviceClass"} <= served.keys():
        return Finding("dra", Level.OK, f"resource.k8s.io/v1 served{gates}")
    return Finding(
        "dra",
        Level.WARN,
        f"resource.k8s.io/v1 is not served{gates}: pods with resourceClaims wait for ever",
        "DRA is on by default from v1.34; check kube-apiserver's --runtime-config and "
        "--feature-gates DynamicResourceAllocation",
    )


async def check_pod_level_resources(probe: Probe) -> Finding:
    """``PodLevelResources`` (a pod's ``spec.resources``): the gate, else a dry run."""
    on = probe.gate("PodLevelResources")
    how = "gate PodLevelResources"
    if on is None:
        on, how = await _pod_field_kept(probe)
    if on is None:
        return Finding(
            "pod-level resources",
            Level.WARN,
            f"cannot tell ({probe.gates_error or 'no gate'}; {how})",
            "run as a user who may get /metrics or create pods",
        )
    if on:
        return Finding("pod-level resources", Level.OK, f"on ({how})")
    return Finding(
        "pod-level resources",
        Level.WARN,
        f"off ({how}): the API server drops a pod's spec.resources; pods are placed by "
        "their containers' requests",
        "kube-apiserver (and kubelets) --feature-gates PodLevelResources=true (beta, on by "
        "default from v1.34)",
    )


async def _pod_field_kept(probe: Probe) -> tuple[bool | None, str]:
    """Does a server-side dry run of a pod with ``spec.resources`` keep the field?"""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "sluice-doctor-"},
        "spec": {
            "resources": {"requests": {"cpu": "10m"}},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    for namespace in (probe.namespace, "default"):
        try:
            made = await probe.client.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", query=[("dryRun", "All")], body=pod
            )
        except NotFoundError:
            continue  # no such namespace
        except ApiError as exc:
            return None, f"a dry run of a pod was refused: {exc}"
        return bool((made.get("spec") or {}).get("resources")), "a dry run of a pod kept it"
    return None, "no namespace to dry-run a pod in"


async def check_scheduling_gates(probe: Probe) -> Finding:
    """``spec.schedulingGates`` (Kueue's admission holds pods with them): GA in v1.30."""
    if probe.version is not None and probe.version >= (1, 30):
        return Finding("scheduling gates", Level.OK, "GA since v1.30 (always on)")
    on = probe.gate("PodSchedulingReadiness")
    if on:
        return Finding("scheduling gates", Level.OK, "on (gate PodSchedulingReadiness)")
    return Finding(
        "scheduling gates",
        Level.WARN,
        "PodSchedulingReadiness is off or unknown: pods' spec.schedulingGates are dropped",
        "--feature-gates PodSchedulingReadiness=true (beta from v1.27), or v1.30 and later",
    )


async def check_apis(probe: Probe) -> list[Finding]:
    """Which PodGroup and Queue APIs are served (Sluice's, Volcano's, scheduler-plugins',
    the Workload API's): one line each kind. Sluice's own missing fails."""
    out = []
    for kind, attribute in (("PodGroup", "pod_group_kind"), ("Queue", "queue_kind")):
        served: list[str] = []
        missing: list[str] = []
        sluice_served = True
        for api in APIS:
            api_kind = getattr(api, attribute)
            if not api_kind:
                continue
            kinds = await probe.served(api.api_version)
            (served if api_kind in kinds else missing).append(f"{api.title} ({api.api_version})")
            if api is APIS[0] and api_kind not in kinds:
                sluice_served = False
        said = f"served: {', '.join(served) or 'none'}"
        if missing:
            said += f"; not served: {', '.join(missing)}"
        check = f"{kind.lower()} apis"
        if not sluice_served:
            out.append(Finding(check, Level.FAIL, said, "kubectl apply -f crds/"))
        else:
            out.append(Finding(check, Level.OK, said))
    return out
