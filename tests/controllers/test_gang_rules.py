"""Which pods the grouper leaves alone, and the queue of a gang (the minimum each kind of
owner needs: ``test_owner_sizes.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.owners import OwnerRef
from scheduler.controllers.gang_rules import Alone, Gang, group_name, plan
from tests.builders import pod

Obj = dict[str, Any]
NS = "team"


def owner(
    api_version: str, kind: str, name: str = "w", labels: Obj | None = None, **spec: Any
) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": spec,
    }


def member(labels: Obj | None = None) -> Obj:
    return pod("w-0", ns=NS, labels=labels or {})


def job(**spec: Any) -> Obj:
    return owner("batch/v1", "Job", **spec)


def jobset(*replicated: Obj, **spec: Any) -> Obj:
    return owner("jobset.x-k8s.io/v1alpha2", "JobSet", replicatedJobs=list(replicated), **spec)


def rjob(name: str, replicas: int | None = None, **job_spec: Any) -> Obj:
    out: Obj = {"name": name, "template": {"spec": job_spec}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def kubeflow(kind: str, field: str, api: str = "kubeflow.org/v1", **replicas: Any) -> Obj:
    specs = {role: ({} if n is None else {"replicas": n}) for role, n in replicas.items()}
    return owner(api, kind, **{field: specs})


def ray_cluster(*groups: Obj, autoscaling: bool | None = None) -> Obj:
    spec: Obj = {"headGroupSpec": {}, "workerGroupSpecs": list(groups)}
    if autoscaling is not None:
        spec["enableInTreeAutoscaling"] = autoscaling
    return owner("ray.io/v1", "RayCluster", **spec)


def lws(size: int, policy: str | None = None) -> Obj:
    spec: Obj = {"leaderWorkerTemplate": {"size": size}, "replicas": 2}
    if policy:
        spec["startupPolicy"] = policy
    return owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", **spec)


def lws_pod(group: str, worker: str) -> Obj:
    return member(
        {
            "leaderworkerset.sigs.k8s.io/group-index": group,
            "leaderworkerset.sigs.k8s.io/worker-index": worker,
        }
    )


PYTORCH = "pytorchReplicaSpecs"
MPI = "mpiReplicaSpecs"


@pytest.mark.parametrize(
    ("chain", "the_pod", "cut", "why"),
    [
        pytest.param(
            [owner("apps/v1", "ReplicaSet", "w-5d8"), owner("apps/v1", "Deployment")],
            None,
            "",
            "the pods of a Deployment are gangs of one",
            id="deployment",
        ),
        pytest.param(
            [owner("apps/v1", "StatefulSet")],
            None,
            "",
            "the pods of a StatefulSet are gangs of one",
            id="statefulset",
        ),
        pytest.param(
            [owner("apps/v1", "ReplicaSet")],
            None,
            "",
            "no gang rule for a ReplicaSet",
            id="no-rule",
        ),
        pytest.param(
            [],
            None,
            "Widget team/w: the cluster serves no example.com/v1 Widget",
            "the cluster serves no example.com/v1 Widget",
            id="kind-not-installed",
        ),
        pytest.param(
            [],
            None,
            "ConfigMap team/w: cannot read it (403)",
            "cannot read it (403)",
            id="owner-unreadable",
        ),
        pytest.param(
            [job(parallelism=3, labels={L.GROUP_BY_OWNER_LABEL: "false"})],
            None,
            "",
            "grouping by owner is off",
            id="opted-out-on-the-owner",
        ),
        pytest.param(
            [job(), jobset(rjob("a"), labels={L.GROUP_BY_OWNER_LABEL: "false"})],
            None,
            "",
            "on JobSet team/w",
            id="opted-out-up-the-chain",
        ),
        pytest.param(
            [owner("ray.io/v1", "RayJob", clusterSelector={"ray.io/cluster": "c"})],
            None,
            "",
            "runs on an existing RayCluster",
            id="rayjob-existing-cluster",
        ),
        pytest.param(
            [job(parallelism="3")],
            None,
            "",
            "Job team/w: spec.parallelism: must be a non-negative integer, got '3'",
            id="malformed-owner",
        ),
        pytest.param(
            [owner("kubeflow.org/v1", "PyTorchJob")],
            None,
            "",
            "PyTorchJob team/w: spec.pytorchReplicaSpecs: is required",
            id="kubeflow-without-replicas",
        ),
        pytest.param(
            [lws(4)],
            member(),
            "",
            "leaderworkerset.sigs.k8s.io/group-index]: is missing",
            id="lws-no-index",
        ),
    ],
)
def test_pods_left_alone(chain: list[Obj], the_pod: Obj | None, cut: str, why: str) -> None:
    verdict = plan(the_pod or member(), chain, cut)
    assert isinstance(verdict, Alone), verdict
    assert why in verdict.why


def test_a_known_kind_below_an_unreadable_owner_still_groups() -> None:
    verdict = plan(member(), [job(parallelism=2)], "TrainJob team/t: cannot read it (403)")
    assert isinstance(verdict, Gang) and verdict.min_member == 2


@pytest.mark.parametrize(
    ("pod_queue", "owner_labels", "policy_queue", "namespace_queue", "queue"),
    [
        pytest.param("", {}, "", "", "default", id="default"),
        pytest.param("", {}, "", "ns-q", "ns-q", id="namespace-default"),
        pytest.param("", {}, "kf-q", "ns-q", "kf-q", id="kubeflow-scheduling-policy"),
        pytest.param("", {L.QUEUE_LABEL: "own-q"}, "kf-q", "ns-q", "own-q", id="owner-label"),
        pytest.param("pod-q", {L.QUEUE_LABEL: "own-q"}, "kf-q", "ns-q", "pod-q", id="pod-label"),
    ],
)
def test_the_queue(
    pod_queue: str, owner_labels: Obj, policy_queue: str, namespace_queue: str, queue: str
) -> None:
    top = kubeflow("PyTorchJob", PYTORCH, Worker=2)
    top["metadata"]["labels"] = owner_labels
    if policy_queue:
        top["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": policy_queue}}
    the_pod = member({L.QUEUE_LABEL: pod_queue} if pod_queue else {})
    verdict = plan(the_pod, [top], "", namespace_queue)
    assert isinstance(verdict, Gang)
    assert verdict.queue == queue


def test_alone_pods_get_their_queue_too() -> None:
    deployment = owner("apps/v1", "Deployment", labels={L.QUEUE_LABEL: "serving"})
    assert plan(member(), [deployment]) == Alone(
        "the pods of a Deployment are gangs of one (Deployment team/w)", "serving"
    )
    assert plan(member(), [], "cut", "ns-q").queue == "ns-q"


@pytest.mark.parametrize(
    ("ref", "suffix", "name"),
    [
        pytest.param(OwnerRef("batch/v1", "Job", "train", "u1"), "", "job-train-", id="short"),
        pytest.param(
            OwnerRef("batch/v1", "Job", "a" * 70, "u1"), "", "job-" + "a" * 53 + "-", id="long"
        ),
        pytest.param(
            OwnerRef("x/v1", "LeaderWorkerSet", "s", "u1"), "3", "leaderworkerset-s-", id="suffix"
        ),
        pytest.param(
            OwnerRef("batch/v1", "Job", "a" * 52 + ".b", "u1"),
            "",
            "job-" + "a" * 52 + "-",
            id="no-dot-before-dash",
        ),
    ],
)
def test_group_names_are_label_values(ref: OwnerRef, suffix: str, name: str) -> None:
    made = group_name(ref, suffix)
    assert made.startswith(name)
    assert len(made) <= 63
    assert made.endswith(f"-{suffix}") if suffix else len(made) - len(name) == 5
    assert group_name(ref, suffix) == made
    assert group_name(OwnerRef(ref.api_version, ref.kind, ref.name, "other"), suffix) != made
