"""What gang a pod forms with the other pods of its owner (layer 4, pure: no kopf, no I/O).

The pod grouper (:mod:`.grouper`) reads a pod's chain of controller owners and hands it to
:func:`plan`, which answers with a :class:`Gang` (a PodGroup to make and join) or
:class:`Alone` (the pod is a gang of one), each saying why. The minimum of a gang is what
its owner needs to run, as each operator's own gang integration computes it (read in their
types and controllers; see :data:`RULES`):

==========================  =================================================================
owner                       minimum (``minMember``), and whose rule it follows
==========================  =================================================================
batch Job                   ``parallelism`` (default 1), bounded by ``completions``: the pods
                            the Job controller runs at once (v1.36's, whose own PodGroup for
                            an Indexed Job has ``minCount`` = ``parallelism``)
JobSet                      replicas x pods per Job of the replicated jobs that start
                            together: those without ``dependsOn``; with ``startupPolicy``
                            ``InOrder``, the first one only (the JobSet controller creates or
                            resumes the others once those before them run); less the Jobs
                            whose pods join a group their Job controller made (``elsewhere``)
PyTorchJob, TFJob, JAXJob,  ``runPolicy.schedulingPolicy.minAvailable``, else every replica of
MPIJob (kubeflow.org)       every type, as the training operator v1.9 sizes its PodGroups
                            (``ReconcileJobs``: ``GetTotalReplicas``; a type's ``replicas``
                            defaults to 1, an MPIJob's ``Worker`` to 0; a PyTorchJob's
                            ``elasticPolicy`` does not enter it). An MPIJob ``v2beta1``
                            (mpi-operator): ``minAvailable``, else its workers + 1 (the
                            launcher), but with ``launcherCreationPolicy:
                            WaitForWorkersReady`` its workers only (a departure: the launcher
                            is made once they are Ready, so a gang that waits for it never
                            starts)
RayCluster, RayJob          the head plus, per worker group not suspended, ``minReplicas``
                            (autoscaling on: ``enableInTreeAutoscaling``) or ``replicas``
                            kept within min and max, times ``numOfHosts``, as KubeRay's Volcano
                            integration sizes it; a RayJob's from its ``rayClusterSpec`` (its
                            submitter joins beyond the minimum, as there)
LeaderWorkerSet             one gang per group (``group-index``) and template revision, of
                            ``leaderWorkerTemplate.size``, or 1 with ``startupPolicy:
                            LeaderReady`` (the workers come once the leader is Ready), as
                            LWS's Volcano provider sizes its PodGroups
Deployment, StatefulSet     gangs of one
==========================  =================================================================

The gang is made from the highest owner up the chain whose kind has a rule: the pods of a
Job made by a JobSet, or of a RayCluster made by a RayJob, are grouped by the JobSet, the
RayJob. A chain with no such owner (a ReplicaSet of its own, an owner the grouper could
not read, a kind not installed) leaves the pod alone. A pod or any owner on its chain
labelled ``scheduling.sluice.dev/group-by-owner: "false"`` is left alone too.

Which group a pod belongs to is one rule: the group it names
(:func:`~scheduler.api.membership.pod_group_ref`), and only a pod that names none comes to
the grouper. So a gang counts none of the pods that another controller already put in a
group of its own: the JobSet rule leaves out the Jobs in ``elsewhere`` (named by
:func:`jobset_jobs`, found by :mod:`.claimed_jobs`: Jobs whose pod template names a group,
or for which v1.36's Job controller made a ``scheduling.k8s.io`` PodGroup).

The queue of a gang (and of a pod left alone): the pod's label
``scheduling.sluice.dev/queue``, else the same label on the owner, else the owner's own
queue field (Kubeflow's ``runPolicy.schedulingPolicy.queue``), else the label on the pod's
Namespace (its default queue), else ``default``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from scheduler.api import labels as L
from scheduler.api.errors import InvalidInputError
from scheduler.api.owners import OwnerRef, opted_out

__all__ = [
    "RULES",
    "Alone",
    "ChildJob",
    "Gang",
    "Rule",
    "chosen_owner",
    "counted_jobs",
    "group_name",
    "jobset_jobs",
    "plan",
    "queue_of",
    "rule_of",
]

Obj = Mapping[str, Any]

#: PodGroup names are label values too (``scheduling.sluice.dev/pod-group``).
MAX_NAME: Final = 63


@dataclass(frozen=True, slots=True)
class Gang:
    """The pod joins the PodGroup ``name`` (made if missing), owned by ``owner``."""

    name: str
    min_member: int
    queue: str
    owner: OwnerRef
    minimum: str
    """Where the minimum comes from, for people (``all 4 replicas of PyTorchJob
    team/bert: Master 1, Worker 3``): the PodGroup's ``minimum`` annotation."""


