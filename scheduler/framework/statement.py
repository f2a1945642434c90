"""Statement: a transaction of scheduling decisions over a session (layer 1).

Operations apply to the session at once (so later decisions in the same cycle see them)
and are recorded, so they can be undone exactly::

    with session.statement() as stmt:
        cp = stmt.checkpoint()
        stmt.allocate(task, node)
        if not session.job_ready(job):
            stmt.rollback(cp)          # undo back to the checkpoint
        else:
            stmt.commit()              # turn the decisions into effects

Leaving the block without :meth:`commit` (normally or by an exception) discards every
operation. A statement is used by one action, in one cycle, from one thread.

If undoing an operation fails (a plugin raises in a placement handler while the statement
rolls back), the session no longer matches any state the statement knew:
:class:`~scheduler.api.errors.SessionCorruptedError` is raised, which no per-job boundary
catches, so the loop throws the whole cycle away.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, assert_never

from scheduler.api.errors import InvariantError, PluginError, SessionCorruptedError
from scheduler.api.job import JobInfo, PodGroupPhase
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.framework.effects import (
    Bind,
    ClearNomination,
    Dissolution,
    Effect,
    Evict,
    EvictReason,
    Nominate,
    Preemption,
    SetPhase,
    VictimBundle,
)

if TYPE_CHECKING:
    from scheduler.framework.session import Session


class _Kind(enum.Enum):
    """What an operation did to its task."""

    ALLOCATE = "allocate"
    PIPELINE = "pipeline"
    EVICT = "evict"
    UNPIPELINE = "unpipeline"

    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class _Move:
    """A task moved (placed, nominated, evicted, its nomination withdrawn)."""

    kind: _Kind
    task: TaskInfo
    node: str
    prev_status: TaskStatus
    prev_node: str
    reason: EvictReason = EvictReason.PREEMPTED
    preemptor: TaskInfo | None = None
    queue: str = ""
    bundle: VictimBundle = VictimBundle.POD
    breaks_budget: bool = False


@dataclass(frozen=True, slots=True)
class _Phase:
    """A PodGroup's phase changed (admitted: Pending to Inqueue)."""

    job: JobInfo
    phase: PodGroupPhase
    prev: PodGroupPhase


_Op = _Move | _Phase

_TARGET = {
    _Kind.ALLOCATE: TaskStatus.ALLOCATED,
    _Kind.PIPELINE: TaskStatus.PIPELINED,
    _Kind.EVICT: TaskStatus.RELEASING,
    _Kind.UNPIPELINE: TaskStatus.PENDING,
}
"""The status each kind of move leaves its task in."""


@dataclass(frozen=True, slots=True)
class Recording:
    """The operations a statement recorded after a checkpoint (:meth:`Statement.recorded`),
    to be done again on the same state (:meth:`Statement.replay`): a search that tried
    several places keeps the best one's recording and replays it, instead of searching
    it again."""

    ops: tuple[_Op, ...]

    def __len__(self) -> int:
        return len(self.ops)


