"""The GPUs of one node as the gpushare plugin sees them: what a pod asks (:class:`Demand`),
what a pod holds (:class:`Holding`), one row's device arrays (:class:`RowState`,
:class:`RowDevices`), and how devices are chosen on it: bin-packed (:func:`binpack`), the
lowest that fit (:func:`lowest`, for the read-back), or, when nothing fits, the least
held (:func:`fallback`). Pure functions; deterministic."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.framework.node_table import BoolVector, IntVector


@dataclass(frozen=True, slots=True)
class Demand:
    """What a pod asks: ``whole`` devices, or ``memory`` bytes of one device.

    ``invalid`` is the reason when the pod's annotation cannot be read.
    """

    whole: int = 0
    memory: int = 0
    invalid: str = ""


@dataclass(frozen=True, slots=True)
class Holding:
    """The devices one task holds on one row, as on_place chose them."""

    row: int
    devices: tuple[int, ...]
    memory: int
    """Bytes held on the device by a share; 0 for whole devices."""
    whole: bool
    priority: int
    nominated: bool
    wrote: bool
    """Whether on_place put the index into ``session.annotations`` (on_unplace takes it out)."""


@dataclass(slots=True)
class RowState:
    """One row's device arrays, a copy to adjust (nominations, own holding, releasing)."""

    mem: IntVector
    whole: IntVector
    holders: IntVector

    def apply(self, h: Holding, sign: int) -> None:
        for d in h.devices:
            self.holders[d] += sign
            if h.whole:
                self.whole[d] += sign
            else:
                self.mem[d] += sign * h.memory


def index_text(devices: tuple[int, ...]) -> str:
    """The ``gpu-index`` annotation value of ``devices``: ``"1"``, ``"0,1"``."""
    return ",".join(str(d) for d in devices)


@dataclass(frozen=True, slots=True)
class RowDevices:
    """What does not change on a row during a session: which device slots are real
    (``valid``), each device's memory (``cap``), how many devices (``count``)."""

    valid: BoolVector
    cap: IntVector
    count: int


def free_devices(state: RowState, row: RowDevices, demand: Demand) -> BoolVector:
    """Devices of ``row`` that could take ``demand`` alone."""
    valid = row.valid
    free: BoolVector
    if demand.whole:
        free = valid & (state.holders == 0)
    else:
        free = valid & (state.whole == 0) & (row.cap - state.mem >= demand.memory)
    return free


def fits(state: RowState, row: RowDevices, demand: Demand, devices: tuple[int, ...]) -> bool:
    """Could ``devices`` of ``row`` take ``demand`` alone?"""
    free = free_devices(state, row, demand)
    return all(d < len(free) and bool(free[d]) for d in devices)


def binpack(state: RowState, row: RowDevices, demand: Demand) -> tuple[int, ...]:
    """The lowest free indexes for whole devices; for a share, the most used device that
    still fits (lowest index on a tie). Empty when nothing fits."""
    free = np.flatnonzero(free_devices(state, row, demand))
    if demand.whole:
        if len(free) < demand.whole:
            return ()
        return tuple(int(d) for d in free[: demand.whole])
    if len(free) == 0:
        return ()
    # argmax returns the first maximum: the lowest index among the most used.
    return (int(free[int(np.argmax(state.mem[free]))]),)


def lowest(state: RowState, row: RowDevices, demand: Demand) -> tuple[int, ...]:
    """The lowest indexes that fit (read-back of pods without a valid index)."""
    free = np.flatnonzero(free_devices(state, row, demand))
    k = max(demand.whole, 1)
    return tuple(int(d) for d in free[:k]) if len(free) >= k else ()


def fallback(state: RowState, row: RowDevices, demand: Demand) -> tuple[int, ...]:
    """Where a task goes when nothing fits (reality over-committed, or a placement no
    filter checked): the least held devices, lowest index first. Deterministic."""
    count = row.count
    k = min(max(demand.whole, 1), count)
    if not demand.whole:
        room = row.cap - state.mem
        order = sorted(range(count), key=lambda d: (int(state.whole[d]), -int(room[d]), d))
    else:
        order = sorted(range(count), key=lambda d: (int(state.holders[d]), d))
    return tuple(sorted(order[:k]))
