"""What one cycle sees of storage (layer 0): the snapshot's :class:`VolumeView`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from scheduler.api.volumes.model import (
    CapacityInfo,
    CsiDriverInfo,
    CsiNodeInfo,
    PvcInfo,
    PvInfo,
    StorageClassInfo,
)

STORED: Final = (
    "claims",
    "volumes",
    "classes",
    "csi_nodes",
    "csi_drivers",
    "capacities",
    "invalid_claims",
    "invalid_volumes",
)
"""The attributes, of the cache's volume store and of a view alike, that hold storage
objects (read or refused), by kind."""


def holds_nothing(store: object) -> bool:
    """Does ``store`` (a view, or the cache's volume store) hold no storage object?"""
    return not any(getattr(store, name) for name in STORED)


@dataclass(frozen=True, slots=True)
class VolumeView:
    """Claims by ``ns/name`` and PVs by name, as the events show them with the scheduler's
    own writes assumed (a PV it chose for a claim shows the claim in its ``claimRef``; a
    claim it chose a node for shows the ``selected-node`` annotation), until an event
    shows them or the write is known not to have landed; the classes and CSI objects.
    Read-only: the volume plugins keep what a session decides in their own state.
    Shared by the snapshots taken while nothing of it changes."""

    claims: Mapping[str, PvcInfo] = field(default_factory=dict)
    volumes: Mapping[str, PvInfo] = field(default_factory=dict)
    classes: Mapping[str, StorageClassInfo] = field(default_factory=dict)
    csi_nodes: Mapping[str, CsiNodeInfo] = field(default_factory=dict)
    csi_drivers: Mapping[str, CsiDriverInfo] = field(default_factory=dict)
    capacities: Mapping[str, CapacityInfo] = field(default_factory=dict)
    invalid_claims: Mapping[str, str] = field(default_factory=dict)
    """Claims that exist but cannot be read (by ``ns/name``): why. Their pods wait, saying
    so, rather than for the claim "to be created"."""
    invalid_volumes: Mapping[str, str] = field(default_factory=dict)
    """PVs that exist but cannot be read (by name): why."""
    by_class: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The PVs of each storage class, by name, sorted."""

    @property
    def empty(self) -> bool:
        """No storage object at all."""
        return holds_nothing(self)
