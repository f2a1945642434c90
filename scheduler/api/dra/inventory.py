"""The devices of the cluster, from its ResourceSlices and DeviceClasses (layer 0).

:class:`Inventory` resolves pools the way kube's structured allocator does: the slices
of a pool (driver, pool name) count only at the pool's newest generation, and only once
all ``resourceSliceCount`` slices of that generation are there (an incomplete or invalid
pool, one naming a device twice, offers nothing). It numbers every offered device
(``0..len-1``, in slice name then device order, so choices are deterministic), tells
which devices each node reaches, and answers which devices a request's selectors match,
as a boolean vector over all devices, evaluating every CEL expression once per device.

An inventory is rebuilt only when slices or classes change; the cache hands the same
one to every snapshot meanwhile, so what it memoizes (compiled selectors, device
variables, match vectors) lives across cycles. It is not thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.api.dra.cel_selectors import SelectorCache, SelectorError, device_context
from scheduler.api.dra.extended import resource_classes
from scheduler.api.dra.model import (
    Device,
    DeviceClassInfo,
    DeviceID,
    SliceInfo,
    Subrequest,
)

BoolVector = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Match:
    """Which devices a subrequest may take: ``devices[i]`` for device ``i``. ``error``
    is set when a selector does not compile (nothing matches) or when it failed on some
    devices (``failed[i]``; such a device is not taken, and a node where the request
    cannot be met because of it says so)."""

    devices: BoolVector
    failed: BoolVector
    error: str = ""


@dataclass(frozen=True, slots=True)
class PoolState:
    """A pool as the inventory resolved it: why it offers nothing ("" if it does)."""

    driver: str
    pool: str
    generation: int
    problem: str = ""


class Inventory:
    """The offered devices of ``slices`` and the ``classes`` that select them."""

    def __init__(
        self, slices: Mapping[str, SliceInfo], classes: Mapping[str, DeviceClassInfo]
    ) -> None:
        self.classes = dict(classes)
        self.selectors = SelectorCache()
        self.pools: dict[tuple[str, str], PoolState] = {}
        chosen: list[SliceInfo] = self._resolve_pools(slices)
        devices: list[Device] = []
        slice_of: list[SliceInfo] = []
        for s in chosen:
            if s.unsupported:
                continue
            for d in s.devices:
                if d.unsupported:
                    continue
                devices.append(d)
                slice_of.append(s)
        self.devices: tuple[Device, ...] = tuple(devices)
        self.slice_of: tuple[SliceInfo, ...] = tuple(slice_of)
        self.index: dict[DeviceID, int] = {d.id: i for i, d in enumerate(devices)}
        self._contexts: list[object | None] = [None] * len(devices)
        self._matches: dict[tuple[str, tuple[str, ...]], Match] = {}
        self._resource_classes: dict[str, str] | None = None
        self._local: dict[str, tuple[int, ...]] = {}
        self._shared: list[tuple[SliceInfo, tuple[int, ...]]] = []
        by_slice: dict[str, list[int]] = {}
        for i, s in enumerate(slice_of):
            by_slice.setdefault(s.name, []).append(i)
        for idx in by_slice.values():
            s = slice_of[idx[0]]
            if s.node_name:
                self._local[s.node_name] = self._local.get(s.node_name, ()) + tuple(idx)
            else:
                self._shared.append((s, tuple(idx)))

    def __len__(self) -> int:
        return len(self.devices)

    def _resolve_pools(self, slices: Mapping[str, SliceInfo]) -> list[SliceInfo]:
        by_pool: dict[tuple[str, str], list[SliceInfo]] = {}
        for s in slices.values():
            by_pool.setdefault((s.driver, s.pool), []).append(s)
        out: list[SliceInfo] = []
        for key, members in sorted(by_pool.items()):
            newest = max(s.generation for s in members)
            current = sorted((s for s in members if s.generation == newest), key=lambda s: s.name)
            problem = ""
            if len(current) != current[0].slice_count:
                problem = (
                    f"pool {key[1]} of driver {key[0]} is incomplete: {len(current)} of "
                    f"{current[0].slice_count} slices of generation {newest}"
                )
            else:
                names = [d.id.device for s in current for d in s.devices]
                if len(set(names)) != len(names):
                    problem = f"pool {key[1]} of driver {key[0]} names a device twice"
            self.pools[key] = PoolState(key[0], key[1], newest, problem)
            if not problem:
                out.extend(current)
        return sorted(out, key=lambda s: s.name)

    def node_devices(self, node: str, labels: Mapping[str, str]) -> tuple[int, ...]:
        """The devices node ``node`` (with ``labels``) reaches, ascending."""
        local = self._local.get(node, ())
        if not self._shared:
            return local
        extra = [i for s, idx in self._shared if s.reaches(node, labels) for i in idx]
        return tuple(sorted(local + tuple(extra)))

    def is_local(self, device: int) -> bool:
        """Is device ``device`` reached from one node only (its slice names the node)?"""
        return bool(self.slice_of[device].node_name)

    def match(self, sub: Subrequest) -> Match:
        """Which devices ``sub`` may take: its class's selectors and its own, all of them.
        A class that does not exist matches nothing (the caller says why)."""
        key = (sub.device_class, sub.selectors)
        found = self._matches.get(key)
        if found is None:
            found = self._evaluate(sub)
            self._matches[key] = found
        return found

    def _evaluate(self, sub: Subrequest) -> Match:
        n = len(self.devices)
        ok = np.ones(n, dtype=np.bool_)
        failed = np.zeros(n, dtype=np.bool_)
        cls = self.classes.get(sub.device_class)
        if cls is None:
            return Match(np.zeros(n, dtype=np.bool_), failed, "")
        error = ""
        stages = [(f"class {cls.name}", cls.selectors), ("request", sub.selectors)]
        for where, expressions in stages:
            for k, expression in enumerate(expressions):
                selector = self.selectors.get(expression)
                if selector.error:
                    label = f"{where}: selector #{k}: {selector.error}"
                    return Match(np.zeros(n, dtype=np.bool_), failed, label)
                for i in np.flatnonzero(ok & ~failed):
                    try:
                        hit = selector.matches(self._context(int(i)))
                    except SelectorError as exc:
                        failed[i] = True
                        error = error or f"{where}: selector #{k}: {exc}"
                        continue
                    if not hit:
                        ok[i] = False
        return Match(ok & ~failed, failed, error)

    def class_match(self, name: str) -> BoolVector:
        """Which devices DeviceClass ``name`` selects (its selectors only; a selector that
        fails on a device does not select it)."""
        return self.match(Subrequest("", name)).devices

    def _context(self, i: int) -> object:
        context = self._contexts[i]
        if context is None:
            context = device_context(self.devices[i])
            self._contexts[i] = context
        return context

    def resource_classes(self) -> Mapping[str, str]:
        """Extended resource name -> the class serving it (KEP-5004,
        :func:`~scheduler.api.dra.extended.resource_classes`); computed once."""
        if self._resource_classes is None:
            self._resource_classes = resource_classes(self.classes)
        return self._resource_classes

    def class_count(self, name: str, devices: Sequence[int]) -> int:
        """How many of ``devices`` (inventory indexes) class ``name`` selects."""
        if not devices:
            return 0
        return int(self.class_match(name)[list(devices)].sum())

    def devices_of(self, ids: Sequence[DeviceID]) -> list[int]:
        """The indexes of ``ids`` that the inventory offers (others are skipped)."""
        return [self.index[d] for d in ids if d in self.index]


EMPTY_INVENTORY = Inventory({}, {})
