"""Other schedulers' workloads as they are, gang-scheduled by ``sluice run``.

Objects shaped as each operator creates them: a Volcano Job's PodGroup and its annotated
pods (created only once the PodGroup leaves Pending, as Volcano's Job controller does), a
scheduler-plugins PodGroup and its labelled pods, a ``scheduling.k8s.io/v1alpha2``
Workload, its PodGroup and pods naming it in ``spec.schedulingGroup`` (and, where v1.36's
Job controller makes them with ``WorkloadWithJob``, those of an Indexed Job). The CRDs are
the upstream YAML of ``crds/upstream/``; on a real cluster ``sluice run`` runs under the
RBAC of ``manifests/`` (a 403 in its log fails the test). An API whose CRD is missing is
off, and on once the CRD is installed.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest
from harness import (
    UPSTREAM_CRDS,
    ApiFailure,
    Cluster,
    NodeSpec,
    core_path,
    hold_for,
    install_crds,
    load_crds,
    wait_for,
)

pytestmark = pytest.mark.anyio

VOLCANO = "scheduling.volcano.sh/v1beta1"
X_K8S = "scheduling.x-k8s.io/v1alpha1"
KUBERNETES = "scheduling.k8s.io/v1alpha2"
CRD_API = "apiextensions.k8s.io/v1"


async def _create(
    cluster: Cluster, group_version: str, plural: str, obj: dict[str, Any], *, namespaced: bool
) -> dict[str, Any]:
    ns = cluster.namespace if namespaced else None
    body = {"apiVersion": group_version, **obj}
    return await cluster.api.request("POST", core_path(plural, ns, group=group_version), body=body)


async def _get(
    cluster: Cluster, group_version: str, plural: str, name: str, *, namespaced: bool = True
) -> dict[str, Any]:
    ns = cluster.namespace if namespaced else None
    return await cluster.api.get_or_none(core_path(plural, ns, name, group=group_version)) or {}


async def _create_pods(cluster: Cluster, pods: list[tuple[str, dict[str, Any]]]) -> None:
    """Pods from the run's manifest, changed by each ``(name, changes)``: ``annotations``,
    ``labels`` and ``spec`` fields merged in."""
    for name, changes in pods:
        pod = cluster.pod_manifest(name, cpu=changes.get("cpu", "1"))
        pod["metadata"].setdefault("annotations", {}).update(changes.get("annotations", {}))
        pod["metadata"]["labels"].update(changes.get("labels", {}))
        pod["spec"].update(changes.get("spec", {}))
        await cluster.api.request("POST", core_path("pods", cluster.namespace), body=pod)


async def _wait_running(cluster: Cluster, members: list[str], what: str) -> None:
    await wait_for(
        lambda: cluster.all_running(members),
        timeout=60,
        what=what,
        detail=lambda: cluster.describe_pods(members),
    )


async def _wait_group_running(
    cluster: Cluster, group_version: str, name: str, count: int
) -> dict[str, Any]:
    """The PodGroup once its status says Running with ``count`` pods running."""

    async def running() -> dict[str, Any] | None:
        pg = await _get(cluster, group_version, "podgroups", name)
        status = pg.get("status") or {}
        return pg if status.get("phase") == "Running" and status.get("running") == count else None

    return await wait_for(running, timeout=30, what=f"PodGroup {name} Running, {count} running")


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


async def _volcano_gang(
    cluster: Cluster, name: str, queue: str, tasks: dict[str, int]
) -> list[str]:
    """What Volcano's Job controller does for a Job of ``tasks`` (task -> replicas, 1 CPU
    each): a PodGroup (minMember all, minTaskMember per task, minResources), then, once
    its phase is set and not Pending, the pods, annotated with the group and the task."""
    total = sum(tasks.values())
    await _create(
        cluster,
        VOLCANO,
        "podgroups",
        {
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "minMember": total,
                "minTaskMember": tasks,
                "queue": queue,
                "minResources": {"cpu": str(total)},
            },
        },
        namespaced=True,
    )

    async def admitted() -> str | None:
        phase = ((await _get(cluster, VOLCANO, "podgroups", name)).get("status") or {}).get("phase")
        return phase if phase not in (None, "", "Pending") else None

    phase = await wait_for(admitted, timeout=30, what=f"PodGroup {name} leaves Pending")
    assert phase == "Inqueue"
    members = []
    for task, replicas in tasks.items():
        for i in range(replicas):
            pod = f"{name}-{task}-{i}"
            members.append(pod)
            await _create_pods(
                cluster,
                [
                    (
                        pod,
                        {
                            "annotations": {
                                "scheduling.k8s.io/group-name": name,
                                "volcano.sh/task-spec": task,
                                "volcano.sh/job-name": name,
                                "volcano.sh/queue-name": queue,
                            },
                            "labels": {"volcano.sh/job-name": name, "volcano.sh/task-spec": task},
                        },
                    )
                ],
            )
    return members


@contextlib.asynccontextmanager
async def _volcano_queue(cluster: Cluster, suffix: str) -> Any:
    name = cluster.name(suffix)
    await _create(
        cluster,
        VOLCANO,
        "queues",
        {"kind": "Queue", "metadata": {"name": name}, "spec": {"weight": 1, "reclaimable": True}},
        namespaced=False,
    )
    try:
        yield name
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(ApiFailure):
            await cluster.api.request("DELETE", core_path("queues", None, name, group=VOLCANO))


async def test_volcano_job_is_gang_scheduled(cluster: Cluster, start_scheduler) -> None:
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    async with _volcano_queue(cluster, "vq") as queue:
        await start_scheduler()
        members = await _volcano_gang(cluster, "train", queue, {"worker": 2, "ps": 1})
        await _wait_running(cluster, members, "the Volcano job's pods bound and running")
        pg = await _wait_group_running(cluster, VOLCANO, "train", 3)
        scheduled = _conditions(pg)["Scheduled"]
        assert (scheduled["status"], scheduled["reason"]) == (
            "True",
            "tasks in gang are ready to be scheduled",
        )

        async def queue_status() -> dict[str, Any] | None:
            status = (await _get(cluster, VOLCANO, "queues", queue, namespaced=False)).get(
                "status"
            ) or {}
            return status if status.get("running") == 1 else None

        status = await wait_for(queue_status, timeout=30, what=f"Queue {queue} status")
        assert status["state"] == "Open"
        assert status["allocated"]["cpu"] == "3"

        # A second job of 2 pods of 1 CPU: 1 CPU is left, so it waits, whole.
        await _create(
            cluster,
            VOLCANO,
            "podgroups",
            {
                "kind": "PodGroup",
                "metadata": {"name": "big"},
                "spec": {"minMember": 2, "queue": queue},
            },
            namespaced=True,
        )
        big = ["big-0", "big-1"]
        await _create_pods(
            cluster, [(p, {"annotations": {"scheduling.k8s.io/group-name": "big"}}) for p in big]
        )

        async def unschedulable() -> dict[str, Any] | None:
            cond = _conditions(await _get(cluster, VOLCANO, "podgroups", "big")).get(
                "Unschedulable"
            )
            # (while its second pod was not created yet, it said 2/1, as Volcano does)
            whole = cond and cond["message"].startswith("2/2 tasks in gang unschedulable: ")
            return cond if whole and cond["status"] == "True" else None

        cond = await wait_for(unschedulable, timeout=30, what="PodGroup big Unschedulable, 2/2")
        assert cond["reason"] == "NotEnoughResources"
        await hold_for(lambda: not cluster.bound(big), seconds=2.0, what="no member of big bound")
    assert cluster.recorder.violations == []


VOLCANO_HELM_CONFIG = (
    Path(__file__).resolve().parents[1] / "tests" / "config" / "volcano" / "volcano-scheduler.conf"
)
"""The default ``volcano-scheduler.conf`` of Volcano's Helm chart, unchanged."""


