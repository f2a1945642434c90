"""NodeTable: the session's nodes as integer columns, for decisions on all nodes at once.

Row ``i`` is ``table.nodes[i]``; column ``j`` is resource ``table.columns[j]``. The
session keeps ``idle`` (allocatable - used) and ``nominated`` in step with every
placement, so predicates and scores read numpy arrays instead of looping in Python.
Columns are the union of every resource named by a node or a task of the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from scheduler.api.node import NodeInfo
from scheduler.api.resource import CPU, MEMORY, PODS, Resource
from scheduler.api.task import TaskStatus

IntMatrix = npt.NDArray[np.int64]
IntVector = npt.NDArray[np.int64]
BoolVector = npt.NDArray[np.bool_]
FloatVector = npt.NDArray[np.float64]
FloatMatrix = npt.NDArray[np.float64]
IndexVector = npt.NDArray[np.intp]


class TableView(Protocol):
    """What plugins read of a :class:`NodeTable` (the session alone changes it).

    The arrays are the table's own: read them, never write them.
    """

    @property
    def columns(self) -> tuple[str, ...]: ...

    @property
    def col(self) -> Mapping[str, int]: ...

    @property
    def nodes(self) -> tuple[NodeInfo, ...]: ...

    @property
    def row(self) -> Mapping[str, int]: ...

    @property
    def allocatable(self) -> IntMatrix: ...

    @property
    def idle(self) -> IntMatrix: ...

    @property
    def releasing(self) -> IntMatrix:
        """Per row, the room held by pods being evicted (part of ``idle``'s used room)."""
        ...

    @property
    def nonzero_pad(self) -> IntMatrix:
        """Per row, what kube's scores add to the node's used room for containers that
        name no CPU or memory request (``NodeInfo.nonzero_pad``)."""
        ...

    def __len__(self) -> int: ...

    def vector(self, res: Mapping[str, int]) -> IntVector: ...

    def request(self, res: Resource) -> IntVector: ...

    def amounts(self, res: Resource) -> tuple[int, ...]: ...

    def free(
        self,
        priority: int,
        uid: str,
        cols: IntVector | slice,
        rows: IndexVector | None = None,
        *,
        releasing: bool = False,
        job: str = "",
    ) -> IntMatrix: ...

    def free_row(
        self,
        priority: int,
        uid: str,
        row: int,
        cols: IntVector,
        *,
        releasing: bool = False,
        job: str = "",
    ) -> IntVector: ...


class NodeTable:
    """Columns of node resources. Owned by one Session; updated only through it."""

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        extra_names: Iterable[str] = (),
        queue_of: Mapping[str, str] | None = None,
        gang_priority: Mapping[str, int] | None = None,
    ) -> None:
        names = {CPU, MEMORY, PODS}
        self.queue_of: Mapping[str, str] = queue_of or {}
        """Job uid -> its queue: nominated room is yielded only within a queue."""
        self.gang_priority: Mapping[str, int] = gang_priority or {}
        """Job uid -> its priority, for gangs (PodGroups of more than one pod): a gang's
        member holds its nominated room at the gang's priority, not its own."""
        for n in nodes:
            names.update(n.allocatable)
        names.update(extra_names)
        self.columns: tuple[str, ...] = tuple(sorted(names))
        self.col: dict[str, int] = {name: j for j, name in enumerate(self.columns)}
        self.nodes: tuple[NodeInfo, ...] = tuple(nodes)
        self.row: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        self._vectors: dict[Resource, IntVector] = {}
        self._amounts: dict[Resource, tuple[int, ...]] = {}
        self.nominations: dict[int, dict[str, tuple[int, str, IntVector]]] = {}
        """Row -> uid -> (priority, job uid, request) of the tasks nominated to that node."""
        shape = (len(self.nodes), len(self.columns))
        if not self.nodes:
            self.allocatable: IntMatrix = np.zeros(shape, dtype=np.int64)
            self.idle: IntMatrix = np.zeros(shape, dtype=np.int64)
            self.nominated: IntMatrix = np.zeros(shape, dtype=np.int64)
            self.releasing: IntMatrix = np.zeros(shape, dtype=np.int64)
            self.nonzero_pad: IntMatrix = np.zeros(shape, dtype=np.int64)
            self.idle_total: IntVector = np.zeros(len(self.columns), dtype=np.int64)
            return
        # Nodes of a cluster share a few shapes: vectors are built once per distinct value.
        self.allocatable = np.array([self.request(n.allocatable) for n in self.nodes])
        self.idle = self.allocatable - np.array([self.request(n.used) for n in self.nodes])
        self.idle_total = self.idle.sum(axis=0)
        """The sum of ``idle`` over every row (kept in step by the session)."""
        self.nominated = np.array([self.request(n.nominated) for n in self.nodes])
        self.releasing = np.array([self.request(n.releasing) for n in self.nodes])
        self.nonzero_pad = np.array([self.request(n.nonzero_pad) for n in self.nodes])
        """Per row, ``NodeInfo.nonzero_pad`` (kept in step by the session)."""
        for i, n in enumerate(self.nodes):
            if not n.nominated.is_zero():
                self.nominations[i] = {
                    t.uid: (
                        self.gang_priority.get(t.job_id, t.priority),
                        t.job_id,
                        self.request(t.request),
                    )
                    for t in n.tasks.values()
                    if t.status is TaskStatus.PIPELINED
                }

    def __len__(self) -> int:
        return len(self.nodes)

    def vector(self, res: Mapping[str, int]) -> IntVector:
        """``res`` as a row aligned with ``columns``. Names outside the columns are ignored."""
        v = np.zeros(len(self.columns), dtype=np.int64)
        for name, amount in res.items():
            j = self.col.get(name)
            if j is not None:
                v[j] = amount
        return v

    def request(self, res: Resource) -> IntVector:
        """Cached :meth:`vector` for task requests (read-only result)."""
        v = self._vectors.get(res)
        if v is None:
            v = self.vector(res)
            v.flags.writeable = False
            self._vectors[res] = v
        return v

    def amounts(self, res: Resource) -> tuple[int, ...]:
        """:meth:`request` as a tuple of ints (cached): for loops in Python."""
        out = self._amounts.get(res)
        if out is None:
            out = self._amounts[res] = tuple(self.request(res).tolist())
        return out

    def free(
        self,
        priority: int,
        uid: str,
        cols: IntVector | slice,
        rows: IndexVector | None = None,
        *,
        releasing: bool = False,
        job: str = "",
    ) -> IntMatrix:
        """Room for a task of ``priority`` (uid ``uid``, of job ``job``) on every row (or on
        ``rows``, in their order), in columns ``cols``.

        ``idle`` less what is nominated to the node, except nominations of lower priority
        in the same queue, and the task's own (KEP-4832: a nominated pod keeps its room
        from pods of equal or lower priority only; and, as priority decides nothing
        across queues, from every pod of another queue: else the copy of a pod a reclaim
        evicted, of higher priority, would take back the room nominated to the reclaimer,
        and be reclaimed again, every other cycle). A gang's member holds its room at the
        gang's priority (:attr:`gang_priority`): a gang starts whole, and a pod of lower
        priority than the gang that took the room of one of its members of lower
        priority still would waste the gang's evictions and make it evict again. Plus the
        room of pods being evicted when ``releasing`` (the view of a preemptor that waits
        for its victims). Without ``job``, nominations of lower priority of any queue
        yield.
        """
        if rows is None:
            free: IntMatrix = self.idle[:, cols] - self.nominated[:, cols]
            if releasing:
                free += self.releasing[:, cols]
            for row, noms in self.nominations.items():
                yielded = self._yielded(noms, priority, uid, job, cols)
                if yielded is not None:
                    free[row] += yielded
            return free
        free = self.idle[rows][:, cols] - self.nominated[rows][:, cols]
        if releasing:
            free += self.releasing[rows][:, cols]
        for i, row in enumerate(rows.tolist()):
            on_row = self.nominations.get(row)
            yielded = self._yielded(on_row, priority, uid, job, cols) if on_row else None
            if yielded is not None:
                free[i] += yielded
        return free

    def free_row(
        self,
        priority: int,
        uid: str,
        row: int,
        cols: IntVector,
        *,
        releasing: bool = False,
        job: str = "",
    ) -> IntVector:
        """:meth:`free` of one row, at the cost of one row."""
        free: IntVector = self.idle[row, cols] - self.nominated[row, cols]
        if releasing:
            free = free + self.releasing[row, cols]
        on_row = self.nominations.get(row)
        yielded = self._yielded(on_row, priority, uid, job, cols) if on_row else None
        if yielded is not None:
            free = free + yielded
        return free

    def _yielded(
        self,
        noms: dict[str, tuple[int, str, IntVector]],
        priority: int,
        uid: str,
        job: str,
        cols: IntVector | slice,
    ) -> IntVector | None:
        """Room nominated on one row that a task of ``priority`` (uid ``uid``, of job
        ``job``) may take: the nominations of lower priority in its queue, and its own.
        None when there is none."""
        out: IntVector | None = None
        queue = self.queue_of.get(job) if job else None
        for other, (prio, owner, vec) in noms.items():
            if other == uid or (
                prio < priority and (queue is None or self.queue_of.get(owner) == queue)
            ):
                out = vec[cols] if out is None else out + vec[cols]
        return out

    def nominate(
        self, node: str, uid: str, priority: int, vec: IntVector, add: bool, *, job: str = ""
    ) -> None:
        """Record (or drop) a task nominated to ``node`` (``job``: its job's uid; a gang's
        member at the gang's priority); keeps :attr:`nominated` in step."""
        i = self.row[node]
        if add:
            priority = self.gang_priority.get(job, priority)
            self.nominations.setdefault(i, {})[uid] = (priority, job, vec)
            self.nominated[i] += vec
        else:
            noms = self.nominations.get(i, {})
            noms.pop(uid, None)
            if not noms:
                self.nominations.pop(i, None)
            self.nominated[i] -= vec
