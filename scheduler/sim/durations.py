"""Parsing of simulation settings: Go-style durations and ``KIND=VALUE`` lists (layer 4).

Used by ``sluice simulate`` for ``--api-latency delete=3s,bind=10ms`` and
``--api-failures bind=0.1``, by the scenario loader for ``sim.sluice.dev/arrival: 2.5s``,
and by the simulated kubelet for ``sim.sluice.dev/run-for``.

The value parsers (:func:`parse_duration`, :func:`parse_rate`) raise ``ValueError`` with
a one-line message, like ``float()``; callers that know which flag or field they parse
wrap it (:func:`parse_kind_map` raises :class:`ConfigError`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection

from scheduler.api.errors import ConfigError

__all__ = ["parse_duration", "parse_kind_map", "parse_rate"]

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_TERM = re.compile(rf"({_NUMBER})(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_BARE = re.compile(rf"{_NUMBER}")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration (``10ms``, ``3s``, ``1m30s``, ``1.5h``, ``250us``, ``0``).

    A bare number is seconds (``2.5``). Units: ns, us (or µs), ms, s, m, h. A leading
    ``+`` is allowed; negative durations are refused. Raises ValueError.
    """
    s = text.strip()
    if s.startswith("+"):
        s = s[1:]
    if not s:
        raise ValueError(f"invalid duration {text!r}: empty")
    if s.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: must not be negative")
    if _BARE.fullmatch(s):
        return float(s)
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _TERM.match(s, pos)
        if m is None:
            raise ValueError(
                f"invalid duration {text!r}: expected a number with a unit "
                "(ns, us, ms, s, m, h), like 10ms, 1m30s or 1.5h"
            )
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total


def parse_rate(text: str) -> float:
    """A probability in [0, 1] (``0.05``). Raises ValueError."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"invalid rate {text!r}: expected a number within [0, 1]") from None
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"invalid rate {text!r}: must be within [0, 1]")
    return value


def parse_kind_map(
    text: str,
    *,
    parse_value: Callable[[str], float],
    allowed: Collection[str],
    flag: str = "KIND=VALUE list",
) -> dict[str, float]:
    """Parse ``KIND=VALUE,KIND=VALUE`` into a dict (``delete=3s,bind=10ms``).

    ``parse_value`` parses one value and raises ValueError; ``allowed`` lists the kinds;
    ``flag`` names the setting in errors (``--api-latency``). Empty text gives ``{}``;
    blanks around items are ignored. Raises :class:`ConfigError` (obj = ``flag``,
    field = the kind, or the item when it has no kind) with one line: an item without
    ``=``, an unknown kind (listing the allowed ones), a kind given twice, a bad value.
    """
    result: dict[str, float] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        kind, sep, value = item.partition("=")
        kind = kind.strip()
        if not sep or not kind:
            raise ConfigError(flag, item, "expected KIND=VALUE")
        if kind not in allowed:
            raise ConfigError(flag, kind, f"unknown kind; one of {', '.join(allowed)}")
        if kind in result:
            raise ConfigError(flag, kind, "given more than once")
        try:
            result[kind] = parse_value(value)
        except ValueError as exc:
            raise ConfigError(flag, kind, str(exc)) from exc
    return result
