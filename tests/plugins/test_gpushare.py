"""Tests of scheduler.plugins.gpushare: device choice, read-back, filter reasons, rollback,
the index written at bind, and the preemption case of issue 3 point 3."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.resource import GPU
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.config import PluginConfig, SchedulerConfiguration, parse_configuration
from scheduler.framework.effects import Bind, Evict, Nominate, parts
from scheduler.framework.extension_points import NODE_SCORER, ON_PLACE
from scheduler.framework.registry import PluginSpec
from scheduler.framework.session import Session, open_session
from scheduler.plugins.gpu_devices import Demand, binpack, fallback
from scheduler.plugins.gpushare import (
    GPU_MEMORY_NOT_FREE,
    GPU_TOO_SMALL,
    WHOLE_GPUS_NOT_FREE,
    GpuSharePlugin,
    invalid_memory,
)
from tests.builders import cache_with, node, pod, session_with, task_of

Obj = dict[str, Any]
PLUGINS = [PluginConfig("predicates"), PluginConfig("gpushare")]
GI = 1 << 30

# --------------------------------------------------------------------------------------------
# Builders


def gpu_node(name: str, gpus: int = 2, memory: str | None = "8Gi") -> Obj:
    labels = {L.GPU_MEMORY_LABEL: memory} if memory is not None else {}
    return node(name, cpu="16", memory="64Gi", gpus=gpus, labels=labels)


def share(
    name: str, memory: str, *, node: str | None = None, index: str | None = None, priority: int = 0
) -> Obj:
    """A pod asking ``memory`` of one device; ``index`` is its gpu-index annotation."""
    raw = pod(name, node=node, priority=priority)
    annotations = {L.GPU_MEMORY_ANNOTATION: memory}
    if index is not None:
        annotations[L.GPU_INDEX_ANNOTATION] = index
    raw["metadata"]["annotations"] = annotations
    return raw


def whole(
    name: str, gpus: int, *, node: str | None = None, index: str | None = None, priority: int = 0
) -> Obj:
    """A pod asking ``gpus`` whole devices."""
    container = {
        "name": "main",
        "image": "busybox",
        "resources": {"requests": {"cpu": "100m", GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
    }
    raw = pod(name, node=node, priority=priority, containers=[container])
    if index is not None:
        raw["metadata"]["annotations"] = {L.GPU_INDEX_ANNOTATION: index}
    return raw


def open_(nodes: Sequence[Obj], pods: Sequence[Obj]) -> Session:
    return session_with(nodes, pods, PLUGINS)


def plugin(session: Session) -> GpuSharePlugin:
    for _, p in session.plugins:
        if isinstance(p, GpuSharePlugin):
            return p
    raise LookupError("gpushare is not configured")


def held(session: Session, name: str) -> tuple[int, ...] | None:
    return plugin(session).held(task_of(session, name).uid)


def index_of(session: Session, name: str) -> str | None:
    task = task_of(session, name)
    if not task.node_name:
        return None
    return session.bind_annotations(task, task.node_name).get(L.GPU_INDEX_ANNOTATION)


def feasible(session: Session, name: str, *, releasing: bool = False) -> list[str]:
    fit = session.fit(task_of(session, name), releasing=releasing)
    return [session.table.nodes[i].name for i in np.flatnonzero(fit.feasible)]


def explain(session: Session, name: str) -> str:
    return session.fit(task_of(session, name)).explain()


def dump(session: Session) -> tuple[Any, ...]:
    """The plugin's device state, what every task holds, and the annotations to write."""
    p = plugin(session)
    holdings = {t.uid: p.held(t.uid) for job in session.jobs.values() for t in job.tasks.values()}
    annotations = p.annotations()
    return p.usage(), holdings, annotations


# --------------------------------------------------------------------------------------------
# What a pod asks


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (pod("plain"), None),
        (share("s", "4Gi"), Demand(memory=4 * GI)),
        (share("s", "512Mi"), Demand(memory=512 << 20)),
        (share("s", "0"), None),
        (share("s", "lots"), Demand(invalid=invalid_memory("lots"))),
        (whole("w", 2), Demand(whole=2)),
    ],
    ids=["no-gpu", "share", "share-mebibytes", "zero-share", "bad-quantity", "whole"],
)
def test_demand(raw: Obj, expected: Demand | None) -> None:
    session = open_([gpu_node("g")], [raw])
    task = task_of(session, raw["metadata"]["name"])
    assert plugin(session).demand(task) == expected