async def test_volcano_default_configuration_schedules_a_gang(
    cluster: Cluster, start_scheduler
) -> None:
    """``sluice run --config`` with Volcano's own default file (overcommit, drf, ...): a
    Volcano Job's gang is admitted and bound; a second one whose minResources exceed what
    is left of the cluster times 1.2 is not admitted."""
    if cluster.scheduler_name != "sluice":
        pytest.skip("Volcano's file names no scheduler: it schedules schedulerName sluice")
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    async with _volcano_queue(cluster, "vh") as queue:
        await start_scheduler(config=VOLCANO_HELM_CONFIG)
        members = await _volcano_gang(cluster, "train", queue, {"worker": 2, "ps": 1})
        await _wait_running(cluster, members, "the Volcano job's pods bound and running")
        await _wait_group_running(cluster, VOLCANO, "train", 3)
        # 4 CPU x 1.2 = 4.8, less the 3 used: 1.8 left, short of 2.
        await _create(
            cluster,
            VOLCANO,
            "podgroups",
            {
                "kind": "PodGroup",
                "metadata": {"name": "next"},
                "spec": {"minMember": 2, "queue": queue, "minResources": {"cpu": "2"}},
            },
            namespaced=True,
        )

        async def pending() -> bool:
            pg = await _get(cluster, VOLCANO, "podgroups", "next")
            return (pg.get("status") or {}).get("phase", "Pending") == "Pending"

        await hold_for(pending, seconds=3.0, what="PodGroup next not admitted")
    assert cluster.recorder.violations == []


