"""scheduler/cache/cluster_state.py: where tasks count, and the record of changes that the
snapshot builder takes (the seam between the parts that change the state and the one
that copies it)."""

from __future__ import annotations

import pytest

from scheduler.api.core_objects import node_from_object, task_from_pod
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.cache.cluster_state import ClusterState
from tests.builders import node, pod


def state_with(*nodes: str) -> ClusterState:
    state = ClusterState("sluice", None)
    for name in nodes:
        state.nodes[name] = node_from_object(node(name))
    return state


def add(state: ClusterState, name: str, where: str | None = None) -> TaskInfo:
    task = task_from_pod(pod(name, node=where))
    state.tasks[task.uid] = task
    state.attach(task)
    return task


@pytest.mark.parametrize(
    ("status", "counted"),
    [
        (TaskStatus.RUNNING, True),
        (TaskStatus.BINDING, True),
        (TaskStatus.RELEASING, True),
        (TaskStatus.PIPELINED, True),
        (TaskStatus.SUCCEEDED, False),
    ],
    ids=["running", "binding", "releasing", "nominated", "finished"],
)
def test_move_counts_a_task_where_its_status_uses_the_node(
    status: TaskStatus, counted: bool
) -> None:
    state = state_with("n1", "n2")
    task = add(state, "p", "n1")
    state.take_changes()
    state.move(task.uid, status, "n2")
    assert task.uid not in state.nodes["n1"].tasks
    assert (task.uid in state.nodes["n2"].tasks) is counted
    assert state.take_changes() == ({task.uid}, {"n1", "n2"})


def test_a_task_waits_off_node_until_its_node_comes() -> None:
    state = state_with()
    task = add(state, "p", "n1")
    assert state.off_node == {"n1": {task.uid}}
    state.detach(task)
    assert state.off_node == {}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s.task_changed("t"), ({"t"}, set())),
        (lambda s: s.node_changed("n"), (set(), {"n"})),
        (lambda s: None, (set(), set())),
    ],
    ids=["task", "node", "nothing"],
)
def test_take_changes_hands_each_change_once(change: object, expected: object) -> None:
    state = state_with()
    change(state)  # type: ignore[operator]
    assert state.take_changes() == expected
    assert state.take_changes() == (set(), set())


def test_move_of_an_unknown_task_changes_nothing() -> None:
    state = state_with("n1")
    assert state.move("nobody", TaskStatus.RUNNING, "n1") is None
    assert state.take_changes() == (set(), set())
