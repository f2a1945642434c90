"""The pod grouper of `sluice controller` against a fake API: what it reads, what it writes
and in which order, how it fails and retries, and how kopf hands it pods."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import kopf
import pytest

from scheduler.api import labels as L
from scheduler.controllers import operator
from scheduler.controllers.api_client import ApiStatusError
from scheduler.controllers.claimed_jobs import Undecided
from scheduler.controllers.gang_rules import Gang
from scheduler.controllers.grouper import OwnerReader, PodGrouper, pod_group_body
from scheduler.controllers.operator import Controller, ControllerOptions
from scheduler.controllers.workqueue import WorkQueue
from tests.builders import pod

pytestmark = pytest.mark.anyio

Obj = dict[str, Any]
NS = "team"
PG = f"/apis/{L.API_VERSION}/namespaces/{NS}/podgroups"

#: group/version -> the kinds it serves: kind -> (plural, namespaced)
SERVED: dict[str, dict[str, tuple[str, bool]]] = {
    "v1": {"Pod": ("pods", True), "Namespace": ("namespaces", False)},
    "batch/v1": {"Job": ("jobs", True)},
    "apps/v1": {
        "Deployment": ("deployments", True),
        "ReplicaSet": ("replicasets", True),
        "StatefulSet": ("statefulsets", True),
    },
    "jobset.x-k8s.io/v1alpha2": {"JobSet": ("jobsets", True)},
    "kubeflow.org/v1": {"PyTorchJob": ("pytorchjobs", True)},
    "scheduling.k8s.io/v1alpha2": {"PodGroup": ("podgroups", True)},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def merge(into: Obj, patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            merge(into[key], value)
        elif value is None:
            into.pop(key, None)
        else:
            into[key] = copy.deepcopy(value)


class FakeApi:
    """Objects by path, API discovery from :data:`SERVED`, scripted failures, every call."""

    def __init__(self, *objects: Obj) -> None:
        self.objects: dict[str, Obj] = {}
        self.calls: list[tuple[str, str]] = []
        self.failures: dict[tuple[str, str], list[int]] = {}
        self.forbidden: set[str] = set()
        for obj in objects:
            self.put(obj)

    def path_of(self, obj: Obj) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        meta = obj["metadata"]
        if kind == "PodGroup" and api_version == L.API_VERSION:
            return f"{PG.replace(NS, meta['namespace'])}/{meta['name']}"
        plural, namespaced = SERVED[api_version][kind]
        base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        where = f"/namespaces/{meta['namespace']}" if namespaced else ""
        return f"{base}{where}/{plural}/{meta['name']}"

    def put(self, obj: Obj) -> Obj:
        self.objects[self.path_of(obj)] = copy.deepcopy(obj)
        return obj

    def _fail(self, method: str, path: str) -> None:
        for (m, prefix), statuses in self.failures.items():
            if m == method and path.startswith(prefix) and statuses:
                raise ApiStatusError(method, path, statuses.pop(0), '{"message": "nope"}')
        if any(path.startswith(p) for p in self.forbidden):
            raise ApiStatusError(method, path, 403, '{"message": "no"}')

    async def get(self, path: str) -> dict[str, Any] | None:
        self.calls.append(("GET", path))
        self._fail("GET", path)
        for gv, kinds in SERVED.items():
            if path == (f"/apis/{gv}" if "/" in gv else f"/api/{gv}"):
                return {
                    "resources": [
                        {"name": plural, "kind": kind, "namespaced": namespaced}
                        for kind, (plural, namespaced) in kinds.items()
                    ]
                    + [{"name": "x/status", "kind": "X"}]
                }
        if path.startswith("/apis/") and path.count("/") == 3:
            return None  # a group/version not served
        listed = self._list(path)
        if listed is not None:
            return listed
        found = self.objects.get(path)
        return copy.deepcopy(found) if found is not None else None

    def _list(self, path: str) -> dict[str, Any] | None:
        """A collection served (``?labelSelector=key=value`` too): its items; else None."""
        collection, _, query = path.partition("?")
        plural = collection.rsplit("/", 1)[1]
        gv = collection.split("/namespaces/")[0].removeprefix("/apis/").removeprefix("/api/")
        if plural not in {p for p, _ in SERVED.get(gv, {}).values()}:
            return None
        selector = unquote(query.removeprefix("labelSelector="))
        key, _, value = selector.partition("=")
        items = [
            copy.deepcopy(o)
            for p, o in self.objects.items()
            if p.startswith(collection + "/")
            and (not key or o["metadata"].get("labels", {}).get(key) == value)
        ]
        return {"items": items}

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        self.calls.append(("POST", path))
        self._fail("POST", path)
        full = f"{path}/{body['metadata']['name']}"
        if full in self.objects:
            return None
        self.objects[full] = copy.deepcopy(dict(body))
        return copy.deepcopy(dict(body))

    async def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        self.calls.append(("PATCH", path))
        self._fail("PATCH", path)
        found = self.objects.get(path)
        if found is None:
            return None
        merge(found, body)
        return copy.deepcopy(found)

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "GET"]


def namespace(queue: str = "") -> Obj:
    labels = {L.QUEUE_LABEL: queue} if queue else {}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}}


def obj(api_version: str, kind: str, name: str, *, owner: Obj | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": name, "namespace": NS, "uid": f"uid-{kind}-{name}", "labels": {}}
    if owner is not None:
        meta["ownerReferences"] = [ref_to(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def ref_to(owner: Obj, **extra: Any) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        **extra,
    }


def member(name: str, owner: Obj | None, **kw: Any) -> Obj:
    p = pod(name, ns=NS, **kw)
    p["metadata"]["uid"] = f"uid-pod-{name}"
    if owner is not None:
        p["metadata"]["ownerReferences"] = [ref_to(owner)]
    return p


def grouper(api: FakeApi, **kw: Any) -> tuple[PodGrouper, list[int]]:
    logins: list[int] = []

    async def get_api() -> FakeApi:
        return api

    async def relogin() -> None:
        logins.append(1)

    return PodGrouper(get_api, relogin, **kw), logins


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{name}"


def stored_pod(api: FakeApi, name: str) -> Obj:
    return api.objects[pod_path(name)]


def pod_groups(api: FakeApi) -> dict[str, Obj]:
    return {p.rsplit("/", 1)[1]: o for p, o in api.objects.items() if p.startswith(PG)}


# --------------------------------------------------------------------------------------------
# One pass over a pod


async def test_a_jobs_pods_join_one_pod_group_made_before_they_name_it() -> None:
    job = obj("batch/v1", "Job", "train", parallelism=3)
    pods = [member(f"train-{i}", job) for i in range(3)]
    api = FakeApi(namespace(), job, *pods)
    g, _ = grouper(api)
    for p in pods:
        await g.group(p)
    (name, group), *others = pod_groups(api).items()
    assert not others
    assert name.startswith("job-train-")
    assert group["spec"] == {"minMember": 3, "queue": "default"}
    assert group["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-Job-train"}
    ]
    assert group["metadata"]["annotations"][L.MINIMUM_ANNOTATION] == (
        "3 pods at once of Job team/train (parallelism 3)"
    )
    for p in pods:
        assert (
            stored_pod(api, p["metadata"]["name"])["metadata"]["labels"][L.POD_GROUP_LABEL] == name
        )
    # The PodGroup is created once, before the first label; the Job is read once.
    assert api.writes() == [("POST", PG)] + [("PATCH", pod_path(f"train-{i}")) for i in range(3)]
    assert api.calls.count(("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/train")) == 1


async def test_a_jobset_groups_the_pods_of_its_jobs() -> None:
    jobset = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        replicatedJobs=[{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2}}}],
    )
    job = obj("batch/v1", "Job", "js-w-0", owner=jobset, parallelism=2)
    p = member("js-w-0-0", job)
    api = FakeApi(namespace("ns-queue"), jobset, job, p)
    verdict = await grouper(api)[0].group(p)
    [group] = pod_groups(api).values()
    assert group["spec"] == {"minMember": 4, "queue": "ns-queue"}
    assert group["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert verdict is not None


# A JobSet whose workers' Job got a PodGroup of its own from v1.36's Job controller
# (WorkloadWithJob): the objects as the JobSet controller (Jobs named
# <jobset>-<replicated job>-<index>, labelled jobset.sigs.k8s.io/jobset-name, completionMode
# Indexed by its webhook's default) and the Job controller write them (read on the real
# server: a Workload and a PodGroup controlled by the Job, gang minCount = parallelism).

JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
K8S_PG = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/podgroups"


def driver_and_workers(
    *, workers_started: bool = True, template_group: str = ""
) -> tuple[Obj, Obj, Obj, Obj]:
    """The JobSet, its driver Job (1 pod), its workers' Job (4 pods) and the driver's pod."""
    worker_template: Obj = {"spec": {}}
    if template_group:
        worker_template["spec"]["schedulingGroup"] = {"podGroupName": template_group}

    def rj(name: str, n: int, template: Obj) -> Obj:
        spec = {"parallelism": n, "completions": n, "completionMode": "Indexed"}
        return {"name": name, "replicas": 1, "template": {"spec": spec | {"template": template}}}

    jobset = obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        replicatedJobs=[rj("driver", 1, {"spec": {}}), rj("workers", 4, worker_template)],
    )
    jobs = []
    for rj_spec in jobset["spec"]["replicatedJobs"]:
        job = obj(
            "batch/v1",
            "Job",
            f"js-{rj_spec['name']}-0",
            owner=jobset,
            **rj_spec["template"]["spec"],
        )
        job["metadata"]["labels"][JOBSET_LABEL] = "js"
        jobs.append(job)
    driver, workers = jobs
    driver["status"] = {"startTime": "2026-11-28T17:12:21Z", "active": 1}
    if workers_started:
        workers["status"] = {"startTime": "2026-11-28T17:12:21Z", "active": 4}
    return jobset, driver, workers, member("js-driver-0-0", driver)


def job_controllers_pod_group(job: Obj) -> Obj:
    name = f"{job['metadata']['name']}-64c5d6bccb-{job['metadata']['name']}-pgt-0-675b9ccffc"
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": "uid-k8s-pg",
            "ownerReferences": [
                ref_to(job, blockOwnerDeletion=True),
                {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "name": "wl"},
            ],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }


async def test_a_jobset_gang_does_not_count_jobs_in_the_job_controllers_group() -> None:
    """Issue 35 item 4: the workers' pods name the Job controller's PodGroup; the JobSet's
    gang is the driver alone (minMember 1, not 5), and says why."""
    jobset, driver, workers, p = driver_and_workers()
    api = FakeApi(namespace(), jobset, driver, workers, job_controllers_pod_group(workers), p)
    verdict = await grouper(api)[0].group(p)
    assert isinstance(verdict, Gang)
    [group] = pod_groups(api).values()
    assert group["spec"]["minMember"] == 1
    assert group["metadata"]["annotations"][L.MINIMUM_ANNOTATION].endswith(
        "not counted, in a group of their own: js-workers-0 (its pods join PodGroup "
        f"team/{job_controllers_pod_group(workers)['metadata']['name']} (scheduling.k8s.io), "
        "made by the Job controller)"
    )


async def test_a_jobset_gang_counts_jobs_started_without_a_group() -> None:
    """WorkloadWithJob off: both Jobs started and no PodGroup of the Job controller's: 5."""
    jobset, driver, workers, p = driver_and_workers()
    api = FakeApi(namespace(), jobset, driver, workers, p)
    await grouper(api)[0].group(p)
    [group] = pod_groups(api).values()
    assert group["spec"]["minMember"] == 5


