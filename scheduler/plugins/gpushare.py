"""gpushare: GPU devices per node, whole or shared by memory, with stable indexes (layer 2).

What the cluster says:

- a node offers ``nvidia.com/gpu`` devices (its allocatable count), indexed 0..n-1, each
  with the memory of the node label ``scheduling.sluice.dev/gpu-memory`` (``8Gi``). A node
  without the label (or with a label that is not a quantity) has devices of unknown memory:
  only whole-device pods can use them;
- a pod asks for whole devices with the resource ``nvidia.com/gpu`` (the resource itself is
  fitted by ``predicates``), or for part of one device with the pod annotation
  ``scheduling.sluice.dev/gpu-memory`` (``4Gi``). A pod asking both is a whole-device pod;
- the device a pod holds is the pod annotation ``scheduling.sluice.dev/gpu-index``: one
  index for a share, a comma-separated ascending list for whole devices (``0,1``).

What the plugin does, per session:

===============  =========================================================================
hook             behaviour
===============  =========================================================================
open             builds per node, per device: memory held by shares, whole holders, and
                 holders. Tasks held on nodes (``COUNTED_FOR_PLUGINS``) are read in three
                 passes: first pods physically there whose ``gpu-index`` is valid (exactly
                 those devices),
                 then pods physically there without one, then nominated pods (both on the
                 lowest indexes that fit, noted so they always return there). Releasing
                 pods are read the same way into a separate set
filter           share of ``m``: rows whose no device could ever hold ``m`` are rejected
                 with ``GPU_TOO_SMALL`` (not resolvable; this includes nodes without
                 devices); rows where no device has ``m`` free now with
                 ``GPU_MEMORY_NOT_FREE`` (resolvable). ``k`` whole devices: rows with fewer
                 than ``k`` devices free of any holder, ``WHOLE_GPUS_NOT_FREE``
                 (resolvable). An unreadable gpu-memory annotation rejects every node (not
                 resolvable). A pod asking no GPU gets ``[]`` after two dictionary lookups
scorer           binpack: a share scores how used the most used device it fits on already
                 is; whole devices score the part of the node's devices already held
on_place         a pod physically on the node (Binding, Bound, Running) goes back to its
                 ``gpu-index`` if valid, else to the devices noted at open; a nominated or
                 allocated pod goes to its noted devices if they still fit, else binpack:
                 the most used device that fits for a share, the lowest free indexes for
                 whole devices. The index is kept for the bind annotations hook (written
                 on the pod before binding) unless the pod already carries it. A
                 ``gpu-index`` is valid when it names as many distinct devices of the node
                 as the pod asks for; a pending pod's own index is never trusted
on_unplace       frees exactly the devices on_place chose, and withdraws the annotation
bind annotations ``gpu-index`` of a pod being bound, when on_place chose its devices
===============  =========================================================================

Room, as ``TableView.free`` sees it: a nominated pod's devices do not block pods of higher
priority, nor the pod itself; a releasing pod's devices are busy unless the filter is asked
to count releasing room (``releasing``, the preemptor's view) or the pod being placed
is nominated (it waits for that room). Releasing pods are not in the main state (their
status is not in ``COUNTED_FOR_PLUGINS``): the placement handlers see them leave, and
the filter reads back those that left to ``Releasing`` from the tasks themselves.

Determinism: every choice breaks ties by the lowest index; open-time passes go in a fixed
order of (creation, namespace/name).

Costs: device state is dense ``rows x max devices`` integer matrices plus two per-row
summaries (the largest free share, the number of free devices) updated on each placement in
O(devices); the filter compares the summaries for all rows at once and recomputes only the
rows touched by nominations that do not block, the task's own holding, or releasing pods.
The scorer and the placement handlers are registered only when some node has devices.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from scheduler.api.errors import QuantityError
from scheduler.api.labels import GPU_INDEX_ANNOTATION, GPU_MEMORY_ANNOTATION, GPU_MEMORY_LABEL
from scheduler.api.node import NodeInfo
from scheduler.api.resource import GPU, MEMORY, canonical_amount
from scheduler.api.task import TaskInfo, TaskStatus
from scheduler.api.task_states import BOUND_IN_API, COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    BIND_ANNOTATIONS,
    NODE_FILTER,
    NODE_SCORER,
    HookSet,
    PluginContext,
    Rejection,
)
from scheduler.framework.node_table import (
    FloatVector,
    IndexVector,
    IntMatrix,
    IntVector,
    TableView,
)
from scheduler.plugins.gpu_devices import (
    Demand,
    Holding,
    RowDevices,
    RowState,
    binpack,
    fallback,
    fits,
    index_text,
    lowest,
)

BoolMatrix = npt.NDArray[np.bool_]

GPU_MEMORY_NOT_FREE = "node(s) did not have a GPU with enough free memory"
GPU_TOO_SMALL = "node(s) did not have a GPU with enough memory"
WHOLE_GPUS_NOT_FREE = "node(s) did not have enough free whole GPUs"

PHYSICAL = BOUND_IN_API
"""Held statuses of pods that are on their node's devices: their ``gpu-index`` is the truth.
A pending pod's own ``gpu-index`` (stale after a failed bind, or set by hand) is not."""

