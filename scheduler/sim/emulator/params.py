"""Integer query parameters as the API server parses them (layer 4, sim emulator).

The API server decodes ``limit``, ``timeoutSeconds`` and ``gracePeriodSeconds`` with Go's
``strconv.ParseInt``: an optional sign and decimal digits, nothing else. ``540.0`` is
refused with ``400 BadRequest: strconv.ParseInt: parsing "540.0": invalid syntax`` (kopf
sends exactly that when its watch timeout is a float, and stops). The emulator refuses it
the same way, so that no test passes here what a real server refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from scheduler.sim.emulator.responses import HttpError, bad_request

__all__ = ["int_param"]

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_INT64: Final = 2**63


def int_param(query: Mapping[str, str], name: str) -> int | None:
    """The integer query parameter ``name``, None when absent or empty; 400 BadRequest
    (with the API server's message) when it is not an int64 in decimal."""
    text = query.get(name, "")
    if text == "":
        return None
    if not _INTEGER.fullmatch(text):
        raise _refused(text, "invalid syntax")
    value = int(text)
    if not -_INT64 <= value < _INT64:
        raise _refused(text, "value out of range")
    return value


def _refused(text: str, why: str) -> HttpError:
    return bad_request(f'strconv.ParseInt: parsing "{text}": {why}')
