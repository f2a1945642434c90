"""kube-scheduler's VolumeBinding tables (``volume_binding_test.go``, ``binder_test.go``)
ported as tables (tests/conformance/index.yaml names each case): what the filter says of
a pod on each node, which PVs and provisions its bind would write, and the check the
bind's wait makes (kube's checkBindings). Case ids are kube's case names."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.volumes.prebind import (
    ClaimTarget,
    Provision,
    StaticBinding,
    VolumeBindings,
    bound_status,
)
from scheduler.api.volumes.storage_objects import claim_from_object, volume_from_object
from scheduler.app import builtin_registry
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.framework.effects import Bind
from scheduler.framework.session import open_session
from scheduler.plugins.volumes.volume_binding import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    NOT_ENOUGH_SPACE,
    PV_NOT_EXIST,
)
from tests.builders import KIND_ORDER, cache_with, cached_session, task_of
from tests.plugins.kube_volume_tables import (
    NODE_KEY,
    Obj,
    kclaim,
    kclass,
    knode,
    kpod,
    kvolume,
    verdict,
)

IMMEDIATE = "Immediate"

# TestVolumeBinding: the classes and driver every case has --------------------------------

BINDING_CLASSES = [
    kclass("immediate-sc", mode=IMMEDIATE, provisioner=""),
    kclass("wait-sc", provisioner=""),
    kclass("wait-hdd-sc", provisioner=""),
    kclass("wait-sc-with-storage-capacity", provisioner="driver-with-storage-capacity"),
    {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": "driver-with-storage-capacity"},
        "spec": {"storageCapacity": True},
    },
]


def pvc_(name: str, storage_class: str, **kw: Any) -> Obj:
    return kclaim(name, ns="default", size=None, storage_class=storage_class, **kw)


VOLUME_BINDING = {
    "pod has not pvcs": ([knode("node-a")], [], {"node-a": ()}),
    "all bound": (
        [knode("node-a")],
        [
            pvc_("pvc-a", "wait-sc", volume="pv-a", bound=True),
            kvolume("pv-a", storage_class="wait-sc", size="0"),
            kpod("pod-a", ns="default", claims=["pvc-a"]),
        ],
        {"node-a": ()},
    ),
    "PVC does not exist": (
        [knode("node-a")],
        [kpod("pod-a", ns="default", claims=["pvc-a"])],
        'persistentvolumeclaim "pvc-a" not found',
    ),
    "Part of PVCs do not exist": (
        [knode("node-a")],
        [
            pvc_("pvc-a", "wait-sc", volume="pv-a", bound=True),
            kpod("pod-a", ns="default", claims=["pvc-a", "pvc-b"]),
        ],
        'persistentvolumeclaim "pvc-b" not found',
    ),
    "immediate claims not bound": (
        [knode("node-a")],
        [pvc_("pvc-a", "immediate-sc"), kpod("pod-a", ns="default", claims=["pvc-a"])],
        "pod has unbound immediate PersistentVolumeClaims",
    ),
    "unbound claims no matches": (
        [knode("node-a")],
        [pvc_("pvc-a", "wait-sc"), kpod("pod-a", ns="default", claims=["pvc-a"])],
        {"node-a": (BIND_CONFLICT,)},
    ),
    "bound and unbound unsatisfied": (
        [knode("node-a", {"foo": "barbar"})],
        [
            pvc_("pvc-a", "wait-sc", volume="pv-a", bound=True),
            pvc_("pvc-b", "wait-sc"),
            kvolume("pv-a", storage_class="wait-sc", size="0", node_key="foo", node_value="bar"),
            kpod("pod-a", ns="default", claims=["pvc-a", "pvc-b"]),
        ],
        {"node-a": tuple(sorted((NODE_CONFLICT, BIND_CONFLICT)))},
    ),
    "pv not found": (
        [knode("node-a")],
        [
            pvc_("pvc-a", "wait-sc", volume="pv-a", bound=True),
            kpod("pod-a", ns="default", claims=["pvc-a"]),
        ],
        {"node-a": (PV_NOT_EXIST,)},
    ),
    "pv not found claim lost": (
        [knode("node-a")],
        [
            pvc_("pvc-a", "wait-sc", volume="pv-a", bound=True, phase="Lost"),
            kpod("pod-a", ns="default", claims=["pvc-a"]),
        ],
        'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"',
    ),
}


@pytest.mark.parametrize(
    ("nodes", "objects", "expected"), VOLUME_BINDING.values(), ids=VOLUME_BINDING.keys()
)
def test_volume_binding_table(nodes: list[Obj], objects: list[Obj], expected: Any) -> None:
    """TestVolumeBinding's PreFilter and Filter statuses (its scores: not ported)."""
    pod = [o for o in objects if o["kind"] == "Pod"] or [kpod("pod-a", ns="default")]
    others = [o for o in objects if o["kind"] != "Pod"]
    got = verdict([*nodes, *BINDING_CLASSES, *others, *pod], "volumebinding", "pod-a", "default")
    assert got == expected


