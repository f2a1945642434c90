"""The ``preempt`` action (issue 3 points 1, 2, 5), on sessions built through the cache as
the loop builds them, and whole simulations of the scenarios in tests/scenarios/preempt_*.

Session tests run enqueue, allocate and preempt once over a snapshot and read the
statement's effects. Simulation tests run the real loop on the embedded cluster and the
virtual clock, and compare runs (async preemption on and off, API latency) or look at
the cluster's objects afterwards.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from scheduler import app
from scheduler.actions.preempt import PreemptAction, PreemptArguments
from scheduler.actions.victims import Candidate, pdb_violations
from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import DisruptionBudget
from scheduler.api.holds import Hold, HoldKind, QueueView
from scheduler.api.label_selectors import parse_label_selector
from scheduler.api.task import TaskStatus
from scheduler.config import (
    SchedulerConfiguration,
    parse_configuration,
    with_feature_gates,
)
from scheduler.framework.effects import ClearNomination, Evict, Nominate, parts
from scheduler.framework.session import Session
from scheduler.logging import quiet
from scheduler.loop.cycle_report import CycleReport
from scheduler.sim.faults import ApiBehaviour
from scheduler.sim.runner import Simulation, SimulationResult
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import cached_session, node, pod, pod_group, session_dump, task_of

Obj = dict[str, Any]
SCENARIOS = Path(__file__).parent.parent / "scenarios"
PREEMPT_SCENARIOS = sorted(SCENARIOS.glob("preempt_*.yaml"))


@pytest.fixture(autouse=True)
def _log_to_the_live_stderr() -> None:
    """``sluice simulate`` (run by tests/test_scenarios.py under capsys) leaves structlog
    printing to a stderr that pytest has closed since; a warning logged by the executor
    would then raise inside its task group. Point the logs at the current stderr."""
    quiet()


def configuration(**fields: Any) -> SchedulerConfiguration:
    fields.setdefault("actions", ["enqueue", "allocate", "preempt"])
    return parse_configuration(
        {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", **fields}
    )


PREEMPT = configuration()
NO_PROPORTION = configuration(
    tiers=[
        {"plugins": [{"name": "priority"}, {"name": "gang"}, {"name": "conformance"}]},
        {"plugins": [{"name": "predicates"}, {"name": "nodeorder"}]},
    ]
)
"""The default plugins without ``proportion``, whose queue share can mask node-level rules."""


def decide(
    objects: list[Obj],
    config: SchedulerConfiguration = PREEMPT,
    gated: frozenset[str] = frozenset(),
) -> Session:
    """One cycle's decisions (the actions of ``config``) on ``objects``."""
    session = cached_session(objects, config=config)
    if gated:
        session.snapshot.queue = QueueView({j: Hold(HoldKind.EVICTIONS) for j in gated})
    for action in session.resolved.actions:
        session.run_action(action)
    return session


def evicted(session: Session) -> list[str]:
    return [e.task.name for e in parts(session.effects) if isinstance(e, Evict)]


def nominated(session: Session) -> dict[str, str]:
    return {e.task.name: e.node for e in parts(session.effects) if isinstance(e, Nominate)}


def reason(session: Session, name: str) -> str:
    task = task_of(session, name)
    told = session.task_reasons.get(task.uid) or session.job_reasons.get(task.job_id)
    return told.message if told is not None else ""


def full(name: str, *pods: tuple[str, int, str], cpu: str = "2", **kw: Any) -> list[Obj]:
    """Node ``name`` with running pods ``(pod name, priority, cpu)``."""
    out = [node(name, cpu=cpu, **kw)]
    for pname, prio, pcpu in pods:
        out.append(pod(pname, cpu=pcpu, memory=None, node=name, priority=prio))
    return out


def pending(name: str, priority: int, cpu: str = "2", **kw: Any) -> Obj:
    return pod(name, cpu=cpu, memory=None, priority=priority, **kw)


