"""The victim search's simulation on one node (:meth:`VictimSearch.simulate`), as preempt
uses it.

Every possible victim is evicted, the preemptor must then fit (node and queue), and the
victims are re-added one at a time: pods whose eviction breaks a PodDisruptionBudget
first, then members of running gangs with no member to spare, each group most important
first; each one that still lets the preemptor fit stays.

- tables: the budget order decides which pod of one node goes; the queue's room (not
  only the node's) is what the victims must free;
- a gang member is moved ahead only if its eviction breaks its gang;
- a property: the simulation chooses the same victims as the procedure of the issue
  taken literally (remove pods, in the reverse of that order, until the preemptor fits;
  then re-add them in that order), run as an oracle on the same session primitives.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.actions.victims import LowerPriority, SearchArguments, VictimSearch, pdb_violations
from scheduler.api import labels as L
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import EVICTABLE
from scheduler.config import parse_configuration
from scheduler.framework.effects import Evict, Nominate, parts
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement
from tests.builders import cached_session, node, pod, pod_group, queue, session_dump, task_of

Obj = dict[str, Any]
PREEMPT = parse_configuration(
    {
        "apiVersion": L.API_VERSION,
        "kind": "SchedulerConfiguration",
        "actions": ["enqueue", "allocate", "preempt"],
    }
)
GUARDED = {"app": "guarded"}


def decide(objects: list[Obj]) -> Session:
    """One cycle's decisions (enqueue, allocate, preempt) on ``objects``."""
    session = cached_session(objects, config=PREEMPT)
    for action in session.resolved.actions:
        session.run_action(action)
    return session


def evicted(session: Session) -> list[str]:
    return sorted(e.task.name for e in parts(session.effects) if isinstance(e, Evict))


def nominated(session: Session) -> dict[str, str]:
    return {e.task.name: e.node for e in parts(session.effects) if isinstance(e, Nominate)}


def running(name: str, cpu: str, priority: int, *, on: str = "n1", **kw: Any) -> Obj:
    return pod(name, cpu=cpu, memory=None, node=on, priority=priority, **kw)


