"""Bundles: a gang's tasks as victims, Safe or Whole (layer 2).

Volcano's gang-aware preemption groups the tasks of each candidate job in the place being
cleared into two bundles:

- **Safe**: tasks whose eviction leaves the gang whole, at or above ``minMember`` and every
  role at or above its ``minTaskMember``: the surplus, taken in the order the search
  prefers them, as many as the gang (and each role) can spare; or every task of a gang
  already below its minimum (it cannot run anyway). Evicting them breaks nothing.
- **Whole**: the rest, the core: evicting any of it breaks the gang, so its evictable
  members everywhere go with it. A pod without a PodGroup is a job of its own: Whole.

An *elastic* gang (``minMember`` below the sum of its ``minTaskMember``) spares by count
only and ignores roles. Everything here reads the session as it stands; callers classify
before they remove anything.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTS_FOR_GANG
from scheduler.framework.effects import VictimBundle

Kind = VictimBundle
"""The kind of a bundle (SAFE or WHOLE; POD for a pod of its own)."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """Tasks of ``job`` in the place being cleared, all of one ``kind``."""

    job: JobInfo
    kind: Kind
    tasks: tuple[TaskInfo, ...]


def elastic(job: JobInfo) -> bool:
    """Does the gang spare by count only (minMember below the sum of its minTaskMember)?"""
    return job.elastic


def below_minimum(job: JobInfo) -> bool:
    """Is the running gang already below its minimum (in all, or in a role)?"""
    return job.short_of_minimum(COUNTS_FOR_GANG)


def keeps_whole(job: JobInfo, tasks: Collection[TaskInfo]) -> bool:
    """Does evicting ``tasks`` (running members of ``job``) leave the gang whole: at or
    above ``minMember``, and every role at or above its ``minTaskMember`` (unless the gang
    is elastic)? Always true of a gang already below its minimum (nothing left to break);
    false of a pod of its own, which any eviction takes whole."""
    if not job.has_pod_group:
        return not tasks
    if below_minimum(job):
        return True
    if job.placed_count() - len(tasks) < job.min_member:
        return False
    if elastic(job) or not job.min_task_member:
        return True
    left = job.placed_by_role() - Counter(t.role for t in tasks)
    return all(left[r] >= n for r, n in job.min_task_member.items())


def split(
    job: JobInfo, tasks: Iterable[TaskInfo], prefer: Callable[[TaskInfo], Any]
) -> tuple[list[TaskInfo], list[TaskInfo]]:
    """``tasks`` of ``job`` (its evictable tasks in the place being cleared) as (Safe,
    Whole), each in ``prefer`` order; Safe takes the first ones the gang can spare."""
    ordered = sorted(tasks, key=prefer)
    if not job.has_pod_group:
        return [], ordered
    if below_minimum(job):
        return ordered, []
    spare_total = job.placed_count() - job.min_member
    spare_role: Counter[str] | None = None
    if job.min_task_member and not elastic(job):
        by_role = job.placed_by_role()
        spare_role = Counter({r: by_role[r] - n for r, n in job.min_task_member.items()})
    safe: list[TaskInfo] = []
    whole: list[TaskInfo] = []
    for t in ordered:
        role_left = (
            math.inf if spare_role is None or t.role not in spare_role else spare_role[t.role]
        )
        if spare_total > 0 and role_left > 0:
            safe.append(t)
            spare_total -= 1
            if spare_role is not None and t.role in spare_role:
                spare_role[t.role] -= 1
        else:
            whole.append(t)
    return safe, whole


def bundles(
    jobs: dict[str, JobInfo], tasks: Sequence[TaskInfo], prefer: Callable[[TaskInfo], Any]
) -> list[Bundle]:
    """The Safe and Whole bundles of ``tasks`` (candidates of several jobs), per job in the
    order the jobs first appear in ``tasks``; empty bundles left out."""
    by_job: dict[str, list[TaskInfo]] = {}
    for t in tasks:
        by_job.setdefault(t.job_id, []).append(t)
    out: list[Bundle] = []
    for job_id, members in by_job.items():
        job = jobs[job_id]
        safe, whole = split(job, members, prefer)
        if safe:
            out.append(Bundle(job, Kind.SAFE, tuple(safe)))
        if whole:
            out.append(Bundle(job, Kind.WHOLE, tuple(whole)))
    return out
