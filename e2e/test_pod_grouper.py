"""Gangs from owners (issue 21, point 5): ``sluice controller``'s pod grouper makes a
PodGroup from a pod's top owner, and ``sluice run`` starts no pod of a controller before it
is grouped, so no gang ever starts in part.

On a real cluster the batch Jobs' pods are made by the real Job controller (``up
--controller-manager``), JobSet's Jobs too; the PyTorchJob and JobSet CRDs are installed
from ``e2e/owner-crds`` and, with no operator running, the test makes their objects (and
the PyTorchJob's pods) as the operators would. On the emulator, which runs no controller,
the test also makes the pods a Job controller would.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import pytest
from control_plane import ControllerProcess
from harness import (
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    Cluster,
    NodeSpec,
    SchedulerProcess,
    condition,
    core_path,
    custom_path,
    hold_for,
    sluice_command,
    wait_for,
)

pytestmark = pytest.mark.anyio

StartController = Callable[..., Awaitable[ControllerProcess]]
StartScheduler = Callable[..., Awaitable[SchedulerProcess]]

GANG_OF_ONE = "scheduling.sluice.dev/gang-of-one"
OPT_OUT = "scheduling.sluice.dev/group-by-owner"
MINIMUM = "scheduling.sluice.dev/minimum"
PLURALS = {
    "Job": ("batch/v1", "jobs"),
    "JobSet": ("jobset.x-k8s.io/v1alpha2", "jobsets"),
    "PyTorchJob": ("kubeflow.org/v1", "pytorchjobs"),
    "Deployment": ("apps/v1", "deployments"),
}


# --------------------------------------------------------------------------- objects


def template(cluster: Cluster, cpu: str, labels: Mapping[str, str] = ()) -> dict[str, Any]:
    """A pod template of this run (its schedulerName and node selector)."""
    pod = cluster.pod_manifest("template", cpu=cpu, labels=labels)
    return {
        "metadata": {"labels": pod["metadata"]["labels"]},
        "spec": {**pod["spec"], "restartPolicy": "Never"},
    }


def collection(cluster: Cluster, kind: str) -> str:
    group_version, plural = PLURALS[kind]
    return core_path(plural, cluster.namespace, group=group_version)


async def create(
    cluster: Cluster, kind: str, name: str, spec: Mapping[str, Any], **meta: Any
) -> Any:
    group_version, _ = PLURALS[kind]
    body = {
        "apiVersion": group_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": cluster.namespace, **meta},
        "spec": dict(spec),
    }
    return await cluster.api.request("POST", collection(cluster, kind), body=body)


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def create_owned_pod(
    cluster: Cluster,
    name: str,
    owner: Mapping[str, Any],
    *,
    cpu: str,
    labels: Mapping[str, str] = (),
) -> Any:
    """A pod as ``owner``'s controller makes it: the template's spec, a controller owner
    reference."""
    pod = cluster.pod_manifest(name, cpu=cpu, labels=labels)
    pod["metadata"]["ownerReferences"] = [controller_ref(owner)]
    return await cluster.api.request("POST", core_path("pods", cluster.namespace), body=pod)


async def job_pods(cluster: Cluster, job: Mapping[str, Any], count: int, cpu: str) -> list[str]:
    """The names of ``job``'s pods: made by the Job controller on a cluster; on the
    emulator, made here as it would (its labels, a controller reference)."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    if cluster.emulated:
        labels = {"batch.kubernetes.io/job-name": name, "batch.kubernetes.io/controller-uid": uid}
        for i in range(count):
            await create_owned_pod(cluster, f"{name}-{i}", job, cpu=cpu, labels=labels)

    def made() -> list[str]:
        return sorted(
            n
            for n, p in cluster.informer.pods.items()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or ())
        )

    return await wait_for(
        lambda: len(made()) >= count and made(), timeout=60, what=f"{count} pods of Job {name}"
    )