async def test_a_jobset_gang_waits_until_the_job_controller_has_decided() -> None:
    """The workers' Job not started yet (its PodGroup may still come): nothing written, the
    pod is tried again; once the Job controller made the PodGroup, the gang is 1."""
    jobset, driver, workers, p = driver_and_workers(workers_started=False)
    api = FakeApi(namespace(), jobset, driver, workers, p)
    g, _ = grouper(api)
    with pytest.raises(Undecided, match="Job team/js-workers-0 has not been started"):
        await g.group(p)
    assert api.writes() == []
    api.put(job_controllers_pod_group(workers))
    await g.group(p)
    [group] = pod_groups(api).values()
    assert group["spec"]["minMember"] == 1


async def test_a_jobset_gang_waits_for_a_job_not_made_yet() -> None:
    jobset, driver, _, p = driver_and_workers()
    api = FakeApi(namespace(), jobset, driver, p)
    with pytest.raises(Undecided, match="Job team/js-workers-0 of JobSet team/js does not exist"):
        await grouper(api)[0].group(p)


async def test_a_cluster_without_the_workload_api_has_nothing_to_wait_for() -> None:
    jobset, driver, workers, p = driver_and_workers(workers_started=False)
    api = FakeApi(namespace(), jobset, driver, workers, p)
    served = SERVED.pop("scheduling.k8s.io/v1alpha2")
    try:
        await grouper(api)[0].group(p)
    finally:
        SERVED["scheduling.k8s.io/v1alpha2"] = served
    [group] = pod_groups(api).values()
    assert group["spec"]["minMember"] == 5
    assert not any("/jobs?" in path for _, path in api.calls)