EXAMPLE_JOB_UID = "5c3b7d2e-8a41-4d0f-9e6b-2f7a1c9d4e10"
"""The uid of Volcano's example Job ``test-job`` (no Job object: no Volcano controller)."""


def _owned_by_example_job() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": "test-job",
            "uid": EXAMPLE_JOB_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _example_job_pod(cluster: Cluster, index: int, group: str) -> dict[str, Any]:
    """Pod ``index`` of the task default-nginx, as Volcano's job controller makes it
    (``createJobPod``, then the env and svc plugins: the task index, hostname, subdomain)."""
    name = f"test-job-default-nginx-{index}"
    pod = cluster.pod_manifest(name, cpu="1")
    meta, spec = pod["metadata"], pod["spec"]
    meta["ownerReferences"] = _owned_by_example_job()
    meta["labels"].update(
        {
            "volcano.sh/task-index": str(index),
            "volcano.sh/job-name": "test-job",
            "volcano.sh/task-spec": "default-nginx",
            "volcano.sh/job-namespace": cluster.namespace,
            "volcano.sh/queue-name": "default",
        }
    )
    meta["annotations"] = {
        "volcano.sh/task-index": str(index),
        "volcano.sh/task-spec": "default-nginx",
        "scheduling.k8s.io/group-name": group,
        "volcano.sh/job-name": "test-job",
        "volcano.sh/queue-name": "default",
        "volcano.sh/job-version": "0",
        "volcano.sh/template-uid": "test-job-default-nginx",
        "volcano.sh/job-retry-count": "0",
    }
    spec.update({"restartPolicy": "OnFailure", "hostname": name, "subdomain": "test-job"})
    spec["containers"][0]["env"] = [
        {"name": "VK_TASK_INDEX", "value": str(index)},
        {"name": "VC_TASK_INDEX", "value": str(index)},
    ]
    return pod


async def test_volcanos_example_job_as_its_controller_writes_it(
    cluster: Cluster, start_scheduler
) -> None:
    """Volcano's ``example/job.yaml`` with ``schedulerName: sluice`` (minAvailable 3, one
    task of 6 replicas of 1 CPU), as Volcano's job controller makes it: first the PodGroup
    (``createOrUpdatePodGroup``: minMember 3, minTaskMember the task's 6 replicas,
    minResources the quota usage of the first 3 pods, quota names beside plain ones),
    then, once its phase is set and not Pending (``syncJob``), the six pods. With room for
    five: the PodGroup leaves Pending at once, five pods are bound (an elastic gang: its
    minMember is below its task minimum), the sixth waits, and the PodGroup is Running."""
    await cluster.create_nodes(1, NodeSpec(cpu="5"))
    await start_scheduler()
    group = f"test-job-{EXAMPLE_JOB_UID}"
    await _create(
        cluster,
        VOLCANO,
        "podgroups",
        {
            "kind": "PodGroup",
            "metadata": {
                "name": group,
                "ownerReferences": _owned_by_example_job(),
            },
            "spec": {
                "minMember": 3,
                "minTaskMember": {"default-nginx": 6},
                "queue": "default",
                "minResources": {"count/pods": "3", "cpu": "3", "pods": "3", "requests.cpu": "3"},
            },
        },
        namespaced=True,
    )

    async def admitted() -> str | None:
        phase = ((await _get(cluster, VOLCANO, "podgroups", group)).get("status") or {}).get(
            "phase"
        )
        return phase if phase not in (None, "", "Pending") else None

    assert await wait_for(admitted, timeout=30, what="the PodGroup leaves Pending") == "Inqueue"
    pods = [_example_job_pod(cluster, i, group) for i in range(6)]
    for pod in pods:
        await cluster.api.request("POST", core_path("pods", cluster.namespace), body=pod)
    names = [p["metadata"]["name"] for p in pods]
    await wait_for(
        lambda: len(cluster.bound(names)) == 5,
        timeout=60,
        what="five of the six pods bound",
        detail=lambda: cluster.describe_pods(names),
    )
    await hold_for(lambda: len(cluster.bound(names)) == 5, seconds=2.0, what="the sixth waits")
    status = (await _wait_group_running(cluster, VOLCANO, group, 5))["status"]
    assert _conditions({"status": status})["Scheduled"]["status"] == "True"
    assert cluster.recorder.violations == []


