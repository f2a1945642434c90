"""What one cycle sees of DRA (layer 0): the snapshot's :class:`DraView`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api.dra.inventory import EMPTY_INVENTORY, Inventory
from scheduler.api.dra.model import ClaimInfo, ClaimTemplateInfo


@dataclass(frozen=True, slots=True)
class DraView:
    """The devices (``inventory``, shared with later snapshots while slices and classes
    do not change), the claims by ``ns/name`` (with the allocations the scheduler
    assumed written) and the templates. Read-only: the ``dra`` plugin keeps what a
    session allocates in its own state."""

    inventory: Inventory = EMPTY_INVENTORY
    claims: Mapping[str, ClaimInfo] = field(default_factory=dict)
    templates: Mapping[str, ClaimTemplateInfo] = field(default_factory=dict)
    invalid: Mapping[str, str] = field(default_factory=dict)
    """Claims that exist but cannot be read (by ``ns/name``): why. Their pods wait,
    saying so, rather than for a claim "to be created"."""
