"""One PodDisruptionBudget rule (issue 9 point 5): the cache, which ranks preemption
victims by the budgets their eviction breaks, and the embedded API server, which refuses
such an eviction, give the same answer for every budget and pod state."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.actions.victims import pdb_violations
from scheduler.api.errors import TooManyRequestsError
from scheduler.cache.snapshot_builder import budgets_of
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualClock
from tests.builders import cache_with

Obj = dict[str, Any]


def pod(name: str, *, ready: bool = True, phase: str = "Running") -> Obj:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "a"}},
        "spec": {
            "schedulerName": "sluice",
            "nodeName": "n1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def budget(**spec: Any) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec},
    }


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "20"}},
}

CASES = [
    pytest.param({"minAvailable": 2}, [True, True, True], "p0", id="minAvailable-room-for-one"),
    pytest.param({"minAvailable": 3}, [True, True, True], "p0", id="minAvailable-none"),
    pytest.param({"maxUnavailable": 1}, [True, True, False], "p0", id="one-already-unhealthy"),
    pytest.param({"maxUnavailable": 1}, [True, True, False], "p2", id="evict-the-unhealthy"),
    pytest.param({"minAvailable": 3}, [True, True, False], "p2", id="unhealthy-budget-short"),
    pytest.param(
        {"minAvailable": 3, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
        [True, True, False],
        "p2",
        id="always-allow",
    ),
    pytest.param({"minAvailable": "50%"}, [True, True, True, True], "p0", id="percent"),
    pytest.param({"minAvailable": 0}, [False], "p0", id="desired-zero-none-healthy"),
]


@pytest.mark.parametrize(("spec", "ready", "victim"), CASES)
def test_cache_and_api_server_agree(spec: Obj, ready: list[bool], victim: str) -> None:
    pods = [pod(f"p{i}", ready=r) for i, r in enumerate(ready)]
    store = ObjectStore(VirtualClock().wall)
    for obj in [NODE, budget(**spec), *pods]:
        store.create(obj)
    try:
        store.evict("default", victim)
        refused = False
    except TooManyRequestsError:
        refused = True

    cache = cache_with(NODE, *pods)
    budgets = budgets_of({"default/b": budget(**spec)}, cache.tasks.values())
    task = next(t for t in cache.tasks.values() if t.name == victim)
    [violates] = pdb_violations([task], budgets)
    assert violates == refused, (spec, ready, victim, budgets)
