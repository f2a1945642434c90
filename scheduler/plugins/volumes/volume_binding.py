"""volumebinding: pods go where their claims can be bound, as kube's VolumeBinding (layer 2).

===============  =========================================================================
hook             behaviour
===============  =========================================================================
open             reads the snapshot's storage view; nominated pods with claims to bind
                 get their PVs on their node again, highest priority first (so that no
                 pod of lower priority takes them while their victims leave)
filter           a pod without claims: ``[]`` at once. A claim missing, being deleted,
                 lost or unreadable, or an unbound claim of an Immediate class: every
                 node, unresolvable, with kube's words. Else, per node, kube's
                 FindPodVolumes, for every row at once: a bound claim's PV missing
                 (``node(s) unavailable due to one or more pvc(s) bound to non-existent
                 pv(s)``) or not admitting the node (``node(s) had volume node affinity
                 conflict``); a claim waiting for its first consumer that has no PV to
                 match there and whose class cannot provision there (``node(s) didn't
                 find available persistent volumes to bind``: no provisioner, the class's
                 allowedTopologies, another node chosen already) or can provision but no
                 CSIStorageCapacity has room (``node(s) did not have enough free
                 storage``). All unresolvable: evicting pods frees no volume
row filter       the same for one row (the preemption search)
on_place         a placed or nominated pod's claims get their PVs (or the node for
                 provisioning): the PV taken counts as bound to the claim for the rest of
                 the session, so no other claim gets it (a gang's members neither)
on_unplace       gives back what on_place decided (a rolled-back gang leaves nothing)
bind volumes     the writes before the pod's bind (:class:`~scheduler.api.volumes.prebind.
                 VolumeBindings`): each PV's ``claimRef``, each claim's ``selected-node``,
                 and how long the bind waits for the PV controller (``bindTimeoutSeconds``)
===============  =========================================================================

A pod with several claims to bind matches them smallest first, each PV once, as kube's
binder does. Sluice leaves out kube's alpha capacity score (``StorageCapacityScoring``,
off by default in v1.36): this plugin scores nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler.api.errors import InvariantError
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.volumes.claims import PodClaims, claims_of_pod
from scheduler.api.volumes.model import PvcInfo, PvInfo
from scheduler.api.volumes.prebind import ClaimTarget, Provision, StaticBinding, VolumeBindings
from scheduler.api.volumes.view import VolumeView
from scheduler.framework.extension_points import (
    BIND_VOLUMES,
    NODE_FILTER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import BoolVector, TableView
from scheduler.plugins.volumes.matcher import NONE, VolumeMatcher
from scheduler.plugins.volumes.rows import StorageRows

NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"

EMPTY_VIEW = VolumeView()


@dataclass(frozen=True, slots=True)
class VolumeBindingArguments:
    """The arguments of ``volumebinding``; field names are the YAML keys."""

    bindTimeoutSeconds: int = 600
    """How long a pod's bind waits for the PV controller to bind its claims after the
    scheduler's writes (kube's VolumeBindingArgs default); then the writes' assumption is
    dropped and the pod is tried again."""

    def __post_init__(self) -> None:
        if self.bindTimeoutSeconds <= 0:
            raise ValueError(f"bindTimeoutSeconds must be > 0, got {self.bindTimeoutSeconds}")


@dataclass(slots=True)
class _Decision:
    """What on_place decided for one task on one node."""

    node: str
    static: list[tuple[PvcInfo, PvInfo]] = field(default_factory=list)
    provisions: list[PvcInfo] = field(default_factory=list)


class VolumeBindingPlugin:
    """kube's VolumeBinding. One instance per session."""

    name = "volumebinding"

    def __init__(self, arguments: VolumeBindingArguments | None = None) -> None:
        self.arguments = arguments if arguments is not None else VolumeBindingArguments()
        self._view = EMPTY_VIEW
        self._rows: StorageRows | None = None
        self._matcher: VolumeMatcher | None = None
        self._table: TableView | None = None
        self._pods: dict[str, PodClaims] = {}
        self._decided: dict[str, _Decision] = {}
        self._holders: dict[str, set[str]] = {}
        """Claim key -> the tasks whose session decision holds it."""

    # Plugin protocol ------------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._view = context.volumes or EMPTY_VIEW
        self._table = context.table
        hooks.add(NODE_FILTER, self.filter)
        hooks.add(ROW_FILTER, self.row_filter)
        if self._view.empty:
            return
        hooks.add_placement_handlers(self._place, self._unplace)
        hooks.add(BIND_VOLUMES, self.bind_volumes)
        nominated = [
            (t, node)
            for node in context.nodes.values()
            for t in node.tasks.values()
            if t.status is TaskStatus.PIPELINED and t.spec.volumes
        ]
        nominated.sort(key=lambda x: (-x[0].priority, x[0].creation, x[0].key))
        for task, node in nominated:
            self._place(task, node)

    def close(self) -> None:
        self._view = EMPTY_VIEW
        self._rows = self._matcher = self._table = None
        self._pods.clear()
        self._decided.clear()
        self._holders.clear()

    def _session(self) -> tuple[StorageRows, VolumeMatcher]:
        if self._matcher is None or self._rows is None:
            assert self._table is not None, "volumebinding used outside an open session"
            self._rows = StorageRows(self._table.nodes)
            self._matcher = VolumeMatcher(self._view, self._rows)
        return self._rows, self._matcher

    def claims_of(self, task: TaskInfo) -> PodClaims:
        """``task``'s claims in this session's view (memoized)."""
        found = self._pods.get(task.uid)
        if found is None:
            found = claims_of_pod(
                task.namespace, task.name, task.uid, task.spec.volumes, self._view
            )
            self._pods[task.uid] = found
        return found

    # The filter -----------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row (module docstring)."""
        if not task.spec.volumes:
            return []
        claims = self.claims_of(task)
        n = len(table)
        if claims.problem:
            return [Rejection(claims.problem, np.ones(n, dtype=np.bool_), False, whole=True)]
        if not claims.bound and not claims.delayed:
            return []
        conflict, missing = self._bound_rows(claims.bound, n)
        unbound_bad, no_space = self._delayed_rows(claims.delayed, table)
        out = []
        for reason, rows in (
            (NODE_CONFLICT, conflict),
            (BIND_CONFLICT, unbound_bad),
            (NOT_ENOUGH_SPACE, no_space),
            (PV_NOT_EXIST, missing),
        ):
            if rows.any():
                out.append(Rejection(reason, rows, False))
        return out

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """The filter on one row."""
        if not task.spec.volumes:
            return True
        claims = self.claims_of(task)
        if claims.problem:
            return False
        if not claims.bound and not claims.delayed:
            return True
        conflict, missing = self._bound_rows(claims.bound, len(table))
        if conflict[row] or missing[row]:
            return False
        return self._decide(claims.delayed, table, row) is not None

    def _bound_rows(self, bound: Sequence[PvcInfo], n: int) -> tuple[BoolVector, BoolVector]:
        """kube's checkBoundClaims on every row: the rows a bound claim's PV does not
        admit, and those where it is missing (the first failing claim decides a row)."""
        conflict = np.zeros(n, dtype=np.bool_)
        missing = np.zeros(n, dtype=np.bool_)
        if not bound:
            return conflict, missing
        rows, _ = self._session()
        decided = np.zeros(n, dtype=np.bool_)
        for claim in bound:
            pv = self._view.volumes.get(claim.volume_name)
            if pv is None:
                missing |= ~decided
                break
            bad = ~rows.mask(rows.of_volume(pv))
            conflict |= bad & ~decided
            decided |= bad
        return conflict, missing

    def _delayed_rows(
        self, delayed: Sequence[PvcInfo], table: TableView
    ) -> tuple[BoolVector, BoolVector]:
        """kube's matching and provisioning checks for the claims waiting for a first
        consumer, on every row: the rows with no way to bind them, and those where
        provisioning lacks storage capacity."""
        n = len(table)
        unbound_bad = np.zeros(n, dtype=np.bool_)
        no_space = np.zeros(n, dtype=np.bool_)
        if not delayed:
            return unbound_bad, no_space
        _, matcher = self._session()
        skip = np.zeros(n, dtype=np.bool_)
        selected: list[PvcInfo] = []
        to_match: list[PvcInfo] = []
        for claim in delayed:
            node = matcher.selected_node(claim)
            if node is None:
                to_match.append(claim)
                continue
            selected.append(claim)
            there = np.ones(n, dtype=np.bool_)
            row = table.row.get(node)
            if row is not None:
                there[row] = False
            skip |= there
        unbound_bad |= skip
        to_match.sort(key=lambda c: c.request)
        unmatched: dict[str, BoolVector] = {}
        chosen: list[tuple[PvcInfo, np.ndarray]] = []
        for claim in to_match:
            choice = matcher.choices(claim)
            unmatched[claim.key] = choice == NONE
            chosen.append((claim, choice))
        clash = np.zeros(n, dtype=np.bool_)
        for i in range(1, len(chosen)):
            for j in range(i):
                clash |= (chosen[i][1] == chosen[j][1]) & (chosen[i][1] != NONE)
        decided = skip | clash
        picked = {c.key for c in selected}
        for claim in selected + to_match:
            applies = ~decided if claim.key in picked else unmatched[claim.key] & ~decided
            if not applies.any():
                continue
            can, room = self._provisioning(claim, table)
            fail = applies & ~can
            unbound_bad |= fail
            short = applies & can & ~room
            no_space |= short
            decided |= fail | short
        for row in np.flatnonzero(clash & ~skip).tolist():
            if self._decide(delayed, table, row) is None:
                unbound_bad[row] = not self._short_on_row(delayed, table, row)
                no_space[row] = not unbound_bad[row]
        return unbound_bad, no_space

    def _provisioning(self, claim: PvcInfo, table: TableView) -> tuple[BoolVector, BoolVector]:
        """kube's checkVolumeProvisions for one claim on every row: where its class can
        provision (a provisioner, allowedTopologies), and where capacity allows it (a
        CSIStorageCapacity with room, when the class's CSI driver publishes capacity)."""
        rows, _ = self._session()
        n = len(table)
        cls = self._view.classes.get(claim.storage_class)
        if cls is None:
            return np.zeros(n, dtype=np.bool_), np.ones(n, dtype=np.bool_)
        can = rows.of_class(cls)
        driver = self._view.csi_drivers.get(cls.provisioner)
        if driver is None or not driver.storage_capacity or not claim.request:
            return can, np.ones(n, dtype=np.bool_)
        return can, rows.with_capacity(cls.name, claim.request, self._view.capacities)

    def _short_on_row(self, delayed: Sequence[PvcInfo], table: TableView, row: int) -> bool:
        """Is the failure of ``delayed`` on ``row`` one of storage capacity (not of
        finding a PV or a provisioner)?"""
        _, matcher = self._session()
        excluded: set[str] = set()
        provision: list[PvcInfo] = []
        for claim in sorted(delayed, key=lambda c: c.request):
            if matcher.selected_node(claim) is not None:
                provision.append(claim)
                continue
            pv = matcher.choose_on_row(claim, row, excluded)
            if pv is None:
                provision.append(claim)
            else:
                excluded.add(pv.name)
        for claim in provision:
            can, room = self._provisioning(claim, table)
            if not can[row]:
                return False
            if not room[row]:
                return True
        return False

    def _decide(self, delayed: Sequence[PvcInfo], table: TableView, row: int) -> _Decision | None:
        """kube's FindPodVolumes for the claims waiting for a first consumer on one row:
        the PVs and provisions that bind them there, or None when they cannot."""
        _, matcher = self._session()
        node = table.nodes[row].name
        decision = _Decision(node)
        to_match: list[PvcInfo] = []
        for claim in delayed:
            selected = matcher.selected_node(claim)
            if selected is None:
                to_match.append(claim)
            elif selected != node:
                return None
            else:
                decision.provisions.append(claim)
        excluded: set[str] = set()
        for claim in sorted(to_match, key=lambda c: c.request):
            pv = matcher.choose_on_row(claim, row, excluded)
            if pv is None:
                decision.provisions.append(claim)
            else:
                excluded.add(pv.name)
                decision.static.append((claim, pv))
        for claim in decision.provisions:
            can, room = self._provisioning(claim, table)
            if not (can[row] and room[row]):
                return None
        return decision

    # Placement handlers ---------------------------------------------------------------------

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if not task.spec.volumes or task.status not in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            return
        claims = self.claims_of(task)
        if claims.problem or not claims.delayed:
            return
        table = self._table
        assert table is not None
        row = table.row.get(node.name)
        decision = None if row is None else self._decide(claims.delayed, table, row)
        if decision is None:
            return  # a placement no filter checked: bind_volumes refuses it
        _, matcher = self._session()
        for claim, pv in decision.static:
            matcher.take(claim, pv.name)
            self._holders.setdefault(claim.key, set()).add(task.uid)
        for claim in decision.provisions:
            matcher.provision(claim, node.name)
            self._holders.setdefault(claim.key, set()).add(task.uid)
        self._decided[task.uid] = decision

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        decision = self._decided.pop(task.uid, None)
        if decision is None:
            return
        _, matcher = self._session()
        for claim in [c for c, _ in decision.static] + decision.provisions:
            holders = self._holders.get(claim.key)
            if holders is None:
                continue
            holders.discard(task.uid)
            if not holders:
                del self._holders[claim.key]
                matcher.give_back(claim)

    # Bind volumes ---------------------------------------------------------------------------

    def bind_volumes(self, task: TaskInfo, node: NodeInfo, /) -> VolumeBindings | None:
        """The volume writes before ``task`` is bound to ``node`` (module docstring); None
        when its claims are bound already (or it has none)."""
        if not task.spec.volumes:
            return None
        claims = self.claims_of(task)
        if claims.problem:
            raise InvariantError(
                f"{task.key} is bound with claims that cannot be: {claims.problem}"
            )
        if not claims.delayed:
            return None
        decision = self._decided.get(task.uid)
        if decision is None or decision.node != node.name:
            # Never bind a pod whose claims have nowhere to go: the job's attempt fails
            # (SchedulerError) and is rolled back instead.
            raise InvariantError(f"the claims of {task.key} cannot be bound on {node.name}")
        static = tuple(
            StaticBinding(
                ClaimTarget.of(claim),
                pv.name,
                pv.resource_version,
                write=not (pv.claim_ref is not None and pv.claim_ref.uid == claim.uid),
                by_controller=pv.claim_ref is None,
            )
            for claim, pv in decision.static
        )
        provisions = tuple(
            Provision(
                ClaimTarget.of(claim),
                claim.resource_version,
                write=not (claim.provisioning and claim.selected_node == node.name),
            )
            for claim in decision.provisions
        )
        return VolumeBindings(
            node.name, static, provisions, float(self.arguments.bindTimeoutSeconds)
        )
