"""The cache notes the pods placed since the loop last took its notes (issue 37): news for
parked pods whose required pod affinity or hard spread constraints wait for such a pod."""

from __future__ import annotations

from scheduler.cache import placed_pods
from scheduler.framework.awaited_pods import PlacedPod
from tests.builders import cache_with, node, pod


def test_pods_given_a_node_are_noted_once_and_pending_ones_not() -> None:
    cache = cache_with(node("n0"), pod("running", node="n0", labels={"app": "a"}), pod("waiting"))
    assert cache.take_placed_pods() == (PlacedPod("default", {"app": "a"}),)
    assert cache.take_placed_pods() == ()
    cache.ledger.assume_bind("default/waiting", "n0")  # a bind of ours counts from the assumption
    assert cache.take_placed_pods() == (PlacedPod("default", {}),)


def test_a_pod_bound_by_another_scheduler_is_noted() -> None:
    other = pod("other", scheduler="default-scheduler", labels={"app": "b"})
    cache = cache_with(node("n0"), other)
    cache.take_placed_pods()
    cache.handle("Pod", "MODIFIED", {**other, "spec": {**other["spec"], "nodeName": "n0"}})
    assert cache.take_placed_pods() == (PlacedPod("default", {"app": "b"}),)


def test_a_pod_relabelled_on_its_node_is_noted_with_its_labels_before() -> None:
    running = pod("running", node="n0", labels={"app": "a"})
    cache = cache_with(node("n0"), running)
    cache.take_placed_pods()
    meta = {**running["metadata"], "labels": {"app": "z"}}
    cache.handle("Pod", "MODIFIED", {**running, "metadata": meta})
    assert cache.take_placed_pods() == (PlacedPod("default", {"app": "z"}, {"app": "a"}),)
    cache.handle("Pod", "MODIFIED", {**running, "metadata": meta})  # the same again
    assert cache.take_placed_pods() == ()


def test_past_the_limit_the_notes_say_too_many_to_tell() -> None:
    notes = placed_pods.PlacedPods()
    for i in range(placed_pods.LIMIT + 1):
        notes.note("default", {"i": str(i)})
    assert notes.take() is None
    assert notes.take() == ()
