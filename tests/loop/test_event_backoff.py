"""scheduler.loop.event_backoff: when a pod's FailedScheduling event is repeated."""

from __future__ import annotations

import pytest

from scheduler.loop.event_backoff import EventBackoff


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        pytest.param([(0.0, "m")], [True], id="first-failure-at-once"),
        pytest.param([(0.0, "m"), (0.5, "m"), (1.0, "m")], [True, False, True], id="after-1s"),
        pytest.param(
            [(0, "m"), (1, "m"), (2, "m"), (3, "m"), (6, "m"), (7, "m")],
            [True, True, False, True, False, True],
            id="doubling-1-2-4",
        ),
        pytest.param(
            [(0, "m"), (1, "m"), (3, "m"), (7, "m"), (15, "m"), (24, "m"), (25, "m"), (35, "m")],
            [True, True, True, True, True, False, True, True],
            id="capped-at-10s",
        ),
        pytest.param([(0.0, "m"), (0.1, "other")], [True, True], id="a-new-message-at-once"),
        pytest.param(
            [(0.0, "m"), (0.1, "other"), (0.5, "other"), (1.1, "other")],
            [True, True, False, True],
            id="a-new-message-restarts-the-backoff",
        ),
    ],
)
def test_when_the_event_is_due(calls: list[tuple[float, str]], expected: list[bool]) -> None:
    backoff = EventBackoff()
    assert [backoff.due("uid", message, now) for now, message in calls] == expected


def test_pods_no_longer_failing_start_afresh() -> None:
    backoff = EventBackoff()
    assert backoff.due("a", "m", 0.0) and backoff.due("b", "m", 0.0)
    backoff.retain({"b"})
    assert len(backoff) == 1
    assert backoff.due("a", "m", 0.1)  # forgotten: at once
    assert not backoff.due("b", "m", 0.1)  # kept: still backing off


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="initial"):
        EventBackoff(initial=5.0, maximum=1.0)
