"""Shards by node pool: which shard owns a node, a queue, a gang (layer 0).

Several ``sluice run`` processes may share one cluster, each a *shard* owning one node
pool, as KAI-Scheduler's SchedulingShards do: a node's pool is the value of its label
``scheduling.sluice.dev/node-pool`` (:data:`POOL_LABEL`; the configuration may name
another key), and a shard with the pool "" owns the nodes without that label. Each
shard has its own Lease and leader; together they must never bind a pod twice nor count
a node's room twice. The rules, pure functions of the objects (every shard reads the same
objects, so every shard draws the same borders):

* **A node** belongs to the shard of its pool; a node of a pool no shard serves belongs to
  none (nobody places pods there).
* **A gang** belongs to one pool. A PodGroup's (of any API), and so all its pods': its
  pool label, else its queue's pool label, else "" (the pool of the nodes without the
  label); its pods' own labels do not count, so a gang is never split between shards (the
  pod grouper of ``sluice controller`` copies the pool label of the pods it groups onto
  the PodGroup it makes). A pod of no PodGroup: its pool label, else the pool its
  ``nodeSelector`` asks for (``spec.nodeSelector[label]``), else its queue's pool label,
  else "".
* **A queue** is seen by every shard, each computing its shares on its own pool's nodes
  and jobs; its status is written by one shard: the shard of the queue's own pool label,
  or, for a queue without one, the first shard listed (see :attr:`Sharding.writes_queue`).
* **A pod of a pool no shard serves** is said to be so, in its reason, by the first shard
  listed (:meth:`Sharding.orphan_reason`); every other shard leaves it alone. A shard
  started without the list (:attr:`Sharding.listed`) cannot tell, and says nothing.

A shard treats the pods of other shards as it treats other schedulers' pods: they use
room where they run (on its nodes: none, since the nodes are partitioned), it never
places them, and they count in no queue. DRA: a ResourceSlice of one node
(``spec.nodeName``) belongs to that node's shard; a slice that names no single node
(``allNodes``, a ``nodeSelector``) belongs to no shard while the cluster is sharded
(devices reachable from several pools could otherwise be given by two shards at once);
claims are seen by every shard, so a device another shard allocated counts as used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from scheduler.api import labels as L

__all__ = ["POOL_LABEL", "Pool", "ShardSpec", "Sharding"]

POOL_LABEL: Final = f"{L.GROUP}/node-pool"
"""The default label key whose value names a node's (a queue's, a gang's) pool."""


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """One shard of the scheduler: its name (its Lease is ``sluice-scheduler-<name>``)
    and the node pool it owns ("" : the nodes without the pool label)."""

    name: str
    pool: str


@dataclass(frozen=True, slots=True)
class Pool:
    """The pool a gang belongs to, and where that was read (for messages)."""

    value: str
    source: str


@dataclass(frozen=True, slots=True)
class Sharding:
    """The shards of a scheduler (``shards``, in the configuration's order), this
    process's (``mine``) and the pool label key. Every replica of every shard reads the
    same configuration, so all agree on who owns what."""

    label: str
    shards: tuple[ShardSpec, ...]
    mine: ShardSpec
    listed: bool = True
    """The shards were listed (the configuration's ``shards``). A shard started alone
    (``sluice run --shard NAME``, no list) knows no other shard: it says nothing of the
    pods outside its pool and writes the status of its pool's queues only."""

    def __post_init__(self) -> None:
        if self.mine not in self.shards:
            raise ValueError(f"shard {self.mine.name!r} is not one of the shards listed")

    # Nodes ---------------------------------------------------------------------------

    def node_pool(self, labels: Mapping[str, str] | None) -> str:
        return str((labels or {}).get(self.label) or "")

    def owns_node(self, labels: Mapping[str, str] | None) -> bool:
        return self.node_pool(labels) == self.mine.pool

    def node_selector(self) -> str:
        """The API server's label selector of this shard's nodes (``pool=a``, or
        ``!pool`` for the shard of the nodes without the label)."""
        return f"{self.label}={self.mine.pool}" if self.mine.pool else f"!{self.label}"

    # Gangs ---------------------------------------------------------------------------

    def gang_pool(
        self,
        *,
        group_labels: Mapping[str, str] | None,
        pod_labels: Mapping[str, str] | None,
        node_selector: Mapping[str, str] | None,
        queue: str,
        queue_labels: Mapping[str, str] | None,
    ) -> Pool:
        """The pool of a pod's gang, by the rule of the module's docstring.
        ``group_labels``: its PodGroup's labels (None: the pod names no PodGroup, or it
        does not exist yet); ``queue_labels``: its queue's (None: no such queue)."""
        key = self.label
        if group_labels is not None:
            if key in group_labels:
                return Pool(str(group_labels[key]), f"its PodGroup's label {key}")
        elif pod_labels and key in pod_labels:
            return Pool(str(pod_labels[key]), f"its label {key}")
        elif node_selector and key in node_selector:
            return Pool(str(node_selector[key]), f"its nodeSelector on {key}")
        if queue_labels and key in queue_labels:
            return Pool(str(queue_labels[key]), f"the label {key} of its queue {queue!r}")
        return Pool("", f"no {key} on it, its PodGroup or its queue")

    def serving(self, pool: str) -> ShardSpec | None:
        """The shard that owns ``pool``, or None."""
        return next((s for s in self.shards if s.pool == pool), None)

    def owns(self, pool: Pool) -> bool:
        return pool.value == self.mine.pool

    @property
    def reports_orphans(self) -> bool:
        """Does this shard say so of the gangs of pools no shard serves (the first
        listed)?"""
        return self.listed and self.mine == self.shards[0]

    def orphan_reason(self, pool: Pool) -> str:
        """What the pods of a gang of ``pool`` (served by no shard) say."""
        named = ", ".join(f"{s.name} ({s.pool or 'no ' + self.label})" for s in self.shards)
        what = f"node pool {pool.value!r}" if pool.value else f"no node pool ({pool.source})"
        return (
            f"belongs to {what} (from {pool.source}), which no shard of this scheduler "
            f"serves (shards: {named})"
        )

    # Queues --------------------------------------------------------------------------

    def writes_queue(self, labels: Mapping[str, str] | None) -> bool:
        """Does this shard write the status of a queue with ``labels``? The shard of the
        queue's pool; for a queue without the label, the first shard listed (none when
        the shards are not listed)."""
        if labels and self.label in labels:
            return str(labels[self.label]) == self.mine.pool
        return self.listed and self.mine == self.shards[0]

    # Devices -------------------------------------------------------------------------

    def owns_slice_node(self, node_labels: Mapping[str, str] | None) -> bool:
        """Does this shard use a node-local ResourceSlice of a node with ``node_labels``
        (None: the node is not known here, or the slice names no single node)?"""
        return node_labels is not None and self.owns_node(node_labels)