@dataclass(frozen=True, slots=True)
class Alone:
    """The pod is a gang of one, in ``queue``; ``why`` is its ``gang-of-one`` annotation."""

    why: str
    queue: str


@dataclass(frozen=True, slots=True)
class _Minimum:
    count: int
    why: str
    suffix: str = ""
    """Appended to the PodGroup's name: one owner, several gangs (LeaderWorkerSet)."""


Rule = Callable[[Obj, Obj, Mapping[str, str]], "_Minimum | str"]
"""(owner, pod, elsewhere) -> the gang's minimum, or why the pod is alone. ``elsewhere``:
the owner's child Jobs whose pods join another group, by name, with why (:func:`plan`)."""


# --------------------------------------------------------------------------------------------
# Reading fields, with errors that name the object and the field


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _where(obj: Obj) -> str:
    meta = _meta(obj)
    ns, name = meta.get("namespace"), meta.get("name", "?")
    kind = obj.get("kind", "Object")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def _map(obj: Obj, path: str, *, required: bool = False) -> Mapping[str, Any]:
    current: Any = obj
    for part in path.split("."):
        current = current.get(part) if isinstance(current, Mapping) else None
        if current is None:
            if required:
                raise InvalidInputError(_where(obj), path, "is required")
            return {}
    if not isinstance(current, Mapping):
        raise InvalidInputError(_where(obj), path, f"must be a map, got {current!r}")
    return current


def _int(owner: Obj, holder: Mapping[str, Any], key: str, path: str, default: int | None) -> Any:
    value = holder.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError(
            _where(owner), f"{path}.{key}", f"must be a non-negative integer, got {value!r}"
        )
    return value


def _job_pods(owner: Obj, job_spec: Mapping[str, Any], path: str) -> tuple[int, str]:
    """Pods a Job runs at once: ``parallelism`` (default 1) bounded by ``completions``."""
    parallelism = _int(owner, job_spec, "parallelism", path, 1)
    completions = _int(owner, job_spec, "completions", path, None)
    if completions is None:
        return parallelism, f"parallelism {parallelism}"
    return min(parallelism, completions), f"parallelism {parallelism}, completions {completions}"


# --------------------------------------------------------------------------------------------
# The rules, one per kind of owner


