"""Layer 0: structured logs (structlog) with kube-style verbosity.

``configure(verbosity=2)`` once at start-up; then ``get_logger()`` everywhere. Context
(cycle, job, pod) is bound with ``structlog.contextvars``. ``v(4)`` answers whether a
line of verbosity 4 should be written, like klog's ``V(4).Enabled()``; such lines carry
a ``v`` field.
"""

from __future__ import annotations

import io
import logging
import sys
from typing import Any, TextIO, cast

import structlog

_state = {"verbosity": 0}


class _Stderr(io.TextIOBase):
    """Writes to whatever ``sys.stderr`` is when a line is written (tests swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _stderr() -> TextIO:
    return cast(TextIO, _Stderr())


def configure(verbosity: int = 0, *, json: bool = True, stream: Any = None) -> None:
    _state["verbosity"] = verbosity
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(stream or _stderr()),
        cache_logger_on_first_use=False,
    )


def v(level: int) -> bool:
    """True when lines of verbosity ``level`` are enabled."""
    return _state["verbosity"] >= level


def get_logger(name: str = "sluice") -> Any:
    return structlog.get_logger(name)


def quiet() -> None:
    """Drop every line below errors (simulations report failed calls in their timeline)."""
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
        logger_factory=structlog.PrintLoggerFactory(_stderr()),
    )
