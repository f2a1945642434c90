"""Tests of scheduler.framework.statement: decisions applied at once, undone exactly, and
turned into effects only on commit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.api.errors import AllocationError, InvariantError
from scheduler.api.resource import Resource
from scheduler.api.task import TaskStatus
from scheduler.config import PluginConfig
from scheduler.framework.effects import (
    Bind,
    Dissolution,
    Evict,
    EvictReason,
    Nominate,
    Preemption,
)
from scheduler.framework.session import Session
from scheduler.framework.statement import Statement
from tests.builders import node, pod, session_dump, session_with, task_of

PLUGINS = [PluginConfig(n) for n in ("priority", "gang", "predicates", "proportion", "nodeorder")]
Mi = 2**20


def open_() -> Session:
    """n1 (2 cpu) runs r1 (1 cpu); n2 (2 cpu) is empty; a, b and c are pending, 1 cpu each."""
    return session_with(
        [node("n1", cpu="2", memory="1Gi"), node("n2", cpu="2", memory="1Gi")],
        [
            pod("r1", cpu="1", memory="1Mi", node="n1"),
            pod("a", cpu="1", memory="1Mi"),
            pod("b", cpu="1", memory="1Mi"),
            pod("c", cpu="1", memory="1Mi"),
        ],
        PLUGINS,
    )


def proportion(session: Session) -> Any:
    return next(p for _, p in session.plugins if p.name == "proportion")


ONE = Resource({"cpu": 1000, "memory": Mi, "pods": 1})


@pytest.mark.parametrize(
    ("op", "status", "node_name", "accounts"),
    [
        ("allocate", TaskStatus.ALLOCATED, "n2", (ONE, Resource(), Resource())),
        ("pipeline", TaskStatus.PIPELINED, "n2", (Resource(), ONE, Resource())),
        ("evict", TaskStatus.RELEASING, "n1", (ONE, Resource(), ONE)),
    ],
    ids=["allocate", "pipeline", "evict"],
)
def test_operation_applies_at_once(
    op: str, status: TaskStatus, node_name: str, accounts: tuple[Resource, Resource, Resource]
) -> None:
    """``accounts`` is the node's (used, nominated, releasing) while the operation holds."""
    session = open_()
    before = session_dump(session)
    task = task_of(session, "r1" if op == "evict" else "a")
    with session.statement() as stmt:
        if op == "evict":
            stmt.evict(task, "test")
        else:
            getattr(stmt, op)(task, "n2")
        assert (task.status, task.node_name) == (status, node_name)
        n = session.nodes[node_name]
        assert (n.used, n.nominated, n.releasing) == accounts
        row = session.table.row[node_name]
        assert session.table.idle[row].tolist() == session.table.vector(n.idle).tolist()
        assert session.table.nominated[row].tolist() == session.table.vector(n.nominated).tolist()
        assert stmt.operations == 1
    # left without commit: discarded
    assert session_dump(session) == before
    assert session.effects == []


def test_commit_turns_operations_into_effects_in_order() -> None:
    session = open_()
    a, b, r1 = (task_of(session, n) for n in ("a", "b", "r1"))
    with session.statement() as stmt:
        stmt.allocate(a, "n2")
        stmt.pipeline(b, "n1")
        stmt.evict(r1, EvictReason.PREEMPTED, preemptor=b)
        effects = stmt.commit()
    assert effects == [
        Bind(a, "n2", {}),
        Preemption((Nominate(b, "n1"),), (Evict(r1, "n1", EvictReason.PREEMPTED, b),)),
    ]
    assert session.effects == effects
    assert a.status is TaskStatus.BINDING  # assumed, waiting for the bind call
    assert b.status is TaskStatus.PIPELINED
    assert r1.status is TaskStatus.RELEASING
    assert session.nodes["n2"].used == ONE  # leaving the block after commit undoes nothing


def test_rollback_to_checkpoint_undoes_only_what_followed() -> None:
    session = open_()
    a, b, c = (task_of(session, n) for n in ("a", "b", "c"))
    with session.statement() as stmt:
        stmt.allocate(a, "n2")
        after_a = session_dump(session)
        cp = stmt.checkpoint()
        stmt.allocate(b, "n2")
        stmt.allocate(c, "n1")
        assert stmt.operations == 3
        stmt.rollback(cp)
        assert stmt.operations == 1
        assert session_dump(session) == after_a
        assert (b.status, c.status) == (TaskStatus.PENDING, TaskStatus.PENDING)
        stmt.allocate(b, "n1")
        effects = stmt.commit()
    assert [(e.task.name, e.node) for e in effects if isinstance(e, Bind)] == [
        ("a", "n2"),
        ("b", "n1"),
    ]


def test_rollback_restores_plugin_state() -> None:
    session = open_()
    plugin = proportion(session)
    before = plugin.allocated("default")
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "a"), "n2")
        assert plugin.allocated("default") == before + ONE
        stmt.evict(task_of(session, "r1"), "x")
        assert plugin.allocated("default") == before  # releasing no longer counts
        stmt.rollback(0)
    assert plugin.allocated("default") == before


def test_pipelined_then_allocated_and_rolled_back() -> None:
    session = open_()
    before = session_dump(session)
    a = task_of(session, "a")
    with session.statement() as stmt:
        stmt.pipeline(a, "n1")
        stmt.evict(task_of(session, "r1"), "room")
        stmt.allocate(a, "n2")  # moves from the nomination on n1 to n2
        assert session.nodes["n1"].nominated == Resource()
        assert session.nodes["n2"].used == ONE
        stmt.discard()
    assert session_dump(session) == before


