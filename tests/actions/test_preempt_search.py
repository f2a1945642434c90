"""The victim search's candidates: :func:`kube_rank_bound` and the branch and bound over it.

The search may skip the simulation of a candidate node only when its bound shows that
the node cannot rank first. The properties check, on generated clusters, that every
candidate's rank is at or above its bound, and that the search picks the same node and
the same victims as simulating every candidate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.actions.victims import (
    Candidate,
    LowerPriority,
    SearchArguments,
    VictimSearch,
)
from scheduler.actions.victims import kube_rank_bound as rank_bound
from scheduler.api import labels as L
from scheduler.api.task import TaskInfo
from scheduler.config import parse_configuration
from scheduler.framework.session import Session
from tests.builders import cached_session, node, pod, task_of

Obj = dict[str, Any]
OFFSET = 1 << 31
PREEMPT = parse_configuration(
    {"apiVersion": L.API_VERSION, "kind": "SchedulerConfiguration", "actions": ["preempt"]}
)


def _running(name: str, on: str, cpu: str, priority: int, started: int) -> Obj:
    obj = pod(name, cpu=cpu, memory=None, node=on, priority=priority)
    obj["status"]["startTime"] = f"2026-01-01T00:00:{started:02d}Z"
    return obj


def _tasks(*specs: tuple[int, float]) -> list[TaskInfo]:
    """Stand-in victims: (priority, start time); rank_bound reads nothing else."""
    out = []
    for i, (priority, start) in enumerate(specs):
        session = cached_session([node("n"), _running(f"p{i}", "n", "100m", priority, 0)])
        task = task_of(session, f"p{i}")
        task.start_time = start
        out.append(task)
    return out


@pytest.mark.parametrize(
    ("victims", "room", "need", "expected"),
    [
        # nothing lacking: still one victim at least (a preemption evicts something)
        ([(0, 5.0), (3, 9.0)], [[1], [1]], [0], (0, 0, OFFSET, 1, -5.0, "n")),
        # 2500m lacking from pods of 900m, 900m, 900m, 100m: three are needed
        (
            [(0, 1.0), (0, 2.0), (0, 3.0), (1, 4.0)],
            [[900], [900], [900], [100]],
            [2500],
            (0, 0, 3 * OFFSET, 3, -1.0, "n"),
        ),
        # the column needing the most victims decides: cpu needs 1, memory 2
        ([(2, 0.0), (1, 0.0)], [[5, 1], [1, 1]], [4, 2], (0, 1, 2 * OFFSET + 3, 2, -0.0, "n")),
        # all of them cannot free what lacks: not a candidate
        ([(0, 0.0), (0, 0.0)], [[1], [1]], [3], None),
        # fewer pods at the lowest priority than needed: the latest start among them
        ([(0, 7.0), (4, 9.0)], [[1], [1]], [2], (0, 0, 2 * OFFSET + 4, 2, -7.0, "n")),
    ],
)
def test_rank_bound(
    victims: list[tuple[int, float]],
    room: list[list[int]],
    need: list[int],
    expected: tuple[Any, ...] | None,
) -> None:
    assert rank_bound("n", _tasks(*victims), room, need) == expected


def test_no_possible_victim_has_no_bound() -> None:
    assert rank_bound("n", [], [], [1]) is None


# Properties ------------------------------------------------------------------------------------

CPUS = ["300m", "500m", "900m", "1", "2"]


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    """1-6 nodes of 4 CPU with 0-5 running pods each (priority 0-3, start 0-3 s), and a
    pending preemptor of priority 5 asking 1-4 CPU."""
    objects: list[Obj] = []
    for n in range(draw(st.integers(1, 6))):
        name = f"n{n}"
        objects.append(node(name, cpu="4"))
        used = 0
        for i in range(draw(st.integers(0, 5))):
            cpu = draw(st.sampled_from(CPUS))
            milli = int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000
            if used + milli > 4000:
                break
            used += milli
            prio = draw(st.integers(0, 3))
            started = draw(st.integers(0, 3))
            objects.append(_running(f"{name}-p{i}", name, cpu, prio, started))
    cpu = draw(st.sampled_from(["1", "2", "3", "4"]))
    objects.append(pod("preemptor", cpu=cpu, memory=None, priority=5))
    return objects


def _search(session: Session) -> tuple[Candidate | None, list[tuple[Any, Candidate]]]:
    """The action's choice, and (bound, candidate) for every candidate node simulated."""
    search = VictimSearch(SearchArguments(), LowerPriority())
    task = task_of(session, "preemptor")
    fit = session.fit(task)
    every = []
    with session.statement() as stmt:
        chosen = search.best(session, stmt, task, fit)
        rows = [int(r) for r in np.flatnonzero(fit.candidates() | fit.feasible)]
        bounds = {n.name: bound for _, (bound, n, _) in search.bounded(session, task, rows)}
        for row in rows:
            n = session.table.nodes[row]
            possible = search.policy.possible(session, task, n)
            cand = search.simulate(session, stmt, task, n, possible) if possible else None
            if cand is not None:
                every.append((bounds.get(n.name), cand))
    return chosen, every


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters())
def test_the_bound_never_exceeds_the_rank(objects: list[Obj]) -> None:
    _, every = _search(cached_session(objects, config=PREEMPT))
    for bound, cand in every:
        assert bound is not None, cand.node.name
        assert bound <= cand.rank(), cand.node.name


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters())
def test_the_search_chooses_as_simulating_every_candidate(objects: list[Obj]) -> None:
    chosen, every = _search(cached_session(objects, config=PREEMPT))
    if not every:
        assert chosen is None
        return
    best = min((cand for _, cand in every), key=Candidate.rank)
    assert chosen is not None
    assert (chosen.node.name, [v.uid for v in chosen.victims]) == (
        best.node.name,
        [v.uid for v in best.victims],
    )