async def test_scheduler_plugins_pod_group_is_gang_scheduled(
    cluster: Cluster, start_scheduler
) -> None:
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await start_scheduler()
    await _create(
        cluster,
        X_K8S,
        "podgroups",
        {
            "kind": "PodGroup",
            "metadata": {"name": "nginx"},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 10},
        },
        namespaced=True,
    )
    members = [f"nginx-{i}" for i in range(3)]
    await _create_pods(
        cluster, [(m, {"labels": {"scheduling.x-k8s.io/pod-group": "nginx"}}) for m in members]
    )
    await _wait_running(cluster, members, "the gang bound and running")
    status = (await _wait_group_running(cluster, X_K8S, "nginx", 3))["status"]
    assert status["scheduleStartTime"]
    assert cluster.recorder.violations == []


async def _serves(cluster: Cluster, group_version: str) -> bool:
    return await cluster.api.get_or_none(f"/apis/{group_version}") is not None


async def test_kubernetes_workload_pod_group_is_gang_scheduled(
    cluster: Cluster, start_scheduler
) -> None:
    if not await _serves(cluster, KUBERNETES):
        pytest.skip(f"the API server does not serve {KUBERNETES} (up --workload-api does)")
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await start_scheduler()
    await _create(
        cluster,
        KUBERNETES,
        "workloads",
        {
            "kind": "Workload",
            "metadata": {"name": "train"},
            "spec": {
                "podGroupTemplates": [
                    {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}
                ]
            },
        },
        namespaced=True,
    )
    for name, count in (("train-workers", 3), ("greedy", 3)):
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": count}}}
        if name == "train-workers":
            spec["podGroupTemplateRef"] = {
                "workload": {"workloadName": "train", "podGroupTemplateName": "workers"}
            }
        await _create(
            cluster,
            KUBERNETES,
            "podgroups",
            {"kind": "PodGroup", "metadata": {"name": name}, "spec": spec},
            namespaced=True,
        )
    workers = [f"w-{i}" for i in range(3)]
    greedy = [f"g-{i}" for i in range(3)]
    await _create_pods(
        cluster,
        [(w, {"spec": {"schedulingGroup": {"podGroupName": "train-workers"}}}) for w in workers]
        + [
            (g, {"cpu": "2", "spec": {"schedulingGroup": {"podGroupName": "greedy"}}})
            for g in greedy
        ],
    )
    await _wait_running(cluster, workers, "the gang bound and running")

    async def condition(name: str, status: str) -> dict[str, Any] | None:
        cond = _conditions(await _get(cluster, KUBERNETES, "podgroups", name)).get(
            "PodGroupScheduled"
        )
        return cond if cond and cond["status"] == status else None

    done = await wait_for(lambda: condition("train-workers", "True"), timeout=30, what="Scheduled")
    assert (done["reason"], done["message"]) == ("Scheduled", "")
    waiting = await wait_for(lambda: condition("greedy", "False"), timeout=30, what="greedy False")
    assert waiting["reason"] == "Unschedulable"
    assert not cluster.bound(greedy)
    assert cluster.recorder.violations == []


