"""Gangs sized as their owners size them (issue 35 item 7): one table per kind of owner.

Each row's expectation comes from the owner's own source, named in the row's comment
(repository, version, file, function), read for this table: what ``minMember`` (or
``minCount``) that project's controller writes into the PodGroup it makes for the same
object. Departures are marked as such and say why.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.owners import OwnerRef
from scheduler.controllers.gang_rules import Gang, group_name, plan
from tests.controllers.test_gang_rules import (
    MPI,
    PYTORCH,
    job,
    jobset,
    kubeflow,
    lws,
    member,
    owner,
    ray_cluster,
    rjob,
)

Obj = dict[str, Any]

LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def gang_of(chain: list[Obj], the_pod: Obj | None = None, **kwargs: Any) -> Gang:
    verdict = plan(the_pod or member(), chain, **kwargs)
    assert isinstance(verdict, Gang), verdict
    top = chain[-1]
    assert verdict.owner == OwnerRef(
        top["apiVersion"], top["kind"], top["metadata"]["name"], top["metadata"]["uid"]
    )
    return verdict


def with_spec(obj: Obj, **spec: Any) -> Obj:
    return obj | {"spec": obj["spec"] | spec}


# ------------------------------------------------------------------------------- batch Job
# kubernetes v1.36 pkg/controller/job: the Job controller keeps min(parallelism,
# completions - succeeded) pods active (manageJob); with WorkloadWithJob its own PodGroup
# for an Indexed Job has gang minCount = parallelism (buildPodGroupTemplates), made only
# when completions == parallelism.


@pytest.mark.parametrize(
    ("the_job", "minimum"),
    [
        pytest.param(job(), 1, id="parallelism-defaults-to-1"),
        pytest.param(job(parallelism=4, completions=4), 4, id="indexed-shape-minCount"),
        pytest.param(job(parallelism=4), 4, id="work-queue-parallelism"),
        pytest.param(job(parallelism=4, completions=2), 2, id="bounded-by-completions"),
        pytest.param(job(parallelism=4, completions=10), 4, id="more-completions"),
        pytest.param(job(parallelism=0), 1, id="suspended-by-parallelism-0-at-least-1"),
    ],
)
def test_batch_job(the_job: Obj, minimum: int) -> None:
    assert gang_of([the_job]).min_member == minimum


# ------------------------------------------------------------------------------- JobSet
# kubernetes-sigs/jobset (v0.13 devel) pkg/controllers/jobset_controller.go:
# constructJobsFromTemplate makes `replicas` Jobs per replicated job, named
# GenJobName = <jobset>-<replicated job>-<index>; resumeJobsIfNecessary creates a
# replicated job with dependsOn only once its dependency reached its status, and with
# startupPolicy InOrder resumes one replicated job at a time. JobSet writes no PodGroup
# itself; the gang is the pods that start together.


@pytest.mark.parametrize(
    ("chain", "elsewhere", "minimum"),
    [
        pytest.param(
            [job(parallelism=2), jobset(rjob("driver"), rjob("workers", 3, parallelism=2))],
            {},
            7,
            id="every-replicated-job",
        ),
        pytest.param(
            [
                job(),
                jobset(
                    rjob("driver"),
                    rjob("workers", 3, parallelism=2),
                    startupPolicy={"startupPolicyOrder": "InOrder"},
                ),
            ],
            {},
            1,
            id="in-order-the-first",
        ),
        pytest.param(
            [
                job(),
                jobset(
                    rjob("init", 1, parallelism=2),
                    rjob("main", 2) | {"dependsOn": [{"name": "init", "status": "Complete"}]},
                ),
            ],
            {},
            2,
            id="depends-on-comes-later",
        ),
        pytest.param(
            [job(), jobset(rjob("w", 2, parallelism=4, completions=1))],
            {},
            2,
            id="bounded-by-completions",
        ),
        # Issue 35 item 4: WorkloadWithJob on, v1.36's Job controller made a PodGroup of
        # its own (minCount 4) for the workers' Indexed Job, whose pods name it: the
        # JobSet's gang is the driver alone, not 5.
        pytest.param(
            [
                job(),
                jobset(
                    rjob("driver", 1, parallelism=1, completions=1, completionMode="Indexed"),
                    rjob("workers", 1, parallelism=4, completions=4, completionMode="Indexed"),
                ),
            ],
            {"w-workers-0": "the Job controller's PodGroup team/pg"},
            1,
            id="workers-in-the-job-controllers-group",
        ),
        pytest.param(
            [job(parallelism=2), jobset(rjob("driver"), rjob("workers", 3, parallelism=2))],
            {"w-workers-1": "its PodGroup"},
            5,
            id="one-job-of-three-elsewhere",
        ),
    ],
)
def test_jobset(chain: list[Obj], elsewhere: dict[str, str], minimum: int) -> None:
    gang = gang_of(chain, elsewhere=elsewhere)
    assert gang.min_member == minimum, gang.minimum
    for name in elsewhere:
        assert name in gang.minimum


# ------------------------------------------------------------------------------- Kubeflow
# kubeflow/training-operator v1.9.0 pkg/controller.v1/common/job.go (ReconcileJobs):
# minMember := totalReplicas, replaced by runPolicy.schedulingPolicy.minAvailable when
# set; totalReplicas = k8sutil.GetTotalReplicas: every replica type's replicas, 1 when
# unset (pkg/util/k8sutil/k8sutil.go). The defaulters (pkg/apis/kubeflow.org/v1/
# *_defaults.go) set a type's replicas to 1, an MPIJob's Worker to 0 (mpi_defaults.go);
# a PyTorchJob's elasticPolicy (pytorch_defaults.go: setElasticPolicy) never enters
# minMember.


@pytest.mark.parametrize(
    ("top", "minimum"),
    [
        pytest.param(kubeflow("PyTorchJob", PYTORCH, Master=1, Worker=3), 4, id="pytorch-all"),
        pytest.param(
            kubeflow("PyTorchJob", PYTORCH, Master=None, Worker=2), 3, id="pytorch-unset-is-1"
        ),
        # The case: two workers, elasticPolicy.minReplicas 1 -> all replicas.
        pytest.param(
            with_spec(
                kubeflow("PyTorchJob", PYTORCH, Worker=2),
                elasticPolicy={"minReplicas": 1, "maxReplicas": 2},
            ),
            2,
            id="pytorch-elastic-min-replicas-not-the-minimum",
        ),
        pytest.param(
            with_spec(
                kubeflow("PyTorchJob", PYTORCH, Master=1, Worker=8),
                runPolicy={"schedulingPolicy": {"minAvailable": 5}},
            ),
            5,
            id="pytorch-min-available",
        ),
        pytest.param(
            with_spec(
                kubeflow("PyTorchJob", PYTORCH, Worker=8),
                elasticPolicy={"minReplicas": 2},
                runPolicy={"schedulingPolicy": {"minAvailable": 3}},
            ),
            3,
            id="pytorch-min-available-over-elastic",
        ),
        pytest.param(
            kubeflow("TFJob", "tfReplicaSpecs", Chief=1, PS=2, Worker=4, Evaluator=None),
            8,
            id="tfjob-every-type",
        ),
        pytest.param(kubeflow("JAXJob", "jaxReplicaSpecs", Worker=4), 4, id="jaxjob"),
        pytest.param(
            kubeflow("MPIJob", MPI, Launcher=None, Worker=None), 1, id="mpijob-v1-worker-default-0"
        ),
        pytest.param(
            kubeflow("MPIJob", MPI, Launcher=1, Worker=4), 5, id="mpijob-v1-launcher-and-workers"
        ),
    ],
)
def test_training_operator(top: Obj, minimum: int) -> None:
    gang = gang_of([top])
    assert gang.min_member == minimum, gang.minimum


# kubeflow/mpi-operator v0.8.2 pkg/controller/podgroup.go (calculateMinAvailable):
# schedulingPolicy.minAvailable, else workerReplicas + 1 (the launcher, always one);
# workers default to 0 (pkg/apis/kubeflow/v2beta1/default.go). Departure: with
# launcherCreationPolicy WaitForWorkersReady the launcher Job is created only once every
# worker is Ready (pkg/controller/mpi_job_controller.go), so Sluice counts the workers only.


@pytest.mark.parametrize(
    ("top", "minimum"),
    [
        pytest.param(
            kubeflow("MPIJob", MPI, "kubeflow.org/v2beta1", Launcher=1, Worker=4),
            5,
            id="workers-plus-launcher",
        ),
        pytest.param(
            kubeflow("MPIJob", MPI, "kubeflow.org/v2beta1", Launcher=None, Worker=None),
            1,
            id="defaults-launcher-only",
        ),
        pytest.param(
            with_spec(
                kubeflow("MPIJob", MPI, "kubeflow.org/v2beta1", Launcher=1, Worker=4),
                runPolicy={"schedulingPolicy": {"minAvailable": 2}},
            ),
            2,
            id="min-available",
        ),
        pytest.param(
            with_spec(
                kubeflow("MPIJob", MPI, "kubeflow.org/v2beta1", Launcher=1, Worker=4),
                launcherCreationPolicy="WaitForWorkersReady",
            ),
            4,
            id="departure-launcher-after-workers",
        ),
    ],
)
def test_mpi_operator(top: Obj, minimum: int) -> None:
    gang = gang_of([top])
    assert gang.min_member == minimum, gang.minimum


# ------------------------------------------------------------------------------- KubeRay
# ray-project/kuberay (v1.7 devel) ray-operator/controllers/ray/batchscheduler/volcano/
# volcano_scheduler.go (calculatePodGroupParams): 1 (the head) + CalculateDesiredReplicas,
# or + CalculateMinReplicas when enableInTreeAutoscaling; utils/util.go
# GetWorkerGroupDesiredReplicas: a suspended group 0, replicas below minReplicas (or
# unset) -> minReplicas, above maxReplicas -> maxReplicas, times numOfHosts. handleRayJob:
# the RayJob's rayClusterSpec, the submitter left out of minMember.


@pytest.mark.parametrize(
    ("chain", "minimum"),
    [
        pytest.param(
            [ray_cluster({"groupName": "g", "replicas": 3, "minReplicas": 1, "maxReplicas": 5})],
            4,
            id="replicas",
        ),
        pytest.param(
            [
                ray_cluster(
                    {"replicas": 3, "minReplicas": 1, "maxReplicas": 5, "numOfHosts": 2},
                    {"replicas": 9, "minReplicas": 0, "maxReplicas": 2},
                )
            ],
            9,
            id="hosts-and-max",
        ),
        pytest.param(
            [ray_cluster({"replicas": 0, "minReplicas": 2}, {"replicas": 5, "suspend": True})],
            3,
            id="below-min-and-suspended",
        ),
        pytest.param([ray_cluster({"minReplicas": 2})], 3, id="replicas-unset-min"),
        pytest.param(
            [ray_cluster({"replicas": 1, "minReplicas": 3, "maxReplicas": 2})],
            4,
            id="min-above-max-min-wins",
        ),
        pytest.param(
            [ray_cluster({"replicas": 3, "numOfHosts": 0})], 1, id="zero-hosts-no-worker-pods"
        ),
        pytest.param(
            [
                ray_cluster(
                    {"replicas": 3, "minReplicas": 1, "maxReplicas": 5, "numOfHosts": 2},
                    autoscaling=True,
                )
            ],
            3,
            id="autoscaling-min-replicas",
        ),
        pytest.param(
            [
                ray_cluster({"replicas": 2, "minReplicas": 2}),
                owner(
                    "ray.io/v1",
                    "RayJob",
                    "rj",
                    rayClusterSpec={"workerGroupSpecs": [{"replicas": 4, "minReplicas": 1}]},
                ),
            ],
            5,
            id="rayjob-cluster-spec",
        ),
    ],
)
def test_kuberay(chain: list[Obj], minimum: int) -> None:
    gang = gang_of(chain)
    assert gang.min_member == minimum, gang.minimum


# ------------------------------------------------------------------------------- LWS
# kubernetes-sigs/lws (v0.10) pkg/schedulerprovider/volcano_provider.go
# (CreatePodGroupIfNotExists): one PodGroup per group, named <lws>-<group-index>-<revision>
# (interface.go: GetPodGroupName, from the pod's labels group-index and
# template-revision-hash), minMember = leaderWorkerTemplate.size, or 1 with startupPolicy
# LeaderReady; the leader and its workers all name it (InjectPodGroupMetadata).


def lws_member(group: str, worker: str, revision: str | None = "5f7c") -> Obj:
    labels = {LWS_GROUP: group, LWS_WORKER: worker}
    if revision is not None:
        labels[LWS_REVISION] = revision
    return member(labels)


def lws_chain(top: Obj, worker: bool) -> list[Obj]:
    """A worker's chain goes through its StatefulSet and its leader pod."""
    if not worker:
        return [owner("apps/v1", "StatefulSet", "w"), top]
    return [
        owner("apps/v1", "StatefulSet", "w-0"),
        owner("v1", "Pod", "w-0"),
        owner("apps/v1", "StatefulSet", "w"),
        top,
    ]