def group_of(cluster: Cluster, name: str) -> str:
    pod = cluster.pod(name) or {}
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL, ""))


async def pod_groups_of(cluster: Cluster, owner: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = await cluster.api.request("GET", custom_path("podgroups", cluster.namespace))
    return [
        pg
        for pg in listed.get("items") or ()
        if any(
            r.get("uid") == owner["metadata"]["uid"]
            for r in pg["metadata"].get("ownerReferences") or ()
        )
    ]


async def grouped(cluster: Cluster, owner: Mapping[str, Any], pods: list[str]) -> dict[str, Any]:
    """Wait until every pod of ``pods`` names the one PodGroup owned by ``owner``; it."""

    async def one_group() -> dict[str, Any] | None:
        groups = await pod_groups_of(cluster, owner)
        if len(groups) != 1:
            return None
        name = groups[0]["metadata"]["name"]
        return groups[0] if all(group_of(cluster, p) == name for p in pods) else None

    return await wait_for(
        one_group,
        timeout=60,
        what=f"the pods of {owner['kind']} {owner['metadata']['name']} in one PodGroup",
        detail=lambda: cluster.describe_pods(pods),
    )


def gang_of_one(cluster: Cluster, name: str) -> str:
    pod = cluster.pod(name) or {}
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(GANG_OF_ONE, ""))


async def no_partial_start(cluster: Cluster, pods: list[str], seconds: float = 3.0) -> None:
    """Room for fewer pods than the gang needs: none of them is bound for ``seconds``."""
    await hold_for(
        lambda: not cluster.bound(pods), seconds=seconds, what="no pod of the gang bound"
    )


async def all_bound(cluster: Cluster, pods: list[str], what: str) -> dict[str, str]:
    bound: dict[str, str] = await wait_for(
        lambda: cluster.all_bound(pods) and cluster.bound(pods),
        timeout=60,
        what=what,
        detail=lambda: cluster.describe_pods(pods),
    )
    assert cluster.recorder.violations == []
    return bound


# --------------------------------------------------------------------------- the tests