def test_pod_without_gpu_passes_and_gpu_less_cluster_registers_no_handlers() -> None:
    session = open_([node("cpu")], [pod("plain"), share("s", "1Gi"), whole("w", 1)])
    assert plugin(session).filter(task_of(session, "plain"), session.table, False) == []
    assert "gpushare" not in session.hooks.plugins_of(ON_PLACE)
    assert "gpushare" not in session.hooks.plugins_of(NODE_SCORER)
    assert explain(session, "s") == f"0/1 nodes are available: 1 {GPU_TOO_SMALL}."
    assert feasible(session, "w") == []  # predicates: Insufficient nvidia.com/gpu


# --------------------------------------------------------------------------------------------
# Filter reasons


@pytest.mark.parametrize(
    ("nodes", "pods", "name", "reasons", "candidates"),
    [
        ([gpu_node("g")], [share("s", "16Gi")], "s", {GPU_TOO_SMALL: 1}, 0),
        (
            [gpu_node("g")],
            [
                share("a", "4Gi", node="g", index="0"),
                share("b", "4Gi", node="g", index="1"),
                share("s", "6Gi"),
            ],
            "s",
            {GPU_MEMORY_NOT_FREE: 1},
            1,
        ),
        ([gpu_node("g", memory=None)], [share("s", "1Gi")], "s", {GPU_TOO_SMALL: 1}, 0),
        ([gpu_node("g", memory="lots")], [share("s", "1Gi")], "s", {GPU_TOO_SMALL: 1}, 0),
        (
            [gpu_node("g", gpus=2)],
            [share("a", "1Gi", node="g", index="1"), whole("w", 2)],
            "w",
            {WHOLE_GPUS_NOT_FREE: 1},
            1,
        ),
        (
            [gpu_node("g", memory="4Gi"), gpu_node("h", memory="16Gi"), node("cpu")],
            [share("s", "8Gi")],
            "s",
            {GPU_TOO_SMALL: 2},
            0,
        ),
        ([gpu_node("g")], [share("s", "bad")], "s", {invalid_memory("bad"): 1}, 0),
    ],
    ids=[
        "share-larger-than-any-device",
        "no-device-with-enough-free-memory",
        "devices-of-unknown-memory",
        "unreadable-node-label",
        "whole-devices-taken-by-a-share",
        "only-the-big-node-fits",
        "unreadable-pod-annotation",
    ],
)
def test_rejections(
    nodes: list[Obj], pods: list[Obj], name: str, reasons: dict[str, int], candidates: int
) -> None:
    session = open_(nodes, pods)
    fit = session.fit(task_of(session, name))
    assert dict(fit.reasons()) == reasons
    assert int(fit.candidates().sum()) == candidates


def test_explain_counts_nodes_per_reason() -> None:
    nodes = [gpu_node("g1"), gpu_node("g2"), gpu_node("small", memory="2Gi")]
    pods = [
        share("a", "6Gi", node="g1", index="0"),
        share("b", "6Gi", node="g1", index="1"),
        share("s", "4Gi"),
    ]
    session = open_(nodes, pods)
    assert feasible(session, "s") == ["g2"]
    assert explain(session, "s") == (
        f"1/3 nodes are available: 1 {GPU_MEMORY_NOT_FREE}, 1 {GPU_TOO_SMALL}."
    )


def test_whole_gpu_needs_devices_free_of_shares() -> None:
    pods = [share("a", "1Gi", node="g", index="0"), whole("w1", 1), whole("w2", 2)]
    session = open_([gpu_node("g", gpus=2)], pods)
    assert feasible(session, "w1") == ["g"]
    assert explain(session, "w2") == f"0/1 nodes are available: 1 {WHOLE_GPUS_NOT_FREE}."


# --------------------------------------------------------------------------------------------
# Choosing devices


