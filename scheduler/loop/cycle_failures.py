"""What the loop does with failures inside a cycle: job errors and failed cycles (layer 3).

A job whose attempt raised (a plugin, an AllocationError, a bug) was rolled back by the
actions' per-job boundary and recorded on the session; the scheduling queue
(:mod:`scheduler.loop.queue`) makes it back off. :class:`JobErrorLog` logs each distinct
failure of a job once with its traceback, and counts its pods as
``scheduler_schedule_attempts_total{result="error"}``. A cycle that failed as a whole (an
action raised outside any job, a plugin's ``open`` raised, a rollback failed) is logged
with its traceback and counted in ``sluice_cycle_failures_total``; its decisions are
thrown away.
"""

from __future__ import annotations

from scheduler.framework.job_boundaries import error_message
from scheduler.framework.session import Session
from scheduler.logging import get_logger
from scheduler.metrics import PROFILE, Metrics

log = get_logger("sluice.loop")


class JobErrorLog:
    """Owned by the loop. Not thread-safe (the loop's task only)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._logged: dict[str, str] = {}
        """The last failure logged with its traceback, per job still failing."""

    def after_cycle(self, session: Session) -> None:
        """Log (once per distinct failure of a job) and count the jobs that failed in
        ``session``'s cycle; forget jobs no longer failing or backing off."""
        for uid, exc in session.job_errors.items():
            job = session.jobs[uid]
            message = error_message(exc)
            pods = sum(1 for t in job.tasks.values() if t.sluice and not t.node_name)
            self._metrics.schedule_attempts.labels("error", PROFILE).inc(max(pods, 1))
            if self._logged.get(uid) != message:
                self._logged[uid] = message
                log.error("scheduling a job failed", job=uid, error=message, exc_info=exc)
        self._logged = {u: m for u, m in self._logged.items() if u in session.failing_jobs}


def cycle_failed(metrics: Metrics, number: int, where: str, exc: BaseException) -> None:
    """Log and count a cycle thrown away because ``where`` raised ``exc``."""
    metrics.cycle_failures.labels(where).inc()
    log.error(
        "scheduling cycle failed; its decisions are discarded",
        cycle=number,
        where=where,
        error=f"{type(exc).__name__}: {exc}",
        exc_info=exc,
    )
