"""The structured allocator: devices for a pod's claims on one node (layer 0, pure).

As kube's structured allocator: claims one after the other, each claim's requests in
order, each request's devices one at a time; a ``firstAvailable`` request tries its
alternatives in order and takes the first that leads to a full solution; ``All`` takes
every matching device the node reaches (none in use, at least one); ``matchAttribute``
constraints are checked as devices are added. The search is depth first and
exhaustive (devices in inventory order, combinations rather than orders), bounded by
:data:`MAX_STEPS`, and returns the first full solution: the same inputs give the same
devices. Devices taken for one claim are not offered to another.

A failure says why, in words that do not depend on the node, so that FailedScheduling
can count nodes per reason, and whether removing pods could help (``resolvable``): a
node that lacks matching devices altogether cannot be helped by preemption; one whose
matching devices are in use can.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.api.dra.codec import node_allocation_selector
from scheduler.api.dra.inventory import Inventory, Match
from scheduler.api.dra.model import (
    ALLOCATION_MODE_ALL,
    MAX_ALLOCATION_RESULTS,
    Allocation,
    AttributeValue,
    ClaimInfo,
    Constraint,
    DeviceResult,
    Subrequest,
)
from scheduler.api.label_selectors import Requirement
from scheduler.api.pod import NodeSelectorTerm

MAX_STEPS = 20_000
"""Devices tried per allocation before giving up (kube bounds its search by a timeout)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The allocations of the claims asked (in their order), or why not."""

    allocations: tuple[Allocation, ...] | None
    reason: str = ""
    resolvable: bool = True

    @property
    def ok(self) -> bool:
        return self.allocations is not None


class _ConstraintState:
    __slots__ = ("constraint", "count", "value")

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        self.value: AttributeValue | None = None
        self.count = 0

    def applies(self, request: str, full: str) -> bool:
        names = self.constraint.requests
        return not names or request in names or full in names

    def add(self, attributes: Mapping[str, AttributeValue]) -> bool:
        value = attributes.get(self.constraint.attribute)
        if value is None:
            return False
        if self.count and value != self.value:
            return False
        if not self.count:
            self.value = value
        self.count += 1
        return True

    def remove(self) -> None:
        self.count -= 1


class _Search:
    def __init__(
        self,
        inventory: Inventory,
        node_devices: Sequence[int],
        free: Callable[[int], bool],
        claims: Sequence[ClaimInfo],
    ) -> None:
        self.inv = inventory
        self.node_devices = node_devices
        self.free = free
        self.claims = claims
        self.used: set[int] = set()
        self.results: list[list[tuple[str, int, Subrequest]]] = [[] for _ in claims]
        self.constraints = [[_ConstraintState(c) for c in claim.constraints] for claim in claims]
        self.steps = 0
        self.exhausted = False

    def candidates(self, match: Match) -> list[int]:
        devices = match.devices
        return [d for d in self.node_devices if devices[d] and d not in self.used and self.free(d)]

    def take(self, ci: int, request: str, full: str, device: int, sub: Subrequest) -> bool:
        attributes = self.inv.devices[device].attributes
        added: list[_ConstraintState] = []
        for state in self.constraints[ci]:
            if state.applies(request, full):
                if not state.add(attributes):
                    for s in added:
                        s.remove()
                    return False
                added.append(state)
        self.used.add(device)
        self.results[ci].append((full, device, sub))
        return True

    def give_back(self, ci: int, request: str, full: str, device: int) -> None:
        self.results[ci].pop()
        self.used.discard(device)
        for state in self.constraints[ci]:
            if state.applies(request, full):
                state.remove()

    def solve(self, ci: int, ri: int) -> bool:
        if ci == len(self.claims):
            return True
        claim = self.claims[ci]
        if ri == len(claim.requests):
            return self.solve(ci + 1, 0)
        request = claim.requests[ri]
        for sub in request.alternatives:
            full = request.name if request.exactly is not None else f"{request.name}/{sub.name}"
            match = self.inv.match(sub)
            if sub.mode == ALLOCATION_MODE_ALL:
                every = [d for d in self.node_devices if match.devices[d]]
                if not every or any(d in self.used or not self.free(d) for d in every):
                    continue
                picks = every
            else:
                picks = []
            if len(self.results[ci]) + max(sub.count, len(picks)) > MAX_ALLOCATION_RESULTS:
                continue
            if sub.mode == ALLOCATION_MODE_ALL:
                if self._take_all((ci, ri), (request.name, full), picks, sub):
                    return True
            elif self._pick(
                (ci, ri), (request.name, full), sub, self.candidates(match), start=0, have=0
            ):
                return True
            if self.exhausted:
                return False
        return False

    def _take_all(
        self, at: tuple[int, int], names: tuple[str, str], devices: list[int], sub: Subrequest
    ) -> bool:
        ci, ri = at
        request, full = names
        taken: list[int] = []
        for d in devices:
            if not self.take(ci, request, full, d, sub):
                break
            taken.append(d)
        else:
            if self.solve(ci, ri + 1):
                return True
        for d in reversed(taken):
            self.give_back(ci, request, full, d)
        return False

    def _pick(
        self,
        at: tuple[int, int],
        names: tuple[str, str],
        sub: Subrequest,
        cands: list[int],
        *,
        start: int,
        have: int,
    ) -> bool:
        ci, ri = at
        request, full = names
        if have == sub.count:
            return self.solve(ci, ri + 1)
        for k in range(start, len(cands) - (sub.count - have) + 1):
            self.steps += 1
            if self.steps > MAX_STEPS:
                self.exhausted = True
                return False
            d = cands[k]
            if d in self.used or not self.take(ci, request, full, d, sub):
                continue
            if self._pick(at, names, sub, cands, start=k + 1, have=have + 1):
                return True
            self.give_back(ci, request, full, d)
            if self.exhausted:
                return False
        return False


def allocate(
    inventory: Inventory,
    node: str,
    node_devices: Sequence[int],
    free: Callable[[int], bool],
    claims: Sequence[ClaimInfo],
) -> Outcome:
    """Devices for every claim of ``claims`` among ``node_devices`` (the inventory
    indexes of the devices node ``node`` reaches) that ``free(i)`` says are not in use.

    Pure; deterministic. The claims must be allocatable by Sluice (no
    :attr:`~ClaimInfo.unsupported` reason) and their classes must exist.
    """
    search = _Search(inventory, node_devices, free, claims)
    if search.solve(0, 0):
        return Outcome(
            tuple(
                _allocation(inventory, node, claim, search.results[ci])
                for ci, claim in enumerate(claims)
            )
        )
    if search.exhausted:
        return Outcome(None, "the device search took too long", resolvable=False)
    return _why(inventory, node_devices, free, claims)


def _why(
    inventory: Inventory,
    node_devices: Sequence[int],
    free: Callable[[int], bool],
    claims: Sequence[ClaimInfo],
) -> Outcome:
    """Why ``claims`` cannot be allocated on the node: the first request that lacks
    matching devices at all (not resolvable), else the first whose matching devices are
    in use (resolvable), else the claim whose constraint cannot be met."""
    busy: str = ""
    for claim in claims:
        for request in claim.requests:
            sub = request.alternatives[-1]
            match = inventory.match(sub)
            on_node = [d for d in node_devices if match.devices[d]]
            # A selector that does not compile fails everywhere; one that failed on some
            # devices explains the nodes that have such devices.
            failed = bool(match.error) and (
                not match.failed.any() or any(match.failed[d] for d in node_devices)
            )
            need = max(sub.count, 1)
            what = f"claim {claim.key}, request {request.name}, class {sub.device_class}"
            if failed and len(on_node) < need:
                return Outcome(None, f"{what}: {match.error}", resolvable=False)
            if len(on_node) < need:
                return Outcome(
                    None, f"cannot allocate {what}: no matching device", resolvable=False
                )
            free_here = sum(1 for d in on_node if free(d))
            short = (
                free_here < len(on_node) if sub.mode == ALLOCATION_MODE_ALL else free_here < need
            )
            if not busy and short:
                busy = f"cannot allocate {what}: matching devices are in use"
    if busy:
        return Outcome(None, busy)
    keys = ", ".join(c.key for c in claims)
    if any(c.constraints for c in claims):
        return Outcome(None, f"cannot allocate claims {keys}: constraints not satisfied")
    return Outcome(None, f"cannot allocate all of claims {keys} together")


def _allocation(
    inventory: Inventory,
    node: str,
    claim: ClaimInfo,
    chosen: Sequence[tuple[str, int, Subrequest]],
) -> Allocation:
    results = tuple(DeviceResult(full, inventory.devices[d].id) for full, d, _ in chosen)
    selector, node_name = _node_selector(inventory, node, [d for _, d, _ in chosen])
    return Allocation(results, selector, _configs(inventory, claim, chosen), node_name=node_name)


def _node_selector(
    inventory: Inventory, node: str, devices: Sequence[int]
) -> tuple[tuple[NodeSelectorTerm, ...] | None, str]:
    """Where the devices can be used: the node, when one of them is node-local; else the
    AND of their slices' single-term selectors (None when every slice is ``allNodes``)."""
    if any(inventory.is_local(d) for d in devices):
        return node_allocation_selector(node), node
    labels: list[Requirement] = []
    fields: list[Requirement] = []
    for d in devices:
        s = inventory.slice_of[d]
        if s.node_selector and len(s.node_selector) == 1:
            term = s.node_selector[0]
            labels.extend(r for r in term.labels if r not in labels)
            fields.extend(r for r in term.fields if r not in fields)
        elif s.node_selector:
            # Several ORed terms cannot be ANDed with others in one term: pin to the node.
            return node_allocation_selector(node), node
    if not labels and not fields:
        return None, ""
    return (NodeSelectorTerm(tuple(labels), tuple(fields)),), ""


def _configs(
    inventory: Inventory, claim: ClaimInfo, chosen: Sequence[tuple[str, int, Subrequest]]
) -> tuple[Mapping[str, Any], ...]:
    """The allocation's config: each class's config once (for the requests of that
    class), then the claim's own, as kube's allocator writes them."""
    out: list[dict[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    for full, _, sub in chosen:
        names = by_class.setdefault(sub.device_class, [])
        if full not in names:
            names.append(full)
    for class_name, names in by_class.items():
        cls = inventory.classes.get(class_name)
        for config in cls.config if cls is not None else ():
            out.append({"source": "FromClass", "requests": list(names), **dict(config)})
    picked = {full for full, _, _ in chosen} | {full.split("/")[0] for full, _, _ in chosen}
    for config in claim.config:
        requests = list(config.get("requests") or [])
        if not requests or any(r in picked for r in requests):
            body = {k: v for k, v in config.items() if k != "requests"}
            entry: dict[str, Any] = {"source": "FromClaim", **body}
            if requests:
                entry["requests"] = requests
            out.append(entry)
    return tuple(out)
