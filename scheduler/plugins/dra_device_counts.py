"""What the dra plugin's filter and scorer compute from the device inventory alone: the
usual claim counted for every row at once (:func:`count_all`), the allocator's refusals
grouped by reason (:func:`each_row`), and the ``firstAvailable`` score of an allocation.
Pure functions; the plugin passes in what devices are free."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from scheduler.api.dra.allocator import Outcome
from scheduler.api.dra.inventory import Inventory
from scheduler.api.dra.model import ALLOCATION_MODE_EXACT, Allocation, ClaimInfo
from scheduler.framework.extension_points import Rejection

BoolVector = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def count_all(
    inv: Inventory, device_row: IntArray, todo: list[ClaimInfo], free: BoolVector, n: int
) -> list[Rejection] | None:
    """The usual case for all rows at once: every request of the claims is one
    ``ExactCount`` of the same class and selectors, without constraints. None when
    the claims are anything else (the allocator then runs per row). ``device_row``: each
    device's row, -1 for a device no single row reaches."""
    key = None
    need = 0
    for claim in todo:
        if claim.constraints:
            return None
        for request in claim.requests:
            sub = request.exactly
            if sub is None or sub.mode != ALLOCATION_MODE_EXACT:
                return None
            if key is None:
                key = sub
            elif (sub.device_class, sub.selectors) != (key.device_class, key.selectors):
                return None
            need += sub.count
    if key is None:
        return []
    match = inv.match(key)
    rows = device_row
    have = np.bincount(rows[match.devices & free & (rows >= 0)], minlength=n)[:n]
    short = have < need
    if not short.any():
        return []
    exist = np.bincount(rows[match.devices & (rows >= 0)], minlength=n)[:n]
    claim = todo[0]
    what = (
        f"claim {claim.key}, request {claim.requests[0].name}, class {key.device_class}"
        if len(todo) == 1 and len(claim.requests) == 1
        else f"claims {', '.join(c.key for c in todo)}, class {key.device_class}"
    )
    out = []
    none = short & (exist < need)
    busy = short & ~none
    if none.any():
        failed = np.bincount(rows[match.failed & (rows >= 0)], minlength=n)[:n] > 0
        if match.error and (none & failed).any():
            out.append(Rejection(f"cannot allocate {what}: {match.error}", none & failed, False))
            none &= ~failed
        if none.any():
            out.append(Rejection(f"cannot allocate {what}: no matching device", none, False))
    if busy.any():
        out.append(Rejection(f"cannot allocate {what}: matching devices are in use", busy, True))
    return out


def each_row(outcome: Callable[[int], Outcome], refused: BoolVector) -> list[Rejection]:
    """The rows not ``refused`` grouped by what ``outcome`` (the allocator on a row) says
    against them, one rejection per reason."""
    groups: dict[tuple[str, bool], list[int]] = {}
    for row in range(len(refused)):
        if refused[row]:
            continue
        found = outcome(row)
        if not found.ok:
            groups.setdefault((found.reason, found.resolvable), []).append(row)
    out = []
    for (reason, resolvable), rows in groups.items():
        mask = np.zeros(len(refused), dtype=np.bool_)
        mask[rows] = True
        out.append(Rejection(reason, mask, resolvable))
    return out


FIRST_AVAILABLE_MAX = 8
"""At most this many alternatives in a ``firstAvailable`` request (the API's limit): the
first scores 8, the last 1, as kube-scheduler scores them."""


def alternative_score(claim: ClaimInfo, allocation: Allocation) -> int:
    """What ``allocation`` of ``claim`` scores: per ``firstAvailable`` request, 8 less the
    index of the alternative it got."""
    got = {r.request for r in allocation.results}
    score = 0
    for request in claim.requests:
        for i, sub in enumerate(request.first_available):
            if f"{request.name}/{sub.name}" in got:
                score += FIRST_AVAILABLE_MAX - i
    return score