def budget(allowed: int) -> Obj:
    """A PodDisruptionBudget over the GUARDED pods whose status allows ``allowed``
    disruptions."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": GUARDED}},
        "status": {"disruptionsAllowed": allowed},
    }


# Budgets: pods whose eviction breaks one are re-added first ------------------------------------


@pytest.mark.parametrize(
    ("pods", "allowed", "victims"),
    [
        # equal priority and size, one victim needed: the unguarded one, whichever name
        # sorts first (without the budget order the first name would be re-added first)
        ([("a", 1, "2", False), ("b", 1, "2", True)], 0, ["a"]),
        ([("a", 1, "2", True), ("b", 1, "2", False)], 0, ["b"]),
        # the guarded pod is the least important, yet spared: the other one suffices
        ([("guarded", 1, "2", True), ("plain", 2, "2", False)], 0, ["plain"]),
        # two unguarded victims rather than one guarded, as kube-scheduler does
        (
            [("guarded", 1, "2", True), ("s1", 2, "1", False), ("s2", 2, "1", False)],
            0,
            ["s1", "s2"],
        ),
        # the guarded pod goes when nothing else can make room
        (
            [("guarded", 1, "2", True), ("small", 1, "1", False), ("top", 200, "1", False)],
            0,
            ["guarded"],
        ),
        # one disruption allowed: counted in priority order, the more important guarded
        # pod uses it, and the less important one is the one whose eviction would break
        # the budget, so it is spared
        ([("g-hi", 2, "1", True), ("g-lo", 1, "1", True), ("plain", 3, "1", False)], 1, ["g-hi"]),
    ],
    ids=[
        "equal-guarded-second",
        "equal-guarded-first",
        "guarded-lower-priority-spared",
        "two-unguarded-over-one-guarded",
        "guarded-only-choice",
        "one-disruption-allowed",
    ],
)
def test_pods_a_budget_protects_are_spared_first(
    pods: list[tuple[str, int, str, bool]], allowed: int, victims: list[str]
) -> None:
    """One node, full; the preemptor (priority 100) asks what the victims must free."""
    size = sum(int(cpu) for _, _, cpu, _ in pods)
    need = str(sum(int(cpu) for name, _, cpu, _ in pods if name in victims))
    objects = [node("n1", cpu=str(size)), budget(allowed)]
    for name, prio, cpu, guarded in pods:
        objects.append(running(name, cpu, prio, labels=GUARDED if guarded else None))
    objects.append(pod("high", cpu=need, memory=None, priority=100))
    session = decide(objects)
    assert evicted(session) == victims
    assert nominated(session) == {"high": "n1"}


# The queue's room ---------------------------------------------------------------------------


def in_queue(obj: Obj, name: str = "q") -> Obj:
    obj["metadata"]["labels"][L.QUEUE_LABEL] = name
    return obj


@pytest.mark.parametrize(
    ("node_cpu", "capability", "pods", "preemptor_cpu", "victims"),
    [
        # the node has room, the queue (capability 4) has not: a pod of the queue goes,
        # the least important one
        ("8", "4", [("low-a", 1, "2", "q"), ("low-b", 2, "2", "q")], "2", ["low-a"]),
        # a pod of another queue, even less important, frees none of the queue's room
        (
            "8",
            "4",
            [("low-a", 1, "2", "q"), ("low-b", 2, "2", "q"), ("other", 0, "2", "other")],
            "2",
            ["low-a"],
        ),
        # two pods of the queue must go for its room; the more important one stays
        (
            "8",
            "4",
            [("low-a", 1, "1", "q"), ("low-b", 2, "1", "q"), ("top", 200, "2", "q")],
            "2",
            ["low-a", "low-b"],
        ),
        # the node is full and evicting low-a would make room on it, but the queue
        # (capability 3) would still be over: no preemption at all
        ("4", "3", [("low-a", 1, "2", "q"), ("top", 200, "2", "q")], "2", []),
    ],
    ids=["node-room-queue-full", "other-queue-frees-nothing", "two-for-the-queue", "queue-never"],
)
def test_victims_must_free_the_queues_room(
    node_cpu: str,
    capability: str,
    pods: list[tuple[str, int, str, str]],
    preemptor_cpu: str,
    victims: list[str],
) -> None:
    objects = [
        node("n1", cpu=node_cpu),
        queue("q", capability={"cpu": capability}),
        queue("other"),
        *(in_queue(running(name, cpu, prio), q) for name, prio, cpu, q in pods),
        in_queue(pod("high", cpu=preemptor_cpu, memory=None, priority=100)),
    ]
    session = decide(objects)
    assert evicted(session) == victims
    assert nominated(session) == ({"high": "n1"} if victims else {})


# Running gangs -----------------------------------------------------------------------------


def test_a_gang_member_whose_eviction_breaks_nothing_is_not_spared_first() -> None:
    """Gang g (minMember 2) runs member m0 on n1 and m1, m2 on n2 (not preemptable).
    Evicting m0 leaves two members: g stays whole, so m0 (priority 1) is the victim, not
    the lone pod x (priority 3). (Whether a gang has a member to spare is judged before
    the simulation removes anything: with every possible victim removed, g would look
    exactly at its minMember, and m0 would be spared in x's place.)"""
    keep = {L.PREEMPTABLE_LABEL: "false"}
    objects = [
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod_group("g", min_member=2),
        running("m0", "2", 1, group="g"),
        running("x", "2", 3),
        running("m1", "2", 1, on="n2", group="g", labels=keep),
        running("m2", "2", 1, on="n2", group="g", labels=keep),
        pod("high", cpu="2", memory=None, priority=100),
    ]
    session = decide(objects)
    assert evicted(session) == ["m0"]


# The literal procedure as an oracle ----------------------------------------------------------


class RecordingStatement(Statement):
    """A statement that remembers the tasks it re-added (:meth:`undo`), in order."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.undone: list[TaskInfo] = []

    def undo(self, task: TaskInfo) -> None:
        self.undone.append(task)
        super().undo(task)


class RecordingSearch(VictimSearch):
    """The preempt search, remembering the victims of the re-add loop (before
    :meth:`bundle` adds the rest of the gangs they break)."""

    def __init__(self) -> None:
        super().__init__(SearchArguments(), LowerPriority())
        self.loop_victims: list[TaskInfo] | None = None

    def bundle(
        self, session: Session, stmt: Statement, task: TaskInfo, victims: list[TaskInfo]
    ) -> list[TaskInfo]:
        self.loop_victims = list(victims)
        return super().bundle(session, stmt, task, victims)


def literal_victims(  # noqa: PLR0917
    session: Session,
    stmt: Statement,
    search: VictimSearch,
    task: TaskInfo,
    node: str,
    order: list[TaskInfo],
) -> list[TaskInfo] | None:
    """The issue's procedure: remove pods in the reverse of ``order`` (least important
    first, pods whose eviction breaks a budget last) until ``task`` fits; then re-add the
    removed ones in ``order``, keeping each that still lets it fit. Those left out are
    the victims (None if it never fits, or fits without any). Rolls back."""
    cp = stmt.checkpoint()
    try:
        removed: set[str] = set()
        for v in reversed(order):
            if search.policy.fits(session, task, node):
                break
            stmt.evict(v, "literal", preemptor=task)
            removed.add(v.uid)
        if not search.policy.fits(session, task, node):
            return None
        victims = []
        for v in order:
            if v.uid not in removed:
                continue
            stmt.undo(v)
            if not search.policy.fits(session, task, node):
                stmt.evict(v, "literal", preemptor=task)
                victims.append(v)
        return victims or None
    finally:
        stmt.rollback(cp)


CPUS = ["250m", "500m", "1", "2"]
MEMORY = ["256Mi", "1Gi", "2Gi"]


def _milli(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(q) * 1000


def _mebi(q: str) -> int:
    return int(q[:-2]) if q.endswith("Mi") else int(q[:-2]) * 1024


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    """Node n1 (4 CPU, 4 GiB, room for 3-8 pods) filled with up to 7 running pods of
    random size and priority (0-6; the preemptor has 5) and start time, a budget label
    on some, and sometimes membership of a running gang g whose other members run on
    n2; a budget allowing 0-2 disruptions; sometimes a CPU capability on the queue; a
    preemptor asking 1-4 CPU and some memory."""
    slots = draw(st.integers(3, 8), label="pod slots")
    objects: list[Obj] = [
        node("n1", cpu="4", memory="4Gi", pods=slots),
        node("n2", cpu="16", memory="64Gi"),
        budget(draw(st.integers(0, 2), label="disruptions allowed")),
    ]
    gang = draw(st.booleans(), label="gang?")
    members = cpu_used = mem_used = 0
    for i in range(min(slots, 7)):
        cpu = draw(st.sampled_from(CPUS), label="cpu")
        memory = draw(st.sampled_from(MEMORY), label="memory")
        if cpu_used + _milli(cpu) > 4000 or mem_used + _mebi(memory) > 4096:
            break
        cpu_used += _milli(cpu)
        mem_used += _mebi(memory)
        in_gang = gang and draw(st.booleans(), label="member?")
        obj = pod(
            f"p{i}",
            cpu=cpu,
            memory=memory,
            node="n1",
            priority=draw(st.integers(0, 6), label="priority"),
            labels=GUARDED if draw(st.integers(0, 2), label="guarded?") == 0 else None,
            group="g" if in_gang else None,
        )
        obj["status"]["startTime"] = f"2026-01-01T00:00:{draw(st.integers(0, 3)):02d}Z"
        objects.append(obj)
        members += in_gang
    if gang:
        elsewhere = draw(st.integers(0, 3), label="members on n2")
        for j in range(elsewhere):
            prio = draw(st.integers(0, 6), label="member priority")
            objects.append(pod(f"m{j}", cpu="1", node="n2", priority=prio, group="g"))
        if members + elsewhere:
            minimum = draw(st.integers(1, members + elsewhere), label="minMember")
            objects.append(pod_group("g", min_member=minimum))
    if draw(st.booleans(), label="capability?"):
        cpu = draw(st.sampled_from(["4", "6", "8"]), label="capability")
        objects.append(queue(L.DEFAULT_QUEUE, capability={"cpu": cpu}))
    cpu = draw(st.sampled_from(["1", "2", "3", "4"]), label="preemptor cpu")
    memory = draw(st.sampled_from(["128Mi", "1Gi", "3Gi"]), label="preemptor memory")
    objects.append(pod("preemptor", cpu=cpu, memory=memory, priority=5))
    return objects


def _breaks_a_gang_it_cannot_take(
    session: Session, preemptor: TaskInfo, victims: list[TaskInfo]
) -> bool:
    """Does evicting ``victims`` leave a gang below its minimum with a running member of
    ``preemptor``'s priority or higher (no victim of it)?"""
    taken = {v.uid for v in victims}
    for job_id in {v.job_id for v in victims}:
        job = session.jobs[job_id]
        if not job.has_pod_group or job.placed_count() - len(taken & set(job.tasks)) >= (
            job.min_member
        ):
            continue
        if any(
            t.uid not in taken and t.status in EVICTABLE and t.priority >= preemptor.priority
            for t in job.tasks.values()
        ):
            return True
    return False


