"""Kubernetes timestamps (layer 4, kube): ``metav1.MicroTime`` written, RFC 3339 read.

Leases (``acquireTime``, ``renewTime``) and ``events.k8s.io/v1`` Events (``eventTime``,
``series.lastObservedTime``) hold MicroTime: RFC 3339 in UTC with exactly six fractional
digits and a ``Z``, e.g. ``2026-01-01T00:00:00.250000Z``. Pure functions.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["format_micro_time", "parse_time"]


def format_micro_time(wall: float) -> str:
    """``wall`` (Unix seconds) as MicroTime: ``2026-01-01T00:00:00.250000Z``."""
    stamp = datetime.fromtimestamp(round(wall, 6), tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    """Unix seconds of an RFC 3339 timestamp (``Z`` or an offset, any fraction; a value
    without a zone is taken as UTC). Raises ValueError for a malformed value."""
    parsed = datetime.fromisoformat(text.strip())
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
