"""Job boundaries: every question about one job is asked inside that job's boundary,
and what fails there fails that job only.

:class:`JobBoundaries` is the part of :class:`~scheduler.framework.session.Session` that
keeps the running action's time budget (jobs deferred, work carried to the next slice)
and confines a job's failure (:meth:`~JobBoundaries.job_scope`: rolled back,
SchedulerError, no second try this cycle); the session runs the action
(:meth:`~scheduler.framework.session.Session.run_action`). While an action runs, a JOB-scoped
question asked outside any boundary is an InvariantError: a hole in the boundary is a bug
the tests find, not a cycle thrown away in production.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Self

from scheduler.api import reasons
from scheduler.api.errors import PluginError, SessionCorruptedError
from scheduler.api.job import JobInfo
from scheduler.api.reasons import Reason
from scheduler.framework.effects import Effect


class JobBoundaries:
    """The session's boundaries and time budget; its state is set by :meth:`__init__`,
    what it reads of the session's decisions is declared below (the session sets it)."""

    effects: list[Effect]
    task_reasons: dict[str, Reason]
    job_reasons: dict[str, Reason]
    job_errors: dict[str, Exception]
    failing_jobs: set[str]

    def __init__(self) -> None:
        self._scopes: list[str] = []
        """The jobs whose boundaries the cycle is inside, innermost last."""
        self._acting = ""
        """The action running (``Session.run_action``), while one does."""
        self.deferred: set[str] = set()
        """Jobs not tried this cycle because an action ran out of its time budget
        (:meth:`try_job`): no later action tries them, they say nothing new, and the next
        cycle tries them first (the loop runs it at once)."""
        self._out_of_time: Callable[[], bool] = never
        self._slice_over: Callable[[], bool] = never
        self._tried = 0
        self._carried: dict[str, object] = {}
        """What actions that ran out of time left to go on with (:meth:`carry`)."""

    def out_of_time(self) -> bool:
        """Has the running action spent its time budget? Never before it tried a job in
        this run (:meth:`note_try`), so every run of an action makes progress."""
        return self._tried > 0 and self._out_of_time()

    def slice_over(self) -> bool:
        """Should the running action, which keeps its place (:meth:`carry`), stop here
        and let the loop hand on what was decided? Its budget is spent, or the slice the
        loop gave it is over (a cycle's first slice is short, so its first binds go out
        soon). Never before it tried a job in this run, as :meth:`out_of_time`."""
        return self._tried > 0 and self._slice_over()

    def note_try(self) -> None:
        """The running action is about to try a job (what :meth:`try_job` counts)."""
        self._tried += 1

    def carry(self, action: str, progress: object) -> None:
        """``action`` ran out of time and will go on from ``progress`` when run again on
        this session (:meth:`resume`). The loop then hands on what the session decided so
        far, lets background calls run for a while, and runs ``action`` again before any
        later action: one cycle in several slices, none holding the loop longer than the
        budget. Only an action that keeps its own place this way may call it."""
        self._carried[action] = progress

    def resume(self, action: str) -> object | None:
        """What ``action`` carried (:meth:`carry`) when it ran out of time, taken; None
        when it starts afresh."""
        return self._carried.pop(action, None)

    @property
    def unfinished(self) -> bool:
        """An action carried work to go on with in this session (:meth:`carry`)."""
        return bool(self._carried)

    def try_job(self, job: JobInfo) -> bool:
        """May the running action try ``job`` now? Called by an action just before it
        tries a job, in its order. False for a job deferred earlier in the cycle, and for
        every job once the action has used its time budget (then ``job`` is deferred:
        see :attr:`deferred`). The first job an action tries is always allowed, so every
        action makes progress each cycle; the jobs deferred are the last in the action's
        order, so job order holds across cycles: a cut is a pause, not a reordering."""
        if job.uid in self.deferred:
            return False
        if self.out_of_time():
            self.defer(job)
            return False
        self._tried += 1
        return True

    def defer(self, job: JobInfo) -> None:
        """Leave ``job`` to the next cycle: what this cycle recorded about it is dropped,
        so it is neither reported nor parked as if it had been tried."""
        self.deferred.add(job.uid)
        self.job_reasons.pop(job.uid, None)
        for t in job.tasks.values():
            self.task_reasons.pop(t.uid, None)

    @contextmanager
    def job_scope(self, job: JobInfo) -> Iterator[None]:
        """The boundary of ``job``: questions about it are asked inside, and a failure of
        the block (a plugin that raised, an AllocationError, a bug) is confined to it. Its
        statement has already been rolled back by the statement's own block; the job says
        SchedulerError (:meth:`record_job_error`) and no action tries it again this cycle;
        the other jobs go on. Nested scopes are fine (the innermost records the error).

        A failure after the job committed decisions, or a rollback that failed, leaves the
        session untrustworthy: that escalates as SessionCorruptedError, and the loop throws
        the cycle away.
        """
        committed = len(self.effects)
        self._scopes.append(job.uid)
        try:
            yield
        except SessionCorruptedError:
            raise
        except Exception as exc:
            if len(self.effects) != committed:
                raise SessionCorruptedError(
                    f"job {job.uid} failed after committing decisions: {exc}"
                ) from exc
            self.record_job_error(job, exc)
        finally:
            self._scopes.pop()

    def for_each_job(
        self,
        jobs: Iterable[JobInfo],
        attempt: Callable[[Self, JobInfo], None],
        *,
        keep_place: bool = False,
    ) -> None:
        """``attempt(session, job)`` for each job in order, each inside its boundary. Jobs
        that failed earlier in the cycle are skipped, and so are the jobs deferred
        (:meth:`try_job`: once the action is out of time, the rest).

        With ``keep_place`` the running action keeps its place instead of deferring: once
        it is out of time, the jobs left (a list, in order) are carried (:meth:`carry`)
        and the loop runs the action again on this session after handing on what was
        decided; the action then takes them from :meth:`resume` and calls this again with
        them. The other actions' work of the cycle is not done again, as it would be for
        jobs deferred to the next cycle."""
        ordered = list(jobs) if keep_place else jobs
        for i, job in enumerate(ordered):
            if job.uid in self.job_errors or job.uid in self.deferred:
                continue
            if keep_place and self.slice_over():
                assert isinstance(ordered, list)
                self.carry(self._acting, ordered[i:])
                return
            if not self.try_job(job):
                continue
            with self.job_scope(job):
                attempt(self, job)

    def select_jobs(
        self, jobs: Iterable[JobInfo], wanted: Callable[[JobInfo], bool]
    ) -> list[JobInfo]:
        """The jobs for which ``wanted(job)`` holds, each asked inside its boundary (a job
        whose question raised fails, and is not selected). Jobs that failed earlier in the
        cycle, and jobs deferred to the next one, are left out."""
        out: list[JobInfo] = []
        for job in jobs:
            if job.uid in self.job_errors or job.uid in self.deferred:
                continue
            keep = False
            with self.job_scope(job):
                keep = wanted(job)
            if keep:
                out.append(job)
        return out

    def record_job_error(self, job: JobInfo, exc: Exception) -> None:
        """``job``'s attempt raised ``exc``: it says SchedulerError, naming the plugin if a
        plugin raised, and is not tried again this cycle. Called by the actions' per-job
        boundary after the job's statement was rolled back."""
        self.job_errors.setdefault(job.uid, exc)
        self.failing_jobs.add(job.uid)
        self.job_reasons[job.uid] = reasons.scheduler_error(error_message(exc))
        for t in job.tasks.values():
            self.task_reasons.pop(t.uid, None)


def never() -> bool:
    """The time budget of no budget: never spent."""
    return False


def error_message(exc: Exception) -> str:
    """What a job's pods say when its attempt raised ``exc``."""
    if isinstance(exc, PluginError):
        return f"SchedulerError: plugin {exc.plugin!r} failed in {exc.point}: {exc.cause}"
    return f"SchedulerError: {type(exc).__name__}: {exc}"
