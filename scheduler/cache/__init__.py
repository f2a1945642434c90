"""Layer 2: the scheduler's live view of the cluster, fed by watch events."""

from scheduler.cache.cache import ObjectNotice, SchedulerCache

__all__ = ["ObjectNotice", "SchedulerCache"]
