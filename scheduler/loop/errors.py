"""What the loop does with failures inside a cycle: job errors and failed cycles (layer 3).

A job whose attempt raised (a plugin, an AllocationError, a bug) was rolled back by the
actions' per-job boundary and recorded on the session. :class:`JobErrors` gives it a
backoff (1 s, doubling to 60 s while it keeps failing; the next snapshot carries it, so no
action tries the job meanwhile), logs each distinct failure of a job once with its
traceback, and counts its pods as ``scheduler_schedule_attempts_total{result="error"}``.
A cycle that failed as a whole (an action raised outside any job, a plugin's ``open``
raised, a rollback failed) is logged with its traceback and counted in
``sluice_cycle_failures_total``; its decisions are thrown away.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.snapshot import Backoff
from scheduler.framework.session import Session, error_message
from scheduler.logging import get_logger
from scheduler.metrics import PROFILE, Metrics

log = get_logger("sluice.loop")

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 60.0


class JobErrors:
    """Owned by the loop. Not thread-safe (the loop's task only)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._backoffs: dict[str, Backoff] = {}
        self._delays: dict[str, float] = {}
        self._logged: dict[str, str] = {}
        """The last failure logged with its traceback, per job."""

    def view(self) -> Mapping[str, Backoff]:
        """The jobs waiting after an error, as the next snapshot carries them."""
        return dict(self._backoffs)

    def after_cycle(self, session: Session, now: float) -> None:
        """Back off, log and count the jobs that failed in ``session``'s cycle; forget the
        backoffs that ended for jobs that did not fail again."""
        for uid, exc in session.job_errors.items():
            job = session.jobs[uid]
            delay = min(MAX_BACKOFF, self._delays.get(uid, INITIAL_BACKOFF / 2) * 2)
            self._delays[uid] = delay
            message = error_message(exc)
            self._backoffs[uid] = Backoff(message, delay, now + delay)
            pods = sum(1 for t in job.tasks.values() if t.sluice and not t.node_name)
            self._metrics.schedule_attempts.labels("error", PROFILE).inc(max(pods, 1))
            if self._logged.get(uid) != message:
                self._logged[uid] = message
                log.error("scheduling a job failed", job=uid, error=message, exc_info=exc)
        for uid in [u for u, b in self._backoffs.items() if b.until <= now]:
            if uid not in session.job_errors:
                del self._backoffs[uid]
                self._delays.pop(uid, None)
                self._logged.pop(uid, None)
        for uid in [u for u in self._delays if u not in session.jobs]:
            self._delays.pop(uid, None)
            self._backoffs.pop(uid, None)
            self._logged.pop(uid, None)


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