async def test_a_jobs_pods_start_as_one_gang(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A batch Job of parallelism 3 with room for 2: its pods wait together (without the
    grouper each would start alone as soon as it appeared), then start together."""
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    await start_scheduler()
    await start_controller()
    job = await create(
        cluster,
        "Job",
        "train",
        {"parallelism": 3, "completions": 3, "template": template(cluster, cpu="600m")},
    )
    pods = await job_pods(cluster, job, 3, cpu="600m")
    group = await grouped(cluster, job, pods)
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["queue"] == "default"
    assert group["metadata"]["annotations"][MINIMUM] == (
        f"3 pods at once of Job {cluster.namespace}/train (parallelism 3, completions 3)"
    )
    await no_partial_start(cluster, pods)
    await cluster.create_node("n2", NodeSpec(cpu="1"))
    bound = await all_bound(cluster, pods, "the Job's 3 pods bound once a third node exists")
    assert len(set(bound.values())) == 3
    await nothing_said_of_the_wait(cluster, pods)
    if not cluster.emulated:  # the garbage collector deletes the PodGroup with its Job
        await cluster.api.request(
            "DELETE",
            f"{collection(cluster, 'Job')}/train",
            body={"propagationPolicy": "Background"},
        )
        await wait_for(
            lambda: _gone(cluster, job), timeout=60, what="the PodGroup garbage-collected"
        )


async def nothing_said_of_the_wait(cluster: Cluster, pods: list[str]) -> None:
    """Issue 35 item 5: with the controller running, a pod's second or so of waiting to be
    grouped is a normal step, not told as a failure (the grace, ``podGrouperGrace``): no
    ``FailedScheduling`` event of it, nor a ``PodScheduled`` condition saying it."""
    said = "waiting for sluice controller"
    events = [
        e
        for e in await cluster.events()
        if (e.get("regarding") or {}).get("name") in pods and said in str(e.get("note"))
    ]
    assert events == [], events
    for name in pods:
        cond = condition(cluster.pod(name) or {}, "PodScheduled") or {}
        assert said not in str(cond.get("message", "")), (name, cond)


async def _gone(cluster: Cluster, owner: Mapping[str, Any]) -> bool:
    return not await pod_groups_of(cluster, owner)


async def test_pods_wait_for_the_grouper_and_say_so(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """No controller yet: a Job's pods are not started; their condition and ``sluice
    explain`` say what they wait for. The controller starts: they are grouped and bound."""
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await start_scheduler()
    job = await create(
        cluster, "Job", "wait", {"parallelism": 2, "template": template(cluster, cpu="500m")}
    )
    pods = await job_pods(cluster, job, 2, cpu="500m")
    owner = f"Job {cluster.namespace}/wait"

    def says_why() -> bool:
        for name in pods:
            cond = condition(cluster.pod(name) or {}, "PodScheduled") or {}
            if cond.get("status") != "False" or owner not in str(cond.get("message")):
                return False
        return True

    await wait_for(
        says_why,
        timeout=30,
        what="PodScheduled=False saying the pods wait for the grouper",
        detail=lambda: cluster.describe_pods(pods),
    )
    message = condition(cluster.pod(pods[0]) or {}, "PodScheduled")["message"]  # type: ignore[index]
    assert message.startswith("waiting for sluice controller to group this pod"), message
    assert not cluster.bound(pods)
    explained = await _explain(cluster, pods[0])
    assert explained["reason"] == message
    assert explained["waits_for"] == [
        f"{cluster.namespace}/{pods[0]} waits for the pod grouper of sluice controller to "
        f"group it by its owner {owner}"
    ]
    await start_controller()
    await grouped(cluster, job, pods)
    await all_bound(cluster, pods, "the Job's pods bound once grouped")


async def _explain(cluster: Cluster, pod: str) -> dict[str, Any]:
    command = [
        *sluice_command(),
        "explain",
        "pod",
        f"{cluster.namespace}/{pod}",
        "--kubeconfig",
        cluster.scheduler_kubeconfig or "",
        "-o",
        "json",
    ]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    )
    assert done.returncode == 0, done.stderr
    explained: dict[str, Any] = json.loads(done.stdout)
    return explained


@pytest.mark.usefixtures("owner_crds")
async def test_a_pytorchjob_is_one_gang(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A PyTorchJob (Master 1, Worker 2) and its pods as the training operator makes them:
    one PodGroup of 3 owned by the PyTorchJob, in the queue its label names; no pod before
    all fit."""
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    queue = await cluster.create_queue("training", weight=1)
    await start_scheduler()
    await start_controller()
    replica = {"restartPolicy": "OnFailure", "template": template(cluster, cpu="600m")}
    job = await create(
        cluster,
        "PyTorchJob",
        "bert",
        {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **replica},
                "Worker": {"replicas": 2, **replica},
            }
        },
        labels={QUEUE_LABEL: queue},
    )
    pods = []
    for role, index in (("master", 0), ("worker", 0), ("worker", 1)):
        name = f"bert-{role}-{index}"
        labels = {
            "training.kubeflow.org/job-name": "bert",
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": role,
            "training.kubeflow.org/replica-index": str(index),
        }
        await create_owned_pod(cluster, name, job, cpu="600m", labels=labels)
        pods.append(name)
    group = await grouped(cluster, job, pods)
    assert group["spec"] == {"minMember": 3, "queue": queue}
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    await no_partial_start(cluster, pods, seconds=2.0)
    await cluster.create_node("n2", NodeSpec(cpu="1"))
    await all_bound(cluster, pods, "the PyTorchJob's 3 pods bound once a third node exists")