# binder_test.go: the fixtures -----------------------------------------------------------

WAIT, IMMEDIATE_CLASS, PROVISIONED, TOPO_MISMATCH = (
    "waitClass",
    "immediateClass",
    "waitClassWithProvisioner",
    "topoMismatchClass",
)
PROVISIONER = "test-provisioner"
BINDER_CLASSES = [
    kclass(WAIT, provisioner="kubernetes.io/no-provisioner"),
    kclass(IMMEDIATE_CLASS, mode=IMMEDIATE, provisioner=""),
    kclass(PROVISIONED, provisioner=PROVISIONER),
    kclass(
        TOPO_MISMATCH,
        provisioner=PROVISIONER,
        topologies=[{"matchLabelExpressions": [{"key": NODE_KEY, "values": ["node2"]}]}],
    ),
]

unbound = kclaim("unbound-pvc", storage_class=WAIT)
unbound2 = kclaim("unbound-pvc2", size="5G", storage_class=WAIT)
prebound = kclaim("prebound-pvc", storage_class=WAIT, volume="pv-node1a")
bound = kclaim("bound-pvc", storage_class=WAIT, volume="pv-bound", bound=True)
immediate_unbound = kclaim("immediate-unbound-pvc", storage_class=IMMEDIATE_CLASS)
immediate_bound = kclaim(
    "immediate-bound-pvc", storage_class=IMMEDIATE_CLASS, volume="pv-bound-immediate", bound=True
)
provisioned = kclaim("provisioned-pvc", size="1Gi", storage_class=PROVISIONED)
selected_node = kclaim("provisioned-pvc", size="1Gi", storage_class=PROVISIONED, selected="node1")
no_provisioner = kclaim("no-provisioner-pvc", size="1Gi", storage_class=WAIT)
topo_mismatch = kclaim("topo-mismatch-pvc", size="1Gi", storage_class=TOPO_MISMATCH)

pv_node1a = kvolume("pv-node1a", size="5G", storage_class=WAIT, node_value="node1")
pv_node1b = kvolume("pv-node1b", size="10G", storage_class=WAIT, node_value="node1")
pv_node2 = kvolume("pv-node2", size="1G", storage_class=WAIT, node_value="node2")
pv_bound = kvolume("pv-bound", storage_class=WAIT, node_value="node1", claim=bound)
pv_node1a_bound = kvolume(
    "pv-node1a", size="5G", storage_class=WAIT, node_value="node1", claim=unbound
)
pv_bound_immediate = kvolume(
    "pv-bound-immediate", storage_class=IMMEDIATE_CLASS, node_value="node1", claim=immediate_bound
)
pv_bound_immediate_node2 = kvolume(
    "pv-bound-immediate", storage_class=IMMEDIATE_CLASS, node_value="node2", claim=immediate_bound
)
generic_owned = kclaim(
    "test-pod-test-volume", storage_class=WAIT, volume="pv-bound", bound=True, owner="uid-test-pod"
)
generic_not_owned = kclaim(
    "test-pod-test-volume", storage_class=WAIT, volume="pv-bound", bound=True
)
pv_bound_generic = kvolume("pv-bound", storage_class=WAIT, node_value="node1", claim=generic_owned)
EPHEMERAL = [
    {
        "name": "test-volume",
        "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": WAIT}}},
    }
]
NODE1 = knode("node1", {NODE_KEY: "node1"})


