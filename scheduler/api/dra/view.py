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
    extended_claims: Mapping[str, str] = field(default_factory=dict)
    """Pod uid -> the key (in :attr:`claims`) of the claim made for its extended resources
    (KEP-5004): the claim in the API (annotated, controlled by the pod), or, while the
    scheduler's writes of it are under way, the one it assumed
    (``ns/<extended-resources>/<pod uid>``)."""
    extended: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Node name -> the extended resources it serves through DRA (resource -> class): those
    some pod of the snapshot asks, that a class serves, and that the node's own
    allocatable does not offer. Per snapshot (:meth:`~scheduler.cache.dra_store.DraStore.
    extend_nodes`); the snapshot's nodes count those devices as their allocatable."""
