"""dra: devices through Dynamic Resource Allocation (``resource.k8s.io/v1``) (layer 2).

What kube-scheduler's DynamicResources plugin does, on the session: a pod's claims are
found as kube finds them (``spec.resourceClaims[].resourceClaimName``, or the claim made
from a template, named in ``status.resourceClaimStatuses``); a claim already allocated
pins its pods to the nodes its allocation allows; the others are allocated by the
structured allocator (:mod:`scheduler.api.dra.allocator`) when the pod is placed, and
written (allocation, then reservation for the pod) before the bind.

===============  =========================================================================
hook             behaviour
===============  =========================================================================
open             reads the snapshot's DRA view (nothing at all when the cluster has no
                 DRA object: a pod without claims then costs one attribute read): which
                 devices each node reaches, the devices of allocated claims (in use),
                 which pods hold which claim. Nominated pods' claims, not allocated in
                 the API, are allocated in the session on their node (highest priority
                 first), so that their devices are kept for them
filter           a claim that does not exist yet, is being deleted, belongs to another
                 pod, asks what Sluice does not support, names a missing class, or has a
                 selector that does not compile: every node, not resolvable, the reason
                 naming the claim. An allocated claim: the nodes its allocation does not
                 allow (not resolvable). Claims to allocate: the nodes where the allocator
                 finds no devices, with its reason (resolvable when matching devices
                 exist but are in use). One request of one class (the usual claim) is
                 counted for all nodes at once; anything else runs the allocator per node
row filter       the same for one node (the preemption search)
scorer           as kube-scheduler's: for a pod with ``firstAvailable`` requests, each
                 node scores ``8 - i`` per request whose alternative ``i`` it would get
                 (its claims allocated already included), normalized to [0, 100] over the
                 rows scored; 0 for every other pod
on_place         the pod holds its claims; those not allocated are allocated on the node
                 (a nominated pod may take devices being released; anyone else only free
                 ones)
on_unplace       the pod lets its claims go; a claim allocated in this session that nobody
                 holds any more is deallocated (a rolled-back gang leaves nothing)
bind claims      for each claim of a pod being bound and not reserved for it in the API:
                 the allocation made in this session (if the API has none), the pod to
                 add to ``reservedFor``, and whether the claim needs the finalizer
===============  =========================================================================

Devices in use, as the filter sees them: every device some allocation holds (in the API
or in this session; a device is counted once per allocation). With ``releasing`` (the
preemptor's view), the allocations of claims that nobody holds any more but a pod being
evicted (or gone), which the claim controller will deallocate, do not count; nor do the
devices a nominated pod of lower priority was given in this session, for a pod of higher
priority, nor a nominated pod's own. So the victim search, which removes and re-adds
victims through the placement handlers, sees a victim's devices released; a preemptor
nominated to a node is given the devices its victims hold (in the session, each cycle,
so no pod of lower priority takes them), and is bound only once the claim controller
has released them (its own nomination's devices are chosen again where it is placed).
A pod is never bound without its devices: a claim left unallocated at bind time (a
placement no filter checked) fails the job's attempt instead.

Extended resources served by DRA (KEP-5004, :mod:`scheduler.api.dra.extended`): a pod
asking ``example.com/gpu`` that a DeviceClass serves has, on each node serving it through
DRA (the snapshot's ``DraView.extended``: the node's own allocatable lacks it), a claim
of its own to allocate beside its ResourceClaims, built for that node's served resources
(``ns/<extended-resources>`` in reasons, ``ns/<extended-resources>/<uid>`` as a key); on
the other nodes the resource is the node's, fitted by ``predicates``. The claim is
allocated, released and rolled back as any claim of the pod; at bind time it is handed
on to be created (then written as any claim, and named in the pod's status). Once
created, the claim in the API (annotated, controlled by the pod) is the pod's: a pod
being placed that has one already (left by a bind that failed) waits, saying so, until
the loop has deleted it, as kube-scheduler's PostFilter does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scheduler.api.dra.allocator import Outcome, allocate
from scheduler.api.dra.inventory import Inventory
from scheduler.api.dra.model import (
    EXTENDED_SESSION_NAME,
    MAX_RESERVED_FOR,
    Allocation,
    ClaimBinding,
    ClaimInfo,
)
from scheduler.api.dra.pods import PodClaims, claims_of_pod
from scheduler.api.dra.view import DraView
from scheduler.api.node import NodeInfo
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    BIND_CLAIMS,
    NODE_FILTER,
    NODE_SCORER,
    ROW_FILTER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import FloatVector, IndexVector, TableView
from scheduler.plugins.dra_claim_states import ClaimState, claim_writes, released
from scheduler.plugins.dra_device_counts import (
    BoolVector,
    alternative_score,
    count_all,
    each_row,
)
from scheduler.plugins.dra_extended_claims import ExtendedClaims


@dataclass(frozen=True, slots=True)
class _Plan:
    """What placing a task takes: claims allocated already (with their allocations), its
    ResourceClaims to allocate, and the extended resources it asks that DRA may serve
    (resource -> class; empty when none)."""

    pinned: list[tuple[str, Allocation]]
    todo: list[ClaimInfo]
    extended: Mapping[str, str]


class DraPlugin:
    """Claims and devices of DRA. No arguments. One instance per session."""

    name = "dra"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._view: DraView | None = None
        self._inv: Inventory | None = None
        self._table: TableView | None = None
        self._row_devices: list[tuple[int, ...]] = []
        self._device_row: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._shared = False
        self._use: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        """Per device, the allocations (API or session) that hold it (more than one when a
        nominated pod was given a device still being released)."""
        self._states: dict[str, ClaimState] = {}
        self._idle: set[str] = set()
        """Claims allocated in the API that nobody holds now (maybe on their way out)."""
        self._nominated: set[str] = set()
        """Claims allocated in this session for nominated tasks."""
        self._pods: dict[str, PodClaims] = {}
        self._tasks: dict[str, TaskInfo] = {}
        self._extended: ExtendedClaims | None = None

    # Plugin protocol ------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        view = context.dra
        hooks.add(NODE_FILTER, self.filter)
        if view is None:
            return
        self._view = view
        inv = self._inv = view.inventory
        table = self._table = context.table
        self._extended = ExtendedClaims(view, table)
        self._row_devices = [inv.node_devices(n.name, n.labels) for n in table.nodes]
        rows = np.full(len(inv), -1, dtype=np.int64)
        for r, devices in enumerate(self._row_devices):
            for d in devices:
                rows[d] = r if inv.is_local(d) else -1
        self._device_row = rows
        self._shared = any(not inv.is_local(d) for d in range(len(inv)))
        self._use = np.zeros(len(inv), dtype=np.int64)
        for key, claim in view.claims.items():
            if claim.allocation is not None:
                self._state(key)
        for job in context.jobs.values():
            for t in job.tasks.values():
                self._tasks[t.uid] = t
        hooks.add(ROW_FILTER, self.row_filter)
        hooks.add(NODE_SCORER, self.score, 1.0)
        hooks.add_placement_handlers(self._place, self._unplace)
        hooks.add(BIND_CLAIMS, self.bind_claims)
        self._read_back(context.nodes)

    def close(self) -> None:
        self._view = self._inv = self._table = None
        self._states.clear()
        self._idle.clear()
        self._nominated.clear()
        self._pods.clear()
        self._tasks.clear()
        self._extended = None

    # Read-only views ----------------------------------------------------------------------

    def allocation(self, key: str) -> Allocation | None:
        """Claim ``key``'s allocation as the session has it (API or made here), or None."""
        state = self._states.get(key)
        return state.allocation if state is not None else None

    def holders(self, key: str) -> frozenset[str]:
        state = self._states.get(key)
        return frozenset(state.holders) if state is not None else frozenset()

    def devices_of_node(self, node: str) -> list[tuple[str, str]]:
        """Each device node ``node`` reaches, with the claim holding it ("" if free)."""
        if self._inv is None or self._table is None:
            return []
        holder = {d: key for key, s in self._states.items() for d in s.devices}
        row = self._table.row[node]
        return [(str(self._inv.devices[d].id), holder.get(d, "")) for d in self._row_devices[row]]

    # A pod's claims -----------------------------------------------------------------------

    def claims_of(self, task: TaskInfo) -> PodClaims:
        """``task``'s claims, found as kube-scheduler finds them (memoized per session)."""
        found = self._pods.get(task.uid)
        if found is None:
            view = self._view
            found = (
                claims_of_pod(task, view.claims, view.invalid)
                if view is not None
                else claims_of_pod(task, {})
            )
            self._pods[task.uid] = found
        return found

    def extended_asks(self, task: TaskInfo) -> Mapping[str, str]:
        """The extended resources ``task`` asks that a DeviceClass serves (resource ->
        class); empty for most pods, at the cost of one attribute read."""
        if not task.spec.containers or self._extended is None:
            return {}
        return self._extended.asks(task)

    def extended_key(self, task: TaskInfo) -> str:
        """The key of ``task``'s extended-resource claim in the API (or assumed), else
        of the one a placement in this session made for it ("" when neither)."""
        if self._view is not None:
            key = self._view.extended_claims.get(task.uid, "")
            if key:
                return key
        key = _session_key(task)
        return key if key in self._states else ""

    def _held_keys(self, task: TaskInfo) -> list[str]:
        """The claims ``task`` holds where it is placed: its ResourceClaims and its
        extended-resource claim."""
        keys = list(self.claims_of(task).keys) if task.spec.resource_claims else []
        ext = self.extended_key(task) if task.spec.containers else ""
        if ext:
            keys.append(ext)
        return keys

    @property
    def _ext(self) -> ExtendedClaims:
        """The extended-resource claims of a session with DRA objects."""
        assert self._extended is not None
        return self._extended

    def _state(self, key: str) -> ClaimState:
        state = self._states.get(key)
        if state is None:
            assert self._view is not None and self._inv is not None
            claim = self._view.claims[key]
            state = ClaimState(claim, claim.allocation)
            if claim.allocation is not None:
                state.devices = tuple(self._inv.devices_of(claim.allocation.devices))
                np.add.at(self._use, list(state.devices), 1)
            self._states[key] = state
        return state

    # The filter -------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row (see the module docstring). ``[]`` at once
        for a pod without claims that asks no extended resource."""
        if not task.spec.resource_claims and not task.spec.containers:
            return []
        n = len(table)
        if self._view is None:
            if not task.spec.resource_claims:
                return []
            why = "waiting for its ResourceClaims: the cluster has no DRA object"
            return [Rejection(why, np.ones(n, dtype=np.bool_), False)]
        plan = self._plan(task)
        if isinstance(plan, str):
            return [Rejection(plan, np.ones(n, dtype=np.bool_), False)]
        out: list[Rejection] = []
        refused = np.zeros(n, dtype=np.bool_)
        for key, allocation in plan.pinned:
            if allocation.node_name in table.row:
                bad = np.ones(n, dtype=np.bool_)
                bad[table.row[allocation.node_name]] = False
            else:
                bad = np.array([not allocation.allows(x.name, x.labels) for x in table.nodes])
            if bad.any():
                why = f"node(s) did not match the allocation of ResourceClaim {key}"
                out.append(Rejection(why, bad, False))
                refused |= bad
        if not plan.todo and not plan.extended:
            return out
        inv = self._inv
        assert inv is not None
        free = self._free(task, releasing)
        groups = self._ext.served_rows(plan.extended) if plan.extended else [(~refused, ())]
        for rows, served in groups:
            todo = list(plan.todo)
            if served:
                todo.append(self._ext.claim(task, served))
            if not todo:
                continue
            counted = count_all(inv, self._device_row, todo, free, n) if not self._shared else None
            if counted is not None:
                for r in counted:
                    mine = r.nodes & rows & ~refused
                    if mine.any():
                        out.append(Rejection(r.reason, mine, r.resolvable))
            else:
                outcome = functools.partial(self._outcome, todo=todo, free=free)
                out.extend(each_row(outcome, refused | ~rows))
        return out

    def row_filter(self, task: TaskInfo, table: TableView, row: int, releasing: bool, /) -> bool:
        """The filter on one row."""
        if not task.spec.resource_claims and not task.spec.containers:
            return True
        if self._view is None:
            return not task.spec.resource_claims
        plan = self._plan(task)
        if isinstance(plan, str):
            return False
        node = table.nodes[row]
        if any(not a.allows(node.name, node.labels) for _, a in plan.pinned):
            return False
        todo = list(plan.todo)
        served = self._ext.served(plan.extended, node.name) if plan.extended else ()
        if served:
            todo.append(self._ext.claim(task, served))
        if not todo:
            return True
        return self._outcome(row, todo, self._free(task, releasing)).ok

    def score(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> FloatVector:
        """Nodes that give a pod the earlier alternatives of its ``firstAvailable``
        requests score higher (module docstring). The same whether or not pods are being
        evicted (``releasing``): devices are counted as the allocation plans them."""
        del releasing
        out: FloatVector = np.zeros(len(rows), dtype=np.float64)
        if not task.spec.resource_claims or self._view is None:
            return out
        plan = self._plan(task)
        if isinstance(plan, str) or not any(
            r.first_available for c in plan.todo for r in c.requests
        ):
            return out
        pinned = sum(
            alternative_score(
                self._states[k].claim if k in self._states else self._view.claims[k], a
            )
            for k, a in plan.pinned
        )
        free = self._free(task, False)
        for i, row in enumerate(rows.tolist()):
            outcome = self._outcome(row, plan.todo, free)
            if outcome.allocations is not None:
                out[i] = pinned + sum(
                    alternative_score(c, a)
                    for c, a in zip(plan.todo, outcome.allocations, strict=True)
                )
        best = out.max() if len(out) else 0.0
        if best > 0:
            out *= 100.0 / best
        return out

    def _plan(self, task: TaskInfo) -> str | _Plan:
        """The claims of ``task`` allocated already (with their allocations), those to
        allocate, the extended resources DRA may serve it; or why no node can take it."""
        assert self._inv is not None and self._view is not None
        pinned: list[tuple[str, Allocation]] = []
        todo: list[ClaimInfo] = []
        if task.spec.resource_claims:
            found = self.claims_of(task)
            if found.problem:
                return found.problem
            for key in found.keys:
                why = self._plan_claim(task, key, pinned, todo)
                if why:
                    return why
        asks = self.extended_asks(task)
        left = self._view.extended_claims.get(task.uid) if asks else None
        if left is not None:
            what = "the claim" if left == _session_key(task) else f"ResourceClaim {left}"
            return (
                f"{what} made for its extended resources by an earlier attempt is still "
                "there: waiting for its deletion"
            )
        return _Plan(pinned, todo, asks)

    def _plan_claim(
        self, task: TaskInfo, key: str, pinned: list[tuple[str, Allocation]], todo: list[ClaimInfo]
    ) -> str:
        """Add claim ``key`` of ``task`` to ``pinned`` or ``todo``; or say why it cannot be
        allocated anywhere."""
        assert self._inv is not None and self._view is not None
        state = self._states.get(key)
        claim = state.claim if state is not None else self._view.claims[key]
        allocation = state.allocation if state is not None else None
        if state is not None and state.made_by == task.uid and state.nominated is not None:
            allocation = None  # its own nomination's devices: chosen again where it goes
        if allocation is not None:
            if len(claim.reserved_for) >= MAX_RESERVED_FOR and not claim.reserved_for_pod(task.uid):
                return f"ResourceClaim {key} is in use by {MAX_RESERVED_FOR} pods already"
            pinned.append((key, allocation))
            return ""
        if claim.unsupported:
            return f"ResourceClaim {key}: {claim.unsupported}"
        for request in claim.requests:
            for sub in request.alternatives:
                if sub.device_class not in self._inv.classes:
                    return (
                        f"ResourceClaim {key}, request {request.name}: "
                        f"DeviceClass {sub.device_class} does not exist"
                    )
                match = self._inv.match(sub)
                if match.error and not match.failed.any():
                    return f"ResourceClaim {key}, request {request.name}: {match.error}"
        todo.append(claim)
        return ""

    def _free(self, task: TaskInfo, releasing: bool) -> BoolVector:
        """Devices ``task`` may take now (module docstring): held by no allocation but
        those that do not count against it (its own, made in this session; a nominated
        pod's of lower priority; with ``releasing``, claims on their way out)."""
        give: list[int] = []
        for key in self._nominated:
            state = self._states[key]
            mine = state.made_by == task.uid
            if mine or (state.nominated is not None and state.nominated < task.priority):
                give.extend(state.devices)
        if releasing:
            for key in self._idle:
                state = self._states[key]
                if released(state, self._tasks):
                    give.extend(state.devices)
        if not give:
            free: BoolVector = self._use == 0
            return free
        use = self._use.copy()
        np.subtract.at(use, give, 1)
        left: BoolVector = use == 0
        return left

    def _outcome(self, row: int, todo: Sequence[ClaimInfo], free: BoolVector) -> Outcome:
        assert self._inv is not None and self._table is not None
        node = self._table.nodes[row].name
        return allocate(self._inv, node, self._row_devices[row], lambda d: bool(free[d]), todo)

    # Placement handlers -------------------------------------------------------------------

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if (not task.spec.resource_claims and not task.spec.containers) or self._view is None:
            return
        found = self.claims_of(task) if task.spec.resource_claims else PodClaims()
        if found.problem:
            return
        self._tasks[task.uid] = task
        todo: list[tuple[str, ClaimInfo]] = []
        for key in self._held_keys(task):
            state = self._state(key) if key in self._view.claims else self._states[key]
            state.holders.add(task.uid)
            state.departed.pop(task.uid, None)
            self._idle.discard(key)
            if state.allocation is None:
                todo.append((key, state.claim))
        placing = task.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED)
        asks = self.extended_asks(task)
        if asks and placing and not self.extended_key(task):
            served = self._ext.served(asks, node.name)
            if served:
                claim = self._ext.claim(task, served)
                key = _session_key(task)
                state = self._states[key] = ClaimState(claim, None, holders={task.uid})
                state.extended = self._ext.to_create(task, served)
                todo.append((key, claim))
        if not todo:
            return
        assert self._table is not None
        nominated = task.status is TaskStatus.PIPELINED
        free = self._free(task, releasing=nominated)
        outcome = self._outcome(self._table.row[node.name], [c for _, c in todo], free)
        if outcome.allocations is None:
            return  # nothing fits (a placement no filter checked): the write will not be made
        for (key, _), allocation in zip(todo, outcome.allocations, strict=True):
            state = self._states[key]
            state.allocation = allocation
            state.devices = tuple(self._inv.devices_of(allocation.devices))  # type: ignore[union-attr]
            state.made_by = task.uid
            state.nominated = task.priority if nominated else None
            if nominated:
                self._nominated.add(key)
            np.add.at(self._use, list(state.devices), 1)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        if (not task.spec.resource_claims and not task.spec.containers) or self._view is None:
            return
        for key in self._held_keys(task):
            state = self._states.get(key)
            if state is None or task.uid not in state.holders:
                continue
            state.holders.discard(task.uid)
            state.departed[task.uid] = task
            if state.holders:
                continue
            if state.made_by:
                np.subtract.at(self._use, list(state.devices), 1)
                state.allocation, state.devices = None, ()
                state.made_by, state.nominated = "", None
                self._nominated.discard(key)
                if state.extended is not None:
                    del self._states[key]  # made for this placement only
            elif state.allocation is not None:
                self._idle.add(key)

    def _read_back(self, nodes: Mapping[str, NodeInfo]) -> None:
        """Open-time pass: who holds which claim; nominated pods' claims allocated in the
        session on their node (highest priority first, then oldest)."""
        nominated: list[tuple[TaskInfo, NodeInfo]] = []
        for node in nodes.values():
            for task in node.tasks.values():
                if not task.spec.resource_claims and not task.spec.containers:
                    continue
                if task.status is TaskStatus.PIPELINED:
                    nominated.append((task, node))
                elif task.status in COUNTED_FOR_PLUGINS:
                    self._place(task, node)
                elif task.status is TaskStatus.RELEASING:
                    for key in self._held_keys(task):
                        if self._view is not None and key in self._view.claims:
                            self._state(key).departed[task.uid] = task
        self._idle = {
            key
            for key, s in self._states.items()
            if s.allocation is not None and not s.made_by and not s.holders
        }
        nominated.sort(key=lambda x: (-x[0].priority, x[0].creation, x[0].key))
        for task, node in nominated:
            self._place(task, node)

    # Bind claims --------------------------------------------------------------------------

    def bind_claims(self, task: TaskInfo, node: NodeInfo, /) -> list[ClaimBinding]:
        """The claim writes before ``task`` is bound to ``node`` (module docstring)."""
        if (not task.spec.resource_claims and not task.spec.containers) or self._view is None:
            return []
        return claim_writes(task, self._held_keys(task), self._states)


def _session_key(task: TaskInfo) -> str:
    """The key of ``task``'s extended-resource claim before it exists (as
    :attr:`ClaimBinding.key <scheduler.api.dra.model.ClaimBinding.key>` has it)."""
    return f"{task.namespace}/{EXTENDED_SESSION_NAME}/{task.uid}"
