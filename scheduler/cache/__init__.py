"""Layer 2: the scheduler's live view of the cluster, fed by watch events.

Reached from outside through this package only (``make contracts``): its parts are
ingest, the ledger and the snapshot builder over one state (:mod:`.cache` names them).
"""

from scheduler.cache.cache import SchedulerCache
from scheduler.cache.ingest_news import ObjectNotice

__all__ = ["ObjectNotice", "SchedulerCache"]
