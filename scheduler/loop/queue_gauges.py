"""The loop's per-queue gauges: ``scheduler_pending_pods``, ``scheduler_queue_deserved``
and ``scheduler_queue_allocated``, set after each cycle; the series of a queue (or a
resource) that went are removed, so no gauge keeps counting what is gone."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.queue import QueueShare
from scheduler.api.resource import CPU
from scheduler.metrics import Metrics


class QueueGauges:
    """One per loop; it remembers which series it set."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._pending_series: set[str] = set()
        """Queues with a ``scheduler_pending_pods`` series."""
        self._share_series: set[tuple[str, str]] = set()
        """(queue, resource) with a ``scheduler_queue_deserved``/``_allocated`` series."""

    def pending(self, pending: Mapping[str, int]) -> None:
        """Set ``scheduler_pending_pods`` per queue; a queue that is gone loses its series,
        so the gauge does not keep counting pods that went with it."""
        for queue in self._pending_series - pending.keys():
            self.metrics.pending_pods.remove(queue)
        for queue, n in pending.items():
            self.metrics.pending_pods.labels(queue).set(n)
        self._pending_series = set(pending)

    def shares(self, shares: Mapping[str, QueueShare]) -> None:
        """Set ``scheduler_queue_deserved`` and ``scheduler_queue_allocated`` per queue and
        resource (CPU in cores); series of queues or resources that went are removed."""
        series: set[tuple[str, str]] = set()
        for queue, share in shares.items():
            for gauge, amounts in (
                (self.metrics.queue_deserved, share.deserved),
                (self.metrics.queue_allocated, share.allocated),
            ):
                for resource in set(share.deserved) | set(share.allocated):
                    amount = amounts[resource]
                    gauge.labels(queue, resource).set(amount / 1000 if resource == CPU else amount)
            series.update((queue, r) for r in set(share.deserved) | set(share.allocated))
        for gone in self._share_series - series:
            self.metrics.queue_deserved.remove(*gone)
            self.metrics.queue_allocated.remove(*gone)
        self._share_series = series
