"""Matching unbound claims to PVs, for every node at once, as kube's binder does (layer 2).

:class:`VolumeMatcher` holds one session's view of PVs and claims and what the session
decided on top of it: the PV chosen for a claim (the PV counts as bound to that claim
from then on: no other claim gets it) and the node chosen to provision a claim's PV (the
claim counts as annotated with it). It answers kube's FindMatchingVolume for one claim on
every row at once (:meth:`VolumeMatcher.choices`) and on one row while other PVs are
excluded (:meth:`VolumeMatcher.choose_on_row`, for a pod whose claims compete for the
same PVs):

* a PV bound (or pre-bound, by ``claimRef``) to the claim is its answer on the rows its
  node affinity admits, and no PV is on the others;
* otherwise the smallest Available PV of the claim's class that fits it (size, access
  modes, volume mode, selector, attributes class, not being deleted) and admits the row;
  of two of one size, the one whose name sorts first (kube takes the first its informer
  lists).

A PV's affinity is computed once per session as the rows it admits (a local PV: one), so
a class of thousands of local PVs costs thousands of steps per claim shape, and the
answer for one shape is cached until a PV of its class is taken or given back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.api.label_selectors import LabelSelector
from scheduler.api.volumes.model import PvcInfo, PvInfo
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.node_table import IntVector
from scheduler.plugins.volumes.rows import StorageRows

NONE = -1
"""No PV (in a vector of choices)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What decides which PVs fit a claim, besides the claim itself (the cache key of a
    claim's candidates)."""

    storage_class: str
    request: int
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    selector: LabelSelector | None

    @staticmethod
    def of(claim: PvcInfo) -> Shape:
        return Shape(
            claim.storage_class,
            claim.request,
            claim.access_modes,
            claim.volume_mode,
            claim.attributes_class,
            claim.selector,
        )


def fits(pv: PvInfo, claim: PvcInfo) -> bool:
    """The checks kube's FindMatchingVolume makes of every PV before it looks at the
    claimRef: large enough, the same volume mode and attributes class, not being deleted."""
    return (
        pv.capacity >= claim.request
        and pv.volume_mode == claim.volume_mode
        and pv.attributes_class == claim.attributes_class
        and not pv.deleting
    )


def available_for(pv: PvInfo, shape: Shape) -> bool:
    """The further checks of an unbound PV: Available, selected, of the class, with every
    access mode the claim asks."""
    return (
        pv.phase == "Available"
        and (shape.selector is None or shape.selector.matches(pv.labels))
        and pv.storage_class == shape.storage_class
        and shape.access_modes <= pv.access_modes
    )


class VolumeMatcher:
    """See the module docstring. One per session; used from one thread."""

    def __init__(self, view: VolumeView, rows: StorageRows) -> None:
        self.view = view
        self.rows = rows
        self._n = len(rows)
        self.taken: dict[str, str] = {}
        """PV name -> the claim (``ns/name``) it was chosen for in this session."""
        self.claim_pv: dict[str, str] = {}
        """Claim key -> the PV chosen for it in this session."""
        self.claim_node: dict[str, str] = {}
        """Claim key -> the node chosen to provision its PV in this session."""
        self._ids: dict[str, int] = {}
        self._names: list[str] = []
        self._class_version: dict[str, int] = {}
        self._candidates: dict[Shape, list[PvInfo]] = {}
        self._choices: dict[Shape, tuple[int, IntVector]] = {}
        self._prebound: dict[str, list[str]] | None = None

    # Identities ---------------------------------------------------------------------------

    def id_of(self, name: str) -> int:
        """A small integer for PV ``name`` (the values of a choice vector)."""
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self._names)
            self._names.append(name)
        return found

    def name_of(self, pv_id: int) -> str:
        return self._names[pv_id]

    # Session decisions --------------------------------------------------------------------

    def selected_node(self, claim: PvcInfo) -> str | None:
        """The node chosen to provision ``claim`` (in this session, else in the API or
        assumed), or None."""
        node = self.claim_node.get(claim.key)
        if node is not None:
            return node
        return claim.selected_node if claim.provisioning else None

    def take(self, claim: PvcInfo, pv: str) -> None:
        """``pv`` is chosen for ``claim`` in this session."""
        self.taken[pv] = claim.key
        self.claim_pv[claim.key] = pv
        self._changed(claim.storage_class)

    def give_back(self, claim: PvcInfo) -> None:
        """``claim``'s session decision (its PV or its node) is undone."""
        pv = self.claim_pv.pop(claim.key, None)
        if pv is not None:
            self.taken.pop(pv, None)
            self._changed(claim.storage_class)
        self.claim_node.pop(claim.key, None)

    def provision(self, claim: PvcInfo, node: str) -> None:
        """``claim``'s PV is to be provisioned on ``node`` (decided in this session)."""
        self.claim_node[claim.key] = node

    def _changed(self, storage_class: str) -> None:
        self._class_version[storage_class] = self._class_version.get(storage_class, 0) + 1

    # Answers ------------------------------------------------------------------------------

    def prebound(self, claim: PvcInfo, excluded: Iterable[str] = ()) -> PvInfo | None:
        """The PV bound or pre-bound to ``claim`` among the PVs of its class that fit it
        (the first by name), in this session or in the view; None when there is none."""
        session = self.claim_pv.get(claim.key)
        volumes = self.view.volumes
        skip = set(excluded)
        if session is not None and session not in skip:
            pv = volumes.get(session)
            if pv is not None and fits(pv, claim):
                return pv
        if self._prebound is None:
            index: dict[str, list[str]] = {}
            for name, pv in volumes.items():
                if pv.claim_ref is not None:
                    index.setdefault(pv.claim_ref.key, []).append(name)
            for names in index.values():
                names.sort()
            self._prebound = index
        for name in self._prebound.get(claim.key, ()):
            pv = volumes[name]
            if (
                name not in skip
                and pv.storage_class == claim.storage_class
                and pv.bound_to(claim)
                and fits(pv, claim)
                and self.taken.get(name, claim.key) == claim.key
            ):
                return pv
        return None

    def candidates(self, claim: PvcInfo) -> list[PvInfo]:
        """The unbound PVs that could take ``claim`` on some node (its shape's, not taken
        in this session), smallest first, then by name."""
        shape = Shape.of(claim)
        static = self._candidates.get(shape)
        if static is None:
            volumes = self.view.volumes
            static = [
                volumes[name]
                for name in self.view.by_class.get(claim.storage_class, ())
                if volumes[name].claim_ref is None
                and fits(volumes[name], claim)
                and available_for(volumes[name], shape)
            ]
            static.sort(key=lambda pv: (pv.capacity, pv.name))
            self._candidates[shape] = static
        if not self.taken:
            return static
        return [pv for pv in static if pv.name not in self.taken]

    def choices(self, claim: PvcInfo) -> IntVector:
        """Per row, the PV (its id) kube's FindMatchingVolume gives ``claim`` there, or
        :data:`NONE`. Read-only (cached)."""
        pv = self.prebound(claim)
        if pv is not None:
            out = np.full(self._n, NONE, dtype=np.int64)
            rows = self.rows.of_volume(pv)
            out[slice(None) if rows is None else rows] = self.id_of(pv.name)
            return out
        shape = Shape.of(claim)
        version = self._class_version.get(claim.storage_class, 0)
        cached = self._choices.get(shape)
        if cached is not None and cached[0] == version:
            return cached[1]
        out = self._smallest(self.candidates(claim))
        out.flags.writeable = False
        self._choices[shape] = (version, out)
        return out

    def _smallest(self, candidates: Sequence[PvInfo]) -> IntVector:
        """Per row, the first of ``candidates`` (in their order) that admits it."""
        n = self._n
        big = len(candidates)
        best = np.full(n, big, dtype=np.int64)
        single_rows: list[int] = []
        single_pos: list[int] = []
        for pos, pv in enumerate(candidates):
            rows = self.rows.of_volume(pv)
            if rows is None:
                np.minimum(best, pos, out=best)
                break
            if len(rows) == 1:
                single_rows.append(int(rows[0]))
                single_pos.append(pos)
            elif len(rows):
                best[rows] = np.minimum(best[rows], pos)
        if single_rows:
            np.minimum.at(best, np.array(single_rows, dtype=np.intp), single_pos)
        ids = np.array([self.id_of(pv.name) for pv in candidates] + [NONE], dtype=np.int64)
        out: IntVector = ids[best]
        return out

    def choose_on_row(self, claim: PvcInfo, row: int, excluded: set[str]) -> PvInfo | None:
        """kube's FindMatchingVolume for ``claim`` on ``row`` with the PVs ``excluded``
        (chosen for the pod's other claims there) left out."""
        if not excluded:
            pv_id = int(self.choices(claim)[row])
            return None if pv_id == NONE else self.view.volumes[self.name_of(pv_id)]
        pv = self.prebound(claim, excluded)
        if pv is not None:
            return pv if self.rows.admits(self.rows.of_volume(pv), row) else None
        for pv in self.candidates(claim):
            if pv.name not in excluded and self.rows.admits(self.rows.of_volume(pv), row):
                return pv
        return None
