"""Pods made by a controller wait for the pod grouper: the reason their job carries, the
configuration switch, and the news the cache gives when the grouper has acted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.api.owners import grouper_wait_reason
from scheduler.cache import SchedulerCache
from scheduler.config import SchedulerConfiguration
from tests.builders import node, pod, pod_group, queue
from tests.simulated import simulate

Obj = dict[str, Any]
JOB_REF = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "name": "train",
    "uid": "u1",
    "controller": True,
}


def job_pod(name: str, **kw: Any) -> Obj:
    p = pod(name, cpu="1", memory="1Mi", **kw)
    p["metadata"]["ownerReferences"] = [dict(JOB_REF)]
    return p


def cache_of(*objects: Obj, wait: bool = True) -> SchedulerCache:
    cache = SchedulerCache(wait_for_pod_grouper=wait)
    cache.handle("Queue", "ADDED", queue(L.DEFAULT_QUEUE))
    for obj in objects:
        cache.handle(obj["kind"], "ADDED", obj)
    return cache


def test_the_waiting_pod_is_a_job_with_the_reason() -> None:
    cache = cache_of(node("n1"), job_pod("train-0"))
    job = cache.snapshot().jobs["default/train-0"]
    assert job.problem == grouper_wait_reason("Job default/train")
    assert "waiting for sluice controller" in job.problem
    assert cache.tasks["default/train-0"].awaits_grouper == "Job default/train"


def test_without_the_switch_nothing_waits() -> None:
    cache = cache_of(node("n1"), job_pod("train-0"), wait=False)
    assert cache.snapshot().jobs["default/train-0"].problem == ""
    assert cache.tasks["default/train-0"].awaits_grouper == ""


def test_pods_of_other_schedulers_never_wait() -> None:
    cache = cache_of(job_pod("other", scheduler="default-scheduler"))
    assert cache.tasks["default/other"].awaits_grouper == ""


@pytest.mark.parametrize(
    ("change", "job"),
    [
        pytest.param(
            {"labels": {L.POD_GROUP_LABEL: "job-train"}}, "default/job-train", id="grouped"
        ),
        pytest.param(
            {"annotations": {L.GANG_OF_ONE_ANNOTATION: "why"}}, "default/train-0", id="left-alone"
        ),
    ],
)
def test_the_grouper_acting_is_news_for_the_job(change: dict[str, Obj], job: str) -> None:
    """A parked job is let go by news of its own: the grouper's label or annotation, written
    after the pod was created, must be such news, or the pod would wait up to 5 minutes."""
    first = job_pod("train-0")
    cache = cache_of(node("n1"), first)
    cache.take_fresh_jobs()
    generation = cache.generation
    woken: list[int] = []
    cache.on_change = lambda: woken.append(1)
    second = copy.deepcopy(first)
    for key, values in change.items():
        second["metadata"].setdefault(key, {}).update(values)
    cache.handle("Pod", "MODIFIED", second)
    assert cache.take_fresh_jobs() == {job}
    assert woken == [1]
    assert cache.generation == generation  # news for its own job only
    assert cache.tasks["default/train-0"].awaits_grouper == ""


def test_an_unrelated_update_is_no_news() -> None:
    first = job_pod("train-0")
    cache = cache_of(node("n1"), first)
    cache.take_fresh_jobs()
    second = copy.deepcopy(first)
    second["metadata"]["labels"]["x"] = "y"
    cache.handle("Pod", "MODIFIED", second)
    assert cache.take_fresh_jobs() == set()


def grouped(p: Obj, group: str) -> Obj:
    p["metadata"]["labels"][L.POD_GROUP_LABEL] = group
    return p


@pytest.mark.parametrize(
    ("config", "pods", "bound"),
    [
        pytest.param(SchedulerConfiguration(), [job_pod("a"), job_pod("b")], set(), id="waiting"),
        pytest.param(
            SchedulerConfiguration(wait_for_pod_grouper=False),
            [job_pod("a"), job_pod("b")],
            {"default/a", "default/b"},
            id="switched-off",
        ),
        pytest.param(
            SchedulerConfiguration(),
            [grouped(job_pod("a"), "g"), grouped(job_pod("b"), "g")],
            {"default/a", "default/b"},
            id="grouped",
        ),
    ],
)
def test_no_pod_of_a_controller_starts_before_it_is_grouped(
    config: SchedulerConfiguration, pods: list[Obj], bound: set[str]
) -> None:
    objects = [node("n1", cpu="4"), pod_group("g", min_member=2), *pods]
    sim = simulate(objects, config=config)
    assert set(sim.result.bindings) == bound
    for key, reason in sim.result.pending.items():
        assert reason == grouper_wait_reason("Job default/train"), key