def test_shares_binpack_onto_the_same_device() -> None:
    pods = [share("s1", "2Gi"), share("s2", "2Gi"), share("s3", "6Gi"), share("s4", "4Gi")]
    session = open_([gpu_node("g")], pods)
    with session.statement() as stmt:
        for name in ("s1", "s2", "s3", "s4"):
            stmt.allocate(task_of(session, name), "g")
        stmt.commit()
    assert [held(session, n) for n in ("s1", "s2", "s3", "s4")] == [(0,), (0,), (1,), (0,)]
    assert plugin(session).usage() == {"g": [(8 * GI, 0, 3), (6 * GI, 0, 1)]}


def test_share_goes_to_the_most_used_device_that_fits() -> None:
    pods = [
        share("a", "2Gi", node="g", index="0"),
        share("b", "5Gi", node="g", index="1"),
        share("c", "3Gi", node="g", index="2"),
        share("s", "3Gi"),
    ]
    session = open_([gpu_node("g", gpus=4)], pods)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "s"), "g")
        stmt.commit()
    assert held(session, "s") == (1,)  # 5Gi used, 3Gi free: the fullest that still fits


def test_whole_gpus_get_distinct_lowest_free_indexes() -> None:
    pods = [
        share("a", "1Gi", node="g", index="1"),
        whole("w2", 2),
        whole("w1", 1),
        whole("w-extra", 1),
    ]
    session = open_([gpu_node("g", gpus=4)], pods)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "w2"), "g")
        stmt.allocate(task_of(session, "w1"), "g")
        effects = stmt.commit()
    assert held(session, "w2") == (0, 2)
    assert held(session, "w1") == (3,)
    assert {e.task.name: dict(e.annotations) for e in effects if isinstance(e, Bind)} == {
        "w2": {L.GPU_INDEX_ANNOTATION: "0,2"},
        "w1": {L.GPU_INDEX_ANNOTATION: "3"},
    }
    # Predicates still sees one nvidia.com/gpu free; the plugin knows device 1 is shared.
    assert explain(session, "w-extra") == f"0/1 nodes are available: 1 {WHOLE_GPUS_NOT_FREE}."


def test_index_annotation_appears_in_the_bind_effect() -> None:
    session = open_([gpu_node("g")], [share("a", "4Gi", node="g", index="1"), share("s", "2Gi")])
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "s"), "g")
        effects = stmt.commit()
    (bind,) = [e for e in effects if isinstance(e, Bind)]
    assert bind.task.name == "s"
    assert dict(bind.annotations) == {L.GPU_INDEX_ANNOTATION: "1"}


def test_stale_index_of_a_pending_pod_is_replaced() -> None:
    pods = [share("a", "6Gi", node="g", index="0"), share("s", "4Gi", index="0")]
    session = open_([gpu_node("g")], pods)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "s"), "g")
        stmt.commit()
    assert held(session, "s") == (1,)
    assert index_of(session, "s") == "1"


# --------------------------------------------------------------------------------------------
# Reading back what runs


def test_read_back_of_running_pods() -> None:
    pods = [
        share("a", "4Gi", node="g", index="2"),
        whole("w", 2, node="g", index="3,0"),
        share("unannotated", "6Gi", node="g"),
        share("bad-index", "2Gi", node="g", index="9"),
        whole("w-no-index", 1, node="g"),
    ]
    session = open_([gpu_node("g", gpus=4)], pods)
    assert held(session, "a") == (2,)
    assert held(session, "w") == (0, 3)
    # Unannotated pods go, in (creation, name) order, to the lowest indexes that fit:
    # bad-index (2Gi) fits on device 1, unannotated (6Gi) too; w-no-index finds no free device.
    assert held(session, "bad-index") == (1,)
    assert held(session, "unannotated") == (1,)
    # Over-committed, deterministically: the least held device, lowest index first.
    assert held(session, "w-no-index") == (0,)
    assert plugin(session).annotations() == {}  # nothing to write on running pods
    usage = plugin(session).usage()["g"]
    assert usage == [(0, 2, 2), (8 * GI, 0, 2), (4 * GI, 0, 1), (0, 1, 1)]


def test_pods_on_nodes_without_devices_are_ignored() -> None:
    session = open_([node("cpu"), gpu_node("g")], [share("a", "4Gi", node="cpu", index="0")])
    assert held(session, "a") is None
    assert plugin(session).usage() == {"g": [(0, 0, 0), (0, 0, 0)]}


# --------------------------------------------------------------------------------------------
# Nominations and releasing room


