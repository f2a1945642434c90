"""The scenarios that name a feature fail when the feature is switched off (issue 38
point 4): a scenario that passes whether or not PodDisruptionBudgets count, or whether
or not a gang's topology constraint holds, shows nothing about them.

Each scenario (tests/scenarios/ and tests/conformance/) with a PodDisruptionBudget is
run with the scheduler seeing no budget at all; each with a topology constraint (a
PodGroup's ``topologyConstraint``, Volcano's ``networkTopology``) with the ``topology``
plugin giving no node sets. Each must then miss its expectation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.plugins.topology import TopologyPlugin
from tests.test_scenarios import check, simulate, split

HERE = Path(__file__).parent
ALL = sorted((HERE / "scenarios").glob("*.yaml")) + sorted(
    p for p in (HERE / "conformance").glob("*/**/*.yaml")
)


def _with(words: tuple[str, ...]) -> list[Path]:
    """The scenarios that run (no ``error`` expected) and mention one of ``words``."""
    out = []
    for path in ALL:
        text = path.read_text()
        if any(w in text for w in words) and "error" not in split(path)[0]["expect"]:
            out.append(path)
    return out


BUDGETED = _with(("PodDisruptionBudget",))
CONSTRAINED = _with(("topologyConstraint", "networkTopology"))

NT = "TestAllocateWithNetWorkTopologies"
VACUOUS = {
    f"{NT}-02-soft-network-topology-constrain-can-allocate-job-when-minava": (
        "minMember 1: the gang's minimum, one pod, is placed inside the preferred domain, and "
        "the other pod later as its surplus, wherever there is room, with or without the "
        "preference"
    ),
    f"{NT}-10-hard-network-topology-constrain-can-allocate-job-when-minava": (
        "minMember 1: the gang's minimum, one pod, is placed inside one domain, and the other "
        "pod later as its surplus, wherever there is room, with or without the constraint"
    ),
    f"{NT}-03-soft-network-topology-constrain-two-available-hypernodes-can": (
        "one pod whose node affinity (nodeRole: master) leaves it a single node: the preference "
        "has nothing to choose between"
    ),
    "TestNodeLevelScoreWithNetWorkTopologies-01-hard-network-topology-constrain-allocate-"
    "job-to-highest-scor": (
        "node-level binpack: the half-full s0 nodes, the domain the constraint chooses, score "
        "highest for both pods with or without it (kube's MostAllocated since issue 37: each "
        "pod fills its node); a decoy that outscored them would change the case itself"
    ),
}
"""Topology cases whose constraint cannot change the outcome, with why: they show that
such a constraint does not stand in the way, and are left out of the guard."""


def _id(path: Path) -> str:
    return str(path.relative_to(HERE).with_suffix(""))


def _misses(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expectation, _ = split(path)
    outcome = simulate(path, tmp_path, capsys)
    try:
        check(expectation["expect"], outcome)
    except AssertionError:
        return
    pytest.fail(f"{path.name} meets its expectation with the feature switched off")


@pytest.mark.parametrize("path", BUDGETED, ids=[_id(p) for p in BUDGETED])
def test_a_budget_scenario_fails_when_budgets_are_ignored(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setattr("scheduler.cache.snapshot_builder.budgets_of", lambda budgets, tasks: ())
    _misses(path, tmp_path, capsys)


GUARDED = [p for p in CONSTRAINED if p.stem not in VACUOUS]


@pytest.mark.parametrize("path", GUARDED, ids=[_id(p) for p in GUARDED])
def test_a_topology_scenario_fails_when_the_constraint_is_ignored(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setattr(TopologyPlugin, "subset", lambda self, *args: None)
    _misses(path, tmp_path, capsys)


def test_the_guarded_sets_are_whole() -> None:
    """Every budget scenario is guarded; every topology case but those whose constraint
    cannot matter (named, with why), each of which exists."""
    assert len(BUDGETED) >= 12
    assert {p.stem for p in CONSTRAINED} >= set(VACUOUS)
    assert len(GUARDED) == len(CONSTRAINED) - len(VACUOUS) >= 24