async def test_a_job_whose_template_names_a_group_is_not_counted_without_a_read() -> None:
    jobset, driver, workers, p = driver_and_workers(template_group="mine")
    api = FakeApi(namespace(), jobset, driver, workers, p)
    await grouper(api)[0].group(p)
    [group] = pod_groups(api).values()
    assert group["spec"]["minMember"] == 1
    assert "its pod template names" in group["metadata"]["annotations"][L.MINIMUM_ANNOTATION]
    assert not any(path.startswith(K8S_PG) for _, path in api.calls)


async def test_a_pod_group_made_before_is_brought_up_to_date() -> None:
    job = obj("batch/v1", "Job", "train", parallelism=4)
    p = member("train-0", job)
    api = FakeApi(namespace(), job, p)
    g, _ = grouper(api)
    old = pod_group_body(NS, (await g.group(p)))  # type: ignore[arg-type]
    old["spec"]["minMember"] = 2
    api.put(old)
    g2, _ = grouper(api)  # a restarted controller: nothing remembered
    api.calls.clear()
    await g2.group(p)
    assert pod_groups(api)[old["metadata"]["name"]]["spec"]["minMember"] == 4
    assert [c[0] for c in api.writes()] == ["POST", "PATCH", "PATCH"]


async def test_someone_elses_pod_group_of_that_name_is_joined_as_it_is() -> None:
    job = obj("batch/v1", "Job", "train", parallelism=4)
    p = member("train-0", job)
    api = FakeApi(namespace(), job, p)
    g, _ = grouper(api)
    theirs = pod_group_body(NS, (await g.group(p)))  # type: ignore[arg-type]
    theirs["metadata"]["ownerReferences"] = []
    theirs["spec"]["minMember"] = 9
    api.put(theirs)
    api.calls.clear()
    await grouper(api)[0].group(p)
    assert pod_groups(api)[theirs["metadata"]["name"]]["spec"]["minMember"] == 9
    assert [c[0] for c in api.writes()] == ["POST", "PATCH"]  # the pod's label only


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        pytest.param("deployment", "the pods of a Deployment are gangs of one", id="deployment"),
        pytest.param("not-installed", "the cluster serves no example.com/v1 Widget", id="kind"),
        pytest.param("forbidden", "sluice controller may not read it (403 Forbidden)", id="403"),
        pytest.param("gone", "Job team/train: not found", id="owner-gone"),
        pytest.param("recreated", "Job team/train: not found", id="owner-of-another-uid"),
        pytest.param("opted-out", "grouping by owner is off", id="opted-out"),
    ],
)
async def test_pods_left_alone_are_told_why(setup: str, why: str) -> None:
    job = obj("batch/v1", "Job", "train", parallelism=3)
    api = FakeApi(namespace("ns-queue"))
    if setup == "deployment":
        deployment = obj("apps/v1", "Deployment", "web")
        rs = obj("apps/v1", "ReplicaSet", "web-5d8", owner=deployment)
        api.put(deployment)
        api.put(rs)
        p = member("web-5d8-x", rs)
    elif setup == "not-installed":
        p = member("w-0", obj("example.com/v1", "Widget", "w"))
    else:
        p = member("train-0", job)
        if setup == "forbidden":
            api.forbidden.add("/apis/batch/v1/namespaces")
        elif setup == "recreated":
            api.put(job | {"metadata": {**job["metadata"], "uid": "another"}})
        elif setup == "opted-out":
            job["metadata"]["labels"][L.GROUP_BY_OWNER_LABEL] = "false"
            api.put(job)
        elif setup != "gone":
            raise AssertionError(setup)
    api.put(p)
    await grouper(api)[0].group(p)
    meta = stored_pod(api, p["metadata"]["name"])["metadata"]
    assert why in meta["annotations"][L.GANG_OF_ONE_ANNOTATION]
    assert meta["labels"][L.QUEUE_LABEL] == "ns-queue"
    assert L.POD_GROUP_LABEL not in meta["labels"]
    assert pod_groups(api) == {}


