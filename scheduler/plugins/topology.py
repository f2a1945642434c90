"""The ``topology`` plugin (layer 2): node sets from Topology levels for gangs that ask.

A ``Topology`` object names node label keys, widest level first (a zone, then a rack).
A PodGroup's ``topologyConstraint`` names a Topology and levels of it:

- ``requiredLevel``: the whole gang must share one domain of that level (one value of the
  label): one node set per domain;
- ``preferredLevel``: it should share one domain of that level if it can: the domains of
  the preferred level first, then those of each wider level up to the required one (or,
  without one, the whole cluster last), so that the first set that fits is the tightest
  placement.

Within a level, for allocation, only the domains whose free room (summed over their
nodes) could hold the gang's minimum are offered, the one with the least free room first
(best fit, keeping large domains whole for large gangs). For eviction, every domain is
offered, the one lacking the least first (fewest victims to clear). A node without the
level's label is in no domain of that level. A job without a constraint is not relevant
(None, one attribute read); a constraint naming a Topology or a level that does not exist
makes the job invalid, with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from scheduler.api import labels as L
from scheduler.api.cluster_snapshot import TopologyInfo
from scheduler.api.job import JobInfo, TopologyConstraint
from scheduler.api.task import TaskInfo
from scheduler.api.task_states import COUNTED_FOR_PLUGINS
from scheduler.framework.extension_points import (
    JOB_VALID,
    SUBSET_NODES,
    HookSet,
    PluginContext,
)
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets
from scheduler.framework.node_table import BoolVector, IntVector, TableView
from scheduler.framework.plugin_status import SUCCESS, Status
from scheduler.framework.registry import NoArguments

NAME = "topology"


def level_name(label_key: str) -> str:
    """What users call a level: the label key's name part (``topology.kubernetes.io/zone``
    is ``zone``)."""
    return label_key.rsplit("/", 1)[-1]


def levels_of(c: TopologyConstraint, topology: TopologyInfo) -> list[str]:
    """The label keys to make sets of, in order: the preferred level, then each wider one
    down to the required level (or all of them); just the required one without a
    preference."""
    levels = list(topology.levels)
    if not c.preferred_level:
        return [c.required_level] if c.required_level else []
    pref = levels.index(c.preferred_level)
    stop = levels.index(c.required_level) if c.required_level else 0
    return [levels[i] for i in range(pref, stop - 1, -1)]


class TopologyPlugin:
    name = NAME

    def __init__(self, arguments: NoArguments) -> None:
        del arguments
        self._topologies: Mapping[str, TopologyInfo] = {}
        self._table: TableView | None = None
        self._labels = NodeLabelIndex(())

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._topologies = context.topologies
        self._table = context.table
        self._labels = NodeLabelIndex(context.table.nodes)
        hooks.add(JOB_VALID, self.job_valid)
        hooks.add(SUBSET_NODES, self.subset)

    def close(self) -> None:
        self._topologies = {}
        self._table = None
        self._labels = NodeLabelIndex(())

    def job_valid(self, job: JobInfo, /) -> Status:
        """A constraint must name an existing Topology and levels of it, the preferred one
        no wider than the required one."""
        found = self._resolve(job.topology)
        return found if isinstance(found, Status) else SUCCESS

    def _resolve(
        self, c: TopologyConstraint | None
    ) -> tuple[TopologyConstraint, TopologyInfo] | Status | None:
        """``c`` in levels of a Topology, with that Topology; None when the job has no
        constraint (or a tier above the widest level: the whole cluster); or why not."""
        if c is None:
            return None
        if c.tier or c.tier_name:
            return self._resolve_tier(c)
        if not c.topology and c.required_level:  # a node label key on its own
            return c, TopologyInfo("", (c.required_level,))
        topology = self._topologies.get(c.topology)
        if topology is None:
            return Status.unresolvable(
                f"topologyConstraint.topology: Topology {c.topology!r} does not exist", NAME
            )
        for field, key in (
            ("requiredLevel", c.required_level),
            ("preferredLevel", c.preferred_level),
        ):
            if key and key not in topology.levels:
                return Status.unresolvable(
                    f"topologyConstraint.{field}: {key!r} is not a level of Topology "
                    f"{c.topology!r} (levels: {', '.join(topology.levels)})",
                    NAME,
                )
        if (
            c.required_level
            and c.preferred_level
            and topology.levels.index(c.preferred_level) < topology.levels.index(c.required_level)
        ):
            return Status.unresolvable(
                f"topologyConstraint.preferredLevel: {c.preferred_level!r} is wider than the "
                f"requiredLevel {c.required_level!r}",
                NAME,
            )
        return c, topology

    def _resolve_tier(
        self, c: TopologyConstraint
    ) -> tuple[TopologyConstraint, TopologyInfo] | Status | None:
        """Volcano's ``networkTopology``: tier 1 is the narrowest level of the Topology
        (the one the PodGroup's annotation names, or the only one), tier 2 the next wider;
        ``highestTierName`` names a level by its name (``rack``) or label key. A tier above
        the widest level is the whole cluster."""
        if c.topology:
            topology = self._topologies.get(c.topology)
            if topology is None:
                return Status.unresolvable(
                    f"networkTopology: Topology {c.topology!r} (annotation "
                    f"{L.TOPOLOGY_ANNOTATION}) does not exist",
                    NAME,
                )
        elif len(self._topologies) == 1:
            topology = next(iter(self._topologies.values()))
        else:
            return Status.unresolvable(
                f"networkTopology: the cluster has {len(self._topologies)} Topologies; name "
                f"one with the annotation {L.TOPOLOGY_ANNOTATION} on the PodGroup",
                NAME,
            )
        levels = topology.levels
        if c.tier_name:
            matching = [k for k in levels if c.tier_name in (k, level_name(k))]
            if not matching:
                return Status.unresolvable(
                    f"networkTopology.highestTierName: {c.tier_name!r} is not a level of "
                    f"Topology {topology.name!r} (levels: {', '.join(levels)})",
                    NAME,
                )
            key = matching[0]
        elif c.tier > len(levels):
            return None
        else:
            key = levels[len(levels) - c.tier]
        if c.soft:
            return TopologyConstraint(topology.name, preferred_level=key), topology
        return TopologyConstraint(topology.name, required_level=key), topology

    def subset(
        self, job: JobInfo, tasks: Sequence[TaskInfo], nodes: NodeSet, purpose: Purpose, /
    ) -> Subsets | None:
        if job.topology is None:
            return None
        found = self._resolve(job.topology)
        if found is None:
            return None
        if isinstance(found, Status):
            return Subsets(())  # job_valid says why; the job is not tried anyway
        c, topology = found
        need = self._need(job, tasks)
        held = self._held_rows(job)
        out: list[NodeSet] = []
        keys = levels_of(c, topology)
        for key in keys:
            out.extend(self._domains(key, nodes, need, purpose, held))
        if c.preferred_level and not c.required_level:
            out.append(nodes)  # anywhere, last
        return Subsets(tuple(out), level_name(keys[-1]) if keys else "")

    def _need(self, job: JobInfo, tasks: Sequence[TaskInfo]) -> IntVector:
        """What the gang's minimum still to place asks in all, per table column: the
        smallest of ``tasks``, as many as minMember less those already placed."""
        table = self._table
        assert table is not None, "topology used outside an open session"
        left = max(job.min_member - job.placed_count(), 1)
        vectors = sorted((table.request(t.request) for t in tasks), key=lambda v: int(v.sum()))
        need: IntVector = np.zeros(len(table.columns), dtype=np.int64)
        for vec in vectors[:left]:
            need = need + vec
        return need

    def _held_rows(self, job: JobInfo) -> list[int]:
        """The rows of the nodes the job's members already hold (placed, bound or
        nominated, not leaving): the rest of the gang must join them."""
        table = self._table
        assert table is not None
        return [
            table.row[t.node_name]
            for t in job.tasks.values()
            if t.status in COUNTED_FOR_PLUGINS and t.node_name in table.row
        ]

    def _domains(
        self, key: str, nodes: NodeSet, need: IntVector, purpose: Purpose, held: list[int]
    ) -> list[NodeSet]:
        """The domains of level ``key`` within ``nodes``, in the order of the module
        docstring; only the one the job's members already hold, if they hold one (the one
        most of them are in, should they be spread already)."""
        table = self._table
        assert table is not None
        column = self._labels.column(key)
        inside: BoolVector = nodes.rows & column.present()
        if not inside.any():
            return []
        codes = column.codes[inside]
        idle = table.idle[inside]
        bins = column.missing + 1
        free = np.stack(
            [np.bincount(codes, weights=idle[:, j], minlength=bins) for j in range(idle.shape[1])],
            axis=1,
        )
        present = np.bincount(codes, minlength=bins) > 0
        wanted = need > 0
        lacking = (
            np.maximum(need - free, 0)[:, wanted].sum(axis=1) if wanted.any() else np.zeros(bins)
        )
        room = free[:, wanted].sum(axis=1) if wanted.any() else free.sum(axis=1)
        level = level_name(key)
        joined: int | None = None
        if held:
            codes_held = [
                int(column.codes[row]) for row in held if column.codes[row] != column.missing
            ]
            if codes_held:
                joined = max(set(codes_held), key=lambda c: (codes_held.count(c), -c))
        order: list[int] = []
        for code in np.flatnonzero(present).tolist():
            if joined is not None and code != joined:
                continue
            if purpose is Purpose.ALLOCATE and lacking[code] > 0:
                continue
            order.append(code)
        if purpose is Purpose.ALLOCATE:
            order.sort(key=lambda c: (room[c], column.values[c]))
        else:
            order.sort(key=lambda c: (lacking[c], -room[c], column.values[c]))
        out = []
        for code in order:
            rows = inside & (column.codes == code)
            rows.flags.writeable = False
            out.append(NodeSet(f"{level} {column.values[code]}", rows, level))
        return out