@pytest.mark.parametrize(
    ("top", "the_pod", "worker", "minimum", "suffix"),
    [
        pytest.param(lws(4), lws_member("0", "0"), False, 4, "0-5f7c", id="leader-created"),
        pytest.param(lws(4), lws_member("0", "2"), True, 4, "0-5f7c", id="leader-created-worker"),
        pytest.param(
            lws(4, "LeaderReady"), lws_member("1", "0"), False, 1, "1-5f7c", id="leader-ready"
        ),
        pytest.param(
            lws(4, "LeaderReady"),
            lws_member("1", "3"),
            True,
            1,
            "1-5f7c",
            id="leader-ready-worker-joins-the-leaders-group",
        ),
        pytest.param(
            lws(2), lws_member("3", "1", revision=None), True, 2, "3", id="no-revision-label"
        ),
    ],
)
def test_leader_worker_set(top: Obj, the_pod: Obj, worker: bool, minimum: int, suffix: str) -> None:
    gang = gang_of(lws_chain(top, worker), the_pod)
    assert gang.min_member == minimum, gang.minimum
    meta = top["metadata"]
    ref = OwnerRef(top["apiVersion"], top["kind"], meta["name"], meta["uid"])
    assert gang.name == group_name(ref, suffix)


def test_a_new_lws_revision_is_a_new_gang() -> None:
    """A rolling update's pods (a new template-revision-hash) do not join the old group."""
    old = gang_of(lws_chain(lws(4), False), lws_member("0", "0", "aaa"))
    new = gang_of(lws_chain(lws(4), False), lws_member("0", "0", "bbb"))
    assert old.name != new.name
