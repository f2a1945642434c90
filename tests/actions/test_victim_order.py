"""The order in which a gang's candidate victims are taken is a total order (issue 23).

Reclaim orders bundles by queue share, then by ROI where it differs by more than
``roiThreshold`` and by job priority where it does not. Written as a pairwise rule that
is not transitive (ROIs 0.50, 0.47, 0.44 with a threshold of 0.05), so the order depended
on the order the bundles came in. The property: the order is the same for every
permutation of the same bundles. Preempt's order is checked the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.actions.victims import LowerPriority, QueueReclaim
from scheduler.actions.victims.bundle_scores import Scored
from scheduler.actions.victims.bundles import Bundle, Kind
from scheduler.api.job import JobInfo

SHARES = {"a": 1.5, "b": 1.5, "c": 2.0}
"""Queues a and b equally above their share (their bundles compare by ROI and priority)."""


class _Shares:
    @staticmethod
    def key(queue: str) -> tuple[int, float]:
        return (0, -SHARES[queue])


@st.composite
def bundles(draw: st.DrawFn) -> list[Scored]:
    """2-6 bundles of distinct jobs, mostly Whole and mostly in queues a and b (equally
    above their share), with ROIs close to one another (steps of 0.03 around thresholds
    of 0.05) and priorities 0-2."""
    out: list[Scored] = []
    zero = np.zeros(1, dtype=np.int64)
    for i in range(draw(st.integers(2, 6))):
        job = JobInfo(
            f"default/j{i}",
            "default",
            f"j{i}",
            draw(st.sampled_from(["a", "a", "b", "c"])),
            priority=draw(st.integers(0, 2)),
        )
        kind = draw(st.sampled_from([Kind.WHOLE, Kind.WHOLE, Kind.SAFE]))
        roi = draw(st.integers(0, 4)) * 0.03
        out.append(Scored(Bundle(job, kind, ()), zero, zero, roi))
    return out


def _reclaim() -> QueueReclaim:
    policy = QueueReclaim()
    policy.shares = lambda session: _Shares()  # type: ignore[assignment,method-assign,return-value]
    return policy


def _names(scored: list[Scored]) -> list[tuple[str, str]]:
    return [(s.bundle.job.name, s.bundle.kind.value) for s in scored]


@settings(max_examples=300)
@given(
    scored=bundles(),
    order=st.randoms(use_true_random=False),
    threshold=st.sampled_from([0.05, 0.05, 0.0, 0.1]),
)
def test_reclaim_order_does_not_depend_on_the_order_given(
    scored: list[Scored], order: Any, threshold: float
) -> None:
    policy = _reclaim()
    shuffled = list(scored)
    order.shuffle(shuffled)
    session: Any = None
    first = _names(policy.order_bundles(session, scored, threshold))
    second = _names(policy.order_bundles(session, shuffled, threshold))
    assert first == second


@given(scored=bundles(), order=st.randoms(use_true_random=False))
def test_preempt_order_does_not_depend_on_the_order_given(scored: list[Scored], order: Any) -> None:
    shuffled = list(scored)
    order.shuffle(shuffled)
    session: Any = None
    first = _names(LowerPriority().order_bundles(session, scored, 0.05))
    assert first == _names(LowerPriority().order_bundles(session, shuffled, 0.05))


def test_reclaim_order_groups_rois_near_the_best() -> None:
    """ROIs 0.50 (priority 2), 0.47 (priority 1), 0.44 (priority 0), threshold 0.05: the
    first two are within it of the best and go by priority; 0.44 is not, and comes last."""
    zero = np.zeros(1, dtype=np.int64)
    scored = [
        Scored(
            Bundle(JobInfo(f"default/{n}", "default", n, "a", priority=p), Kind.WHOLE, ()),
            zero,
            zero,
            roi,
        )
        for n, p, roi in (("x", 2, 0.50), ("y", 1, 0.47), ("z", 0, 0.44))
    ]
    session: Any = None
    assert [s.bundle.job.name for s in _reclaim().order_bundles(session, scored, 0.05)] == [
        "y",
        "x",
        "z",
    ]
