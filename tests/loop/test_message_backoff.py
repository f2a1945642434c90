"""scheduler.loop.message_backoff: when a pending pod is told why again (its event with
``repeat``, its condition without)."""

from __future__ import annotations

import pytest

from scheduler.loop.message_backoff import MessageBackoff


@pytest.mark.parametrize(
    ("calls", "repeat", "expected"),
    [
        pytest.param([(0.0, "m")], True, [True], id="first-failure-at-once"),
        pytest.param([(0.0, "m")], False, [True], id="condition: first at once"),
        pytest.param(
            [(0.0, "m"), (0.5, "m"), (1.0, "m")], True, [True, False, True], id="event: after-1s"
        ),
        pytest.param(
            [(0.0, "m"), (5.0, "m"), (60.0, "m")],
            False,
            [True, False, False],
            id="condition: the same message never again",
        ),
        pytest.param(
            [(0, "m"), (1, "m"), (2, "m"), (3, "m"), (6, "m"), (7, "m")],
            True,
            [True, True, False, True, False, True],
            id="doubling-1-2-4",
        ),
        pytest.param(
            [(0, "m"), (1, "m"), (3, "m"), (7, "m"), (15, "m"), (24, "m"), (25, "m"), (35, "m")],
            True,
            [True, True, True, True, True, False, True, True],
            id="capped-at-10s",
        ),
        pytest.param(
            [(0.0, "m"), (0.1, "a"), (0.5, "b"), (1.0, "c")],
            False,
            [True, False, False, True],
            id="condition: a changed message waits for the backoff",
        ),
        pytest.param(
            [(0.0, "m"), (0.1, "a"), (1.0, "a"), (1.5, "b"), (2.9, "c"), (3.0, "c")],
            True,
            [True, False, True, False, False, True],
            id="event: a changed message too; the backoff doubles (1, then 2 s)",
        ),
        pytest.param(
            [(float(t), f"m{t}") for t in range(40)],
            False,
            [t in (0, 1, 3, 7, 15, 25, 35) for t in range(40)],
            id="condition: a message that changes every second: 1, 2, 4, 8, 10 s apart",
        ),
    ],
)
def test_when_a_pod_is_told(
    calls: list[tuple[float, str]], repeat: bool, expected: list[bool]
) -> None:
    backoff = MessageBackoff()
    assert [backoff.due("uid", message, now, repeat=repeat) for now, message in calls] == expected


def test_a_failed_telling_is_forgotten_and_told_again_at_once() -> None:
    backoff = MessageBackoff()
    assert backoff.due("a", "m", 0.0, repeat=False)
    backoff.forget("a")  # its write failed
    assert backoff.due("a", "m", 0.1, repeat=False)
    assert backoff.last("a") == "m"


def test_told_outside_restarts_the_backoff() -> None:
    backoff = MessageBackoff()
    assert backoff.due("a", "m", 0.0, repeat=False)
    backoff.told("a", "Binding rejected", 5.0)  # a failed bind says why at once
    assert backoff.last("a") == "Binding rejected"
    assert not backoff.due("a", "m", 5.5, repeat=False)
    assert backoff.due("a", "m", 6.0, repeat=False)


def test_pods_no_longer_failing_start_afresh() -> None:
    backoff = MessageBackoff()
    assert backoff.due("a", "m", 0.0, repeat=True) and backoff.due("b", "m", 0.0, repeat=True)
    backoff.retain({"b"})
    assert len(backoff) == 1
    assert backoff.due("a", "m", 0.1, repeat=True)  # forgotten: at once
    assert not backoff.due("b", "m", 0.1, repeat=True)  # kept: still backing off


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="initial"):
        MessageBackoff(initial=5.0, maximum=1.0)
