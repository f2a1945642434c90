"""What ``sluice doctor`` says (layer 5, doctor): one :class:`Finding` per check, each
``ok``, ``warn`` or ``fail`` with what was seen and what to do, written one line each
(:func:`render_text`) or as JSON (:func:`render_json`)."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Finding", "Level", "exit_code", "render_json", "render_text"]


class Level(enum.Enum):
    OK = "ok"
    WARN = "warn"
    """Sluice runs, but something it could use is off, or the check could not be made."""
    FAIL = "fail"
    """Sluice cannot work as installed until this is fixed."""


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    """Which check, short (``api server``, ``crd queues.scheduling.sluice.dev``)."""
    level: Level
    said: str
    """What was seen."""
    fix: str = ""
    """What to do ("" when nothing is to be done)."""


def render_text(findings: Sequence[Finding]) -> str:
    """One line a finding (``LEVEL  CHECK  WHAT -> WHAT TO DO``), then a count."""
    width = max((len(f.check) for f in findings), default=0)
    lines = []
    for f in findings:
        line = f"{f.level.value:<4}  {f.check:<{width}}  {f.said}"
        if f.fix:
            line += f" -> {f.fix}"
        lines.append(line)
    counts = {level: sum(f.level is level for f in findings) for level in Level}
    lines.append(
        f"{len(findings)} checks: {counts[Level.OK]} ok, {counts[Level.WARN]} warn, "
        f"{counts[Level.FAIL]} fail"
    )
    return "\n".join(lines)


def render_json(findings: Sequence[Finding]) -> str:
    return json.dumps(
        [
            {"check": f.check, "level": f.level.value, "said": f.said, "fix": f.fix}
            for f in findings
        ],
        indent=2,
    )


def exit_code(findings: Sequence[Finding]) -> int:
    """1 when any check failed, else 0 (warnings do not fail the command)."""
    return 1 if any(f.level is Level.FAIL for f in findings) else 0