def test_nominated_share_keeps_its_device_from_lower_priority_only() -> None:
    pods = [
        share("nominee", "8Gi", priority=10),
        share("low", "4Gi", priority=5),
        share("equal", "4Gi", priority=10),
        share("high", "4Gi", priority=20),
    ]
    session = open_([gpu_node("g", gpus=1)], pods)
    with session.statement() as stmt:
        stmt.pipeline(task_of(session, "nominee"), "g")
        assert held(session, "nominee") == (0,)
        assert feasible(session, "nominee") == ["g"]  # its own holding does not block it
        assert feasible(session, "low") == []
        assert feasible(session, "equal") == []
        assert feasible(session, "high") == ["g"]


def test_releasing_room_counts_only_in_the_preemptors_view() -> None:
    pods = [share("victim", "6Gi", node="g", index="0"), share("s", "4Gi")]
    session = open_([gpu_node("g", gpus=1)], pods)
    with session.statement() as stmt:
        stmt.evict(task_of(session, "victim"), "test")
        assert held(session, "victim") is None
        assert feasible(session, "s") == []
        assert explain(session, "s") == f"0/1 nodes are available: 1 {GPU_MEMORY_NOT_FREE}."
        assert feasible(session, "s", releasing=True) == ["g"]
        # A nominated pod waits for the releasing room: it takes the device being freed.
        stmt.pipeline(task_of(session, "s"), "g")
        assert held(session, "s") == (0,)


def test_releasing_pods_at_open_occupy_their_devices() -> None:
    objects = [gpu_node("g", gpus=1), share("victim", "6Gi", node="g", index="0")]
    cache = cache_with(*objects, share("s", "4Gi"))
    cache.ledger.assume_evict("default/victim")
    session = open_session(cache.snapshot(), app.resolve(_config(["gpushare"])))
    assert held(session, "victim") is None
    assert feasible(session, "s") == []
    assert feasible(session, "s", releasing=True) == ["g"]


# --------------------------------------------------------------------------------------------
# Rollback


def test_rollback_restores_device_state_exactly() -> None:
    pods = [
        share("a", "4Gi", node="g", index="0"),
        share("b", "2Gi", node="g", index="1"),
        whole("w", 1, node="h", index="1"),
        share("s1", "2Gi"),
        share("s2", "4Gi"),
        whole("w2", 1),
        share("nominee", "6Gi", priority=10),
    ]
    session = open_([gpu_node("g"), gpu_node("h")], pods)
    before = dump(session)
    with session.statement() as stmt:
        stmt.evict(task_of(session, "b"), "test")
        stmt.allocate(task_of(session, "s1"), "g")
        cp = stmt.checkpoint()
        stmt.evict(task_of(session, "a"), "test")
        stmt.allocate(task_of(session, "s2"), "g")
        stmt.allocate(task_of(session, "w2"), "h")
        stmt.pipeline(task_of(session, "nominee"), "g")
        assert dump(session) != before
        stmt.undo(task_of(session, "a"))  # out of order, as preemption re-adds a victim
        assert held(session, "a") == (0,)
        stmt.rollback(cp)
        stmt.undo(task_of(session, "b"))
        assert held(session, "b") == (1,)
        stmt.rollback(0)
        assert dump(session) == before
    assert dump(session) == before


def test_unannotated_running_pod_returns_to_its_noted_device() -> None:
    pods = [share("a", "4Gi", node="g"), share("b", "6Gi", node="g", index="0")]
    session = open_([gpu_node("g")], pods)
    assert held(session, "a") == (1,)  # b holds 6Gi of device 0: a was noted on device 1
    with session.statement() as stmt:
        a = task_of(session, "a")
        stmt.evict(a, "test")
        stmt.evict(task_of(session, "b"), "test")
        stmt.undo(a)  # binpack alone would pick device 0 (lowest on a tie)
        assert held(session, "a") == (1,)


# --------------------------------------------------------------------------------------------
# Scores


