"""PodGroups and Queues of other schedulers' APIs in the cache: which job each pod joins
as groups come and go, queues of one name in two APIs, relists (scheduler.cache)."""

from __future__ import annotations

from scheduler.api import labels as L
from scheduler.api.group_apis import KUBERNETES, SCHEDULER_PLUGINS, VOLCANO
from scheduler.api.membership import COSCHEDULING_POD_GROUP_LABEL
from tests.builders import (
    api_pod_group,
    cache_with,
    key_of,
    pod,
    pod_group,
    queue,
    volcano_queue,
)

ANNOTATED = pod("w", annotations={L.POD_GROUP_ANNOTATION: "g"})
GANG = {"schedulingPolicy": {"gang": {"minCount": 1}}}
BASIC = {"schedulingPolicy": {"basic": {}}}


def _job_of(cache: object, name: str = "w") -> str:
    snap = cache.snapshot()  # type: ignore[attr-defined]
    return next(j.uid for j in snap.jobs.values() for t in j.tasks.values() if t.name == name)


def test_volcano_annotation_joins_a_sluice_group_until_a_volcano_one_appears() -> None:
    cache = cache_with(pod_group("g"), ANNOTATED)
    assert _job_of(cache) == "default/g"
    vg = api_pod_group(VOLCANO, "g", {"minMember": 1})
    cache.handle(key_of(vg), "ADDED", vg)
    assert _job_of(cache) == "volcano:default/g"
    assert set(cache.snapshot().jobs["volcano:default/g"].tasks) == {"default/w"}
    cache.handle(key_of(vg), "DELETED", vg)
    assert _job_of(cache) == "default/g"


def test_a_pod_naming_a_missing_group_of_another_api_waits_with_a_problem() -> None:
    cache = cache_with(ANNOTATED)
    job = cache.snapshot().jobs["volcano:default/g"]
    assert job.problem == "pod group volcano:default/g does not exist"


def test_basic_group_members_are_alone_and_rejoin_when_it_becomes_a_gang() -> None:
    member = pod("w", schedulingGroup={"podGroupName": "g"})
    basic = api_pod_group(KUBERNETES, "g", BASIC)
    cache = cache_with(basic, member)
    job = cache.snapshot().jobs["default/w"]
    assert (job.has_pod_group, job.problem) == (False, "")
    assert cache.basic_groups == {"kubernetes:default/g"}
    assert cache.group_members("kubernetes:default/g") == ["default/w"]
    cache.handle(key_of(basic), "DELETED", basic)
    assert cache.snapshot().jobs["kubernetes:default/g"].problem == (
        "pod group kubernetes:default/g does not exist"
    )
    gang = api_pod_group(KUBERNETES, "g", GANG)
    cache.handle(key_of(gang), "ADDED", gang)
    assert _job_of(cache) == "kubernetes:default/g"
    assert not cache.snapshot().jobs["kubernetes:default/g"].problem


def test_groups_of_one_name_in_every_api_are_distinct_jobs() -> None:
    pods = [
        pod("s", group="g"),
        pod("v", annotations={L.POD_GROUP_ANNOTATION: "g"}),
        pod("x", labels={COSCHEDULING_POD_GROUP_LABEL: "g"}),
        pod("k", schedulingGroup={"podGroupName": "g"}),
    ]
    cache = cache_with(
        pod_group("g"),
        api_pod_group(VOLCANO, "g", {"minMember": 1}),
        api_pod_group(SCHEDULER_PLUGINS, "g", {"minMember": 1}),
        api_pod_group(KUBERNETES, "g", GANG),
        *pods,
    )
    jobs = cache.snapshot().jobs
    assert {uid: sorted(t.name for t in j.tasks.values()) for uid, j in jobs.items()} == {
        "default/g": ["s"],
        "volcano:default/g": ["v"],
        "scheduler-plugins:default/g": ["x"],
        "kubernetes:default/g": ["k"],
    }


def test_a_relist_drops_the_groups_of_one_api_only() -> None:
    vg = api_pod_group(VOLCANO, "g", {"minMember": 1})
    cache = cache_with(pod_group("g"), vg)
    cache.replace(key_of(vg), [])
    assert set(cache.pod_groups) == {"default/g"}


def test_queues_of_one_name_sluice_first_and_the_other_told() -> None:
    sluice = queue("team", weight=2)
    vq = volcano_queue("team", {"weight": 5})
    cache = cache_with(vq, sluice)
    assert cache.queues["team"].weight == 2
    assert cache.adjusted["Queue team (scheduling.volcano.sh/v1beta1)"] == (
        "Queue team (scheduling.volcano.sh/v1beta1): not used: Sluice's is"
    )
    cache.handle("Queue", "DELETED", sluice)
    assert cache.queues["team"].weight == 5
    assert "Queue team (scheduling.volcano.sh/v1beta1)" not in cache.adjusted
    assert cache.queue_objects["team"]["apiVersion"] == VOLCANO.api_version
    cache.handle(key_of(vq), "DELETED", vq)
    assert "team" not in cache.queues


def test_volcano_root_queue_is_the_root() -> None:
    cache = cache_with(volcano_queue("root"), volcano_queue("eng", {"parent": "root"}))
    assert "root" not in cache.queues
    assert cache.queues["eng"].parent == ""
    assert not cache.adjusted  # nothing of it changed: it is the root, as in Volcano
    assert set(cache.queue_sources["root"]) == {VOLCANO.queue_key}  # its status is written


def test_volcano_task_and_preemptable_annotations_reach_the_task() -> None:
    cache = cache_with(
        pod("w", annotations={"volcano.sh/task-spec": "ps", "volcano.sh/preemptable": "false"})
    )
    task = cache.tasks["default/w"]
    assert (task.role, task.preemptable) == ("ps", False)


def test_a_group_of_another_schedulers_pods_is_not_sluices() -> None:
    theirs = pod("t", scheduler="default-scheduler", schedulingGroup={"podGroupName": "g"})
    ours = pod("o", schedulingGroup={"podGroupName": "h"})
    cache = cache_with(
        api_pod_group(KUBERNETES, "g", GANG),
        api_pod_group(KUBERNETES, "h", GANG),
        api_pod_group(VOLCANO, "empty", {"minMember": 2}),
        theirs,
        ours,
    )
    jobs = cache.snapshot().jobs
    assert "kubernetes:default/g" not in jobs  # kube-scheduler's: not admitted, no status
    assert "kubernetes:default/h" in jobs
    assert "volcano:default/empty" in jobs  # no pods yet: admitted, its pods come then