@pytest.mark.cluster_only
async def test_job_controller_workload_is_gang_scheduled(cluster: Cluster, start_scheduler) -> None:
    """v1.36's Job controller with the feature gate WorkloadWithJob makes, for an Indexed
    Job whose parallelism equals its completions, a Workload and a PodGroup of gang policy
    (minCount = parallelism), and pods naming it (found on ``up --workload-api
    --controller-manager --feature-gates WorkloadWithJob=true``; NonIndexed Jobs and Indexed
    ones with fewer parallel pods than completions get none)."""
    if not await _serves(cluster, KUBERNETES):
        pytest.skip(f"the API server does not serve {KUBERNETES}")
    await cluster.create_nodes(3, NodeSpec(cpu="1"))
    await start_scheduler()
    template = cluster.pod_manifest("ignored", cpu="1")
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "indexed", "namespace": cluster.namespace},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": template["metadata"]["labels"]},
                "spec": template["spec"],
            },
        },
    }
    await cluster.api.request(
        "POST", core_path("jobs", cluster.namespace, group="batch/v1"), body=job
    )

    async def made_group() -> list[dict[str, Any]] | None:
        doc = await cluster.api.get_or_none(
            core_path("podgroups", cluster.namespace, group=KUBERNETES)
        )
        return list((doc or {}).get("items") or ()) or None

    groups: list[dict[str, Any]] | None = None
    with contextlib.suppress(AssertionError):  # none within 15 s: the gate is off
        groups = await wait_for(made_group, timeout=15, what="a PodGroup of the Job")
    if not groups:
        pytest.skip(
            "the Job controller made no Workload/PodGroup (feature gate WorkloadWithJob off, "
            "or no controller manager)"
        )
    assert groups[0]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    group = groups[0]["metadata"]["name"]

    async def pods_of_job() -> list[str] | None:
        names = [
            p["metadata"]["name"]
            for p in await cluster.list_pods()
            if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group
        ]
        return names if len(names) == 3 else None

    members = await wait_for(pods_of_job, timeout=30, what="the Job's 3 pods")
    await wait_for(
        lambda: cluster.all_bound(members),
        timeout=60,
        what="the Job's pods bound as a gang",
        detail=lambda: cluster.describe_pods(members),
    )


async def _delete_crds(cluster: Cluster, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        name = crd["metadata"]["name"]
        with contextlib.suppress(ApiFailure):
            await cluster.api.request(
                "DELETE", core_path("customresourcedefinitions", None, name, group=CRD_API)
            )

    async def gone() -> bool:
        for crd in crds:
            path = core_path(
                "customresourcedefinitions", None, crd["metadata"]["name"], group=CRD_API
            )
            if await cluster.api.get_or_none(path) is not None:
                return False
        return True

    await wait_for(gone, timeout=60, what="the Volcano CRDs deleted")


async def test_an_api_is_off_until_its_crd_is_installed(cluster: Cluster, start_scheduler) -> None:
    group = VOLCANO.split("/", maxsplit=1)[0]
    volcano_crds = [c for c in load_crds(pattern=UPSTREAM_CRDS) if c["spec"]["group"] == group]
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await _delete_crds(cluster, volcano_crds)
    try:
        proc = await start_scheduler()
        await wait_for(
            lambda: (
                "API off" in proc.log_text() and "PodGroup.scheduling.volcano.sh" in proc.log_text()
            ),
            timeout=30,
            what="the scheduler says the Volcano API is off",
        )
        await install_crds(cluster.api, crds=volcano_crds)
        await wait_for(
            lambda: (
                '"API on: watching its objects"' in proc.log_text()
                or "API on: watching its objects" in proc.log_text()
            ),
            timeout=30,
            what="the scheduler says the Volcano API is on",
        )
        async with _volcano_queue(cluster, "late") as queue:
            members = await _volcano_gang(cluster, "late", queue, {"worker": 2})
            await wait_for(
                lambda: cluster.all_bound(members),
                timeout=60,
                what="the gang bound once the API is on",
                detail=lambda: cluster.describe_pods(members),
            )
        off = [r for r in proc.log_records() if str(r.get("event", "")).startswith("API off")]
        assert len([r for r in off if r.get("kind") == "PodGroup.scheduling.volcano.sh"]) == 1
    finally:
        with anyio.CancelScope(shield=True):
            await install_crds(cluster.api, crds=volcano_crds)
