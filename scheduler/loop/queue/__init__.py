"""The scheduling queue: every hold on a job between cycles, and one view of them per cycle
(layer 3, loop). See :mod:`scheduler.loop.queue.job_queue`."""

from scheduler.api.holds import GateTicket
from scheduler.loop.queue.job_queue import JobQueue
from scheduler.loop.queue.starvation_hold import ReservationChange

__all__ = ["GateTicket", "JobQueue", "ReservationChange"]
