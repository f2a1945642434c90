"""The ``reserve`` action (layer 2): hold nodes for the starving job ``elect`` chose.

Runs last. For the target (if it has not started this cycle): the nodes on which it will
fit soonest, in the best of its domains (its topology constraint respected): those with
the fewest and smallest pods of its priority or lower to drain per pod of it, exactly
enough for the pods it still needs and no more. From then on the ``reservation`` plugin
keeps every other job of the target's priority or lower off them, so their room goes to
the target as it frees; the target may go anywhere, and is placed by allocate as soon as
it fits. The nodes are kept while they still take the target once drained (a pod of
higher priority may take reserved room: the reservation then moves). A target that
started, or was deleted, releases them.
"""

from __future__ import annotations

from scheduler.actions.starving_jobs import domains, node_rooms, soonest, started, still_needed
from scheduler.api.job import JobInfo
from scheduler.framework.registry import NoArguments
from scheduler.framework.session import Session


class ReserveAction:
    name = "reserve"

    def __init__(self, arguments: NoArguments) -> None:
        del arguments

    def execute(self, session: Session) -> None:
        r = session.reservation
        if r is None:
            return
        job = session.jobs.get(r.job)
        if job is None:
            session.starvation.release("the job was deleted")
            return
        if started(job):
            session.starvation.release("the job started")
            return
        with session.job_scope(job):
            self._reserve_for(session, job)

    @staticmethod
    def _reserve_for(session: Session, job: JobInfo) -> None:
        """Hold the nodes that take the target soonest (inside its boundary: a plugin
        that raises fails the target, not the cycle)."""
        r = session.reservation
        assert r is not None
        tasks = still_needed(session, job)
        if not tasks:
            return
        table = session.table
        best: tuple[tuple[int, int, int], frozenset[str]] | None = None
        for domain in domains(session, job, tasks):
            rooms = node_rooms(session, job, tasks, domain)
            if r.nodes:
                held = [room for room in rooms if table.nodes[room.row].name in r.nodes]
                if sum(room.takes for room in held) >= len(tasks):
                    return  # the nodes held still take the job: keep them
            chosen = soonest(rooms, len(tasks))
            if chosen is None:
                continue
            cost = (sum(c.pods for c in chosen), sum(c.size for c in chosen), len(chosen))
            if best is None or cost < best[0]:
                best = (cost, frozenset(table.nodes[c.row].name for c in chosen))
        if best is not None and best[1] != r.nodes:
            session.starvation.reserve(best[1])
