"""ObjectStore.evict: the Eviction API and PodDisruptionBudgets."""

from __future__ import annotations

from typing import Any

import pytest
from sim_builders import condition, new_store, pdb, pod

from scheduler.api.errors import (
    ConflictError,
    InvalidObjectError,
    NotFoundError,
    TooManyRequestsError,
)
from scheduler.sim.store import ObjectStore


def _workload(store: ObjectStore, healthy: int, unready: int = 0, ns: str = "default") -> None:
    """``healthy`` Running+Ready pods h0.., then ``unready`` Running pods u0.., label app=a."""
    for i in range(healthy):
        store.create(
            pod(f"h{i}", ns=ns, node="n1", phase="Running", ready=True, labels={"app": "a"})
        )
    for i in range(unready):
        store.create(pod(f"u{i}", ns=ns, node="n1", phase="Running", labels={"app": "a"}))


EVICT_CASES: list[tuple[str, dict[str, Any] | None, int, int, str, bool]] = [
    # id, budget, healthy pods, unready pods, pod to evict, allowed
    ("no-budget", None, 3, 0, "h0", True),
    ("minAvailable-int-refuses", pdb(min_available=3), 3, 0, "h0", False),
    ("minAvailable-int-allows", pdb(min_available=2), 3, 0, "h0", True),
    ("minAvailable-pct-allows", pdb(min_available="50%"), 3, 0, "h0", True),
    ("minAvailable-pct-rounds-up", pdb(min_available="67%"), 3, 0, "h0", False),
    ("minAvailable-100pct", pdb(min_available="100%"), 3, 0, "h0", False),
    ("maxUnavailable-0", pdb(max_unavailable=0), 3, 0, "h0", False),
    ("maxUnavailable-1", pdb(max_unavailable=1), 3, 0, "h0", True),
    ("maxUnavailable-pct-rounds-up", pdb(max_unavailable="10%"), 3, 0, "h0", True),
    ("maxUnavailable-0pct", pdb(max_unavailable="0%"), 3, 0, "h0", False),
    ("maxUnavailable-counts-unready", pdb(max_unavailable=1), 2, 1, "h0", False),
    ("selector-does-not-match", pdb(match={"app": "other"}, min_available=3), 3, 0, "h0", True),
    ("null-selector-matches-nothing", pdb(null_selector=True, min_available=3), 3, 0, "h0", True),
    ("other-namespace", pdb(ns="elsewhere", min_available=3), 3, 0, "h0", True),
    ("unready-pod-healthy-budget", pdb(min_available=2), 2, 1, "u0", True),
    ("ready-pod-no-room", pdb(min_available=2), 2, 1, "h0", False),
    ("unready-pod-unhealthy-budget", pdb(min_available=3), 2, 1, "u0", False),
    ("unready-pod-always-allow", pdb(min_available=3, policy="AlwaysAllow"), 2, 1, "u0", True),
    ("neither-field", pdb(), 3, 0, "h0", True),
]


@pytest.mark.parametrize(
    ("budget", "healthy", "unready", "victim", "allowed"),
    [c[1:] for c in EVICT_CASES],
    ids=[c[0] for c in EVICT_CASES],
)
def test_eviction_and_budgets(
    budget: dict[str, Any] | None, healthy: int, unready: int, victim: str, allowed: bool
) -> None:
    store, _ = new_store()
    _workload(store, healthy, unready)
    if budget is not None:
        store.create(budget)
    rv = store.resource_version
    if not allowed:
        with pytest.raises(TooManyRequestsError) as info:
            store.evict("default", victim)
        assert "Cannot evict pod as it would violate the pod's disruption budget." in str(
            info.value
        )
        assert "budget" in str(info.value)
        assert info.value.name == "budget"
        assert store.resource_version == rv
        assert store.get("Pod", "default", victim)["metadata"].get("deletionTimestamp") is None
        return
    result = store.evict("default", victim)
    assert result["metadata"]["deletionTimestamp"]
    assert result["metadata"]["deletionGracePeriodSeconds"] == 30
    assert condition(result, "DisruptionTarget") == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("victim", "events", "gone"),
    [
        (pod("v", labels={"app": "a"}), ["MODIFIED", "DELETED"], True),
        (pod("v", node="n1", phase="Succeeded", labels={"app": "a"}), ["DELETED"], True),
        (pod("v", node="n1", labels={"app": "a"}), ["MODIFIED", "MODIFIED"], False),
    ],
    ids=["unbound-pending", "finished", "bound-pending"],
)
def test_pods_evicted_without_looking_at_budgets(
    victim: dict[str, Any], events: list[str], gone: bool
) -> None:
    store, _ = new_store()
    _workload(store, 2)
    store.create(pdb(min_available="100%"))
    store.create(victim)
    seen: list[str] = []
    store.subscribe(lambda ev: seen.append(ev.type), kinds=["Pod"])
    store.evict("default", "v")
    assert seen == events
    assert (store.try_get("Pod", "default", "v") is None) is gone


def test_terminating_pod_can_be_evicted_again_with_shorter_grace() -> None:
    store, _ = new_store()
    _workload(store, 2)
    store.create(pdb(min_available=1))
    store.evict("default", "h0")
    store.create(pdb("strict", min_available="100%"))
    again = store.evict("default", "h0", grace_period_seconds=5)
    assert again["metadata"]["deletionGracePeriodSeconds"] == 5
    assert store.evict("default", "h0", grace_period_seconds=0)["metadata"]["name"] == "h0"
    assert store.try_get("Pod", "default", "h0") is None


def test_evicted_pod_no_longer_counts_as_healthy() -> None:
    store, _ = new_store()
    _workload(store, 3)
    store.create(pdb(max_unavailable=1))
    store.evict("default", "h0")
    with pytest.raises(TooManyRequestsError):
        store.evict("default", "h1")


def test_every_matching_budget_must_allow() -> None:
    store, _ = new_store()
    _workload(store, 3)
    store.create(pdb("loose", min_available=1))
    store.create(pdb("tight", min_available=3))
    with pytest.raises(TooManyRequestsError, match="tight"):
        store.evict("default", "h0")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"uid": "someone-else"}, ConflictError),
        ({"name": "missing"}, NotFoundError),
    ],
    ids=["uid-precondition", "not-found"],
)
def test_evict_errors(kwargs: dict[str, Any], error: type[Exception]) -> None:
    store, _ = new_store()
    _workload(store, 1)
    name = kwargs.pop("name", "h0")
    with pytest.raises(error):
        store.evict("default", name, **kwargs)


@pytest.mark.parametrize(
    "budget",
    [pdb(min_available="lots"), pdb(max_unavailable="x%"), pdb(min_available=True)],
    ids=["word", "bad-percent", "bool"],
)
def test_malformed_budget_is_invalid(budget: dict[str, Any]) -> None:
    store, _ = new_store()
    _workload(store, 2)
    store.create(budget)
    with pytest.raises(InvalidObjectError, match="PodDisruptionBudget default/budget"):
        store.evict("default", "h0")