def _batch_job(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum:
    count, how = _job_pods(owner, _map(owner, "spec"), "spec")
    return _Minimum(count, f"{count} pods at once of {_where(owner)} ({how})")


@dataclass(frozen=True, slots=True)
class ChildJob:
    """A Job a JobSet makes (or made) whose pods its gang counts: ``name`` as the JobSet
    controller names it (``<jobset>-<replicated job>-<index>``), ``spec`` its template's
    Job spec, ``replicated_job`` the name of the replicated job it comes from."""

    name: str
    replicated_job: str
    spec: Mapping[str, Any]


def jobset_jobs(owner: Obj) -> list[ChildJob]:
    """The Jobs of JobSet ``owner`` whose pods start together (module docstring): the
    ones its gang counts, those another group may take among them. Raises
    InvalidInputError naming the field when the JobSet cannot be read."""
    spec = _map(owner, "spec")
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated:
        raise InvalidInputError(_where(owner), "spec.replicatedJobs", "must be a non-empty list")
    in_order = _map(owner, "spec.startupPolicy").get("startupPolicyOrder") == "InOrder"
    name = str(_meta(owner).get("name", ""))
    out: list[ChildJob] = []
    for i, rj in enumerate(replicated):
        path = f"spec.replicatedJobs[{i}]"
        if not isinstance(rj, Mapping):
            raise InvalidInputError(_where(owner), path, "must be a map")
        if (in_order and i > 0) or rj.get("dependsOn"):
            continue  # created once those before it run: joins beyond the minimum
        replicas = _int(owner, rj, "replicas", path, 1)
        template = rj.get("template")
        job_spec = template.get("spec") if isinstance(template, Mapping) else None
        job_spec = job_spec if isinstance(job_spec, Mapping) else {}
        rj_name = str(rj.get("name", i))
        out += [ChildJob(f"{name}-{rj_name}-{j}", rj_name, job_spec) for j in range(replicas)]
    return out


def _jobset(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum:
    in_order = _map(owner, "spec.startupPolicy").get("startupPolicyOrder") == "InOrder"
    total = 0
    parts: dict[str, list[int]] = {}
    left_out: list[str] = []
    for child in jobset_jobs(owner):
        pods, _ = _job_pods(owner, child.spec, f"replicatedJobs[{child.replicated_job}]")
        counted = parts.setdefault(child.replicated_job, [])
        if child.name in elsewhere:
            left_out.append(f"{child.name} ({elsewhere[child.name]})")
            continue
        total += pods
        counted.append(pods)
    listed = ", ".join(
        f"{rj} {len(counts)} x {counts[0]}" if counts and len(set(counts)) == 1 else f"{rj} 0"
        for rj, counts in parts.items()
    )
    order = " (startupPolicy InOrder: the first)" if in_order else ""
    why = f"the replicated jobs of {_where(owner)} that start together{order}: {listed}"
    if left_out:
        why += "; not counted, in a group of their own: " + ", ".join(left_out)
    return _Minimum(total, why)


#: kind -> the field holding its map of replica type to ReplicaSpec.
KUBEFLOW_REPLICA_SPECS: Final[Mapping[str, str]] = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}


def _kubeflow(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum:
    """The training operator v1.9 (``pkg/controller.v1/common/job.go``, ``ReconcileJobs``):
    ``minAvailable``, else ``GetTotalReplicas`` over the replica types with their defaults
    (``SetDefaults_*``: 1, an MPIJob's Worker 0). mpi-operator's MPIJob ``v2beta1``
    (``calculateMinAvailable``): ``minAvailable``, else its workers + 1."""
    kind = str(owner.get("kind"))
    field = KUBEFLOW_REPLICA_SPECS[kind]
    policy = _map(owner, "spec.runPolicy.schedulingPolicy")
    min_available = _int(owner, policy, "minAvailable", "spec.runPolicy.schedulingPolicy", None)
    if min_available is not None:
        return _Minimum(
            min_available,
            f"runPolicy.schedulingPolicy.minAvailable {min_available} of {_where(owner)}",
        )
    specs = _map(owner, f"spec.{field}", required=True)
    mpi_v2 = kind == "MPIJob" and str(owner.get("apiVersion", "")).endswith("/v2beta1")
    counts: dict[str, int] = {}
    for role, replica_spec in sorted(specs.items()):
        holder = replica_spec if isinstance(replica_spec, Mapping) else {}
        default = 0 if (kind == "MPIJob" and str(role).lower() == "worker") else 1
        counts[str(role)] = _int(owner, holder, "replicas", f"spec.{field}.{role}", default)
    notes = ""
    if mpi_v2:
        workers = next((n for role, n in counts.items() if role.lower() == "worker"), 0)
        counts = {"Launcher": 1, "Worker": workers}  # the launcher is always one
        if _map(owner, "spec").get("launcherCreationPolicy") == "WaitForWorkersReady":
            counts.pop("Launcher")
            notes = (
                " (the launcher starts once they are Ready: "
                "launcherCreationPolicy WaitForWorkersReady)"
            )
    total = sum(counts.values())
    listed = ", ".join(f"{role} {n}" for role, n in counts.items())
    return _Minimum(total, f"all {total} replicas of {_where(owner)}: {listed}{notes}")


def _ray_cluster_minimum(owner: Obj, spec: Mapping[str, Any], path: str) -> tuple[int, str]:
    """KubeRay's own gang size (its Volcano integration, ``calculatePodGroupParams``): the
    head plus each worker group's pods, ``GetWorkerGroupDesiredReplicas`` (replicas kept
    within min and max) or, autoscaling, ``CalculateMinReplicas``; times ``numOfHosts``."""
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise InvalidInputError(_where(owner), f"{path}.workerGroupSpecs", "must be a list")
    total, parts = 1, ["head 1"]
    for i, group in enumerate(groups):
        where = f"{path}.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            raise InvalidInputError(_where(owner), where, "must be a map")
        if group.get("suspend") is True:
            continue
        low = _int(owner, group, "minReplicas", where, 0)
        high = _int(owner, group, "maxReplicas", where, None)
        hosts = _int(owner, group, "numOfHosts", where, 1)
        wanted = _int(owner, group, "replicas", where, None)
        if autoscaling or wanted is None or wanted < low:
            replicas = low
        elif high is not None and wanted > high:
            replicas = high
        else:
            replicas = wanted
        total += replicas * hosts
        parts.append(f"{group.get('groupName', i)} {replicas} x {hosts}")
    how = "minReplicas (autoscaling)" if autoscaling else "replicas"
    return total, f"{', '.join(parts)} ({how})"


def _ray_cluster(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum:
    total, how = _ray_cluster_minimum(owner, _map(owner, "spec"), "spec")
    return _Minimum(total, f"the head and workers of {_where(owner)}: {how}")


def _ray_job(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum | str:
    spec = _map(owner, "spec.rayClusterSpec")
    if not spec:
        return f"{_where(owner)} runs on an existing RayCluster (no spec.rayClusterSpec)"
    total, how = _ray_cluster_minimum(owner, spec, "spec.rayClusterSpec")
    return _Minimum(total, f"the head and workers of the RayCluster of {_where(owner)}: {how}")


LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LWS_REVISION: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def _leader_worker_set(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> _Minimum | str:
    """LWS's Volcano provider (``CreatePodGroupIfNotExists``): a PodGroup per group and
    revision (``<lws>-<group-index>-<revision>``), ``minMember`` the group's ``size``, or
    1 with ``startupPolicy: LeaderReady``; the leader and its workers all join it."""
    template = _map(owner, "spec.leaderWorkerTemplate")
    size = _int(owner, template, "size", "spec.leaderWorkerTemplate", 1)
    policy = _map(owner, "spec").get("startupPolicy") or "LeaderCreated"
    labels = _meta(pod).get("labels") or {}
    group = labels.get(LWS_GROUP_INDEX)
    if not isinstance(group, str) or not group.isdigit():
        raise InvalidInputError(_where(pod), f"metadata.labels[{LWS_GROUP_INDEX}]", "is missing")
    revision = labels.get(LWS_REVISION)
    suffix = f"{group}-{revision}" if isinstance(revision, str) and revision else group
    where = f"group {group} of {_where(owner)}"
    if policy == "LeaderReady":
        return _Minimum(
            1,
            f"the leader of {where} (startupPolicy LeaderReady: its {size - 1 if size else 0} "
            "workers come once it is Ready, and join beyond the minimum)",
            suffix,
        )
    return _Minimum(size, f"the {size} pods of {where} (leader and workers)", suffix)


def _alone(owner: Obj, pod: Obj, elsewhere: Mapping[str, str]) -> str:
    return f"the pods of a {owner.get('kind')} are gangs of one ({_where(owner)})"


#: (API group, kind) of an owner -> its rule.
RULES: Final[Mapping[tuple[str, str], Rule]] = {
    ("batch", "Job"): _batch_job,
    ("jobset.x-k8s.io", "JobSet"): _jobset,
    **{("kubeflow.org", kind): _kubeflow for kind in KUBEFLOW_REPLICA_SPECS},
    ("ray.io", "RayCluster"): _ray_cluster,
    ("ray.io", "RayJob"): _ray_job,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _leader_worker_set,
    ("apps", "Deployment"): _alone,
    ("apps", "StatefulSet"): _alone,
}


def rule_of(obj: Obj) -> Rule | None:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return RULES.get((group, str(obj.get("kind", ""))))


# --------------------------------------------------------------------------------------------
# Names and queues


def group_name(owner: OwnerRef, suffix: str = "") -> str:
    """The PodGroup made for ``owner``: ``<kind>-<name>-<hash of uid>[-<suffix>]``, at most
    63 characters (it is also a label value), the name shortened to fit. The uid's hash
    keeps an owner deleted and created again under its name from joining the old group,
    which the garbage collector is about to delete."""
    digest = hashlib.sha256(owner.uid.encode()).hexdigest()[:5]
    tail = f"-{digest}" + (f"-{suffix}" if suffix else "")
    head = f"{owner.kind.lower()}-{owner.name}"
    head = head[: MAX_NAME - len(tail)].rstrip("-.")
    return head + tail


def _queue_label(obj: Obj | None) -> str:
    labels = _meta(obj).get("labels") if obj is not None else None
    value = labels.get(L.QUEUE_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and value else ""


def queue_of(pod: Obj, owner: Obj | None, namespace_queue: str) -> str:
    """The queue of ``pod``'s gang (module docstring)."""
    own = ""
    if owner is not None and owner.get("kind") in KUBEFLOW_REPLICA_SPECS:
        value = _map(owner, "spec.runPolicy.schedulingPolicy").get("queue")
        own = value if isinstance(value, str) else ""
    return _queue_label(pod) or _queue_label(owner) or own or namespace_queue or L.DEFAULT_QUEUE


# --------------------------------------------------------------------------------------------
# The plan


def _ref_of(obj: Obj) -> OwnerRef:
    meta = _meta(obj)
    return OwnerRef(
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
    )


def chosen_owner(chain: Sequence[Obj]) -> Obj | None:
    """The owner a gang is made from: the highest of ``chain`` whose kind has a rule."""
    return next((obj for obj in reversed(chain) if rule_of(obj) is not None), None)


def counted_jobs(owner: Obj) -> list[ChildJob]:
    """The child Jobs whose pods the gang of ``owner`` counts, when it counts them by Job
    (a JobSet: :func:`jobset_jobs`), else []. The grouper asks which of them another
    group takes (``plan``'s ``elsewhere``). [] too when the owner cannot be read (then
    :func:`plan` says why)."""
    if rule_of(owner) is not _jobset:
        return []
    try:
        return jobset_jobs(owner)
    except InvalidInputError:
        return []


def plan(
    pod: Obj,
    chain: Sequence[Obj],
    cut: str = "",
    namespace_queue: str = "",
    elsewhere: Mapping[str, str] | None = None,
) -> Gang | Alone:
    """The gang of ``pod``.

    ``chain``: the pod's controller owners as read, the nearest first. ``cut``: why the
    chain stops short of the top (an owner that could not be read, or whose kind the
    cluster does not serve), or "". ``namespace_queue``: the queue the pod's Namespace
    names (its label ``scheduling.sluice.dev/queue``), or "". ``elsewhere``: the chosen
    owner's child Jobs (of :func:`counted_jobs`) whose pods join a group another
    controller made, by name, with why: the gang does not count them.

    Never raises: an owner whose fields cannot be read leaves the pod alone, the
    message naming the object and the field.
    """
    for obj in (pod, *chain):
        if opted_out(obj):
            return Alone(
                f"grouping by owner is off: {L.GROUP_BY_OWNER_LABEL}=false on {_where(obj)}",
                queue_of(pod, None, namespace_queue),
            )
    chosen = chosen_owner(chain)
    if chosen is None:
        if cut:
            why = cut
        elif chain:
            why = f"no gang rule for a {chain[-1].get('kind')} ({_where(chain[-1])})"
        else:
            why = "no owner"
        return Alone(why, queue_of(pod, None, namespace_queue))
    rule = rule_of(chosen)
    assert rule is not None
    try:
        queue = queue_of(pod, chosen, namespace_queue)
        minimum = rule(chosen, pod, elsewhere or {})
    except InvalidInputError as exc:
        why = f"cannot read the gang's minimum: {exc}"
        return Alone(why, queue_of(pod, None, namespace_queue))
    if isinstance(minimum, str):
        return Alone(minimum, queue)
    owner = _ref_of(chosen)
    return Gang(
        group_name(owner, minimum.suffix),
        max(minimum.count, 1),
        queue,
        owner,
        minimum.why,
    )