# Arguments and ranking ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "total", "expected"),
    [
        ({}, 50, 50),  # fewer nodes than the absolute minimum: all
        ({}, 5000, 500),  # 10 %
        ({}, 20000, 1000),  # capped
        ({"minCandidateNodesAbsolute": 3, "minCandidateNodesPercentage": 0}, 10, 3),
        ({"minCandidateNodesPercentage": 100, "maxCandidateNodes": 1000}, 700, 700),
    ],
)
def test_candidate_count_is_clamped(fields: dict[str, int], total: int, expected: int) -> None:
    assert PreemptArguments(**fields).candidates(total) == expected


@pytest.mark.parametrize(
    "fields",
    [
        {"minCandidateNodesPercentage": 101},
        {"minCandidateNodesPercentage": -1},
        {"minCandidateNodesAbsolute": 0},
        {"minCandidateNodesAbsolute": 10, "maxCandidateNodes": 5},
    ],
)
def test_bad_arguments_are_refused(fields: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        PreemptArguments(**fields)


def _started(obj: Obj, seconds: int) -> Obj:
    obj["status"]["startTime"] = f"2026-01-01T00:00:{seconds:02d}Z"
    return obj


def test_candidates_rank_in_kube_schedulers_order() -> None:
    objects = [
        node("n1"),
        node("n2"),
        _started(pod("a", node="n1", priority=5), 10),
        _started(pod("b", node="n1", priority=1), 10),
        _started(pod("c", node="n2", priority=1), 10),
        _started(pod("d", node="n1", priority=5), 20),
        _started(pod("e", node="n1", priority=3), 10),
        _started(pod("f", node="n1", priority=3), 30),
    ]
    session = cached_session(objects, config=PREEMPT)
    t = {name: task_of(session, name) for name in "abcdef"}

    def rank(*names: str, pdb: int = 0, on: str = "n1") -> tuple[Any, ...]:
        return Candidate(session.nodes[on], tuple(t[x] for x in names), pdb).rank()

    # fewest PDB violations first, whatever else
    assert rank("a", "d", pdb=0) < rank("b", pdb=1)
    # then the lowest priority of the highest victim
    assert rank("b", "c", "e", "f") < rank("a")
    # then the smallest sum of priorities (each offset by 2^31, so fewer victims win)
    assert rank("b", "e") < rank("e", "f")
    assert rank("e") < rank("b", "e")
    # then the latest start of the highest-priority victims: d (20 s) before a (10 s)
    assert rank("d") < rank("a")
    assert rank("b", "f") < rank("b", "e")
    # then the node name
    assert rank("c", on="n1") < rank("b", on="n2")


def test_pdb_violations_count_in_order() -> None:
    session = cached_session(
        [node("n1"), *(pod(f"p{i}", node="n1", labels={"app": "x"}) for i in range(3))],
        config=PREEMPT,
    )
    sel = parse_label_selector({"matchLabels": {"app": "x"}}, obj="pdb", field="selector")
    budget = DisruptionBudget("default", "b", sel, 1)
    victims = [task_of(session, f"p{i}") for i in range(3)]
    assert pdb_violations(victims, [budget]) == [False, True, True]
    other_ns = DisruptionBudget("elsewhere", "b", sel, 0)
    assert pdb_violations(victims, [other_ns]) == [False, False, False]


# Who is a victim ------------------------------------------------------------------------------


def test_lowest_priority_victims_first_and_the_rest_reprieved() -> None:
    session = decide(
        [
            *full("n1", ("p1", 1, "1"), ("p2", 2, "1"), ("p3", 3, "1"), ("p4", 4, "1"), cpu="4"),
            pending("high", 100, cpu="2"),
        ]
    )
    assert evicted(session) == ["p2", "p1"]
    assert nominated(session) == {"high": "n1"}


def test_a_smaller_pod_of_the_same_priority_can_be_reprieved() -> None:
    """Re-adding most important first keeps every victim that still lets the task fit."""
    session = decide(
        [
            *full("n1", ("big", 1, "2"), ("small", 1, "1"), ("keep", 5, "1"), cpu="4"),
            pending("high", 100, cpu="2"),
        ]
    )
    assert evicted(session) == ["big"]


@pytest.mark.parametrize(
    ("victim", "preemptor"),
    [
        (pod("v", cpu="2", memory=None, node="n1", priority=1, ns="kube-system"), {}),
        (
            pod(
                "v",
                cpu="2",
                memory=None,
                node="n1",
                priority=1,
                labels={L.PREEMPTABLE_LABEL: "false"},
            ),
            {},
        ),
        (pod("v", cpu="2", memory=None, node="n1", priority=100), {}),
        (pod("v", cpu="2", memory=None, node="n1", priority=200), {}),
        (
            pod("v", cpu="2", memory=None, node="n1", priority=1, labels={L.QUEUE_LABEL: "other"}),
            {},
        ),
        (
            pod(
                "v",
                cpu="2",
                memory=None,
                node="n1",
                priority=1,
                priorityClassName="system-cluster-critical",
            ),
            {},
        ),
        (pod("v", cpu="2", memory=None, node="n1", priority=1), {"preemptionPolicy": "Never"}),
    ],
    ids=[
        "kube-system",
        "preemptable-false",
        "equal",
        "higher",
        "other-queue",
        "system-cluster-critical",
        "policy-never",
    ],
)
def test_no_victims(victim: Obj, preemptor: dict[str, Any]) -> None:
    other = {
        "apiVersion": L.API_VERSION,
        "kind": "Queue",
        "metadata": {"name": "other"},
        "spec": {"weight": 1},
    }
    session = decide([node("n1", cpu="2"), other, victim, pending("high", 100, **preemptor)])
    assert evicted(session) == []
    assert nominated(session) == {}
    assert "Insufficient cpu" in reason(session, "high")


def test_terminating_pods_are_not_victims_and_their_room_is_waited_for() -> None:
    going = pod("going", cpu="2", memory=None, node="n1", priority=1)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    session = decide(
        [node("n1", cpu="2"), going, *full("n2", ("low", 1, "2")), pending("high", 100)]
    )
    # n1's room is being freed: the preemptor is nominated there with no new victims,
    # rather than evicting n2's pod
    assert evicted(session) == []
    assert nominated(session) == {"high": "n1"}


@pytest.mark.parametrize(
    ("node_kw", "preemptor_kw"),
    [
        ({"taints": ["dedicated=x:NoSchedule"]}, {}),
        ({"labels": {"zone": "a"}}, {"nodeSelector": {"zone": "b"}}),
        ({"unschedulable": True}, {}),
    ],
    ids=["untolerated-taint", "selector", "unschedulable"],
)
def test_nodes_failing_for_reasons_eviction_cannot_fix_are_not_candidates(
    node_kw: dict[str, Any], preemptor_kw: dict[str, Any]
) -> None:
    session = decide(
        [*full("n1", ("low", 1, "2"), **node_kw), pending("high", 100, **preemptor_kw)]
    )
    assert evicted(session) == []
    assert nominated(session) == {}


def test_host_port_conflict_is_resolved_by_eviction() -> None:
    def with_port(obj: Obj) -> Obj:
        obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        return obj

    session = decide(
        [
            node("n1", cpu="8"),
            with_port(pod("holder", cpu="1", memory=None, node="n1", priority=1)),
            pod("bystander", cpu="1", memory=None, node="n1", priority=1),
            with_port(pending("high", 100, cpu="1")),
        ]
    )
    assert evicted(session) == ["holder"]
    assert nominated(session) == {"high": "n1"}


def test_anti_affinity_is_resolved_by_eviction() -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "x"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    session = decide(
        [
            node("n1", cpu="8"),
            pod("x", cpu="1", memory=None, node="n1", priority=1, labels={"app": "x"}),
            pod("y", cpu="1", memory=None, node="n1", priority=1, labels={"app": "y"}),
            pending("high", 100, cpu="1", affinity=anti),
        ]
    )
    assert evicted(session) == ["x"]


def test_within_job_preemption_needs_the_gang_to_stay_whole() -> None:
    group = pod_group("g", min_member=2, min_task_member={"ps": 1, "worker": 1})
    objects = [
        node("n1", cpu="4"),
        group,
        pod("w0", cpu="2", memory=None, node="n1", priority=1, group="g", role="worker"),
        pod("w1", cpu="2", memory=None, node="n1", priority=1, group="g", role="worker"),
        pod("ps", cpu="2", memory=None, priority=100, group="g", role="ps"),
    ]
    session = decide(objects)
    assert evicted(session) == ["w1"]
    assert nominated(session) == {"ps": "n1"}
    # with minMember 3 the eviction would leave the gang short: nothing is done
    objects[1] = pod_group("g", min_member=3, min_task_member={"ps": 1, "worker": 1})
    session = decide(objects)
    assert evicted(session) == []
    assert nominated(session) == {}


def test_a_failed_gang_preemption_leaves_the_session_as_it_was() -> None:
    objects = [
        *full("n1", ("l1", 1, "2"), ("l2", 1, "2"), cpu="4"),
        *full("n2", ("top", 2000, "4"), cpu="4"),
        pod_group("g", min_member=2),
        pod("g0", cpu="3", memory=None, priority=100, group="g"),
        pod("g1", cpu="3", memory=None, priority=100, group="g"),
    ]
    session = cached_session(objects, config=PREEMPT)
    for action in session.resolved.actions:
        if action.name != "preempt":
            session.run_action(action)
    before = session_dump(session)
    PreemptAction(PreemptArguments()).execute(session)
    assert session_dump(session) == before
    assert [e for e in parts(session.effects) if isinstance(e, Evict | Nominate)] == []


def test_gated_jobs_do_not_preempt() -> None:
    objects = [*full("n1", ("low", 1, "2")), pending("high", 100)]
    job = task_of(cached_session(objects, config=PREEMPT), "high").job_id
    session = decide(objects, gated=frozenset({job}))
    assert evicted(session) == []
    assert nominated(session) == {}


def test_equal_priority_nomination_is_accounted_for_by_the_next_preemptor() -> None:
    """KEP-4832 race 3 at session level: ``first`` is nominated to n1 (its victim low-a
    releasing); ``second`` of equal priority must not count low-a's room."""
    objects = [
        node("n1", cpu="4"),
        pod("low-a", cpu="2", memory=None, node="n1", priority=1),
        pod("low-b", cpu="2", memory=None, node="n1", priority=1),
        pod("first", cpu="2", memory=None, priority=100),
        pod("second", cpu="2", memory=None, priority=100),
    ]
    for config in (PREEMPT, NO_PROPORTION):
        session = decide(objects, config)
        assert sorted(evicted(session)) == ["low-a", "low-b"]
        assert nominated(session) == {"first": "n1", "second": "n1"}


def test_stale_nomination_is_withdrawn() -> None:
    """A nominated pod whose node can no longer take it, even once the victims are gone,
    is pending again (ClearNomination) and may preempt."""
    nominee = pending("nominee", 100)
    nominee["status"]["nominatedNodeName"] = "n1"
    session = decide([*full("n1", ("top", 2000, "2")), *full("n2", ("low", 1, "2")), nominee])
    clears = [e for e in parts(session.effects) if isinstance(e, ClearNomination)]
    assert [(e.task.name, e.node) for e in clears] == [("nominee", "n1")]
    assert evicted(session) == ["low"]
    assert nominated(session) == {"nominee": "n2"}


def test_candidate_evaluation_is_bounded_and_rotates() -> None:
    objects = [
        *full("n1", ("l1", 1, "2")),
        *full("n2", ("l2", 1, "2")),
        *full("n3", ("l3", 1, "2")),
        pending("high", 100),
    ]
    args = PreemptArguments(
        minCandidateNodesPercentage=0, minCandidateNodesAbsolute=1, maxCandidateNodes=1
    )
    chosen = []
    action = PreemptAction(args)
    for _ in range(4):
        session = cached_session(objects, config=PREEMPT)
        session.run_action(action)
        chosen.append(nominated(session)["high"])
    assert chosen == ["n1", "n2", "n3", "n1"]


# Whole simulations ----------------------------------------------------------------------------


def scenario_docs(path: Path) -> tuple[dict[str, Any], list[Obj]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    [expectation] = [d for d in docs if d.get("kind") == "Expectation"]
    return expectation, [d for d in docs if d.get("kind") != "Expectation"]


def simulate(
    docs: Sequence[Obj],
    *,
    config: SchedulerConfiguration | None = None,
    gates: dict[str, bool] | None = None,
    behaviour: ApiBehaviour | None = None,
    max_cycles: int | None = 400,
    on_cycle: Callable[[CycleReport, list[dict[str, Any]]], None] | None = None,
    prepare: Callable[[Simulation], None] | None = None,
) -> tuple[Simulation, SimulationResult]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
        scenario = load_scenario([str(path)])
    cfg = config or scenario.config or SchedulerConfiguration()
    if gates:
        cfg = with_feature_gates(cfg, gates)
    resolved = app.resolve(cfg)
    sim = Simulation(
        scenario,
        lambda cache, ports: app.build_loop(resolved, cache, ports),
        scheduler_name=cfg.scheduler_name,
        behaviour=behaviour,
        max_cycles=max_cycles,
        on_cycle=on_cycle,
    )
    if prepare is not None:
        prepare(sim)
    result = anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim, result


def outcome(result: SimulationResult) -> tuple[Any, ...]:
    return (result.bindings, result.evictions, result.nominations, sorted(result.pending))


def without_config(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if d.get("kind") != "SchedulerConfiguration"]


def _args_free(path: Path) -> bool:
    expectation, _ = scenario_docs(path)
    return not expectation.get("args")


SAME_DECISION_SCENARIOS = [p for p in PREEMPT_SCENARIOS if _args_free(p)]


@pytest.mark.parametrize(
    "path", SAME_DECISION_SCENARIOS, ids=[p.stem for p in SAME_DECISION_SCENARIOS]
)
def test_async_off_and_api_latency_decide_the_same(path: Path) -> None:
    _, docs = scenario_docs(path)
    _, base = simulate(docs)
    assert base.cycles < 400
    _, sync = simulate(docs, gates={"SchedulerAsyncPreemption": False})
    assert outcome(sync) == outcome(base)
    _, slow = simulate(docs, behaviour=ApiBehaviour(latency={"delete": 2.0}))
    assert outcome(slow) == outcome(base)


@pytest.mark.parametrize(
    "name",
    [
        "preempt_race_lower_waits",
        "preempt_race_second_equal_accounts",
        "preempt_race_second_lower_accounts",
        "preempt_sync_same_decisions",
    ],
)
def test_races_hold_at_node_level_without_the_queue_share(name: str) -> None:
    """The same outcome with ``proportion`` left out: the node table's accounting of
    nominations (not the queue's share) keeps the room."""
    expectation, docs = scenario_docs(SCENARIOS / f"{name}.yaml")
    gates = {"SchedulerAsyncPreemption": False} if expectation.get("args") else None
    _, with_share = simulate(docs, gates=gates)
    _, without = simulate(docs, config=NO_PROPORTION, gates=gates)
    assert outcome(without) == outcome(with_share)


@pytest.mark.parametrize(
    "name", ["preempt_race_higher_takes_room", "preempt_race_second_higher_ignores"]
)
def test_higher_priority_ignores_lower_nominations_with_the_default_plugins(name: str) -> None:
    expectation, docs = scenario_docs(SCENARIOS / f"{name}.yaml")
    _, result = simulate(without_config(docs))
    expect = expectation["expect"]
    assert result.evictions == expect["evictions"]
    assert result.bindings == expect["bindings"]


def test_victims_get_the_condition_and_the_preemptor_its_nomination_in_the_cluster() -> None:
    _, docs = scenario_docs(SCENARIOS / "preempt_one_victim.yaml")
    seen: dict[str, Any] = {}
    sims: list[Simulation] = []

    def on_cycle(report: CycleReport, _: list[dict[str, Any]]) -> None:
        if report.number == 2:  # the victim is terminating (30 s grace), high waits
            seen["low"] = sims[0].store.try_get("Pod", "default", "low-1")
            seen["high"] = sims[0].store.try_get("Pod", "default", "high")

    sim, _ = simulate(docs, on_cycle=on_cycle, prepare=sims.append)
    low = seen["low"]
    assert low is not None and low["metadata"].get("deletionTimestamp")
    conditions = {c["type"]: c for c in low["status"].get("conditions", [])}
    target = conditions["DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "PreemptionByScheduler",
        "sluice: preempting to accommodate a higher priority pod",
    )
    assert seen["high"]["status"].get("nominatedNodeName") == "n1"
    events, _ = sim.store.list("Event")
    preempted = [e for e in events if e.get("reason") == "Preempted"]
    assert [e["regarding"]["name"] for e in preempted] == ["low-1"]
    metrics = sim.loop.metrics.registry
    assert metrics.get_sample_value("scheduler_preemption_attempts_total") == 1
    assert (
        metrics.get_sample_value(
            "scheduler_preemption_goroutines_execution_total", {"result": "success"}
        )
        == 1
    )


def test_when_every_delete_fails_the_preemptor_ends_pending_and_not_nominated() -> None:
    _, docs = scenario_docs(SCENARIOS / "preempt_eviction_always_fails.yaml")
    sim, result = simulate(
        docs, behaviour=ApiBehaviour(failure_rate={"delete": 1.0}, seed=1), max_cycles=20
    )
    assert "default/high" not in result.bindings
    assert "default/high" in result.pending
    high = sim.store.try_get("Pod", "default", "high")
    assert high is not None and not (high.get("status") or {}).get("nominatedNodeName")
    low = sim.store.try_get("Pod", "default", "low-1")
    assert low is not None and not low["metadata"].get("deletionTimestamp")
    task = next(t for t in sim.cache.tasks.values() if t.name == "high")
    assert (task.status, task.node_name) == (TaskStatus.PENDING, "")
    assert not sim.loop.queue.gates()
    errors = sim.loop.metrics.registry.get_sample_value(
        "scheduler_preemption_goroutines_execution_total", {"result": "error"}
    )
    # every attempt fails and is counted; attempts back off (1 s, 2 s, 4 s, ...), so 20
    # cycles see only a few of them, spread over virtual time; nothing was evicted
    times = [e["t"] for e in result.timeline if e["event"] == "delete-failed"]
    assert errors == len(times)
    assert 2 <= len(times) < 10
    assert all(later > earlier for earlier, later in itertools.pairwise(times))
    assert result.evictions == []


def test_a_failed_preemption_is_retried_after_a_backoff() -> None:
    _, docs = scenario_docs(SCENARIOS / "preempt_eviction_always_fails.yaml")
    attempts: list[float] = []

    def on_cycle(report: CycleReport, _: list[dict[str, Any]]) -> None:
        if any(isinstance(e, Evict) for e in parts(report.effects)):
            attempts.append(report.started)

    simulate(
        docs,
        behaviour=ApiBehaviour(failure_rate={"delete": 1.0}, seed=1),
        max_cycles=20,
        on_cycle=on_cycle,
    )
    assert len(attempts) >= 2
    assert attempts[1] > attempts[0], f"retried at once: {attempts[:5]}"


def sim_pod(name: str, priority: int, cpu: str, **fields: Any) -> Obj:
    """A pod for a scenario document: ``node``, ``grace``, ``group``, ``arrival``."""
    meta: Obj = {"name": name}
    spec: Obj = {
        "schedulerName": L.SCHEDULER_NAME,
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if "node" in fields:
        spec["nodeName"] = fields["node"]
    if "grace" in fields:
        spec["terminationGracePeriodSeconds"] = fields["grace"]
    if "group" in fields:
        meta["labels"] = {L.POD_GROUP_LABEL: fields["group"]}
    if "arrival" in fields:
        meta["annotations"] = {"sim.sluice.dev/arrival": fields["arrival"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def sim_node(name: str, cpu: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "10"}},
    }


GANG_LOSES_A_NOMINATION: list[Obj] = [
    sim_node("n0", "1"),
    sim_node("n1", "2"),
    # capacity no pod here may use: the queue's share is no limit in this case
    sim_node("spare", "8", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
    {
        "apiVersion": L.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": {"minMember": 2},
    },
    sim_pod("low-a", 0, "1", node="n1", grace=30),
    sim_pod("low-b", 0, "1", node="n1", grace=30),
    sim_pod("g-0", 10, "1", group="g"),
    sim_pod("g-1", 10, "2", group="g"),
    sim_pod("top", 20, "1", arrival="2s"),
    sim_pod("filler", 5, "1", arrival="40s"),
]


@pytest.mark.parametrize("async_on", [True, False], ids=["async", "sync"])
def test_a_gang_that_lost_a_nomination_does_not_keep_the_others(async_on: bool) -> None:
    """Gang g (minMember 2, priority 10): g-0 is nominated to n0 (free now) and g-1 to n1
    (evicting low-a and low-b, 30 s grace). At 2 s top (priority 20) takes n0, g-0's
    room: g-0's nomination is withdrawn and the gang cannot be placed any more. g-1 must
    not keep holding n1: at 40 s filler (priority 5) should get it."""
    sim, result = simulate(GANG_LOSES_A_NOMINATION, gates={"SchedulerAsyncPreemption": async_on})
    assert result.bindings.get("default/top") == "n0"
    assert result.evictions == ["default/low-a", "default/low-b"]
    g1 = next(t for t in sim.cache.tasks.values() if t.name == "g-1")
    assert g1.status is TaskStatus.PENDING, "g-1 still holds n1 for a gang that cannot run"
    assert result.bindings.get("default/filler") == "n1"


def test_an_eviction_refused_by_a_budget_is_retried_after_a_backoff() -> None:
    """Through the Eviction API (eviction mode ``evict``) a budget refuses to evict the
    only victim; the preemptor should back off, not retry at the same instant."""
    docs: list[Obj] = [
        sim_node("n1", "2"),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
        sim_pod("low", 1, "2", node="n1"),
        sim_pod("high", 100, "2"),
    ]
    docs[2]["metadata"]["labels"] = {"app": "guarded"}
    attempts: list[float] = []

    def on_cycle(report: CycleReport, _: list[dict[str, Any]]) -> None:
        if any(isinstance(e, Evict) for e in parts(report.effects)):
            attempts.append(report.started)

    def evict_mode(sim: Simulation) -> None:
        sim.backend.eviction_mode = "evict"

    sim, result = simulate(docs, max_cycles=20, on_cycle=on_cycle, prepare=evict_mode)
    assert sim.faults.calls["evict"] >= 1
    assert "default/high" not in result.bindings
    assert len(attempts) >= 2
    assert attempts[1] > attempts[0], f"retried at once: {attempts[:5]}"