def binder_pod(claims: list[Obj], volumes: list[Obj] | None = None) -> Obj:
    return kpod(
        claims=[c["metadata"]["name"] for c in claims], volumes=volumes or [], uid="uid-test-pod"
    )


def find(objects: list[Obj], pod: Obj) -> tuple[Any, Any]:
    """kube's findPodVolumes for ``pod`` on node1: the filter's verdict, and the volume
    writes of its bind there (None when the pod does not fit)."""
    got = verdict([NODE1, *BINDER_CLASSES, *objects, pod], "volumebinding")
    if got != {"node1": ()}:
        return got, None
    session = cached_session(
        [NODE1, *BINDER_CLASSES, *objects, pod], [PluginConfig("volumebinding")]
    )
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "test-pod", "testns"), "node1")
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind)
    return got, effect.volumes


def writes(bindings: VolumeBindings | None) -> tuple[list[tuple[str, str]], list[str]]:
    """(claim, PV) of the static bindings, and the claims to provision."""
    if bindings is None:
        return [], []
    return (
        [(b.claim.name, b.volume) for b in bindings.static],
        [p.claim.name for p in bindings.provisions],
    )


FAIL = "fail"
"""kube's findPodVolumes errs: the pod fits nowhere (Sluice: a refusal whatever the node)."""