async def test_a_pods_own_queue_label_is_kept() -> None:
    deployment = obj("apps/v1", "Deployment", "web")
    p = member("web-0", deployment, labels={L.QUEUE_LABEL: "mine"})
    api = FakeApi(namespace("ns-queue"), deployment, p)
    await grouper(api)[0].group(p)
    assert stored_pod(api, "web-0")["metadata"]["labels"][L.QUEUE_LABEL] == "mine"


@pytest.mark.parametrize(
    ("p", "wanted"),
    [
        pytest.param(member("a", obj("batch/v1", "Job", "j")), True, id="waits"),
        pytest.param(
            member("a", obj("batch/v1", "Job", "j"), scheduler="default-scheduler"),
            False,
            id="another-scheduler",
        ),
        pytest.param(member("a", None), False, id="no-owner"),
        pytest.param(member("a", obj("batch/v1", "Job", "j"), group="g"), False, id="grouped"),
    ],
)
async def test_which_pods_it_wants(p: Obj, wanted: bool) -> None:
    api = FakeApi(namespace())
    g, _ = grouper(api)
    assert g.wants(p) is wanted
    if not wanted:
        assert await g.group(p) is None
        assert api.calls == []


async def test_a_pod_gone_meanwhile_is_no_error() -> None:
    job = obj("batch/v1", "Job", "train")
    p = member("train-0", job)
    api = FakeApi(namespace(), job)  # the pod itself is not there: the patch finds nothing
    assert await grouper(api)[0].group(p) is None