def test_scorer_prefers_partly_used_devices() -> None:
    nodes = [gpu_node("empty"), gpu_node("used"), gpu_node("wholes", gpus=4)]
    pods = [
        share("a", "4Gi", node="used", index="1"),
        whole("w", 1, node="wholes", index="0"),
        share("s", "2Gi"),
        whole("x", 1),
    ]
    session = open_(nodes, pods)
    p = plugin(session)
    rows = np.arange(3)
    assert p.score(task_of(session, "s"), session.table, rows, False).tolist() == [0.0, 50.0, 0.0]
    assert p.score(task_of(session, "x"), session.table, rows, False).tolist() == [0.0, 50.0, 25.0]
    assert p.score(task_of(session, "a"), session.table, rows, False).tolist() == [0.0, 50.0, 0.0]
    assert p.score(task_of(session, "s"), session.table, rows[:0], False).tolist() == []


# --------------------------------------------------------------------------------------------
# The case of issue 3 point 3: a re-added victim returns to its own device


def _config(
    extra: Sequence[str] = ("gpushare",), actions: Sequence[str] = ("allocate",)
) -> SchedulerConfiguration:
    return parse_configuration(
        {
            "apiVersion": L.API_VERSION,
            "kind": "SchedulerConfiguration",
            "actions": list(actions),
            "tiers": [
                {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
                {
                    "plugins": [
                        {"name": "predicates"},
                        {"name": "proportion"},
                        {"name": "nodeorder"},
                        *({"name": name} for name in extra),
                    ]
                },
            ],
        }
    )


PREEMPT_CASE = [
    gpu_node("g"),
    share("a", "4Gi", node="g", index="0", priority=1),
    share("b", "4Gi", node="g", index="1", priority=1),
    share("c", "8Gi", priority=100),
]


def _preempt(objects: Sequence[Obj], config: SchedulerConfiguration) -> Session:
    cache = cache_with(*objects)
    session = open_session(cache.snapshot(), app.resolve(config))
    for action in session.resolved.actions:
        session.run_action(action)
    return session


def test_preemption_evicts_exactly_one_share_and_binds_on_the_freed_device() -> None:
    session = _preempt(PREEMPT_CASE, _config(actions=["preempt"]))
    evicted = [e.task.name for e in parts(session.effects) if isinstance(e, Evict)]
    nominated = {e.task.name: e.node for e in parts(session.effects) if isinstance(e, Nominate)}
    assert len(evicted) == 1 and evicted[0] in ("a", "b")
    assert nominated == {"c": "g"}
    victim = evicted[0]
    freed = {"a": "0", "b": "1"}[victim]
    survivor = {"a": "b", "b": "a"}[victim]
    assert index_of(session, "c") == freed
    assert held(session, survivor) == (int({"a": "0", "b": "1"}[survivor]),)

    # The next cycles, as the cache sees them: the victim is gone, c is nominated to g.
    cache = cache_with(*PREEMPT_CASE)
    cache.ledger.assume_evict(f"default/{victim}")
    cache.ledger.assume_nomination("default/c", "g")
    following = open_session(cache.snapshot(), app.resolve(_config(actions=["allocate"])))
    for action in following.resolved.actions:
        action.execute(following)
    assert not [e for e in following.effects if isinstance(e, Bind)]  # victim still releasing

    gone = next(o for o in PREEMPT_CASE if o["metadata"]["name"] == victim)
    cache.handle("Pod", "DELETED", gone)
    final = open_session(cache.snapshot(), app.resolve(_config(actions=["allocate"])))
    for action in final.resolved.actions:
        action.execute(final)
    binds = [e for e in final.effects if isinstance(e, Bind)]
    assert [(b.task.name, b.node, dict(b.annotations)) for b in binds] == [
        ("c", "g", {L.GPU_INDEX_ANNOTATION: freed})
    ]


class _ReAddsWhereBinpackPrefers(GpuSharePlugin):
    """The mistake issue 3 warns about: a re-added pod goes wherever binpack puts it."""

    def _choose(self, task: TaskInfo, row: int, demand: Demand) -> tuple[int, ...]:
        state, devices = self._row_state(task, row), self._devices(row)
        return binpack(state, devices, demand) or fallback(state, devices, demand)


def test_re_adding_victims_wherever_binpack_prefers_would_find_no_victim() -> None:
    registry = app.builtin_registry()
    registry.add_plugin(PluginSpec("naive-gpushare", _ReAddsWhereBinpackPrefers))
    cache = cache_with(*PREEMPT_CASE)
    config = _config(extra=["naive-gpushare"], actions=["preempt"])
    session = open_session(cache.snapshot(), registry.resolve(config))
    for action in session.resolved.actions:
        session.run_action(action)
    assert not [e for e in parts(session.effects) if isinstance(e, Evict)]
    assert task_of(session, "c").status is TaskStatus.PENDING


def test_simulated_scenario_writes_the_index_on_the_bound_pod(tmp_path: Path) -> None:
    from scheduler.sim.runner import Simulation
    from scheduler.sim.scenario import load_scenario
    from scheduler.sim.virtual_time import VirtualTimeLoop

    source = Path(__file__).parents[1] / "scenarios" / "gpu_share_preempt_keeps_devices.yaml"
    docs = [d for d in yaml.safe_load_all(source.read_text()) if d and d["kind"] != "Expectation"]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    scenario = load_scenario([str(path)])
    assert scenario.config is not None
    resolved = app.resolve(scenario.config)
    sim = Simulation(scenario, lambda cache, ports: app.build_loop(resolved, cache, ports))
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    assert result.evictions == ["default/share-b"]
    assert result.bindings == {"default/big": "gpu-1"}
    big = sim.store.get("Pod", "default", "big")
    assert big["metadata"]["annotations"][L.GPU_INDEX_ANNOTATION] == "1"


_RANDOM_PODS = [
    share("r0", "4Gi", node="g", index="0", priority=1),
    share("r1", "2Gi", node="g", index="1", priority=1),
    whole("r2", 1, node="h", index="1", priority=1),
    share("r3", "3Gi", node="h", priority=1),
    share("p0", "4Gi", priority=5),
    share("p1", "6Gi", priority=7),
    whole("p2", 1, priority=3),
    whole("p3", 2, priority=9),
    share("p4", "1Gi", priority=2),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["allocate", "pipeline", "evict", "undo", "checkpoint-rollback"]),
            st.integers(0, len(_RANDOM_PODS) - 1),
            st.sampled_from(["g", "h"]),
        ),
        max_size=12,
    )
)
def test_any_sequence_of_moves_rolls_back_exactly(ops: list[tuple[str, int, str]]) -> None:
    session = open_([gpu_node("g"), gpu_node("h", gpus=3)], _RANDOM_PODS)
    before = dump(session)
    with session.statement() as stmt:
        marks: list[int] = []
        done: set[str] = set()
        for kind, i, where in ops:
            task = task_of(session, _RANDOM_PODS[i]["metadata"]["name"])
            if kind == "allocate" and task.status is TaskStatus.PENDING:
                if session.fits_on(task, where):
                    stmt.allocate(task, where)
                    done.add(task.uid)
            elif kind == "pipeline" and task.status is TaskStatus.PENDING:
                stmt.pipeline(task, where)
                done.add(task.uid)
            elif kind == "evict" and task.status is TaskStatus.RUNNING:
                stmt.evict(task, "test")
                done.add(task.uid)
            elif kind == "undo" and task.uid in done:
                stmt.undo(task)
                done.discard(task.uid)
            elif kind == "checkpoint-rollback":
                if marks and i % 2:
                    stmt.rollback(marks.pop())
                    done = {uid for uid in done if _moved(session, uid)}
                else:
                    marks.append(stmt.checkpoint())
            _check_consistent(session)
        stmt.rollback(0)
        assert dump(session) == before


def _moved(session: Session, uid: str) -> bool:
    """Whether the statement still records an operation for task ``uid``."""
    for job in session.jobs.values():
        task = job.tasks.get(uid)
        if task is not None:
            return task.status not in (TaskStatus.PENDING, TaskStatus.RUNNING)
    return False


def _check_consistent(session: Session) -> None:
    """The device matrices equal the sum of what every held task holds."""
    p = plugin(session)
    expected = {name: [[0, 0, 0] for _ in devices] for name, devices in p.usage().items()}
    for job in session.jobs.values():
        for task in job.tasks.values():
            devices = p.held(task.uid)
            if devices is None:
                continue
            demand = p.demand(task)
            assert demand is not None and task.node_name in expected
            for d in devices:
                cell = expected[task.node_name][d]
                cell[0] += demand.memory
                cell[1] += 1 if demand.whole else 0
                cell[2] += 1
    assert {n: [tuple(c) for c in cells] for n, cells in expected.items()} == p.usage()