WITHOUT_PROVISIONING: dict[str, tuple[list[Obj], Obj, Any, list[tuple[str, str]]]] = {
    "no-volumes": ([], kpod(node_name=None), {"node1": ()}, []),
    "no-pvcs": ([], kpod(volumes=[{"name": "scratch", "emptyDir": {}}]), {"node1": ()}, []),
    "pvc-not-found": ([], binder_pod([bound]), FAIL, []),
    "bound-pvc": ([bound, pv_bound], binder_pod([bound]), {"node1": ()}, []),
    "bound-pvc,pv-not-exists": ([bound], binder_pod([bound]), {"node1": (PV_NOT_EXIST,)}, []),
    "prebound-pvc": ([prebound, pv_node1a_bound], binder_pod([prebound]), FAIL, []),
    "unbound-pvc,pv-same-node": (
        [unbound, pv_node2, pv_node1a, pv_node1b],
        binder_pod([unbound]),
        {"node1": ()},
        [("unbound-pvc", "pv-node1a")],
    ),
    "unbound-pvc,pv-different-node": (
        [unbound, pv_node2],
        binder_pod([unbound]),
        {"node1": (BIND_CONFLICT,)},
        [],
    ),
    "two-unbound-pvcs": (
        [unbound, unbound2, pv_node1a, pv_node1b],
        binder_pod([unbound, unbound2]),
        {"node1": ()},
        [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
    ),
    "two-unbound-pvcs,order-by-size": (
        [unbound2, unbound, pv_node1a, pv_node1b],
        binder_pod([unbound2, unbound]),
        {"node1": ()},
        [("unbound-pvc", "pv-node1a"), ("unbound-pvc2", "pv-node1b")],
    ),
    "two-unbound-pvcs,partial-match": (
        [unbound, unbound2, pv_node1a],
        binder_pod([unbound, unbound2]),
        {"node1": (BIND_CONFLICT,)},
        [],
    ),
    "one-bound,one-unbound": (
        [unbound, bound, pv_bound, pv_node1a],
        binder_pod([unbound, bound]),
        {"node1": ()},
        [("unbound-pvc", "pv-node1a")],
    ),
    "one-bound,one-unbound,no-match": (
        [unbound, bound, pv_bound, pv_node2],
        binder_pod([unbound, bound]),
        {"node1": (BIND_CONFLICT,)},
        [],
    ),
    "one-prebound,one-unbound": (
        [unbound, prebound, pv_node1a, pv_node1b],
        binder_pod([unbound, prebound]),
        FAIL,
        [],
    ),
    "immediate-bound-pvc": (
        [immediate_bound, pv_bound_immediate],
        binder_pod([immediate_bound]),
        {"node1": ()},
        [],
    ),
    "immediate-bound-pvc-wrong-node": (
        [immediate_bound, pv_bound_immediate_node2],
        binder_pod([immediate_bound]),
        {"node1": (NODE_CONFLICT,)},
        [],
    ),
    "immediate-unbound-pvc": ([immediate_unbound], binder_pod([immediate_unbound]), FAIL, []),
    "immediate-unbound-pvc,delayed-mode-bound": (
        [immediate_unbound, bound, pv_bound],
        binder_pod([immediate_unbound, bound]),
        FAIL,
        [],
    ),
    "immediate-unbound-pvc,delayed-mode-unbound": (
        [immediate_unbound, unbound],
        binder_pod([immediate_unbound, unbound]),
        FAIL,
        [],
    ),
    "generic-ephemeral,no-pvc": ([], binder_pod([], EPHEMERAL), FAIL, []),
    "generic-ephemeral,with-pvc": (
        [generic_owned, pv_bound_generic],
        binder_pod([], EPHEMERAL),
        {"node1": ()},
        [],
    ),
    "generic-ephemeral,wrong-pvc": (
        [generic_not_owned, pv_bound_generic],
        binder_pod([], EPHEMERAL),
        FAIL,
        [],
    ),
}


@pytest.mark.parametrize(
    ("objects", "pod", "expected", "bindings"),
    WITHOUT_PROVISIONING.values(),
    ids=WITHOUT_PROVISIONING.keys(),
)
def test_find_pod_volumes_without_provisioning(
    objects: list[Obj], pod: Obj, expected: Any, bindings: list[tuple[str, str]]
) -> None:
    """TestFindPodVolumesWithoutProvisioning: the reasons on node1, or a refusal (kube's
    error), and the PVs chosen for the claims to bind."""
    got, volumes = find(objects, pod)
    if expected == FAIL:
        assert isinstance(got, str), got
    else:
        assert got == expected
    assert writes(volumes)[0] == bindings
    assert writes(volumes)[1] == []


WITH_PROVISIONING: dict[str, tuple[list[Obj], Obj, Any, list[tuple[str, str]], list[str]]] = {
    "one-provisioned": (
        [provisioned],
        binder_pod([provisioned]),
        {"node1": ()},
        [],
        ["provisioned-pvc"],
    ),
    "two-unbound-pvcs,one-matched,one-provisioned": (
        [unbound, provisioned, pv_node1a],
        binder_pod([unbound, provisioned]),
        {"node1": ()},
        [("unbound-pvc", "pv-node1a")],
        ["provisioned-pvc"],
    ),
    "one-bound,one-provisioned": (
        [bound, provisioned, pv_bound],
        binder_pod([bound, provisioned]),
        {"node1": ()},
        [],
        ["provisioned-pvc"],
    ),
    "one-binding,one-selected-node": (
        [bound, selected_node, pv_bound],
        binder_pod([bound, selected_node]),
        {"node1": ()},
        [],
        ["provisioned-pvc"],
    ),
    "immediate-unbound-pvc": ([immediate_unbound], binder_pod([immediate_unbound]), FAIL, [], []),
    "one-immediate-bound,one-provisioned": (
        [immediate_bound, provisioned, pv_bound_immediate],
        binder_pod([immediate_bound, provisioned]),
        {"node1": ()},
        [],
        ["provisioned-pvc"],
    ),
    "invalid-provisioner": (
        [no_provisioner],
        binder_pod([no_provisioner]),
        {"node1": (BIND_CONFLICT,)},
        [],
        [],
    ),
    "volume-topology-unsatisfied": (
        [topo_mismatch],
        binder_pod([topo_mismatch]),
        {"node1": (BIND_CONFLICT,)},
        [],
        [],
    ),
}


@pytest.mark.parametrize(
    ("objects", "pod", "expected", "bindings", "provisions"),
    WITH_PROVISIONING.values(),
    ids=WITH_PROVISIONING.keys(),
)
@pytest.mark.parametrize(
    "driver", [None, True, False], ids=["no-driver", "capacity-tracking", "no-capacity-tracking"]
)
def test_find_pod_volumes_with_provisioning(  # noqa: PLR0917
    objects: list[Obj],
    pod: Obj,
    expected: Any,
    bindings: list[tuple[str, str]],
    provisions: list[str],
    driver: bool | None,
) -> None:
    """TestFindPodVolumesWithProvisioning, with the provisioner's CSIDriver absent, or
    present with or without capacity tracking; with tracking, a claim to provision needs
    a CSIStorageCapacity with room on the node (kube's needsCapacity), given here."""
    extra = list(objects)
    if driver is not None:
        extra.append(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": PROVISIONER},
                "spec": {"storageCapacity": driver},
            }
        )
        extra.append(capacity("node1-cap", PROVISIONED, "1Gi", node_value="node1"))
    got, volumes = find(extra, pod)
    if expected == FAIL:
        assert isinstance(got, str), got
    else:
        assert got == expected
    assert writes(volumes) == (bindings, provisions)


