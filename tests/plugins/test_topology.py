"""Node sets and the ``topology`` plugin (issue 14): the SUBSET_NODES extension point
(layering, logs), the plugin's sets for required and preferred levels, what users see of a
placement, and the property that a bound gang with a required level lies in one domain."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import structlog
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import app
from scheduler.api import labels as L
from scheduler.api.group_apis import KUBERNETES, VOLCANO
from scheduler.api.job import JobInfo
from scheduler.api.task import TaskInfo
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.extension_points import SUBSET_NODES, HookSet, PluginContext
from scheduler.framework.node_labels import NodeLabelIndex
from scheduler.framework.node_sets import NodeSet, Purpose, Subsets
from scheduler.framework.registry import PluginSpec
from scheduler.framework.session import Session, open_session
from scheduler.logging import configure, quiet
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import api_pod_group, cache_with, node, pod, pod_group

Obj = dict[str, Any]
RACK = "example.com/rack"
ZONE = "topology.kubernetes.io/zone"
GPU_MODEL = "example.com/gpu-model"


def topology(*levels: str) -> Obj:
    return {
        "apiVersion": L.API_VERSION,
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": [{"nodeLabel": key} for key in levels]},
    }


def constrained(name: str, min_member: int, **levels: str) -> Obj:
    group = pod_group(name, min_member=min_member)
    group["spec"]["topologyConstraint"] = {"topology": "dc", **levels}
    return group


class ByGpuModel:
    """A test plugin: splits every set by the node label ``example.com/gpu-model``, models
    in name order, for every job."""

    name = "gpu-model"

    def __init__(self, arguments: object) -> None:
        del arguments
        self._labels = NodeLabelIndex(())

    def open(self, context: PluginContext, hooks: HookSet, /) -> None:
        self._labels = NodeLabelIndex(context.table.nodes)
        hooks.add(SUBSET_NODES, self.subset)

    def close(self) -> None:
        pass

    def subset(
        self, job: JobInfo, tasks: Sequence[TaskInfo], nodes: NodeSet, purpose: Purpose, /
    ) -> Subsets:
        column = self._labels.column(GPU_MODEL)
        sets = []
        for code, value in sorted(enumerate(column.values), key=lambda cv: cv[1]):
            rows = nodes.rows & (column.codes == code)
            if rows.any():
                sets.append(NodeSet(f"model {value}", rows, "model"))
        return Subsets(tuple(sets), "model")


def session_of(objects: list[Obj], *, with_model: bool = False) -> Session:
    registry = app.builtin_registry()
    registry.add_plugin(PluginSpec("gpu-model", ByGpuModel))
    plugins = [PluginConfig("topology")]
    if with_model:
        plugins.append(PluginConfig("gpu-model"))
    config = SchedulerConfiguration(actions=("enqueue",), tiers=(TierConfig(tuple(plugins)),))
    ordered = sorted(objects, key=lambda o: o["kind"] not in ("Topology", "Node", "PodGroup"))
    return open_session(cache_with(*ordered).snapshot(), registry.resolve(config))


def racks_nodes() -> list[Obj]:
    """Racks ra (a1, a2), rb (b1, b2) in zone z1 and rc (c1) in zone z2; GPU models x and y
    alternate."""
    out = []
    for name, zone, rack, model in [
        ("a1", "z1", "ra", "x"),
        ("a2", "z1", "ra", "y"),
        ("b1", "z1", "rb", "x"),
        ("b2", "z1", "rb", "y"),
        ("c1", "z2", "rc", "x"),
    ]:
        n = node(name, cpu="4")
        n["metadata"]["labels"] = {ZONE: zone, RACK: rack, GPU_MODEL: model}
        out.append(n)
    return out


def set_names(session: Session, sets: Sequence[NodeSet]) -> list[tuple[str, list[str]]]:
    nodes = session.table.nodes
    return [(s.name, sorted(nodes[i].name for i in np.flatnonzero(s.rows))) for s in sets]


def job_sets(session: Session, purpose: Purpose = Purpose.ALLOCATE) -> Subsets | None:
    job = session.jobs["default/g"]
    return session.node_sets(job, list(job.tasks.values()), purpose)


GANG = [pod(f"g-{i}", cpu="1", memory=None, group="g") for i in range(2)]


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        pytest.param(
            {"requiredLevel": RACK},
            [("rack rc", ["c1"]), ("rack ra", ["a1", "a2"]), ("rack rb", ["b1", "b2"])],
            id="required-rack-best-fit-first",
        ),
        pytest.param(
            {"requiredLevel": ZONE, "preferredLevel": RACK},
            [
                ("rack rc", ["c1"]),
                ("rack ra", ["a1", "a2"]),
                ("rack rb", ["b1", "b2"]),
                ("zone z2", ["c1"]),
                ("zone z1", ["a1", "a2", "b1", "b2"]),
            ],
            id="preferred-rack-then-the-zone",
        ),
        pytest.param(
            {"preferredLevel": ZONE},
            [
                ("zone z2", ["c1"]),
                ("zone z1", ["a1", "a2", "b1", "b2"]),
                ("", ["a1", "a2", "b1", "b2", "c1"]),
            ],
            id="preferred-only-then-anywhere",
        ),
    ],
)
def test_the_topology_plugin_orders_domains_for_a_first_fit(
    levels: dict[str, str], expected: list[tuple[str, list[str]]]
) -> None:
    session = session_of(
        [topology(ZONE, RACK), *racks_nodes(), constrained("g", 2, **levels), *GANG]
    )
    sets = job_sets(session)
    assert sets is not None
    assert set_names(session, sets.sets) == expected


def test_no_constraint_means_not_relevant() -> None:
    session = session_of(
        [topology(ZONE, RACK), *racks_nodes(), pod_group("g", min_member=2), *GANG]
    )
    assert job_sets(session) is None


def test_two_plugins_layer_into_the_product_of_their_sets_in_order() -> None:
    session = session_of(
        [topology(ZONE, RACK), *racks_nodes(), constrained("g", 2, requiredLevel=RACK), *GANG],
        with_model=True,
    )
    sets = job_sets(session)
    assert sets is not None and sets.kind == "model"
    assert set_names(session, sets.sets) == [
        ("rack rc, model x", ["c1"]),
        ("rack ra, model x", ["a1"]),
        ("rack ra, model y", ["a2"]),
        ("rack rb, model x", ["b1"]),
        ("rack rb, model y", ["b2"]),
    ]


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        pytest.param(
            constrained("g", 2, requiredLevel="example.com/row"),
            "topologyConstraint.requiredLevel: 'example.com/row' is not a level of Topology 'dc'",
            id="unknown-level",
        ),
        pytest.param(
            {
                **constrained("g", 2),
                "spec": {
                    "minMember": 2,
                    "topologyConstraint": {"topology": "x", "requiredLevel": RACK},
                },
            },
            "topologyConstraint.topology: Topology 'x' does not exist",
            id="unknown-topology",
        ),
        pytest.param(
            constrained("g", 2, requiredLevel=RACK, preferredLevel=ZONE),
            "topologyConstraint.preferredLevel: 'topology.kubernetes.io/zone' is wider than",
            id="preferred-wider-than-required",
        ),
    ],
)
def test_a_bad_constraint_makes_the_job_invalid(group: Obj, reason: str) -> None:
    session = session_of([topology(ZONE, RACK), *racks_nodes(), group, *GANG])
    status = session.job_valid(session.jobs["default/g"])
    assert not status.ok
    assert reason in status.message


@pytest.mark.parametrize(
    ("verbosity", "counted", "named"),
    [(3, False, False), (4, True, False), (7, True, True)],
    ids=["v3-nothing", "v4-counts-without-node-names", "v7-the-nodes-of-each-set"],
)
def test_node_sets_are_logged_at_verbosity_4_and_7(
    verbosity: int, counted: bool, named: bool
) -> None:
    """At ``-v 4`` the number of sets each plugin returned, and no node's name anywhere
    in the log; at ``-v 7`` the nodes of each set too."""
    nodes = racks_nodes()
    session = session_of(
        [topology(ZONE, RACK), *nodes, constrained("g", 2, requiredLevel=RACK), *GANG]
    )
    try:
        configure(verbosity)
        with structlog.testing.capture_logs() as logs:
            job_sets(session)
    finally:
        quiet()
    counts = [e for e in logs if e["event"] == "node sets"]
    assert [c["sets"] for c in counts] == ([{"topology": 3}] if counted else [])
    sets = [e for e in logs if e["event"] == "node set"]
    if named:
        assert (sets[0]["set"], sets[0]["nodes"]) == ("rack rc", ["c1"])
    else:
        names = {n["metadata"]["name"] for n in nodes}
        assert sets == []
        assert not [e for e in logs if names & set(_words(e))], logs


def _words(entry: dict[str, object]) -> list[str]:
    """Every string of a log entry, and those of its lists and maps, one level down."""
    out: list[str] = []
    for value in entry.values():
        items = value if isinstance(value, list | tuple) else [value]
        if isinstance(value, dict):
            items = [*value, *value.values()]
        out += [str(x) for x in items]
    return out


# Through the loop ---------------------------------------------------------------------------


def simulate(objects: list[Obj]) -> Simulation:
    quiet()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        scenario = load_scenario([str(path)])
    resolved = app.resolve()
    sim = Simulation(
        scenario, lambda cache, ports: app.build_loop(resolved, cache, ports), max_cycles=200
    )
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return sim


def test_the_podgroup_says_where_the_gang_was_placed() -> None:
    sim = simulate(
        [topology(ZONE, RACK), *racks_nodes()[:4], constrained("g", 2, requiredLevel=RACK), *GANG]
    )
    group = sim.store.try_get("PodGroup", "default", "g")
    assert group is not None
    [scheduled] = group["status"]["conditions"]
    assert scheduled["type"] == "Scheduled"
    assert scheduled["message"] == "2 or more pods are placed in rack ra"


@st.composite
def clusters(draw: st.DrawFn) -> list[Obj]:
    """2-3 racks of 1-3 nodes of 2-4 CPU, some nodes busy with other pods, and 1-3 gangs of
    2-4 pods of 1 or 2 CPU that require a rack (minMember 1 to all of them)."""
    objects: list[Obj] = [topology(RACK)]
    i = 0
    for r in range(draw(st.integers(2, 3))):
        for _ in range(draw(st.integers(1, 3))):
            n = node(f"n{i}", cpu=draw(st.sampled_from(["2", "3", "4"])))
            n["metadata"]["labels"] = {RACK: f"r{r}"}
            objects.append(n)
            if draw(st.booleans()):
                objects.append(pod(f"busy-{i}", cpu="1", memory=None, node=f"n{i}"))
            i += 1
    for g in range(draw(st.integers(1, 3))):
        size = draw(st.integers(2, 4))
        objects.append(constrained(f"g{g}", draw(st.integers(1, size)), requiredLevel=RACK))
        cpu = draw(st.sampled_from(["1", "2"]))
        objects.extend(pod(f"g{g}-{k}", cpu=cpu, memory=None, group=f"g{g}") for k in range(size))
    return objects


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=clusters())
def test_every_bound_gang_with_a_required_level_lies_in_one_domain(objects: list[Obj]) -> None:
    sim = simulate(objects)
    racks = {
        o["metadata"]["name"]: o["metadata"]["labels"][RACK] for o in objects if o["kind"] == "Node"
    }
    by_gang: dict[str, set[str]] = {}
    for key, node_name in sim.result.bindings.items():
        name = key.split("/", 1)[1]
        if name.startswith("g"):
            by_gang.setdefault(name.split("-", 1)[0], set()).add(racks[node_name])
    for gang, used in by_gang.items():
        assert len(used) == 1, f"{gang} spread over racks {sorted(used)}"


VOLCANO_GANG = [
    pod(f"g-{i}", cpu="1", memory=None, annotations={L.POD_GROUP_ANNOTATION: "g"}) for i in range(2)
]


def volcano_group(network: Obj, annotations: dict[str, str] | None = None) -> Obj:
    return api_pod_group(
        VOLCANO, "g", {"minMember": 2, "networkTopology": network}, annotations=annotations
    )


@pytest.mark.parametrize(
    ("group", "topologies", "expected"),
    [
        pytest.param(
            volcano_group({"mode": "hard", "highestTierAllowed": 1}),
            [topology(ZONE, RACK)],
            [("rack rc", ["c1"]), ("rack ra", ["a1", "a2"]), ("rack rb", ["b1", "b2"])],
            id="tier-1-is-the-narrowest-level",
        ),
        pytest.param(
            volcano_group({"mode": "hard", "highestTierAllowed": 2}),
            [topology(ZONE, RACK)],
            [("zone z2", ["c1"]), ("zone z1", ["a1", "a2", "b1", "b2"])],
            id="tier-2-the-next-wider",
        ),
        pytest.param(
            volcano_group({"mode": "soft", "highestTierAllowed": 2}),
            [topology(ZONE, RACK)],
            [
                ("zone z2", ["c1"]),
                ("zone z1", ["a1", "a2", "b1", "b2"]),
                ("", ["a1", "a2", "b1", "b2", "c1"]),
            ],
            id="soft-is-preferred",
        ),
        pytest.param(
            volcano_group({"highestTierName": "rack"}),
            [topology(ZONE, RACK)],
            [("rack rc", ["c1"]), ("rack ra", ["a1", "a2"]), ("rack rb", ["b1", "b2"])],
            id="tier-by-name",
        ),
        pytest.param(
            volcano_group({"highestTierAllowed": 3}),
            [topology(ZONE, RACK)],
            None,
            id="tier-above-the-widest-is-the-cluster",
        ),
        pytest.param(
            volcano_group({"highestTierAllowed": 1}, {L.TOPOLOGY_ANNOTATION: "dc"}),
            [topology(ZONE, RACK), {**topology(ZONE), "metadata": {"name": "other"}}],
            [("rack rc", ["c1"]), ("rack ra", ["a1", "a2"]), ("rack rb", ["b1", "b2"])],
            id="the-annotation-names-the-topology",
        ),
    ],
)
def test_volcano_network_topology_maps_onto_levels(
    group: Obj, topologies: list[Obj], expected: list[tuple[str, list[str]]] | None
) -> None:
    session = session_of([*topologies, *racks_nodes(), group, *VOLCANO_GANG])
    job = session.jobs["volcano:default/g"]
    assert session.job_valid(job).ok
    sets = session.node_sets(job, list(job.tasks.values()), Purpose.ALLOCATE)
    if expected is None:
        assert sets is None
    else:
        assert sets is not None
        assert set_names(session, sets.sets) == expected


@pytest.mark.parametrize(
    ("group", "topologies", "reason"),
    [
        pytest.param(
            volcano_group({"highestTierAllowed": 1}),
            [],
            "the cluster has 0 Topologies; name one with the annotation "
            "scheduling.sluice.dev/topology",
            id="no-topology",
        ),
        pytest.param(
            volcano_group({"highestTierAllowed": 1}),
            [topology(ZONE, RACK), {**topology(ZONE), "metadata": {"name": "other"}}],
            "the cluster has 2 Topologies",
            id="two-topologies",
        ),
        pytest.param(
            volcano_group({"highestTierName": "row"}),
            [topology(ZONE, RACK)],
            "networkTopology.highestTierName: 'row' is not a level of Topology 'dc'",
            id="unknown-tier-name",
        ),
        pytest.param(
            volcano_group({"highestTierAllowed": 1}, {L.TOPOLOGY_ANNOTATION: "nope"}),
            [topology(ZONE, RACK)],
            "networkTopology: Topology 'nope'",
            id="annotation-names-a-missing-topology",
        ),
    ],
)
def test_volcano_network_topology_that_cannot_map(
    group: Obj, topologies: list[Obj], reason: str
) -> None:
    session = session_of([*topologies, *racks_nodes(), group, *VOLCANO_GANG])
    status = session.job_valid(session.jobs["volcano:default/g"])
    assert not status.ok
    assert reason in status.message


def test_a_kubernetes_topology_key_is_a_level_of_its_own() -> None:
    group = api_pod_group(
        KUBERNETES,
        "g",
        {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    )
    gang = [
        pod(f"g-{i}", cpu="1", memory=None, schedulingGroup={"podGroupName": "g"}) for i in range(2)
    ]
    session = session_of([*racks_nodes(), group, *gang])
    job = session.jobs["kubernetes:default/g"]
    sets = session.node_sets(job, list(job.tasks.values()), Purpose.ALLOCATE)
    assert sets is not None
    assert set_names(session, sets.sets) == [
        ("rack rc", ["c1"]),
        ("rack ra", ["a1", "a2"]),
        ("rack rb", ["b1", "b2"]),
    ]
