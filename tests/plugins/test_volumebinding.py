"""Tests of scheduler.plugins.volumes.volume_binding: kube's VolumeBinding reasons, matching the
smallest PV that fits, provisioning, PVs held in the session (undone by rollback) and the
writes handed to the bind."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.volumes.prebind import VolumeBindings
from scheduler.config import PluginConfig
from scheduler.framework.effects import Bind
from scheduler.framework.session import Session
from tests.builders import ZONE, cached_session, node, pod, task_of
from tests.volume_builders import (
    capacity,
    claim_volumes,
    csi_driver,
    pv,
    pvc,
    storage_class,
)

Obj = dict[str, Any]
PLUGINS = [PluginConfig("predicates"), PluginConfig("volumebinding")]
PROVISIONER = "csi.example.com"


def vpod(name: str, *claims: str, **kw: Any) -> Obj:
    return pod(name, volumes=claim_volumes(*claims), **kw)


def cluster(*extra: Obj) -> list[Obj]:
    """n1 (zone a) and n2 (zone b), the WaitForFirstConsumer class ``local``."""
    return [
        node("n1", labels={ZONE: "a"}),
        node("n2", labels={ZONE: "b"}),
        storage_class(),
        *extra,
    ]


def open_(objects: list[Obj]) -> Session:
    return cached_session(objects, PLUGINS)


def fit_text(session: Session, name: str) -> str:
    return session.fit(task_of(session, name)).explain()


def bind_of(session: Session, name: str, node_name: str) -> VolumeBindings | None:
    with session.statement() as stmt:
        stmt.allocate(task_of(session, name), node_name)
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind)
    return effect.volumes


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            cluster(vpod("p", "c")),
            '0/2 nodes are available: persistentvolumeclaim "c" not found.',
            id="claim-missing",
        ),
        pytest.param(
            cluster(pvc("c", deleting=True), vpod("p", "c")),
            '0/2 nodes are available: persistentvolumeclaim "c" is being deleted.',
            id="claim-being-deleted",
        ),
        pytest.param(
            cluster(pvc("c", volume="gone", phase="Lost"), vpod("p", "c")),
            '0/2 nodes are available: persistentvolumeclaim "c" bound to non-existent '
            'persistentvolume "gone".',
            id="claim-lost",
        ),
        pytest.param(
            cluster(
                storage_class("fast", mode="Immediate", provisioner=PROVISIONER),
                pvc("c", storage_class="fast"),
                vpod("p", "c"),
            ),
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            id="immediate-unbound",
        ),
        pytest.param(
            cluster(pvc("c", storage_class="nosuch"), vpod("p", "c")),
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            id="class-missing-is-immediate",
        ),
        pytest.param(
            cluster(
                pvc("c", volume="pv-2", bound=True),
                pv("pv-2", node="n2", claim="default/c"),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) had volume node affinity conflict.",
            id="bound-local-pv-pins-its-node",
        ),
        pytest.param(
            cluster(pvc("c", volume="gone", bound=True), vpod("p", "c")),
            "0/2 nodes are available: 2 node(s) unavailable due to one or more pvc(s) bound "
            "to non-existent pv(s).",
            id="bound-pv-missing",
        ),
        pytest.param(
            cluster(pvc("c"), pv("pv-1", node="n1"), vpod("p", "c")),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="wffc-local-pv-on-one-node",
        ),
        pytest.param(
            cluster(pvc("c", size="2Gi"), pv("pv-1", node="n1"), vpod("p", "c")),
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.",
            id="wffc-pv-too-small",
        ),
        pytest.param(
            cluster(pvc("c", modes=("ReadWriteMany",)), pv("pv-1", node="n1"), vpod("p", "c")),
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.",
            id="wffc-access-mode-missing",
        ),
        pytest.param(
            cluster(
                pvc("c", selector={"matchLabels": {"tier": "ssd"}}),
                pv("pv-1", node="n1"),
                pv("pv-2", node="n2", labels={"tier": "ssd"}),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="wffc-selector",
        ),
        pytest.param(
            cluster(pvc("c"), pv("pv-1", node="n1", phase="Released"), vpod("p", "c")),
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.",
            id="wffc-pv-not-available",
        ),
        pytest.param(
            cluster(pvc("c"), pv("pv-1", node="n1", claim="default/other"), vpod("p", "c")),
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind.",
            id="wffc-pv-of-another-claim",
        ),
        pytest.param(
            cluster(
                pvc("c"),
                pv("pv-1", node="n1"),
                pv("pv-2", node="n2", claim="default/c", phase="Available"),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="wffc-prebound-pv-wins",
        ),
        pytest.param(
            cluster(
                storage_class(
                    "dyn",
                    provisioner=PROVISIONER,
                    topologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["b"]}]}],
                ),
                pvc("c", storage_class="dyn"),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="provisioning-allowed-topologies",
        ),
        pytest.param(
            cluster(
                storage_class("dyn", provisioner=PROVISIONER),
                csi_driver(PROVISIONER),
                capacity("cap-a", "dyn", "10Gi", nodes={ZONE: "a"}),
                capacity("cap-b", "dyn", "1Gi", nodes={ZONE: "b"}),
                pvc("c", storage_class="dyn", size="5Gi"),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) did not have enough free storage.",
            id="provisioning-capacity",
        ),
        pytest.param(
            cluster(
                storage_class("dyn", provisioner=PROVISIONER),
                csi_driver(PROVISIONER, capacity=False),
                pvc("c", storage_class="dyn", size="5Gi"),
                vpod("p", "c"),
            ),
            "2/2 nodes are available.",
            id="provisioning-capacity-not-published",
        ),
        pytest.param(
            cluster(
                storage_class("dyn", provisioner=PROVISIONER),
                pvc(
                    "c",
                    storage_class="dyn",
                    annotations={"volume.kubernetes.io/selected-node": "n2"},
                ),
                vpod("p", "c"),
            ),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="provisioning-node-selected-already",
        ),
        pytest.param(
            cluster(
                pvc("a"),
                pvc("b"),
                pv("pv-1", node="n1"),
                pv("pv-2", node="n1"),
                pv("pv-3", node="n2"),
                vpod("p", "a", "b"),
            ),
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
            id="two-claims-need-two-pvs",
        ),
        pytest.param(
            cluster(
                pvc("c", volume="pv-2", bound=True),
                pv("pv-2", node="n2", claim="default/c"),
                pvc("d"),
                vpod("p", "c", "d"),
            ),
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to "
            "bind, 1 node(s) had volume node affinity conflict.",
            id="both-reasons-on-one-node",
        ),
    ],
)
def test_filter_reasons(objects: list[Obj], expected: str) -> None:
    assert fit_text(open_(objects), "p") == expected


def test_pod_without_volumes_is_skipped() -> None:
    session = open_(cluster(pod("p")))
    task = task_of(session, "p")
    plugin = next(p for _, p in session.plugins if p.name == "volumebinding")
    assert plugin.filter(task, session.table, False) == []  # type: ignore[attr-defined]


def test_the_smallest_pv_that_fits_is_chosen() -> None:
    session = open_(
        cluster(
            pvc("c", size="2Gi"),
            pv("big", node="n1", size="5Gi"),
            pv("small", node="n1", size="2Gi"),
            pv("tiny", node="n1", size="1Gi"),
            vpod("p", "c"),
        )
    )
    volumes = bind_of(session, "p", "n1")
    assert volumes is not None
    (static,) = volumes.static
    assert (static.volume, static.claim.key, static.write) == ("small", "default/c", True)
    assert volumes.provisions == () and volumes.node == "n1" and volumes.timeout == 600.0


def test_provisioning_writes_the_selected_node() -> None:
    session = open_(
        cluster(
            storage_class("dyn", provisioner=PROVISIONER),
            pvc("c", storage_class="dyn"),
            vpod("p", "c"),
        )
    )
    volumes = bind_of(session, "p", "n2")
    assert volumes is not None and volumes.static == ()
    (prov,) = volumes.provisions
    assert (prov.claim.key, prov.resource_version, prov.write) == ("default/c", "1", True)


def test_a_pv_taken_in_the_session_is_nobody_elses_until_rolled_back() -> None:
    session = open_(
        cluster(pvc("a"), pvc("b"), pv("pv-1", node="n1"), vpod("p", "a"), vpod("q", "b"))
    )
    with session.statement() as stmt:
        cp = stmt.checkpoint()
        stmt.allocate(task_of(session, "p"), "n1")
        assert fit_text(session, "q") == (
            "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind."
        )
        stmt.rollback(cp)
        assert fit_text(session, "q").startswith("1/2")
        stmt.allocate(task_of(session, "q"), "n1")
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind) and effect.volumes is not None
    assert effect.volumes.static[0].claim.key == "default/b"


def test_pods_of_one_claim_share_its_pv() -> None:
    session = open_(
        cluster(
            pvc("c", modes=("ReadWriteMany",)),
            pv("pv-1", node="n1", modes=("ReadWriteMany",)),
            pv("pv-2", node="n2", modes=("ReadWriteMany",)),
            vpod("p", "c"),
            vpod("q", "c"),
        )
    )
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n2")
        assert fit_text(session, "q") == (
            "1/2 nodes are available: 1 node(s) didn't find available persistent volumes to bind."
        )
        stmt.allocate(task_of(session, "q"), "n2")
        bind_p, bind_q = stmt.commit()
    assert isinstance(bind_p, Bind) and isinstance(bind_q, Bind)
    assert bind_p.volumes is not None and bind_q.volumes is not None
    assert bind_p.volumes.static[0].volume == bind_q.volumes.static[0].volume == "pv-2"


def test_a_pv_naming_the_claim_already_is_not_written_again() -> None:
    session = open_(
        cluster(
            pvc("c"), pv("pv-1", node="n1", claim="default/c", phase="Available"), vpod("p", "c")
        )
    )
    volumes = bind_of(session, "p", "n1")
    assert volumes is not None and not volumes.writes
    assert [s.volume for s in volumes.static] == ["pv-1"]


def test_bound_claims_write_nothing() -> None:
    session = open_(
        cluster(
            pvc("c", volume="pv-1", bound=True),
            pv("pv-1", node="n1", claim="default/c"),
            vpod("p", "c"),
        )
    )
    assert bind_of(session, "p", "n1") is None


def test_the_timeout_comes_from_the_arguments() -> None:
    plugins = [PluginConfig("volumebinding", {"bindTimeoutSeconds": 30})]
    session = cached_session(cluster(pvc("c"), pv("pv-1", node="n1"), vpod("p", "c")), plugins)
    volumes = bind_of(session, "p", "n1")
    assert volumes is not None and volumes.timeout == 30.0


def test_a_nominated_pod_keeps_its_pv_at_open() -> None:
    nominated = vpod("p", "a", priority=10)
    nominated["status"] = {"phase": "Pending", "nominatedNodeName": "n1"}
    session = open_(cluster(pvc("a"), pvc("b"), pv("pv-1", node="n1"), nominated, vpod("q", "b")))
    assert fit_text(session, "q") == (
        "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind."
    )