def capacity(
    name: str,
    storage_class: str,
    size: str | None,
    *,
    node_value: str | None = None,
    maximum: str | None = None,
) -> Obj:
    """kube's makeCapacity: on the nodes whose nodeKey is ``node_value`` (every node when
    None)."""
    out: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {"name": name, "namespace": "default"},
        "storageClassName": storage_class,
        "nodeTopology": {"matchLabels": {NODE_KEY: node_value}} if node_value else {},
    }
    if size is not None:
        out["capacity"] = size
    if maximum is not None:
        out["maximumVolumeSize"] = maximum
    return out


CAPACITY: dict[str, tuple[list[Obj], bool]] = {
    "network-attached": ([capacity("net", PROVISIONED, "1Gi")], True),
    "local-storage": ([capacity("net", PROVISIONED, "1Gi", node_value="node1")], True),
    "multiple": (
        [
            capacity("net", PROVISIONED, "1Gi"),
            capacity("net-2", PROVISIONED, "1Gi", node_value="node2"),
            capacity("net-1", PROVISIONED, "1Gi", node_value="node1"),
        ],
        True,
    ),
    "no-storage": ([], False),
    "wrong-node": ([capacity("net", PROVISIONED, "1Gi", node_value="node2")], False),
    "wrong-storage-class": ([capacity("net", WAIT, "1Gi", node_value="node1")], False),
    "insufficient-storage": ([capacity("net", PROVISIONED, "1Mi", node_value="node1")], False),
    "insufficient-volume-size": (
        [capacity("net", PROVISIONED, "1Gi", node_value="node1", maximum="1Mi")],
        False,
    ),
    "zero-storage": ([capacity("net", PROVISIONED, "0Mi", node_value="node1")], False),
    "zero-volume-size": (
        [capacity("net", PROVISIONED, None, node_value="node1", maximum="0Mi")],
        False,
    ),
    "nil-storage": ([capacity("net", PROVISIONED, None, node_value="node1")], False),
}


