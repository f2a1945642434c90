"""Tests of scheduler.api.node: exact accounting, and strict placement refusing to over-allocate."""

from __future__ import annotations

import pytest

from scheduler.api.core_objects import node_from_object, task_from_pod
from scheduler.api.errors import AllocationError
from scheduler.api.node import NodeInfo
from scheduler.api.resource import Resource
from scheduler.api.task import TaskInfo, TaskStatus
from tests.builders import node, pod

Mi = 2**20


def task(name: str, cpu: str, status: TaskStatus, node_name: str = "n1") -> TaskInfo:
    t = task_from_pod(pod(name, cpu=cpu, memory="1Mi"))
    t.status = status
    t.node_name = node_name if status is not TaskStatus.PENDING else ""
    return t


def fresh(cpu: str = "2") -> NodeInfo:
    return node_from_object(node("n1", cpu=cpu, memory="1Gi", pods=10))


def R(cpu: int, memory: int, pods: int) -> Resource:
    return Resource({"cpu": cpu, "memory": memory, "pods": pods})


@pytest.mark.parametrize(
    ("status", "used", "releasing", "nominated"),
    [
        (TaskStatus.ALLOCATED, R(500, Mi, 1), R(0, 0, 0), R(0, 0, 0)),
        (TaskStatus.BINDING, R(500, Mi, 1), R(0, 0, 0), R(0, 0, 0)),
        (TaskStatus.BOUND, R(500, Mi, 1), R(0, 0, 0), R(0, 0, 0)),
        (TaskStatus.RUNNING, R(500, Mi, 1), R(0, 0, 0), R(0, 0, 0)),
        (TaskStatus.RELEASING, R(500, Mi, 1), R(500, Mi, 1), R(0, 0, 0)),
        (TaskStatus.PIPELINED, R(0, 0, 0), R(0, 0, 0), R(500, Mi, 1)),
        (TaskStatus.SUCCEEDED, R(0, 0, 0), R(0, 0, 0), R(0, 0, 0)),
    ],
    ids=lambda v: v.value if isinstance(v, TaskStatus) else None,
)
def test_accounting_by_status(
    status: TaskStatus, used: Resource, releasing: Resource, nominated: Resource
) -> None:
    n = fresh()
    t = task("a", "500m", status)
    n.add_task(t)
    assert (n.used, n.releasing, n.nominated) == (used, releasing, nominated)
    assert n.idle == n.allocatable - used
    assert n.future_idle == n.allocatable - used + releasing - nominated
    assert t.uid in n.tasks
    n.remove_task(t)
    assert (n.used, n.releasing, n.nominated) == (Resource(), Resource(), Resource())
    assert n.tasks == {}


@pytest.mark.parametrize(
    ("existing", "cpu", "strict", "ok"),
    [
        ([], "2", True, True),
        ([], "2001m", True, False),
        (["1500m"], "500m", True, True),
        (["1500m"], "501m", True, False),
        (["1500m"], "501m", False, True),
        (["2"], "1", False, True),
    ],
    ids=[
        "exactly-full",
        "one-milli-over",
        "fills-rest",
        "over-by-one",
        "lenient-over",
        "lenient-overcommitted",
    ],
)
def test_strict_add_refuses_to_over_allocate(
    existing: list[str], cpu: str, strict: bool, ok: bool
) -> None:
    n = fresh()
    for i, c in enumerate(existing):
        n.add_task(task(f"e{i}", c, TaskStatus.RUNNING))
    before = (n.used, dict(n.tasks))
    t = task("new", cpu, TaskStatus.ALLOCATED)
    if ok:
        n.add_task(t, strict=strict)
        assert t.uid in n.tasks
    else:
        with pytest.raises(AllocationError, match="insufficient cpu"):
            n.add_task(t, strict=strict)
        assert (n.used, dict(n.tasks)) == before


def test_strict_ignores_pipelined_and_counts_pods() -> None:
    n = node_from_object(node("n1", cpu="1", memory="1Gi", pods=1))
    n.add_task(task("a", "1", TaskStatus.PIPELINED), strict=True)  # nominations are not checked
    n.add_task(task("b", "1", TaskStatus.ALLOCATED), strict=True)
    with pytest.raises(AllocationError, match=r"insufficient pods$"):
        n.add_task(task("c", "0", TaskStatus.ALLOCATED), strict=True)
    with pytest.raises(AllocationError, match=r"insufficient cpu, pods$"):
        n.add_task(task("d", "1m", TaskStatus.ALLOCATED), strict=True)


def test_add_twice_and_remove_missing_raise() -> None:
    n = fresh()
    t = task("a", "1", TaskStatus.RUNNING)
    n.add_task(t)
    with pytest.raises(AllocationError, match="already on node n1"):
        n.add_task(t)
    n.remove_task(t)
    with pytest.raises(AllocationError, match="is not on node n1"):
        n.remove_task(t)


def test_remove_uses_the_status_held_when_added() -> None:
    n = fresh()
    t = task("a", "1", TaskStatus.RUNNING)
    n.add_task(t)
    t.status = TaskStatus.PIPELINED  # changed behind the node's back
    n.remove_task(t)
    assert (n.used, n.nominated) == (Resource(), Resource())


def test_clone_is_independent() -> None:
    n = fresh()
    t = task("a", "1", TaskStatus.RUNNING)
    n.add_task(t)
    copy = n.clone()
    copy.add_task(task("b", "1", TaskStatus.RUNNING))
    assert len(n.tasks) == 1 and n.used == R(1000, Mi, 1)
    assert len(copy.tasks) == 2 and copy.used == R(2000, 2 * Mi, 2)
    other = t.clone()
    mapped = n.clone({t.uid: other})
    assert mapped.tasks[t.uid] is other
