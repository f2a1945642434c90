"""The one-row form of the predicates filter agrees with the full form on every row, and
its shortfall is what the resource check lacks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import PluginConfig
from tests.builders import node, pod, session_with, task_of

CPUS = st.sampled_from(["100m", "500m", "1", "2", "3"])


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.sampled_from(["1", "2", "4"]), st.booleans(), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    running=st.lists(st.tuples(st.integers(0, 4), CPUS), max_size=6),
    want=CPUS,
    tolerate=st.booleans(),
    releasing=st.booleans(),
)
def test_row_filter_matches_the_full_filter(
    nodes: list[tuple[str, bool, bool]],
    running: list[tuple[int, str]],
    want: str,
    tolerate: bool,
    releasing: bool,
) -> None:
    node_objs = [
        node(
            f"n{i}",
            cpu=cpu,
            taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}] if tainted else None,
            unschedulable=cordoned,
        )
        for i, (cpu, tainted, cordoned) in enumerate(nodes)
    ]
    pods = [pod(f"r{j}", cpu=c, node=f"n{i % len(nodes)}") for j, (i, c) in enumerate(running)]
    extra = {"tolerations": [{"key": "k", "operator": "Exists"}]} if tolerate else {}
    pods.append(pod("new", cpu=want, priority=5, **extra))
    session = session_with(node_objs, pods, [PluginConfig("predicates")])
    task = task_of(session, "new")
    feasible = session.fit(task, releasing=releasing).feasible
    for row in range(len(session.table)):
        assert session.fits_on(task, session.table.nodes[row].name, releasing=releasing) == bool(
            feasible[row]
        )


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(st.sampled_from(["1", "2", "4"]), min_size=1, max_size=5),
    running=st.lists(st.tuples(st.integers(0, 4), CPUS), max_size=6),
    want=CPUS,
    releasing=st.booleans(),
)
def test_shortfall_is_what_the_resource_check_lacks(
    nodes: list[str], running: list[tuple[int, str]], want: str, releasing: bool
) -> None:
    """Zero exactly where the task fits; elsewhere, freeing that much makes it fit."""
    node_objs = [node(f"n{i}", cpu=cpu) for i, cpu in enumerate(nodes)]
    pods = [pod(f"r{j}", cpu=c, node=f"n{i % len(nodes)}") for j, (i, c) in enumerate(running)]
    pods.append(pod("new", cpu=want, priority=5))
    session = session_with(node_objs, pods, [PluginConfig("predicates")])
    task = task_of(session, "new")
    table = session.table
    rows = np.arange(len(table))
    lacking = session.shortfall(task, rows, releasing=releasing)
    feasible = session.fit(task, releasing=releasing).feasible
    for row in rows:
        assert (not lacking[row].any()) == bool(feasible[row])
        table.idle[row] += lacking[row]
        assert session.fits_on(task, table.nodes[int(row)].name, releasing=releasing)
