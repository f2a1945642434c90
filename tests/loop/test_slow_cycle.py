"""A cycle whose decisions take long is logged with the time of each part (issue 26: the
soak's cycles of 2 to 13 s held the event loop, lease renewals included; the log says
which action took the time)."""

from __future__ import annotations

import pytest
import structlog

from scheduler.config import DEFAULT_ACTIONS
from scheduler.logging import configure, quiet
from scheduler.loop import scheduler_loop
from tests.builders import node, pod
from tests.simulated import simulate


@pytest.mark.parametrize(
    ("threshold", "logged"), [(-1.0, True), (60.0, False)], ids=["slow", "fast"]
)
def test_a_slow_cycle_is_logged_with_its_parts(
    monkeypatch: pytest.MonkeyPatch, threshold: float, logged: bool
) -> None:
    monkeypatch.setattr(scheduler_loop, "SLOW_CYCLE_SECONDS", threshold)
    try:
        configure(0)
        with structlog.testing.capture_logs() as logs:
            simulate([node("n1"), pod("p1"), pod("p2")], max_cycles=3, quiet_logs=False)
    finally:
        quiet()
    slow = [e for e in logs if e["event"] == "slow cycle"]
    assert bool(slow) is logged
    if logged:
        assert set(slow[0]["parts"]) == {"snapshot", "open", *DEFAULT_ACTIONS}
        assert slow[0]["log_level"] == "warning"
        assert slow[0]["effects"] == 2  # the two binds of the first cycle
