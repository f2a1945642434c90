"""How the API server writes what the embedded cluster writes (layer 4, sim): timestamps
(``metav1.Time``, ``metav1.MicroTime``), the plural resource names of kinds, and condition
lists updated as its helpers do. Used by the store, the kubelet, the HTTP front and the
runner."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

__all__ = ["parse_rfc3339", "plural", "rfc3339", "rfc3339_micro", "with_condition"]


@lru_cache(maxsize=8192)
def _format_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def rfc3339(wall: float) -> str:
    """``2026-01-01T00:00:00Z`` for a Unix time, truncated to the second (metav1.Time)."""
    return _format_second(math.floor(wall))


def rfc3339_micro(wall: float) -> str:
    """``2026-01-01T00:00:00.250000Z`` (metav1.MicroTime, used by events and leases)."""
    second = math.floor(wall)
    micros = round((wall - second) * 1_000_000)
    if micros >= 1_000_000:
        second, micros = second + 1, 0
    return f"{_format_second(second)[:-1]}.{micros:06d}Z"


def parse_rfc3339(text: str) -> float:
    """Unix time of an RFC 3339 timestamp (``Z`` or an offset; naive means UTC)."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def plural(kind: str) -> str:
    """The resource name of a kind as the API server spells it (``PriorityClass`` ->
    ``priorityclasses``, ``Topology`` -> ``topologies``); of a kind key ``Kind.group``,
    ``plural.group`` (``podgroups.scheduling.volcano.sh``), as the server names it."""
    kind, dot, group = kind.partition(".")
    if dot:
        return f"{plural(kind)}.{group}"
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


def with_condition(
    conditions: Iterable[Mapping[str, Any]] | None, condition: Mapping[str, Any], now: str
) -> list[Mapping[str, Any]]:
    """A new conditions list with ``condition`` set (replacing the one of its type).

    ``lastTransitionTime`` is ``now`` when the status changes and kept otherwise, as the
    API server's condition helpers do.
    """
    result: list[Mapping[str, Any]] = []
    found = False
    for existing in conditions or ():
        if existing.get("type") == condition["type"]:
            found = True
            merged = {**existing, **condition}
            if existing.get("status") == condition.get("status") and existing.get(
                "lastTransitionTime"
            ):
                merged["lastTransitionTime"] = existing["lastTransitionTime"]
            else:
                merged.setdefault("lastTransitionTime", now)
                if "lastTransitionTime" not in condition:
                    merged["lastTransitionTime"] = now
            result.append(merged)
        else:
            result.append(existing)
    if not found:
        result.append({"lastTransitionTime": now, **condition})
    return result
