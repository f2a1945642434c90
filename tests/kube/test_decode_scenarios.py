"""The typed decoder keeps every field the cache reads: the pods and nodes of every
scenario of the test suite, put into a cache as the scenario holds them and into another
as :mod:`scheduler.kube.decode` decodes them from JSON, give the same tasks and nodes.

A reader of a field the decoder skips (a container's image, a pod's addresses...) makes
this fail for the scenarios that set it: add the field to the decoder's TypedDicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api.errors import SluiceError
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo
from scheduler.cache import SchedulerCache
from scheduler.kube.decode import decode_list
from scheduler.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(
    p
    for folder in ("scenarios", "conformance")
    for p in ROOT.joinpath(folder).rglob("*.yaml")
    if p.name != "index.yaml"
)


def _decoded(obj: dict[str, Any]) -> dict[str, Any]:
    page = json.dumps({"metadata": {}, "items": [obj]}, default=str).encode()
    [item], _ = decode_list(page, str(obj["kind"]))
    return item


def _task(t: TaskInfo) -> tuple[Any, ...]:
    return tuple(getattr(t, f) for f in TaskInfo.__dataclass_fields__)


def _node(n: NodeInfo) -> tuple[Any, ...]:
    return (n.name, n.allocatable, dict(n.labels), n.taints, n.unschedulable, n.ready, n.used)


def _load(path: Path, tmp_path: Path) -> Any:
    """The scenario at ``path`` without its Expectation document (as the scenario tests
    run it), or None when it does not load (a test of refusals)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    plain = tmp_path / path.name
    plain.write_text(yaml.safe_dump_all([d for d in docs if d.get("kind") != "Expectation"]))
    try:
        return load_scenario([str(plain)])
    except SluiceError:
        return None


def _caches(path: Path, tmp_path: Path) -> tuple[SchedulerCache, SchedulerCache, int]:
    scenario = _load(path, tmp_path)
    if scenario is None:
        pytest.skip("not a loadable scenario (a test of refusals)")
    whole, decoded = SchedulerCache(), SchedulerCache()
    typed = 0
    for arrival in scenario.arrivals:
        obj = json.loads(json.dumps(arrival.obj, default=str))
        kind = str(obj["kind"]) if obj.get("apiVersion") in ("v1", None) else ""
        key = kind if kind in ("Pod", "Node") else _key(obj)
        whole.handle(key, "ADDED", obj)
        if kind in ("Pod", "Node"):
            typed += 1
            decoded.handle(key, "ADDED", _decoded(obj))
        else:
            decoded.handle(key, "ADDED", obj)
    return whole, decoded, typed


def _key(obj: dict[str, Any]) -> str:
    from scheduler.api.group_apis import kind_key

    return kind_key(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))


@pytest.mark.parametrize("path", SCENARIOS, ids=[str(p.relative_to(ROOT)) for p in SCENARIOS])
def test_decoded_objects_make_the_same_cache(path: Path, tmp_path: Path) -> None:
    whole, decoded, typed = _caches(path, tmp_path)
    if not typed:
        pytest.skip("no pod or node")
    assert {u: _task(t) for u, t in decoded.tasks.items()} == {
        u: _task(t) for u, t in whole.tasks.items()
    }
    assert {n: _node(x) for n, x in decoded.nodes.items()} == {
        n: _node(x) for n, x in whole.nodes.items()
    }
    assert decoded.rejected == whole.rejected


def test_the_suite_covers_many_pods(tmp_path: Path) -> None:
    """The comparison above is only as good as the pods it sees."""
    pods = 0
    for path in SCENARIOS:
        scenario = _load(path, tmp_path)
        if scenario is not None:
            pods += sum(1 for a in scenario.arrivals if a.obj.get("kind") == "Pod")
    assert pods > 1000