async def test_discovery_and_owners_are_kept_a_while() -> None:
    now = [0.0]
    reader = OwnerReader(clock=lambda: now[0])
    job = obj("batch/v1", "Job", "train")
    api = FakeApi(namespace(), job)
    p = member("train-0", job)
    await reader.chain(api, p)
    await reader.chain(api, p)
    assert len(api.calls) == 2  # discovery of batch/v1, the Job
    now[0] = 6.0
    await reader.chain(api, p)
    assert len(api.calls) == 3  # the Job again; discovery is kept for minutes
    widget = member("w-0", obj("example.com/v1", "Widget", "w"))
    await reader.chain(api, widget)
    await reader.chain(api, widget)
    assert api.calls[-1] == ("GET", "/apis/example.com/v1") and len(api.calls) == 4
    now[0] = 40.0  # a kind not served is asked again after 30 s (a CRD installed since)
    await reader.chain(api, widget)
    assert api.calls[-1] == ("GET", "/apis/example.com/v1")


# --------------------------------------------------------------------------------------------
# The workers: failures, retries, login


async def run_until(g: PodGrouper, done: Any, timeout: float = 5.0) -> None:
    task = asyncio.create_task(g.run())
    try:
        async with asyncio.timeout(timeout):
            while not done():
                await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_failures_are_retried_with_backoff_until_the_pod_is_grouped() -> None:
    job = obj("batch/v1", "Job", "train", parallelism=2)
    pods = [member(f"train-{i}", job) for i in range(2)]
    api = FakeApi(namespace(), job, *pods)
    api.failures[("POST", PG)] = [500, 503]
    api.failures[("GET", "/apis/batch/v1")] = [429]
    g, logins = grouper(api, queue=WorkQueue(base=0.01, cap=0.05))
    for p in pods:
        g.offer(p)

    def labelled() -> bool:
        return all(
            L.POD_GROUP_LABEL in stored_pod(api, f"train-{i}")["metadata"]["labels"]
            for i in range(2)
        )

    await run_until(g, labelled)
    assert len(pod_groups(api)) == 1
    assert len(g.queue) == 0
    assert logins == []


async def test_an_expired_login_logs_in_again() -> None:
    job = obj("batch/v1", "Job", "train")
    p = member("train-0", job)
    api = FakeApi(namespace(), job, p)
    api.failures[("GET", "/apis/batch/v1")] = [401]
    g, logins = grouper(api, queue=WorkQueue(base=0.01))
    g.offer(p)
    await run_until(
        g, lambda: L.POD_GROUP_LABEL in stored_pod(api, "train-0")["metadata"]["labels"]
    )
    assert logins == [1]


