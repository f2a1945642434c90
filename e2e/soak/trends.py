"""The soak's checks over time (issue 26): memory, tasks and sockets of the scheduler,
and its throughput, at the start and at the end.

A part of the soak (:mod:`soak`). Pure functions of the samples (:class:`soak.replicas.
Sample`) and of the bind times, so that their rules are tested on their own:

* **memory**: the RSS of the replica that leads, sampled over the run. Its median over
  the window after the warm-up (the first ten minutes, at most 40 % of the run) is the
  baseline; its median over the last window of the run must be under the baseline plus
  ``rss_growth_limit`` (10 %). The leader is killed every few minutes, so each
  leader is a fresh process that listed the cluster anew: what grows across leaders is
  what a scheduler keeps per object of the cluster; what grows within a leader's reign
  shows in its reign (:func:`reigns`: RSS at its first and last sample while leading).
* **tasks and sockets**: their maximum over the last window must stay within half again
  the maximum over the baseline window, or the baseline plus a margin for a burst (the
  calls the bind and status pools may hold in flight, :data:`TASK_MARGIN`).
* **throughput**: binds per window of the run; the mean of the last third of the
  windows must not fall below the mean of the first third by more than the noise
  (twice the windows' standard deviation, at least 15 % of the start).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from soak.replicas import Sample

TASK_MARGIN = 128
"""Tasks the end may hold above the start's maximum: the bind and status pools each run
up to ``bindConcurrency`` (64) calls at once, so a new leader's backlog (every pending pod
bound at once after a failover) is work in flight by design, not a leak. A 2-minute run
on the real server counted 127 tasks at the end against 47 at the start, all of them
binds and writes of a new leader (its busiest sample's functions)."""
SOCKET_MARGIN = 100
"""Sockets the end may hold above the start's maximum: the API client's connection pool
(kubernetes_asyncio's ``connection_pool_maxsize``, 100) keeps a connection alive for 15 s
after each call, so a burst of binds opens up to that many at once and the count swings
with the work (a 2-minute run on the real server sampled 9 to 111 over one leader's
reign). A leak is a socket outside the pool (a client or session never closed, one per
term or watch), which grows past this bound over the hour the soak runs for."""
THROUGHPUT_FLOOR = 0.15


def windows(
    samples: Iterable[Sample], seconds: float, warmup: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """The baseline window (from the first sample of a leader after the warm-up) and the
    end window, each a sixth of the run and five minutes at most."""
    width = min(300.0, seconds / 6.0)
    start = min((s.at for s in samples if s.leading and s.at >= warmup), default=warmup)
    return (start, start + width), (seconds - width, seconds)


def _within(samples: Iterable[Sample], window: tuple[float, float]) -> list[Sample]:
    lo, hi = window
    return [s for s in samples if s.leading and lo <= s.at <= hi]


def busiest(samples: Sequence[Sample], top: int = 8) -> dict[str, Any]:
    """The sample with the most asyncio tasks: when, which replica, and the functions the
    most tasks ran then."""
    counted = [s for s in samples if s.tasks is not None]
    if not counted:
        return {}
    worst = max(counted, key=lambda s: s.tasks or 0.0)
    by = sorted(worst.tasks_by.items(), key=lambda kv: -kv[1])[:top]
    return {"at": worst.at, "replica": worst.replica, "tasks": worst.tasks, "by_function": dict(by)}


def memory(
    samples: Sequence[Sample], seconds: float, warmup: float, limit: float
) -> dict[str, Any]:
    """The leader's RSS at the start and at the end (module docstring); ``ok`` says
    whether it grew less than ``limit`` (a fraction)."""
    base_w, end_w = windows(samples, seconds, warmup)
    base = [s.rss_mb for s in _within(samples, base_w) if s.rss_mb]
    end = [s.rss_mb for s in _within(samples, end_w) if s.rss_mb]
    out: dict[str, Any] = {"baseline_window": base_w, "end_window": end_w}
    if not base or not end:
        out.update(ok=None, why="no leader sampled in a window")
        return out
    b, e = statistics.median(base), statistics.median(end)
    growth = (e - b) / b
    out.update(baseline_mb=round(b, 1), end_mb=round(e, 1), growth=round(growth, 3))
    out["ok"] = growth < limit
    return out


def bounded(samples: Sequence[Sample], seconds: float, warmup: float) -> dict[str, Any]:
    """The leader's asyncio tasks and open sockets: maximum at the start, at the end and
    overall; ``ok`` when the end stays within the bound of the start."""
    base_w, end_w = windows(samples, seconds, warmup)
    out: dict[str, Any] = {}
    ok = True
    for name, margin in (("tasks", TASK_MARGIN), ("sockets", SOCKET_MARGIN)):
        base = [getattr(s, name) for s in _within(samples, base_w) if getattr(s, name) is not None]
        end = [getattr(s, name) for s in _within(samples, end_w) if getattr(s, name) is not None]
        every = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        entry: dict[str, Any] = {"max": max(every) if every else None}
        if base and end:
            bound = max(1.5 * max(base), max(base) + margin)
            entry.update(start_max=max(base), end_max=max(end), bound=bound)
            entry["ok"] = max(end) <= bound
            ok = ok and entry["ok"]
        else:
            entry["ok"] = None
        out[name] = entry
    out["ok"] = ok
    return out


def throughput(binds: Sequence[float], seconds: float, width: float) -> dict[str, Any]:
    """Binds per ``width`` seconds over the run (``binds``: seconds since the start);
    the start and the end compared (module docstring)."""
    count = max(1, int(seconds // width))
    per = [0] * count
    for t in binds:
        i = int(t // width)
        if 0 <= i < count:
            per[i] += 1
    third = max(1, count // 3)
    start, end = per[:third], per[-third:]
    out: dict[str, Any] = {"window_seconds": width, "binds_per_window": per}
    if count < 3:
        out.update(ok=None, why="fewer than three windows")
        return out
    s_mean, e_mean = statistics.mean(start), statistics.mean(end)
    noise = max(2 * statistics.pstdev(per), THROUGHPUT_FLOOR * s_mean)
    out.update(start_mean=round(s_mean, 1), end_mean=round(e_mean, 1), noise=round(noise, 1))
    out["ok"] = e_mean >= s_mean - noise
    return out


def reigns(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Per replica that led: when, and its RSS at its first and last sample as leader."""
    led: dict[int, list[Sample]] = {}
    for s in samples:
        if s.leading:
            led.setdefault(s.replica, []).append(s)
    return [
        {
            "replica": r,
            "from": ss[0].at,
            "to": ss[-1].at,
            "rss_first_mb": ss[0].rss_mb,
            "rss_last_mb": ss[-1].rss_mb,
            "tasks_max": max((s.tasks for s in ss if s.tasks is not None), default=None),
            "sockets_max": max((s.sockets for s in ss if s.sockets is not None), default=None),
        }
        for r, ss in sorted(led.items(), key=lambda kv: kv[1][0].at)
    ]