@pytest.mark.usefixtures("owner_crds")
async def test_a_jobset_groups_the_pods_of_its_jobs(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A JobSet of 2 Jobs of 2 pods, its Jobs made as the JobSet controller makes them (the
    Job controller then makes their pods): one PodGroup of 4, owned by the JobSet."""
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await start_scheduler()
    await start_controller()
    job_spec = {"parallelism": 2, "completions": 2, "template": template(cluster, cpu="500m")}
    jobset = await create(
        cluster,
        "JobSet",
        "js",
        {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": job_spec}}]},
    )
    pods: list[str] = []
    for i in range(2):
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "js",
            "jobset.sigs.k8s.io/replicatedjob-name": "w",
        }
        job = await create(
            cluster,
            "Job",
            f"js-w-{i}",
            job_spec,
            labels=labels,
            ownerReferences=[controller_ref(jobset)],
        )
        pods += await job_pods(cluster, job, 2, cpu="500m")
    group = await grouped(cluster, jobset, pods)
    assert group["spec"]["minMember"] == 4
    await all_bound(cluster, pods, "the JobSet's 4 pods bound")


@pytest.mark.cluster_only
@pytest.mark.usefixtures("owner_crds")
async def test_a_jobset_gang_leaves_out_the_job_controllers_groups(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """Issue 35 item 4: a JobSet of a driver (1 pod) and workers (4 pods, Indexed, the
    shape the Job controller gang-schedules), its Jobs made as the JobSet controller makes
    them (completionMode Indexed, its webhook's default), their pods by the real Job
    controller. With WorkloadWithJob on (``e2e/run-real-server``'s default) the workers'
    pods name the Job controller's PodGroup, and the JobSet's gang is the driver alone;
    with it off (``SLUICE_E2E_K8S_UP_ARGS="--controller-manager --workload-api"``) the
    gang is all 5. Either way every pod is bound (before, the driver waited for ever in a
    gang of 5 when the gate was on)."""
    await cluster.create_nodes(2, NodeSpec(cpu="2"))
    await start_scheduler()
    await start_controller()

    def job_spec(pods: int) -> dict[str, Any]:
        return {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "template": template(cluster, cpu="500m"),
        }

    shapes = {"driver": 1, "workers": 4}
    jobset = await create(
        cluster,
        "JobSet",
        "js",
        {
            "replicatedJobs": [
                {"name": name, "replicas": 1, "template": {"spec": job_spec(pods)}}
                for name, pods in shapes.items()
            ]
        },
    )
    pods: dict[str, list[str]] = {}
    for name, count in shapes.items():
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "js",
            "jobset.sigs.k8s.io/replicatedjob-name": name,
        }
        job = await create(
            cluster,
            "Job",
            f"js-{name}-0",
            job_spec(count),
            labels=labels,
            ownerReferences=[controller_ref(jobset)],
        )
        pods[name] = await job_pods(cluster, job, count, cpu="500m")
    workers = pods["workers"]
    in_job_controllers_group = [
        bool(((cluster.pod(w) or {}).get("spec") or {}).get("schedulingGroup")) for w in workers
    ]
    assert len(set(in_job_controllers_group)) == 1, in_job_controllers_group
    gate_on = in_job_controllers_group[0]
    everyone = [p for names in pods.values() for p in names]
    group = await grouped(cluster, jobset, pods["driver"] if gate_on else everyone)
    minimum = group["metadata"]["annotations"][MINIMUM]
    if gate_on:
        assert group["spec"]["minMember"] == 1, minimum
        assert "not counted, in a group of their own: js-workers-0" in minimum
        assert all(group_of(cluster, w) == "" for w in workers)
    else:
        assert group["spec"]["minMember"] == 5, minimum
    await all_bound(cluster, everyone, "the JobSet's 5 pods")


async def test_owners_it_cannot_use_leave_pods_gangs_of_one(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A pod whose owner's kind is not installed, and one whose owner the controller may
    not read (a ConfigMap, under the RBAC of manifests/): each is annotated why it is a gang
    of one and bound; the controller goes on grouping the others."""
    await cluster.create_nodes(1, NodeSpec(cpu="2"))
    await start_scheduler()
    await start_controller()
    widget = {
        "apiVersion": "widgets.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "uid": "6d1b3cd5-0000-4000-8000-000000000001"},
    }
    await create_owned_pod(cluster, "widget-0", widget, cpu="100m")
    names = ["widget-0"]
    if not cluster.emulated:  # the emulator serves no ConfigMaps
        config_map = await cluster.api.request(
            "POST",
            core_path("configmaps", cluster.namespace),
            body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}},
        )
        await create_owned_pod(cluster, "cm-0", config_map, cpu="100m")
        names.append("cm-0")
    await wait_for(
        lambda: all(gang_of_one(cluster, n) for n in names),
        timeout=60,
        what="the pods annotated gangs of one",
        detail=lambda: cluster.describe_pods(names),
    )
    assert "the cluster serves no widgets.example.com/v1 Widget" in gang_of_one(cluster, "widget-0")
    if "cm-0" in names and cluster.controller_kubeconfig != cluster.kubeconfig:
        assert "may not read it (403 Forbidden)" in gang_of_one(cluster, "cm-0")
    await all_bound(cluster, names, "the pods left alone bound")
    # ... and the controller still groups a Job's pods.
    job = await create(
        cluster, "Job", "after", {"parallelism": 2, "template": template(cluster, cpu="100m")}
    )
    pods = await job_pods(cluster, job, 2, cpu="100m")
    await grouped(cluster, job, pods)


async def test_the_opt_out_label_turns_grouping_off(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A Job labelled ``group-by-owner: "false"``, parallelism 3 with room for 2: its pods
    are gangs of one, so two start; no PodGroup is made."""
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    await start_scheduler()
    await start_controller()
    job = await create(
        cluster,
        "Job",
        "solo",
        {"parallelism": 3, "template": template(cluster, cpu="600m")},
        labels={OPT_OUT: "false"},
    )
    pods = await job_pods(cluster, job, 3, cpu="600m")
    await wait_for(
        lambda: len(cluster.bound(pods)) == 2,
        timeout=60,
        what="two of the opted-out Job's pods bound alone",
        detail=lambda: cluster.describe_pods(pods),
    )
    assert all("grouping by owner is off" in gang_of_one(cluster, p) for p in pods)
    assert await pod_groups_of(cluster, job) == []
    assert cluster.recorder.violations == []


@pytest.mark.cluster_only
async def test_a_deployments_pods_are_gangs_of_one(
    cluster: Cluster, start_scheduler: StartScheduler, start_controller: StartController
) -> None:
    """A Deployment's pods (made by the ReplicaSet controller) are gangs of one."""
    await cluster.create_nodes(1, NodeSpec(cpu="2"))
    await start_scheduler()
    await start_controller()
    labels = {"app": "web"}
    await create(
        cluster,
        "Deployment",
        "web",
        {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": template(cluster, cpu="100m", labels=labels)
            | {"spec": {**template(cluster, cpu="100m")["spec"], "restartPolicy": "Always"}},
        },
    )

    def pods() -> list[str]:
        return [n for n, p in cluster.informer.pods.items() if p["metadata"]["labels"].get("app")]

    names = await wait_for(lambda: len(pods()) == 2 and pods(), timeout=60, what="2 web pods")
    await all_bound(cluster, names, "the Deployment's pods bound")
    for name in names:
        assert gang_of_one(cluster, name).startswith("the pods of a Deployment are gangs of one")
    await nothing_said_of_the_wait(cluster, names)
    await cluster.api.request(
        "DELETE",
        f"{collection(cluster, 'Deployment')}/web",
        body={"propagationPolicy": "Background"},
    )