def _budget_breaks(session: Session, possible: list[TaskInfo]) -> dict[str, bool]:
    """Whether evicting each possible victim breaks a budget, counted most important
    first (as kube-scheduler counts them)."""
    ordered = sorted(possible, key=lambda t: (-t.priority, t.start_time, t.key))
    flags = pdb_violations(ordered, session.snapshot.budgets)
    return {t.uid: f for t, f in zip(ordered, flags, strict=True)}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters())
def test_the_simulation_chooses_as_the_literal_procedure(objects: list[Obj]) -> None:
    """The code removes every possible victim at once instead of one at a time until the
    preemptor fits; the victims are the same as long as removing pods never makes the
    preemptor stop fitting (resources, pod count, host ports, anti-affinity, the queue's
    share): the pods the literal procedure never removes are all re-added by the code
    too, each onto a subset of a state where the preemptor fits."""
    session = cached_session(objects, config=PREEMPT)
    action = RecordingSearch()
    task = task_of(session, "preemptor")
    n1 = session.nodes["n1"]
    possible = action.policy.possible(session, task, n1)
    before = session_dump(session)
    stmt = RecordingStatement(session)
    with stmt:
        cand = action.simulate(session, stmt, task, n1, possible)
        assert session_dump(session) == before, "the simulation left the session changed"
        readd = list(stmt.undone)
        # if the simulation never reached its re-add loop, any order removes them all
        order = readd or sorted(possible, key=lambda t: (-t.priority, t.start_time, t.key))
        oracle = literal_victims(session, stmt, action, task, "n1", order)
        assert session_dump(session) == before
    assert sorted(t.uid for t in order) == sorted(t.uid for t in possible)

    # the re-add order is the documented one: pods breaking a budget first; otherwise
    # most important first (pods of gangs aside, which may be moved ahead)
    breaks = _budget_breaks(session, possible)
    flags = [breaks[t.uid] for t in readd]
    assert flags == sorted(flags, reverse=True)
    for flag in (True, False):
        plain = [
            t for t in readd if breaks[t.uid] is flag and not session.jobs[t.job_id].has_pod_group
        ]
        keys = [(-t.priority, t.start_time, t.key) for t in plain]
        assert keys == sorted(keys)

    if oracle is None:
        assert cand is None
        return
    if cand is None:
        # the victims would break a gang whose other members cannot all go with them
        assert _breaks_a_gang_it_cannot_take(session, task, oracle), oracle
        return
    assert action.loop_victims is not None
    assert [t.uid for t in action.loop_victims] == [t.uid for t in oracle]
    # the rest of the candidate's victims are what bundle added: members of a gang
    assert [t.uid for t in cand.victims[: len(oracle)]] == [t.uid for t in oracle]
    assert all(session.jobs[t.job_id].has_pod_group for t in cand.victims[len(oracle) :])
