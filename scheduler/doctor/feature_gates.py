"""The API server's version and feature gates, as ``sluice doctor`` reads them (layer 5,
doctor). Pure: the texts come from ``/version`` and ``/metrics``.

The API server publishes every feature gate it knows on its own ``/metrics`` as
``kubernetes_feature_enabled{name="...",stage="..."} 0|1`` (since v1.26): the gates as
that server runs with them, not as a configuration file says. Reading it needs ``get`` on
the non-resource URL ``/metrics`` (cluster-admin has it; ``system:monitoring`` too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["feature_gates", "minor_version"]

_GATE = re.compile(
    r'^kubernetes_feature_enabled\{(?=[^}]*name="(?P<name>[^"]+)")[^}]*\}\s+(?P<value>\S+)',
    re.MULTILINE,
)


def feature_gates(metrics: str) -> dict[str, bool]:
    """Gate name -> on, from an API server's ``/metrics`` text."""
    return {m["name"]: float(m["value"]) == 1.0 for m in _GATE.finditer(metrics)}


def minor_version(version: Mapping[str, object]) -> tuple[int, int] | None:
    """(major, minor) of a ``/version`` reply (``minor`` may read ``36+`` on some
    distributions); None when it cannot be read."""
    try:
        major = int(str(version.get("major", "")).rstrip("+"))
        minor = int(str(version.get("minor", "")).rstrip("+"))
    except ValueError:
        return None
    return major, minor
