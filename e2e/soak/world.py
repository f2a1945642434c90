"""The soak's cluster (issue 26): nodes in zones and racks with DRA devices, a hierarchy
of queues, three priorities, a Topology, a PodDisruptionBudget.

A part of the soak (:mod:`soak`). Built once through the harness's direct connection
(:class:`harness.Cluster`), before the schedulers start; :meth:`World.cleanup` deletes
what :class:`harness.Cluster` does not (the Topology, the driver's slices and class).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Final

from dra_driver import FakeDriver
from harness import API_VERSION, RUN_LABEL, ApiFailure, Cluster, NodeSpec, custom_path

from soak.settings import SoakSettings

ZONE_LABEL: Final = "soak.sluice.dev/zone"
RACK_LABEL: Final = "soak.sluice.dev/rack"
JOB_LABEL: Final = "soak.sluice.dev/job"
"""On every pod of the soak: the job (a pod of its own, a gang, a batch Job) it is part of."""
APP_LABEL: Final = "soak.sluice.dev/app"
CLAIM_TEMPLATE: Final = "soak-device"
"""The ResourceClaimTemplate of one device of the run's class."""


@dataclass
class World:
    """What the soak's workload runs on: ``leaves`` (the leaf queues' names, in the
    hierarchy ``eng`` (weight 2: ``eng-a``, ``eng-b``) and ``research`` (weight 1)),
    ``priorities`` (name -> value: ``low``, ``mid``, ``high``), the Topology's name and
    its rack level, the nodes by rack."""

    cluster: Cluster
    settings: SoakSettings
    driver: FakeDriver
    leaves: list[str] = field(default_factory=list)
    parents: dict[str, str] = field(default_factory=dict)
    """Leaf queue -> its parent (empty: a child of the root)."""
    priorities: dict[str, tuple[str, int]] = field(default_factory=dict)
    topology: str = ""
    racks: dict[str, list[str]] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return [n for names in self.racks.values() for n in names]

    async def build(self) -> None:
        c, s = self.cluster, self.settings
        eng = await c.create_queue("eng", weight=2)
        research = await c.create_queue("research", weight=1)
        for leaf, parent in (("eng-a", eng), ("eng-b", eng)):
            name = await c.create_queue(leaf, weight=1, parent=parent)
            self.leaves.append(name)
            self.parents[name] = parent
        self.leaves.append(research)
        self.parents[research] = ""
        for level, value in (("low", 100), ("mid", 1_000), ("high", 10_000)):
            self.priorities[level] = await c.create_priority_class(f"soak-{level}", value)
        self.topology = c.name("dc")
        await c.api.request(
            "POST",
            custom_path("topologies"),
            body={
                "apiVersion": API_VERSION,
                "kind": "Topology",
                "metadata": {"name": self.topology, "labels": {RUN_LABEL: c.run_id}},
                "spec": {"levels": [{"nodeLabel": ZONE_LABEL}, {"nodeLabel": RACK_LABEL}]},
            },
        )
        spec = NodeSpec(cpu=str(s.node_cpu), memory=f"{4 * s.node_cpu}Gi", pods=110)
        for z in range(s.zones):
            for r in range(s.racks_per_zone):
                rack = f"z{z}r{r}"
                self.racks[rack] = [
                    await c.create_node(
                        f"{rack}n{i}",
                        spec,
                        labels={ZONE_LABEL: f"z{z}", RACK_LABEL: rack},
                    )
                    for i in range(s.nodes_per_rack)
                ]
        await self.driver.publish(self.nodes)
        await self.driver.create_template(CLAIM_TEMPLATE, count=1)
        await c.create_pdb(f"{c.run_id}-web", selector={APP_LABEL: "web"}, min_available=2)

    async def cleanup(self) -> None:
        """What :meth:`harness.Cluster.cleanup` leaves: the Topology, slices and class."""
        with contextlib.suppress(ApiFailure):
            await self.cluster.api.request("DELETE", custom_path("topologies", None, self.topology))
        await self.driver.cleanup()