def test_identical_nodes_take_one_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """On nodes alike, the first simulation reaches the bound of every other node."""
    objects: list[Obj] = []
    for n in range(20):
        objects.append(node(f"n{n:02d}", cpu="4"))
        objects.extend(_running(f"n{n:02d}-p{i}", f"n{n:02d}", "900m", 0, 0) for i in range(4))
    objects.append(pod("preemptor", cpu="3", memory=None, priority=10))
    session = cached_session(objects, config=PREEMPT)
    calls: list[str] = []
    simulate = VictimSearch.simulate

    def counted(self: VictimSearch, *args: Any) -> Candidate | None:
        calls.append(args[3].name)
        return simulate(self, *args)

    monkeypatch.setattr(VictimSearch, "simulate", counted)
    chosen, _ = _search(session)
    assert chosen is not None
    assert (chosen.node.name, len(chosen.victims)) == ("n00", 3)
    assert calls[0] == "n00"
    assert len(calls) == 1 + 20  # one for the search, then every node by _search itself


def _window_choice(priorities: list[int], window: int) -> tuple[list[str], str | None]:
    """Nodes n00, n01, ... each full with one 2-CPU pod of the given priority; a
    priority-5 pod asking 2 CPU; the candidate window ``window``. The nodes whose
    simulation may run, and the node chosen."""
    objects: list[Obj] = []
    for i, prio in enumerate(priorities):
        objects += [node(f"n{i:02d}", cpu="2"), _running(f"p{i}", f"n{i:02d}", "2", prio, i % 60)]
    objects.append(pod("preemptor", cpu="2", memory=None, priority=5))
    session = cached_session(objects, config=PREEMPT)
    args = SearchArguments(
        minCandidateNodesPercentage=0,
        minCandidateNodesAbsolute=window,
        maxCandidateNodes=window,
    )
    task = task_of(session, "preemptor")
    fit = session.fit(task)
    window, _ = VictimSearch(args, LowerPriority()).window(session, task, fit)
    window_nodes = [n.name for _, n, _ in window]
    with session.statement() as stmt:
        best = VictimSearch(args, LowerPriority()).best(session, stmt, task, fit)
    return window_nodes, best.node.name if best else None


FAR = [9] * 69
"""69 nodes whose pods are of higher priority than the preemptor: no victim there."""


@pytest.mark.parametrize(
    ("priorities", "window", "evaluated", "chosen"),
    [
        # nodes whose pods are all of higher priority are passed over, not counted
        ([9, 9, 1], 1, ["n02"], "n02"),
        ([9, 1, 9, 2], 2, ["n01", "n03"], "n01"),
        # fewer nodes with victims than the window: all of them
        ([1, 9, 0], 5, ["n00", "n02"], "n02"),
        # no node with victims: nothing
        ([9, 9], 1, [], None),
        # the window stops at k found: n02 (the best) is not looked at; of n00 and n01
        # the victim started later is the one to go
        ([1, 1, 0], 2, ["n00", "n01"], "n01"),
        # past the first rows looked at (64 at least), only while none was found
        ([1, *FAR[:68], 0], 1, ["n00"], "n00"),
        ([*FAR, 0], 1, ["n69"], "n69"),
    ],
)
def test_the_window_passes_over_nodes_without_victims(
    priorities: list[int], window: int, evaluated: list[str], chosen: str | None
) -> None:
    assert _window_choice(priorities, window) == (evaluated, chosen)