def test_exception_in_block_discards_and_propagates() -> None:
    session = open_()
    before = session_dump(session)
    with pytest.raises(RuntimeError, match="boom"), session.statement() as stmt:
        stmt.allocate(task_of(session, "a"), "n2")
        raise RuntimeError("boom")
    assert session_dump(session) == before


def test_transaction_context_manager_discards() -> None:
    session = open_()
    before = session_dump(session)
    with session.statement() as stmt:
        assert isinstance(stmt, Statement)
        stmt.allocate(task_of(session, "a"), "n2")
    assert session_dump(session) == before


@pytest.mark.parametrize(
    "close",
    [lambda s: s.commit(), lambda s: s.discard()],
    ids=["after-commit", "after-discard"],
)
def test_closed_statement_refuses_operations(close: Callable[[Statement], Any]) -> None:
    session = open_()
    a = task_of(session, "a")
    stmt = session.statement()
    close(stmt)
    for action in (
        lambda: stmt.allocate(a, "n2"),
        lambda: stmt.pipeline(a, "n2"),
        lambda: stmt.evict(task_of(session, "r1"), "x"),
        lambda: stmt.rollback(0),
        stmt.commit,
    ):
        with pytest.raises(InvariantError, match="already committed or discarded"):
            action()
    stmt.discard()  # idempotent


def test_over_allocation_raises() -> None:
    session = open_()
    a, b, c = (task_of(session, n) for n in ("a", "b", "c"))
    with session.statement() as stmt:
        stmt.allocate(a, "n1")  # n1 now full
        with pytest.raises(AllocationError, match="does not fit on node n1: insufficient cpu"):
            stmt.allocate(b, "n1")
        stmt.allocate(c, "n2")
        assert stmt.operations == 2


def test_over_allocation_leaves_the_session_unchanged() -> None:
    session = open_()
    a, b = task_of(session, "a"), task_of(session, "b")
    with session.statement() as stmt:
        stmt.allocate(a, "n1")
        before = session_dump(session)
        with pytest.raises(AllocationError):
            stmt.allocate(b, "n1")
        assert session_dump(session) == before
        assert (b.status, b.node_name) == (TaskStatus.PENDING, "")


def test_a_recording_replayed_after_a_rollback_does_the_same_again() -> None:
    """A search tries a place, keeps the statement's recording, rolls back, and later
    replays it: the session ends exactly as the first time, effects included."""
    session = open_()
    a, b, r1 = (task_of(session, n) for n in ("a", "b", "r1"))
    with session.statement() as stmt:
        stmt.allocate(a, "n2")
        stmt.evict(r1, EvictReason.PREEMPTED, preemptor=b)
        stmt.pipeline(b, "n1")
        recording = stmt.recorded()
        once = session_dump(session)
    assert len(recording) == 3
    before = session_dump(session)
    with session.statement() as stmt:
        stmt.replay(recording)
        assert session_dump(session) == once
        effects = stmt.commit()
    assert [type(e) for e in effects] == [Bind, Preemption]
    assert before != once


def test_a_replay_on_a_session_that_moved_is_refused() -> None:
    session = open_()
    a = task_of(session, "a")
    with session.statement() as stmt:
        stmt.allocate(a, "n2")
        recording = stmt.recorded()
    with session.statement() as stmt:
        stmt.allocate(a, "n1")  # the task is elsewhere now
        with pytest.raises(InvariantError, match="moved since"):
            stmt.replay(recording)


def test_a_preemption_and_a_dissolution_are_each_one_effect_whole() -> None:
    """The evictions and nominations a statement committed leave it as one Preemption
    (every nomination with the evictions made for it), a dissolution's evictions as one
    Dissolution per gang, each in the place of its first operation: nothing downstream
    regroups per-pod effects."""
    session = open_()
    a, b, r1 = (task_of(session, n) for n in ("a", "b", "r1"))
    with session.statement() as stmt:
        stmt.evict(r1, EvictReason.PREEMPTED, preemptor=b)
        stmt.allocate(a, "n2")
        stmt.pipeline(b, "n1")
        effects = stmt.commit()
    (preemption, bind) = effects
    assert isinstance(preemption, Preemption) and isinstance(bind, Bind)
    assert preemption.victims_of(b) == (Evict(r1, "n1", EvictReason.PREEMPTED, b),)
    assert preemption.nominations == (Nominate(b, "n1"),)


def test_an_eviction_for_no_nominated_preemptor_is_refused_at_commit() -> None:
    session = open_()
    b, r1 = (task_of(session, n) for n in ("b", "r1"))
    with session.statement() as stmt:
        stmt.evict(r1, EvictReason.PREEMPTED, preemptor=b)
        with pytest.raises(InvariantError, match="without a nominated preemptor"):
            stmt.commit()


def test_a_dissolution_is_one_effect_per_gang() -> None:
    session = open_()
    r1 = task_of(session, "r1")
    with session.statement() as stmt:
        stmt.evict(r1, EvictReason.DISSOLVED)
        effects = stmt.commit()
    assert effects == [Dissolution(r1.job_id, (Evict(r1, "n1", EvictReason.DISSOLVED),))]