async def test_an_unexpected_error_does_not_stop_the_workers() -> None:
    job = obj("batch/v1", "Job", "train")
    p = member("train-0", job)
    api = FakeApi(namespace(), job, p)
    g, _ = grouper(api, queue=WorkQueue(base=0.01))
    original = g.reader.chain
    calls: list[int] = []

    async def broken_once(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug")
        return await original(*args)

    g.reader.chain = broken_once  # type: ignore[method-assign]
    g.offer(p)
    await run_until(
        g, lambda: L.POD_GROUP_LABEL in stored_pod(api, "train-0")["metadata"]["labels"]
    )


async def test_a_pod_that_no_longer_waits_is_dropped() -> None:
    job = obj("batch/v1", "Job", "train")
    p = member("train-0", job)
    g, _ = grouper(FakeApi(namespace(), job, p))
    g.offer(p)
    assert g.holds(p)
    bound = copy.deepcopy(p)
    bound["spec"]["nodeName"] = "n1"
    g.offer(bound)
    assert not g.holds(p)
    g.offer(p)
    g.forget(p)
    assert not g.holds(p)


# --------------------------------------------------------------------------------------------
# kopf: the handler on Pods


async def test_pod_events_reach_the_grouper(logins: list[int]) -> None:
    api = FakeApi(namespace())
    ctl = Controller(ControllerOptions(scheduler_name="other"), api_factory=lambda info: api)
    job = obj("batch/v1", "Job", "j")
    mine = member("a", job, scheduler="other")
    assert ctl.is_pod_to_group(body=mine)
    assert not ctl.is_pod_to_group(body=member("b", job))  # the default scheduler name's
    await ctl.on_pod_event(type="ADDED", body=mine)
    assert ctl.grouper.holds(mine)
    assert ctl.is_pod_to_group(body=mine | {"spec": {**mine["spec"], "nodeName": "n"}})
    await ctl.on_pod_event(type="DELETED", body=mine)
    assert not ctl.grouper.holds(mine)
    assert await ctl.api_client() is api
    assert await ctl.api_client() is api and logins == [1]


async def test_start_and_stop_the_grouper(logins: list[int]) -> None:
    job = obj("batch/v1", "Job", "train")
    p = member("train-0", job)
    api = FakeApi(namespace(), job, p)

    class FakeQueues:
        def __call__(self, info: kopf.ConnectionInfo) -> FakeQueues:
            return self

        async def __aenter__(self) -> FakeQueues:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

        async def get(self, name: str) -> Obj:
            return {"metadata": {"name": name}}

    closed: list[int] = []
    api.close = lambda: closed.append(1) or asyncio.sleep(0)  # type: ignore[attr-defined]
    ctl = Controller(ControllerOptions(), client_factory=FakeQueues(), api_factory=lambda info: api)  # type: ignore[arg-type]
    await ctl.start(logger=operator.logging.getLogger("test"))
    await ctl.on_pod_event(type=None, body=p)
    async with asyncio.timeout(5):
        while L.POD_GROUP_LABEL not in stored_pod(api, "train-0")["metadata"]["labels"]:
            await asyncio.sleep(0.005)
    grouping = ctl._grouping
    await ctl.stop()
    assert grouping is not None and grouping.cancelled()
    assert closed == [1]


async def test_an_owner_made_again_under_its_name_is_read_afresh() -> None:
    """A Job deleted and created again within the seconds its read is kept: the new Job's
    pods must not be taken for orphans of the old one."""
    reader = OwnerReader(clock=lambda: 0.0)
    old = obj("batch/v1", "Job", "train", parallelism=2)
    api = FakeApi(namespace(), old)
    chain, cut = await reader.chain(api, member("train-a", old))
    assert chain[0]["metadata"]["uid"] == "uid-Job-train" and cut == ""
    new = api.put(old | {"metadata": {**old["metadata"], "uid": "uid-new"}})
    chain, cut = await reader.chain(api, member("train-b", new))
    assert cut == "" and chain[0]["metadata"]["uid"] == "uid-new"