@pytest.mark.parametrize(("capacities", "room"), CAPACITY.values(), ids=CAPACITY.keys())
@pytest.mark.parametrize("opt_in", [True, False], ids=["storage-capacity", "no-storage-capacity"])
def test_capacity(capacities: list[Obj], room: bool, opt_in: bool) -> None:
    """TestCapacity: a claim to provision on node1 fits where a CSIStorageCapacity of its
    class has room there, when its driver publishes capacity; else wherever."""
    driver = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": PROVISIONER},
        "spec": {"storageCapacity": opt_in},
    }
    got, volumes = find([driver, *capacities, provisioned], binder_pod([provisioned]))
    if room or not opt_in:
        assert got == {"node1": ()}
        assert writes(volumes) == ([], ["provisioned-pvc"])
    else:
        assert got == {"node1": (NOT_ENOUGH_SPACE,)}


# TestCheckBindings ------------------------------------------------------------------------

bound_node1a = kclaim("unbound-pvc", storage_class=WAIT, volume="pv-node1a", bound=True)
prebound_node1a = kclaim("unbound-pvc", storage_class=WAIT, volume="pv-node1a")
pv_node1b_bound = kvolume(
    "pv-node1b", size="10G", storage_class=WAIT, node_value="node1", claim=unbound2
)
provisioned_bound = kclaim(
    "provisioned-pvc", size="1Gi", storage_class=PROVISIONED, volume="pv-bound", bound=True
)


def annotated(claim: Obj, node: str | None = "node1") -> Obj:
    """kube's addProvisionAnn (the selected node), or its removal (``node`` None)."""
    out = {**claim, "metadata": {**claim["metadata"]}}
    ann = dict(out["metadata"].get("annotations") or {})
    if node is None:
        ann.pop("volume.kubernetes.io/selected-node", None)
    else:
        ann["volume.kubernetes.io/selected-node"] = node
    out["metadata"]["annotations"] = ann
    return out


def without_claim_uid(pv: Obj) -> Obj:
    spec = {
        **pv["spec"],
        "claimRef": {k: v for k, v in pv["spec"]["claimRef"].items() if k != "uid"},
    }
    return {**pv, "spec": spec}


def static(claim: Obj, pv: Obj) -> StaticBinding:
    return StaticBinding(ClaimTarget.of(claim_from_object(claim)), pv["metadata"]["name"], "1")


def provision(claim: Obj) -> Provision:
    return Provision(ClaimTarget.of(claim_from_object(claim)), "1")


CHECK_BINDINGS: dict[
    str, tuple[list[StaticBinding], list[Provision], list[Obj], list[Obj], str]
] = {
    "nothing-to-bind": ([], [], [], [], "bound"),
    "binding-bound": (
        [static(unbound, pv_node1a_bound)],
        [],
        [pv_node1a_bound],
        [bound_node1a],
        "bound",
    ),
    "binding-prebound": (
        [static(unbound, pv_node1a_bound)],
        [],
        [pv_node1a_bound],
        [prebound_node1a],
        "waiting",
    ),
    "binding-unbound": (
        [static(unbound, pv_node1a_bound)],
        [],
        [pv_node1a_bound],
        [unbound],
        "waiting",
    ),
    "binding-pvc-not-exists": (
        [static(unbound, pv_node1a_bound)],
        [],
        [pv_node1a_bound],
        [],
        "failed",
    ),
    "binding-pv-not-exists": ([static(unbound, pv_node1a_bound)], [], [], [bound_node1a], "failed"),
    "binding-claimref-nil": (
        [static(unbound, pv_node1a_bound)],
        [],
        [pv_node1a],
        [bound_node1a],
        "failed",
    ),
    "binding-claimref-uid-empty": (
        [static(unbound, pv_node1a_bound)],
        [],
        [without_claim_uid(pv_node1a_bound)],
        [bound_node1a],
        "failed",
    ),
    "binding-one-bound,one-unbound": (
        [static(unbound, pv_node1a_bound), static(unbound2, pv_node1b_bound)],
        [],
        [pv_node1a_bound, pv_node1b_bound],
        [bound_node1a, unbound2],
        "waiting",
    ),
    "provisioning-pvc-bound": (
        [],
        [provision(provisioned)],
        [pv_bound],
        [annotated(provisioned_bound)],
        "bound",
    ),
    "provisioning-pvc-unbound": (
        [],
        [provision(provisioned)],
        [],
        [annotated(provisioned)],
        "waiting",
    ),
    "provisioning-pvc-not-exists": ([], [provision(provisioned)], [], [], "failed"),
    "provisioning-pvc-annotations-nil": ([], [provision(provisioned)], [], [provisioned], "failed"),
    "provisioning-pvc-selected-node-dropped": (
        [],
        [provision(provisioned)],
        [],
        [annotated(provisioned, None)],
        "failed",
    ),
    "provisioning-pvc-selected-node-wrong-node": (
        [],
        [provision(provisioned)],
        [],
        [annotated(provisioned, "wrong-node")],
        "failed",
    ),
    "binding-bound-provisioning-unbound": (
        [static(unbound, pv_node1a_bound)],
        [provision(provisioned)],
        [pv_node1a_bound],
        [bound_node1a, annotated(provisioned)],
        "waiting",
    ),
    "tolerate-provisioning-pvc-bound-pv-not-found": (
        [],
        [provision(provisioned)],
        [],
        [annotated(provisioned_bound)],
        "waiting",
    ),
}