class Statement:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._ops: list[_Op] = []
        self._done = False

    def __enter__(self) -> Statement:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._done:
            if exc is None:
                self.discard()
                return
            try:
                self.discard()
            except SessionCorruptedError as failed:
                raise failed from exc

    @property
    def operations(self) -> int:
        return len(self._ops)

    def _check_open(self) -> None:
        if self._done:
            raise InvariantError("statement already committed or discarded")

    def allocate(self, task: TaskInfo, node: str) -> None:
        """Place pending ``task`` on ``node``; raises AllocationError if it does not fit."""
        op = _Move(_Kind.ALLOCATE, task, node, task.status, task.node_name)
        self._record(op, TaskStatus.ALLOCATED, node)

    def pipeline(self, task: TaskInfo, node: str) -> None:
        """Nominate pending ``task`` to ``node``: it waits there for room being freed."""
        op = _Move(_Kind.PIPELINE, task, node, task.status, task.node_name)
        self._record(op, TaskStatus.PIPELINED, node)

    def evict(
        self,
        task: TaskInfo,
        reason: EvictReason,
        preemptor: TaskInfo | None = None,
        queue: str = "",
        bundle: VictimBundle = VictimBundle.POD,
        *,
        breaks_budget: bool = False,
    ) -> None:
        """Mark a task on a node as releasing: its room will be freed (for ``preemptor``,
        of queue ``queue``; ``bundle``: what it does to its gang; ``breaks_budget``:
        whether a PodDisruptionBudget allows no more disruption of it)."""
        op = _Move(
            _Kind.EVICT,
            task,
            task.node_name,
            task.status,
            task.node_name,
            reason,
            preemptor,
            queue,
            bundle,
            breaks_budget,
        )
        self._record(op, TaskStatus.RELEASING, task.node_name)

    def unpipeline(self, task: TaskInfo) -> None:
        """Withdraw ``task``'s nomination: it is pending again."""
        op = _Move(_Kind.UNPIPELINE, task, task.node_name, task.status, task.node_name)
        self._record(op, TaskStatus.PENDING, "")

    def enqueue(self, job: JobInfo) -> None:
        """Admit PodGroup ``job``: Pending to Inqueue. The plugins are told first
        (``ON_ENQUEUE``); if one raises, nothing changed. Undoing it sets the phase back
        (the plugins are not told again: the enqueue action commits each admission at
        once, so only a failure before the commit undoes one)."""
        self._check_open()
        self._session.job_enqueued(job)
        self._ops.append(_Phase(job, PodGroupPhase.INQUEUE, job.phase))
        job.phase = PodGroupPhase.INQUEUE

    def _record(self, op: _Move, status: TaskStatus, node: str) -> None:
        """Apply ``op`` to the session and record it. A move refused (AllocationError)
        changed nothing and is not recorded; a move after which a plugin's handler raised
        (PluginError) did happen, so it is recorded for the rollback to undo."""
        self._check_open()
        try:
            self._session.move(op.task, status, node)
        except PluginError:
            self._ops.append(op)
            raise
        self._ops.append(op)

    def undo(self, task: TaskInfo) -> None:
        """Undo the one operation recorded for ``task``, wherever it stands.

        Operations on different tasks are independent, so one can be taken back out of
        order: preemption re-adds a candidate victim this way. Raises InvariantError if
        no operation is recorded for ``task``.
        """
        self._check_open()
        for i in range(len(self._ops) - 1, -1, -1):
            op = self._ops[i]
            if isinstance(op, _Move) and op.task is task:
                del self._ops[i]
                self._session.move(task, op.prev_status, op.prev_node)
                return
        raise InvariantError(f"no operation recorded for {task.key}")

    def evicted(self) -> list[TaskInfo]:
        """The tasks this statement evicts so far, in order (before any commit)."""
        return [op.task for op in self._ops if isinstance(op, _Move) and op.kind is _Kind.EVICT]

    def checkpoint(self) -> int:
        """A mark to roll back to."""
        return len(self._ops)

    def recorded(self, checkpoint: int = 0) -> Recording:
        """The operations recorded after ``checkpoint``, in order (to replay later)."""
        return Recording(tuple(self._ops[checkpoint:]))

    def replay(self, recording: Recording) -> None:
        """Do again, in order, the operations of ``recording``, taken from a statement of
        this session and rolled back since: the session must be as it was then (each
        task where it was; InvariantError otherwise). Plugins are told of each move as
        for any operation; an enqueue's plugins are told again."""
        self._check_open()
        for op in recording.ops:
            match op:
                case _Move():
                    if (op.task.status, op.task.node_name) != (op.prev_status, op.prev_node):
                        raise InvariantError(
                            f"replay of {op.kind.value} {op.task.key}: the task moved since"
                        )
                    node = "" if op.kind is _Kind.UNPIPELINE else op.node
                    self._record(op, _TARGET[op.kind], node)
                case _Phase():
                    self.enqueue(op.job)
                case _:
                    assert_never(op)

    def rollback(self, checkpoint: int) -> None:
        """Undo, newest first, every operation recorded after ``checkpoint``.

        Raises SessionCorruptedError if an undo raises (the rest is still undone)."""
        self._check_open()
        failed: Exception | None = None
        while len(self._ops) > checkpoint:
            op = self._ops.pop()
            try:
                self._undo(op)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            self._done = True
            raise SessionCorruptedError(f"a rollback failed: {failed}") from failed

    def _undo(self, op: _Op) -> None:
        match op:
            case _Move():
                self._session.move(op.task, op.prev_status, op.prev_node)
            case _Phase():
                op.job.phase = op.prev
            case _:
                assert_never(op)

    def discard(self) -> None:
        """Undo everything and close the statement (idempotent)."""
        if self._done:
            return
        try:
            self.rollback(0)
        finally:
            self._done = True

    def commit(self) -> list[Effect]:
        """Close the statement; its operations become effects, recorded on the session.

        The plugins' bind annotations are asked first: if one raises, nothing is committed
        and the statement is still open (its owner's boundary discards it)."""
        self._check_open()
        placed = [op for op in self._ops if isinstance(op, _Move) and op.kind is _Kind.ALLOCATE]
        annotations = {
            op.task.uid: self._session.bind_annotations(op.task, op.node) for op in placed
        }
        claims = {op.task.uid: self._session.bind_claims(op.task, op.node) for op in placed}
        volumes = {op.task.uid: self._session.bind_volumes(op.task, op.node) for op in placed}
        effects = self._effects(annotations, claims, volumes)
        self._done = True
        for op in placed:
            op.task.status = TaskStatus.BINDING
        self._session.effects.extend(effects)
        return effects

    def _effects(
        self,
        annotations: dict[str, dict[str, str]],
        claims: dict[str, Any],
        volumes: dict[str, Any],
    ) -> list[Effect]:
        """The effects of the operations, in their order: one per placement, phase and
        withdrawn nomination; the evictions and nominations of a preemption as one
        :class:`Preemption` (in the place of the first of them: the actions evict, then
        nominate), a dissolution's evictions as one :class:`Dissolution` per gang. Raises
        InvariantError for an eviction whose preemptor is not nominated with it."""
        effects: list[Effect | None] = []
        evictions: list[Evict] = []
        nominations: list[Nominate] = []
        preemption_at = -1
        dissolved: dict[str, tuple[int, list[Evict]]] = {}
        for op in self._ops:
            match op:
                case _Phase():
                    effects.append(SetPhase(op.job, op.phase))
                case _Move(kind=_Kind.ALLOCATE):
                    uid = op.task.uid
                    effects.append(
                        Bind(op.task, op.node, annotations[uid], claims[uid], volumes[uid])
                    )
                case _Move(kind=_Kind.UNPIPELINE):
                    effects.append(ClearNomination(op.task, op.node))
                case _Move(kind=_Kind.PIPELINE | _Kind.EVICT):
                    if op.kind is _Kind.EVICT and op.reason is EvictReason.DISSOLVED:
                        if op.task.job_id not in dissolved:
                            dissolved[op.task.job_id] = (len(effects), [])
                            effects.append(None)  # its place
                        dissolved[op.task.job_id][1].append(_evict(op))
                        continue
                    if preemption_at < 0:
                        preemption_at = len(effects)
                        effects.append(None)  # its place
                    if op.kind is _Kind.EVICT:
                        evictions.append(_evict(op))
                    else:
                        nominations.append(Nominate(op.task, op.node))
                case _:
                    raise InvariantError(f"an operation with no effect: {op!r}")
        if preemption_at >= 0:
            nominated = {n.task.uid for n in nominations}
            orphans = [
                e for e in evictions if e.preemptor is None or e.preemptor.uid not in nominated
            ]
            if orphans:
                raise InvariantError(f"evictions without a nominated preemptor: {orphans}")
            effects[preemption_at] = Preemption(tuple(nominations), tuple(evictions))
        for job, (at, evicts) in dissolved.items():
            effects[at] = Dissolution(job, tuple(evicts))
        return [e for e in effects if e is not None]


def _evict(op: _Move) -> Evict:
    return Evict(op.task, op.node, op.reason, op.preemptor, op.queue, op.bundle, op.breaks_budget)
