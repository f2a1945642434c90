"""How long and how hard the soak runs (issue 26): its duration, the cluster's size, the
rate of work, the faults and how often the chaos strikes, and the limits its checks use.

A part of the soak (:mod:`soak`). Everything has a default fit for the shared 2-core
machine; ``SLUICE_SOAK_*`` environment variables (:meth:`SoakSettings.from_env`) change
the duration and the intervals, so CI runs two minutes and docs/results/soak.md's runs sixty
with the same code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """One soak's parameters. Seconds unless named otherwise."""

    minutes: float = 2.0
    """How long work keeps arriving and the chaos strikes; the settling after it is extra."""
    seed: int = 26

    # -- the cluster
    zones: int = 2
    racks_per_zone: int = 2
    nodes_per_rack: int = 3
    node_cpu: int = 8
    devices_per_node: int = 2
    """DRA devices each node's ResourceSlice offers."""

    # -- the work
    arrivals_per_second: float = 0.8
    """Jobs (a pod of its own, a gang, a topology gang, a pod with a device claim, a batch
    Job) arriving a second, on average (exponential gaps)."""
    mean_run_seconds: float = 90.0
    """How long a job runs once it is placed before it finishes (deleted), on average."""
    give_up_seconds: float = 150.0
    """A job still not placed this long after it arrived is withdrawn (deleted), as
    users give up: the backlog stays bounded."""
    hot_queue_seconds: float = 40.0
    """Every this long another leaf queue gets most of the arrivals, so shares move and
    queues reclaim from each other."""

    # -- the faults between the schedulers and the API server (the fault proxy)
    refuse_rate: float = 0.04
    lost_rate: float = 0.02
    watch_delay: float = 0.2
    watch_cut_after: float = 45.0

    # -- the chaos, each first after ``first_*`` and then every ``*_every`` (jittered)
    apiserver_every: float = 240.0
    first_apiserver: float = 70.0
    apiserver_down: float = 2.0
    """How long the killed API server stays down before it is started again."""
    leader_every: float = 180.0
    first_leader: float = 40.0
    outage_every: float = 300.0
    first_outage: float = 95.0
    outage_seconds: float = 4.0
    """How long the proxy stops listening (both replicas lose the server)."""

    # -- the scheduler's configuration
    reclaim_min_runtime: float | None = None
    """The replicas' ``actionArguments.reclaim.minRuntimeSeconds``; None (the default):
    not set, so that the soak judges the configuration users get."""
    reclaim_back_window: float = 60.0
    """``reclaimed_back`` counts a job that reclaims back from the job it gave to sooner
    than this (and at least the minimum runtime, when one is set): a ping-pong, not
    shares that moved with demand."""

    dissolve_grace: float = 30.0
    """The replicas' ``actionArguments.dissolve.graceSeconds``: what is left of a gang
    that runs below its minimum this long is evicted. Under ``gang_partial_limit``, so
    that a broken gang the scheduler leaves standing is a violation."""

    # -- the checks
    settle_seconds: float = 60.0
    """How long after the last disturbance (a kill, an outage, a leader change until its
    first bind) the cluster counts as settled, for the checks that wait for it."""
    gang_partial_limit: float = 60.0
    """A gang may hold fewer than its minimum bound this long, settled, and no longer."""
    gated_limit: float = 120.0
    """A nominated preemptor may wait unbound this long, settled, and no longer."""
    reason_limit: float = 30.0
    """A pending pod must say why within this long, settled."""
    warmup_minutes: float = 10.0
    """The RSS, tasks and sockets of the first this many minutes (at most 40 % of the run)
    are the baseline the end is compared with."""
    rss_growth_limit: float = 0.10
    sample_every: float = 5.0
    """How often the schedulers' /proc and /metrics are sampled."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Settings of one run that are not parameters (kept for the report)."""

    @property
    def seconds(self) -> float:
        return self.minutes * 60.0

    @property
    def warmup_seconds(self) -> float:
        return min(self.warmup_minutes * 60.0, 0.4 * self.seconds)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SoakSettings:
        """The defaults, with ``SLUICE_SOAK_<FIELD>`` (upper case) for any numeric field:
        ``SLUICE_SOAK_MINUTES=60``, ``SLUICE_SOAK_LEADER_EVERY=240``... A value that is not
        a number is an error naming the variable."""
        env = os.environ if environ is None else environ
        changes: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra":
                continue
            name = f"SLUICE_SOAK_{f.name.upper()}"
            raw = env.get(name)
            if raw is None or raw == "":
                continue
            kind = int if isinstance(getattr(cls(), f.name), int) else float
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name}: expected a number, got {raw!r}") from None
            if value < 0:
                raise ValueError(f"{name}: must not be negative, got {raw!r}")
            changes[f.name] = value
        settings = replace(cls(), **changes)
        if settings.minutes <= 0:
            raise ValueError("SLUICE_SOAK_MINUTES: must be positive")
        return settings

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