@pytest.mark.parametrize(
    ("static_", "provisions", "pvs", "claims", "expected"),
    CHECK_BINDINGS.values(),
    ids=CHECK_BINDINGS.keys(),
)
def test_check_bindings(
    static_: list[StaticBinding],
    provisions: list[Provision],
    pvs: list[Obj],
    claims: list[Obj],
    expected: str,
) -> None:
    """TestCheckBindings: what the bind's wait makes of the objects as the API shows them
    after the writes (bound, still waiting, or failed: the pod is tried again)."""
    bindings = VolumeBindings("node1", tuple(static_), tuple(provisions))
    status = bound_status(
        bindings,
        {f"testns/{c['metadata']['name']}": claim_from_object(c) for c in claims},
        {p["metadata"]["name"]: volume_from_object(p) for p in pvs},
        {NODE_KEY: "node1"},
        {},
    )
    got = "failed" if status.failed else "bound" if status.done else "waiting"
    assert got == expected, status


# TestFindAssumeVolumes ---------------------------------------------------------------------


@pytest.mark.parametrize("repeats", [50], ids=["(single case)"])
def test_find_assume_volumes(repeats: int) -> None:
    """TestFindAssumeVolumes: the PV chosen for a claim, once assumed (the bind handed
    on), is the PV every later cycle chooses for it (two PVs of one size on the node)."""
    pv_node1c = kvolume("pv-node1b", size="5G", storage_class=WAIT, node_value="node1")
    objects = [NODE1, *BINDER_CLASSES, unbound, pv_node2, pv_node1a, pv_node1c]
    objects.append(binder_pod([unbound]))
    ordered = sorted(objects, key=lambda o: KIND_ORDER.index(o["kind"]))
    cache = cache_with(*ordered)
    config = SchedulerConfiguration(
        actions=(), tiers=(TierConfig((PluginConfig("volumebinding"),)),)
    )
    resolved = builtin_registry().resolve(config)

    def bind_once() -> Bind:
        session = open_session(cache.snapshot(), resolved)
        with session.statement() as stmt:
            stmt.allocate(task_of(session, "test-pod", "testns"), "node1")
            (effect,) = stmt.commit()
        session.close()
        assert isinstance(effect, Bind)
        return effect

    first = bind_once()
    assert writes(first.volumes) == ([("unbound-pvc", "pv-node1a")], [])
    assert first.volumes is not None
    cache.volumes.assume(first.task.uid, first.volumes)  # kube's AssumePodVolumes
    for _ in range(repeats):
        again = bind_once()
        assert writes(again.volumes) == ([("unbound-pvc", "pv-node1a")], [])
        assert again.volumes is not None and not any(b.write for b in again.volumes.static)
