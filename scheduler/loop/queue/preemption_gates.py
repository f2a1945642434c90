"""Preemption gates: a job held while the evictions made for it run (layer 3, loop).

DESIGN section 4 (KEP-4832's gate). When a cycle commits a preemption, the preemption
executor closes the preemptor's job's gate (:meth:`Gates.close`), naming the victims
whose deletion must be seen; a gang's several preemptions of one cycle share the gate. The
gate opens when every preemption's API calls are done (:meth:`Gates.calls_done`) and
every victim is gone (:meth:`Gates.victim_gone`, from the cache's events or a NotFound)
and no DRA claim holds devices for a victim any more (:meth:`Gates.devices_released`:
the claim controller releases them after the deletion), or at once when a preemption's
calls fail. If the deletions are not seen within
``timeout`` seconds of the calls ending, it opens anyway (a missed event must never hold a
preemptor for ever; :meth:`Gates.expire`). Each gate has a token: a report about a gate
that has opened (and maybe closed again for a later preemption) changes nothing.

Owned by the scheduling queue (:mod:`scheduler.loop.queue`); its task only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api.holds import GateTicket, Hold, HoldKind
from scheduler.logging import get_logger

log = get_logger("sluice.preemption")

GATE_TIMEOUT = 60.0
"""Seconds after its calls end that a gate waits for its victims' deletions to show."""


@dataclass(slots=True)
class _Gate:
    job: str
    token: int
    waiting_for: set[str] = field(default_factory=set)
    """Victims (uids) whose deletion has not been seen yet."""
    waiting_devices: set[str] = field(default_factory=set)
    """Victims (uids) whose DRA claims still hold devices for them."""
    calls: int = 0
    """Preemptions of the job whose API calls have not finished."""
    deadline: float = math.inf
    """When it opens anyway (set when the calls end with victims still there)."""


class Gates:
    def __init__(self, timeout: float = GATE_TIMEOUT) -> None:
        self.timeout = timeout
        self._gates: dict[str, _Gate] = {}
        self._tokens = 0

    def close(self, job: str, victims: Iterable[str], devices: Iterable[str] = ()) -> GateTicket:
        """Hold ``job`` while a preemption of its runs: one more preemption's calls to
        wait for, ``victims`` (uids still there) to see deleted, and ``devices`` (victims
        whose DRA claims hold devices) to see released."""
        gate = self._gates.get(job)
        if gate is None:
            self._tokens += 1
            gate = self._gates[job] = _Gate(job, self._tokens)
        gate.waiting_for.update(victims)
        gate.waiting_devices.update(devices)
        gate.calls += 1
        gate.deadline = math.inf
        return GateTicket(job, gate.token)

    def calls_done(self, ticket: GateTicket, *, ok: bool, now: float) -> bool:
        """One preemption's calls ended; True when its gate opened. A failure opens it at
        once; otherwise it opens when no calls are left and every victim is gone, or
        ``timeout`` seconds later."""
        gate = self._gates.get(ticket.job)
        if gate is None or gate.token != ticket.token:
            return False  # opened already (an earlier failure); a new gate is not this one's
        gate.calls -= 1
        if not ok or self._done(gate):
            del self._gates[gate.job]
            return True
        if gate.calls == 0:
            gate.deadline = now + self.timeout
        return False

    def victim_gone(self, uid: str) -> list[str]:
        """A pod's deletion was seen; the jobs whose gate this opened."""
        return self._seen(uid, devices=False)

    def devices_released(self, uid: str) -> list[str]:
        """No DRA claim holds devices for pod ``uid`` any more; the jobs whose gate this
        opened."""
        return self._seen(uid, devices=True)

    def _seen(self, uid: str, *, devices: bool) -> list[str]:
        opened = []
        for gate in list(self._gates.values()):
            waiting = gate.waiting_devices if devices else gate.waiting_for
            if uid in waiting:
                waiting.discard(uid)
                if self._done(gate):
                    del self._gates[gate.job]
                    opened.append(gate.job)
        return opened

    def expire(self, now: float) -> list[str]:
        """Open the gates whose victims' deletions were not seen in time; their jobs."""
        late = [g for g in self._gates.values() if g.deadline <= now]
        for gate in late:
            log.warning(
                "victims not seen deleted in time; opening the gate",
                job=gate.job,
                waiting_for=sorted(gate.waiting_for),
            )
            del self._gates[gate.job]
        return [g.job for g in late]

    def holds(self) -> dict[str, Hold]:
        """Every job held behind its gate, as the next cycle sees it."""
        return {
            job: Hold(
                HoldKind.EVICTIONS,
                until=g.deadline,
                victims=frozenset(g.waiting_for),
                devices=frozenset(g.waiting_devices),
                calls_left=g.calls,
            )
            for job, g in self._gates.items()
        }

    def next_deadline(self, now: float) -> float:
        """When a gate next opens by its timeout after ``now`` (``inf``: none will)."""
        return min((g.deadline for g in self._gates.values() if g.deadline > now), default=math.inf)

    def __len__(self) -> int:
        return len(self._gates)

    def __contains__(self, job: object) -> bool:
        return job in self._gates

    @staticmethod
    def _done(gate: _Gate) -> bool:
        return gate.calls == 0 and not gate.waiting_for and not gate.waiting_devices
