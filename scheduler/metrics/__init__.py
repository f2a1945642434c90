"""Layer 0: every Prometheus object Sluice exports, kube-scheduler's names where they mean
the same. One :class:`Metrics` per scheduler instance, on its own registry, so tests and
simulations in one process do not collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PROFILE = "sluice"
_LATENCY = (
    0.001,
    0.002,
    0.004,
    0.008,
    0.016,
    0.032,
    0.064,
    0.128,
    0.256,
    0.512,
    1.024,
    2.048,
    4.096,
    8.192,
    16.384,
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result: 'unschedulable' means a pod "
            "could not be scheduled, 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (decision and binding).",
            ["result", "profile"],
            buckets=_LATENCY,
            registry=r,
        )
        self.cycle_duration = Histogram(
            "scheduler_cycle_duration_seconds",
            "Duration of a scheduling cycle ('all') and of each action in it, in seconds.",
            ["action"],
            buckets=_LATENCY,
            registry=r,
        )
        self.cycle_longest_hold = Gauge(
            "sluice_cycle_longest_hold_seconds",
            "The longest stretch one scheduling cycle held the event loop (no bind handed "
            "on, no watch event taken) since the process started, in seconds.",
            registry=r,
        )
        self.cycles_idle = Counter(
            "sluice_cycles_idle_total",
            "Scheduling cycles skipped because nothing changed since a cycle that decided "
            "nothing with no pod of Sluice waiting (an idle cycle's cost is a comparison).",
            registry=r,
        )
        self.cycle_failures = Counter(
            "sluice_cycle_failures_total",
            "Scheduling cycles thrown away because something failed outside any one job "
            "(an action, a plugin's open, a rollback), by where it failed.",
            ["where"],
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods", "Number of pending pods, by queue.", ["queue"], registry=r
        )
        self.binds = Counter("sluice_bind_total", "Bind calls by result.", ["result"], registry=r)
        self.events_dropped = Counter(
            "scheduler_events_dropped_total",
            "Events not written: over the per-object limit ('limit'), the queue of events "
            "to write was full ('queue_full'), the write failed ('write_failed'), or the "
            "namespace is gone or being deleted ('namespace_gone').",
            ["reason"],
            registry=r,
        )
        self.api_errors = Counter(
            "sluice_api_errors_total", "Failed API calls by kind of call.", ["call"], registry=r
        )
        self.api_ambiguous = Counter(
            "scheduler_api_ambiguous_total",
            "Writes whose outcome was unknown when they failed (a 5xx, a timeout, the "
            "connection lost before the reply), by call: bind, evict, patch, status.",
            ["call"],
            registry=r,
        )
        self.api_ambiguous_resolved = Counter(
            "scheduler_api_ambiguous_resolved_total",
            "Ambiguous writes whose outcome was then learnt, by call and outcome: "
            "'took_effect', 'did_not', or 'unknown' (nothing learnt before the deadline).",
            ["call", "outcome"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts_total",
            "Total preemption attempts in the cluster.",
            registry=r,
        )
        self.reclaim_attempts = Counter(
            "scheduler_reclaim_attempts_total",
            "Total reclaims: evictions of pods of queues above their share for a queue below.",
            registry=r,
        )
        self.gangs_dissolved = Counter(
            "sluice_gangs_dissolved_total",
            "Gangs whose running members were evicted after running below their minimum "
            "for the grace period (the dissolve action).",
            registry=r,
        )
        self.reserved_nodes = Gauge(
            "scheduler_reserved_nodes",
            "Nodes reserved for the starving job elected by starvation protection.",
            registry=r,
        )
        self.queue_deserved = Gauge(
            "scheduler_queue_deserved",
            "A queue's deserved share, by resource (cpu in cores, memory in bytes).",
            ["queue", "resource"],
            registry=r,
        )
        self.queue_allocated = Gauge(
            "scheduler_queue_allocated",
            "What a queue holds (placed or nominated), by resource (cpu in cores).",
            ["queue", "resource"],
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims, per preemption and kind of bundle: "
            "safe (a gang's surplus: the gang stays whole), whole (a gang broken: its "
            "members go together) or pod (a pod without a PodGroup).",
            ["bundle"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.preemption_duration = Histogram(
            "scheduler_preemption_goroutines_duration_seconds",
            "Duration in seconds of the preemption API calls run in the background.",
            ["result"],
            buckets=_LATENCY,
            registry=r,
        )
        self.preemption_executions = Counter(
            "scheduler_preemption_goroutines_execution_total",
            "Number of preemption API call batches run in the background, by result.",
            ["result"],
            registry=r,
        )
