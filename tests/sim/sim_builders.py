"""Small builders for the tests of scheduler.sim (not a test module)."""

from __future__ import annotations

from typing import Any

from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import DEFAULT_EPOCH


class ManualWall:
    """A wall clock the test moves by hand."""

    def __init__(self, start: float = DEFAULT_EPOCH) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def new_store(**kwargs: Any) -> tuple[ObjectStore, ManualWall]:
    wall = ManualWall()
    return ObjectStore(wall, **kwargs), wall


def pod(
    name: str = "p",
    ns: str = "default",
    *,
    node: str | None = None,
    phase: str | None = None,
    ready: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    grace: int | None = None,
    gates: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"schedulerName": "sluice", "containers": [{"name": "main"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    if status:
        obj["status"] = status
    return obj


def node(name: str = "n1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def pdb(
    name: str = "budget",
    ns: str = "default",
    *,
    match: dict[str, str] | None = None,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    policy: str | None = None,
    null_selector: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if not null_selector:
        spec["selector"] = {"matchLabels": dict(match or {"app": "a"})}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def obj(kind: str, name: str, ns: str | None = "default", **fields: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    return {"kind": kind, "metadata": meta, **fields}


def condition(o: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (o.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None