MAX_SCORE = 100.0


def invalid_memory(text: str) -> str:
    """The reason for a pod whose gpu-memory annotation cannot be read (not resolvable)."""
    return f"pod's {GPU_MEMORY_ANNOTATION} annotation {text!r} is not a memory quantity"


class GpuSharePlugin:
    """GPU devices, whole or shared by memory, with a stable index per pod. No arguments.

    One instance per session. ``open`` reads the devices held by the tasks on nodes; the
    placement handlers keep that state in step with ``Session.move``; ``close`` drops it.
    """

    name = "gpushare"

    def __init__(self, arguments: object = None) -> None:
        del arguments
        self._table: TableView | None = None
        self._annotations: dict[str, str] = {}
        """``gpu-index`` values chosen in this session for pods being placed, by uid."""
        self._names: tuple[str, ...] = ()
        self._counts: IntVector = np.zeros(0, dtype=np.int64)
        self._dra_rows: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        """Rows that serve ``nvidia.com/gpu`` through DRA devices (no indexes here)."""
        """Devices per row."""
        self._valid: BoolMatrix = np.zeros((0, 0), dtype=np.bool_)
        """``valid[r, d]``: row ``r`` has device ``d``."""
        self._cap: IntMatrix = np.zeros((0, 0), dtype=np.int64)
        """Memory per device (0 for a device of unknown memory or no device)."""
        self._max_cap: IntVector = np.zeros(0, dtype=np.int64)
        self._mem: IntMatrix = np.zeros((0, 0), dtype=np.int64)
        """Memory held by shares, per device."""
        self._whole: IntMatrix = np.zeros((0, 0), dtype=np.int64)
        """Whole-device holders, per device (more than one only if reality over-commits)."""
        self._holders: IntMatrix = np.zeros((0, 0), dtype=np.int64)
        """Every holder (whole or share), per device."""
        self._best: IntVector = np.zeros(0, dtype=np.int64)
        """Largest free memory of a device without a whole holder, per row; -1 if none."""
        self._free_whole: IntVector = np.zeros(0, dtype=np.int64)
        """Devices without any holder, per row."""
        self._held: dict[str, Holding] = {}
        self._nominated: dict[str, Holding] = {}
        self._home: dict[str, tuple[int, tuple[int, ...]]] = {}
        """Devices noted at open for held pods without a valid ``gpu-index``, by uid."""
        self._departed: dict[str, tuple[TaskInfo, Holding]] = {}
        """Tasks unplaced in this session (or releasing at open), read back lazily: those
        now Releasing on the same node still occupy their devices."""
        self._shares: dict[str, Demand | None] = {}
        self._indexes: dict[str, tuple[int, ...] | None] = {}

    # Plugin protocol -----------------------------------------------------------------------

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        table = context.table
        self._table = table
        nodes = table.nodes
        n = len(nodes)
        self._names = tuple(node.name for node in nodes)
        # A node serving nvidia.com/gpu through DRA devices (KEP-5004) has no device-plugin
        # GPUs to index: the dra plugin allocates its devices, whole only.
        served = context.dra.extended if context.dra is not None else {}
        self._dra_rows = np.array([GPU in served.get(node.name, ()) for node in nodes], dtype=bool)
        counts = np.array(
            [
                0 if dra else node.allocatable.get(GPU, 0)
                for node, dra in zip(nodes, self._dra_rows, strict=True)
            ],
            dtype=np.int64,
        )
        width = int(counts.max()) if n else 0
        self._counts = counts
        per_device = np.array([self._device_memory(node) for node in nodes], dtype=np.int64)
        self._valid = np.arange(width)[None, :] < counts[:, None]
        self._cap = np.where(self._valid, per_device[:, None], 0).astype(np.int64)
        self._max_cap = np.where(counts > 0, per_device, 0).astype(np.int64)
        self._mem = np.zeros((n, width), dtype=np.int64)
        self._whole = np.zeros((n, width), dtype=np.int64)
        self._holders = np.zeros((n, width), dtype=np.int64)
        self._best = np.where(counts > 0, per_device, -1).astype(np.int64)
        self._free_whole = counts.copy()
        hooks.add(NODE_FILTER, self.filter)
        if width == 0:
            return
        self._read_back(nodes)
        hooks.add(NODE_SCORER, self.score, 1.0)
        hooks.add_placement_handlers(self._place, self._unplace)
        hooks.add(BIND_ANNOTATIONS, self.bind_annotations)

    def close(self) -> None:
        self._table = None
        self._annotations.clear()
        self._held.clear()
        self._nominated.clear()
        self._home.clear()
        self._departed.clear()
        self._shares.clear()
        self._indexes.clear()

    # Read-only views (for tests, debugging and other plugins) ----------------------------

    def annotations(self) -> dict[str, dict[str, str]]:
        """The annotations to write at bind time, by task uid (what the bind annotations
        hook answers for each)."""
        return {uid: {GPU_INDEX_ANNOTATION: text} for uid, text in self._annotations.items()}

    def held(self, uid: str) -> tuple[int, ...] | None:
        """The device indexes task ``uid`` holds in this session, or None."""
        h = self._held.get(uid)
        return None if h is None else h.devices

    def usage(self) -> dict[str, list[tuple[int, int, int]]]:
        """Per node with devices, per device: (share memory held, whole holders, holders)."""
        return {
            self._names[r]: [
                (int(self._mem[r, d]), int(self._whole[r, d]), int(self._holders[r, d]))
                for d in range(int(self._counts[r]))
            ]
            for r in (int(x) for x in np.flatnonzero(self._counts))
        }

    # What a pod asks -----------------------------------------------------------------------

    def demand(self, task: TaskInfo) -> Demand | None:
        """What ``task`` asks of GPUs; None when nothing. Cheap: two dictionary lookups for a
        pod asking no GPU."""
        whole = task.request.get(GPU, 0)
        if whole > 0:
            return Demand(whole=whole)
        annotations = task.annotations
        if not annotations:
            return None
        text = annotations.get(GPU_MEMORY_ANNOTATION)
        if text is None:
            return None
        if text in self._shares:
            return self._shares[text]
        out: Demand | None
        try:
            amount = canonical_amount(MEMORY, text)
        except QuantityError:
            out = Demand(invalid=invalid_memory(text))
        else:
            out = Demand(memory=amount) if amount > 0 else None
        self._shares[text] = out
        return out

    @staticmethod
    def _device_memory(node: NodeInfo) -> int:
        text = node.labels.get(GPU_MEMORY_LABEL)
        if text is None:
            return 0
        try:
            return canonical_amount(MEMORY, text)
        except QuantityError:
            return 0

    def _annotated(self, task: TaskInfo, row: int, demand: Demand) -> tuple[int, ...] | None:
        """The devices of ``task``'s ``gpu-index`` if it is valid on ``row``, else None."""
        text = (task.annotations or {}).get(GPU_INDEX_ANNOTATION)
        if text is None:
            return None
        if text in self._indexes:
            devices = self._indexes[text]
        else:
            try:
                devices = tuple(sorted({int(part) for part in text.split(",")}))
            except ValueError:
                devices = None
            self._indexes[text] = devices
        if devices is None or len(devices) != max(demand.whole, 1):
            return None
        if devices[0] < 0 or devices[-1] >= int(self._counts[row]):
            return None
        return devices

    # The filter ------------------------------------------------------------------------------

    def filter(self, task: TaskInfo, table: TableView, releasing: bool, /) -> list[Rejection]:
        """Rejections of ``task`` on every row of ``table``; ``[]`` for a pod asking no GPU.

        Pure with respect to its arguments; reads the plugin's state (and prunes its cache
        of departed tasks).
        """
        demand = self.demand(task)
        if demand is None:
            return []
        if demand.invalid:
            return [Rejection(demand.invalid, np.ones(len(table), dtype=np.bool_), False)]
        best, free_whole = self._view(task, releasing)
        if demand.whole:
            short = (free_whole < demand.whole) & ~self._dra_rows
            return [Rejection(WHOLE_GPUS_NOT_FREE, short, True)] if short.any() else []
        small = self._max_cap < demand.memory
        busy = (best < demand.memory) & ~small
        out = []
        if small.any():
            out.append(Rejection(GPU_TOO_SMALL, small, False))
        if busy.any():
            out.append(Rejection(GPU_MEMORY_NOT_FREE, busy, True))
        return out

    def _view(self, task: TaskInfo, count_releasing: bool) -> tuple[IntVector, IntVector]:
        """The per-row summaries as ``task`` sees them (see the module docstring)."""
        changed = self._adjustments(task, count_releasing=count_releasing, row=None)
        if not changed:
            return self._best, self._free_whole
        best = self._best.copy()
        free_whole = self._free_whole.copy()
        for row, state in changed.items():
            best[row], free_whole[row] = self._summary(row, state)
        return best, free_whole

    def _adjustments(
        self, task: TaskInfo, *, count_releasing: bool, row: int | None
    ) -> dict[int, RowState]:
        """Adjusted copies of the rows (only ``row`` if given) that ``task`` sees differently
        from the main state: lower-priority nominations and its own holding released,
        releasing pods added back unless ``count_releasing``."""
        out: dict[int, RowState] = {}

        def state(r: int) -> RowState:
            s = out.get(r)
            if s is None:
                s = RowState(self._mem[r].copy(), self._whole[r].copy(), self._holders[r].copy())
                out[r] = s
            return s

        own = self._held.get(task.uid)
        if own is not None and (row is None or own.row == row):
            state(own.row).apply(own, -1)
        for uid, h in self._nominated.items():
            if uid != task.uid and h.priority < task.priority and (row is None or h.row == row):
                state(h.row).apply(h, -1)
        if not count_releasing and self._departed:
            for h in self._releasing():
                if row is None or h.row == row:
                    state(h.row).apply(h, +1)
        return out

    def _releasing(self) -> list[Holding]:
        """Holdings of departed tasks that are now Releasing on the same node."""
        out: list[Holding] = []
        stale: list[str] = []
        for uid, (task, h) in self._departed.items():
            if task.status is TaskStatus.RELEASING and task.node_name == self._names[h.row]:
                out.append(h)
            else:
                stale.append(uid)
        for uid in stale:
            del self._departed[uid]
        return out

    def _summary(self, row: int, state: RowState) -> tuple[int, int]:
        valid = self._valid[row]
        share_ok = valid & (state.whole == 0)
        best = int((self._cap[row] - state.mem)[share_ok].max()) if share_ok.any() else -1
        return best, int((valid & (state.holders == 0)).sum())

    def _refresh(self, row: int) -> None:
        main = RowState(self._mem[row], self._whole[row], self._holders[row])
        self._best[row], self._free_whole[row] = self._summary(row, main)

    # The scorer -------------------------------------------------------------------------------

    def score(
        self, task: TaskInfo, table: TableView, rows: IndexVector, releasing: bool, /
    ) -> FloatVector:
        """Binpack, in [0, 100]: prefer nodes whose devices are already partly used
        (whether or not pods are being evicted: ``releasing`` changes nothing here)."""
        del releasing
        out: FloatVector = np.zeros(len(rows), dtype=np.float64)
        demand = self.demand(task)
        if demand is None or demand.invalid:
            return out
        counts = self._counts[rows]
        if demand.whole:
            held = (counts - self._free_whole[rows]).astype(np.float64)
            np.divide(held * MAX_SCORE, counts, out=out, where=counts > 0)
            return out
        cap = self._cap[rows]
        mem = self._mem[rows]
        fits = self._valid[rows] & (self._whole[rows] == 0) & (cap - mem >= demand.memory)
        frac = np.zeros((len(rows), self._cap.shape[1]), dtype=np.float64)
        np.divide(mem, cap, out=frac, where=fits)
        if frac.size:
            out = np.clip(frac.max(axis=1), 0.0, 1.0) * MAX_SCORE
        return out

    # Bind annotations -------------------------------------------------------------------

    def bind_annotations(self, task: TaskInfo, node: NodeInfo, /) -> Mapping[str, str]:
        """The ``gpu-index`` chosen for ``task`` in this session, if it must be written."""
        text = self._annotations.get(task.uid)
        return {GPU_INDEX_ANNOTATION: text} if text is not None else {}

    # Placement handlers --------------------------------------------------------------------

    def _place(self, task: TaskInfo, node: NodeInfo, /) -> None:
        demand = self.demand(task)
        if demand is None or demand.invalid:
            return
        assert self._table is not None, "gpushare used outside an open session"
        row = self._table.row[node.name]
        if self._counts[row] == 0:
            return
        self._departed.pop(task.uid, None)
        self._hold(task, row, demand, self._choose(task, row, demand), write=True)

    def _unplace(self, task: TaskInfo, node: NodeInfo, /) -> None:
        h = self._held.pop(task.uid, None)
        if h is None:
            return
        self._nominated.pop(task.uid, None)
        self._apply(h, -1)
        if h.wrote:
            self._annotations.pop(task.uid, None)
        self._departed[task.uid] = (task, h)

    def _hold(
        self,
        task: TaskInfo,
        row: int,
        demand: Demand,
        devices: tuple[int, ...],
        *,
        write: bool,
        refresh: bool = True,
    ) -> Holding:
        wrote = False
        if write and task.status not in PHYSICAL:
            text = index_text(devices)
            if (task.annotations or {}).get(GPU_INDEX_ANNOTATION) != text:
                self._annotations[task.uid] = text
                wrote = True
        nominated = task.status is TaskStatus.PIPELINED
        h = Holding(row, devices, demand.memory, demand.whole > 0, task.priority, nominated, wrote)
        self._held[task.uid] = h
        if nominated:
            self._nominated[task.uid] = h
        self._apply(h, +1, refresh=refresh)
        return h

    def _apply(self, h: Holding, sign: int, *, refresh: bool = True) -> None:
        r = h.row
        for d in h.devices:
            self._holders[r, d] += sign
            if h.whole:
                self._whole[r, d] += sign
            else:
                self._mem[r, d] += sign * h.memory
        if refresh:
            self._refresh(r)

    def _refresh_all(self) -> None:
        """Every row's summaries at once (after the open-time passes)."""
        share_ok = self._valid & (self._whole == 0)
        free = np.where(share_ok, self._cap - self._mem, np.iinfo(np.int64).min)
        best = free.max(axis=1)
        self._best = np.where(share_ok.any(axis=1), best, -1).astype(np.int64)
        self._free_whole = (self._valid & (self._holders == 0)).sum(axis=1).astype(np.int64)

    # Choosing devices ------------------------------------------------------------------------

    def _choose(self, task: TaskInfo, row: int, demand: Demand) -> tuple[int, ...]:
        physical = task.status in PHYSICAL
        if physical:
            fixed = self._annotated(task, row, demand)
            if fixed is not None:
                return fixed
        home = self._home.get(task.uid)
        state = self._row_state(task, row)
        if (
            home is not None
            and home[0] == row
            and (physical or fits(state, self._devices(row), demand, home[1]))
        ):
            return home[1]
        devices = self._devices(row)
        return binpack(state, devices, demand) or fallback(state, devices, demand)

    def _devices(self, row: int) -> RowDevices:
        return RowDevices(self._valid[row], self._cap[row], int(self._counts[row]))

    def _row_state(self, task: TaskInfo, row: int) -> RowState:
        """``row`` as ``task`` sees it when placed there now (see the module docstring)."""
        assert self._table is not None
        # Placed, a nominated pod waits for the room being freed; anything else takes only
        # what is free now.
        count_releasing = task.status is TaskStatus.PIPELINED
        state = self._adjustments(task, count_releasing=count_releasing, row=row).get(row)
        if state is None:
            state = RowState(self._mem[row], self._whole[row], self._holders[row])
        return state

    # Reading back what the cluster holds ------------------------------------------------------

    def _read_back(self, nodes: tuple[NodeInfo, ...]) -> None:
        """Open-time passes (module docstring). Tasks on rows without devices are ignored."""
        annotated: list[tuple[TaskInfo, int, Demand, tuple[int, ...]]] = []
        unannotated: list[tuple[TaskInfo, int, Demand]] = []
        nominated: list[tuple[TaskInfo, int, Demand]] = []
        releasing: list[tuple[TaskInfo, int, Demand]] = []
        for r in np.flatnonzero(self._counts):
            row = int(r)
            for task in nodes[row].tasks.values():
                demand = self.demand(task)
                if demand is None or demand.invalid:
                    continue
                if task.status in PHYSICAL or task.status is TaskStatus.RELEASING:
                    fixed = self._annotated(task, row, demand)
                    if fixed is not None and task.status is not TaskStatus.RELEASING:
                        annotated.append((task, row, demand, fixed))
                    elif task.status is TaskStatus.RELEASING:
                        releasing.append((task, row, demand))
                    else:
                        unannotated.append((task, row, demand))
                elif task.status in COUNTED_FOR_PLUGINS:
                    nominated.append((task, row, demand))
        for task, row, demand, devices in annotated:
            self._hold(task, row, demand, devices, write=False, refresh=False)
        for task, row, demand in sorted(unannotated, key=lambda x: _order(x[0])):
            devices = self._note(task, row, demand)
            self._hold(task, row, demand, devices, write=False, refresh=False)
        for task, row, demand in sorted(nominated, key=lambda x: (-x[0].priority, _order(x[0]))):
            devices = self._note(task, row, demand)
            self._hold(task, row, demand, devices, write=False, refresh=False)
        for task, row, demand in sorted(releasing, key=lambda x: _order(x[0])):
            devices = self._annotated(task, row, demand) or self._note(task, row, demand)
            h = Holding(row, devices, demand.memory, demand.whole > 0, task.priority, False, False)
            self._departed[task.uid] = (task, h)
        self._refresh_all()

    def _note(self, task: TaskInfo, row: int, demand: Demand) -> tuple[int, ...]:
        state = RowState(self._mem[row], self._whole[row], self._holders[row])
        devices = lowest(state, self._devices(row), demand) or fallback(
            state, self._devices(row), demand
        )
        self._home[task.uid] = (row, devices)
        return devices


def _order(task: TaskInfo) -> tuple[float, str]:
    return (task.creation, task.key)
