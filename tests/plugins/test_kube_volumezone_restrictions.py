"""kube-scheduler's VolumeZone (``volume_zone_test.go``) and VolumeRestrictions
(``volume_restrictions_test.go``) tables ported as tables (tests/conformance/index.yaml
names each case): what the plugin alone says of a pod on the table's node. Case ids are
kube's case names."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.plugins.volumes.restrictions import DISK_CONFLICT, RWOP_CONFLICT
from scheduler.plugins.volumes.zone import ZONE_CONFLICT
from tests.plugins.kube_volume_tables import Obj, kclaim, kclass, knode, kpod, kvolume, verdict

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"


def pv_(name: str, labels: dict[str, str]) -> Obj:
    return kvolume(name, labels=labels)


def claim_(name: str, volume: str = "", storage_class: str | None = None) -> Obj:
    return kclaim(name, ns="default", size=None, volume=volume, storage_class=storage_class)


def zone_pod(claim: str | None) -> Obj:
    return kpod("pod_1", ns="default", claims=[claim] if claim else [])


SINGLE_ZONE_OBJECTS = [
    pv_("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv_("Vol_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv_("Vol_3", {BETA_REGION: "us-west1"}),
    pv_("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv_("Vol_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}),
    pv_("Vol_Stable_3", {ZONE: "us-west1-a", REGION: "us-west1-a"}),
    claim_("PVC_1", "Vol_1"),
    claim_("PVC_2", "Vol_2"),
    claim_("PVC_3", "Vol_3"),
    claim_("PVC_4", "Vol_not_exist"),
    claim_("PVC_Stable_1", "Vol_Stable_1"),
    claim_("PVC_Stable_2", "Vol_Stable_2"),
    claim_("PVC_Stable_3", "Vol_Stable_3"),
]
SINGLE_ZONE: dict[str, tuple[str | None, dict[str, str], bool]] = {
    "pod without volume": (None, {BETA_ZONE: "us-west1-a"}, True),
    "node without labels": ("PVC_1", {}, True),
    "beta zone label matched": ("PVC_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, True),
    "beta region label matched": ("PVC_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}, True),
    "beta region label doesn't match": (
        "PVC_2",
        {BETA_REGION: "no_us-west1", "uselessLabel": "none"},
        False,
    ),
    "beta zone label doesn't match": (
        "PVC_1",
        {BETA_ZONE: "no_us-west1-a", "uselessLabel": "none"},
        False,
    ),
    "zone label matched": ("PVC_Stable_1", {ZONE: "us-west1-a", "uselessLabel": "none"}, True),
    "region label matched": ("PVC_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}, True),
    "region label doesn't match": (
        "PVC_Stable_2",
        {REGION: "no_us-west1", "uselessLabel": "none"},
        False,
    ),
    "zone label doesn't match": (
        "PVC_Stable_1",
        {ZONE: "no_us-west1-a", "uselessLabel": "none"},
        False,
    ),
    "pv with zone and region, node with only zone": ("PVC_Stable_3", {ZONE: "us-west1-a"}, False),
    "pv with zone,node with beta zone": ("PVC_Stable_1", {BETA_ZONE: "us-west1-a"}, False),
    "pv with beta label,node with ga label, matched": ("PVC_1", {ZONE: "us-west1-a"}, True),
    "pv with beta label,node with ga label, don't match": ("PVC_1", {ZONE: "us-west1-b"}, False),
}


@pytest.mark.parametrize(("claim", "labels", "fits"), SINGLE_ZONE.values(), ids=SINGLE_ZONE.keys())
def test_single_zone(claim: str | None, labels: dict[str, str], fits: bool) -> None:
    """TestSingleZone: a PV's zone or region label must hold on the node."""
    got = verdict(
        [knode("host1", labels), *SINGLE_ZONE_OBJECTS, zone_pod(claim)],
        "volumezone",
        "pod_1",
        "default",
    )
    assert got == {"host1": () if fits else (ZONE_CONFLICT,)}


MULTI_ZONE_OBJECTS = [
    pv_("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv_("Vol_2", {BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    pv_("Vol_3", {BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv_("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv_("Vol_Stable_2", {ZONE: "us-west1-c__us-west1-a"}),
    claim_("PVC_1", "Vol_1"),
    claim_("PVC_2", "Vol_2"),
    claim_("PVC_3", "Vol_3"),
    claim_("PVC_4", "Vol_not_exist"),
    claim_("PVC_Stable_1", "Vol_Stable_1"),
    claim_("PVC_Stable_2", "Vol_Stable_2"),
]
MULTI_ZONE: dict[str, tuple[str, dict[str, str], bool]] = {
    "node without labels": ("PVC_3", {}, True),
    "beta zone label matched": ("PVC_3", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, True),
    "beta zone label doesn't match": (
        "PVC_1",
        {BETA_ZONE: "us-west1-b", "uselessLabel": "none"},
        False,
    ),
    "zone label matched": ("PVC_Stable_2", {ZONE: "us-west1-a", "uselessLabel": "none"}, True),
    "zone label doesn't match": (
        "PVC_Stable_1",
        {ZONE: "us-west1-b", "uselessLabel": "none"},
        False,
    ),
}


@pytest.mark.parametrize(("claim", "labels", "fits"), MULTI_ZONE.values(), ids=MULTI_ZONE.keys())
def test_multi_zone(claim: str, labels: dict[str, str], fits: bool) -> None:
    """TestMultiZone: a PV labelled with several zones (``a__b``) admits a node in any."""
    got = verdict(
        [knode("host1", labels), *MULTI_ZONE_OBJECTS, zone_pod(claim)],
        "volumezone",
        "pod_1",
        "default",
    )
    assert got == {"host1": () if fits else (ZONE_CONFLICT,)}


WITH_BINDING_OBJECTS = [
    kclass("Class_Immediate", mode="Immediate", provisioner=""),
    kclass("Class_Wait", provisioner=""),
    pv_("Vol_1", {BETA_ZONE: "us-west1-a"}),
    claim_("PVC_1", "Vol_1"),
    claim_("PVC_NoSC", storage_class="Class_0"),
    claim_("PVC_EmptySC"),
    claim_("PVC_WaitSC", storage_class="Class_Wait"),
    claim_("PVC_ImmediateSC", storage_class="Class_Immediate"),
]
WITH_BINDING: dict[str, tuple[str, Any]] = {
    "label zone failure domain matched": ("PVC_1", {"host1": ()}),
    "unbound volume empty storage class": (
        "PVC_EmptySC",
        "PersistentVolumeClaim had no pv name and storageClass name",
    ),
    "unbound volume no storage class": (
        "PVC_NoSC",
        'storageclasses.storage.k8s.io "Class_0" not found',
    ),
    "unbound volume immediate binding mode": ("PVC_ImmediateSC", "PersistentVolume had no name"),
    "unbound volume wait binding mode": ("PVC_WaitSC", {"host1": ()}),
}


@pytest.mark.parametrize(("claim", "expected"), WITH_BINDING.values(), ids=WITH_BINDING.keys())
def test_with_binding(claim: str, expected: Any) -> None:
    """TestWithBinding: an unbound claim waiting for its first consumer is left to
    VolumeBinding; any other unbound claim refuses the pod whatever the node. The table's
    Immediate class has no volumeBindingMode (kube says "VolumeBindingMode not set"); an
    API server never serves one (it defaults the mode to Immediate), and Sluice reads it
    as the server defaults it (the index records the departure)."""
    node = knode("host1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"})
    got = verdict([node, *WITH_BINDING_OBJECTS, zone_pod(claim)], "volumezone", "pod_1", "default")
    assert got == expected


# VolumeRestrictions -----------------------------------------------------------------------

DISKS = {
    "gce": ({"gcePersistentDisk": {"pdName": "foo"}}, {"gcePersistentDisk": {"pdName": "bar"}}),
    "aws": (
        {"awsElasticBlockStore": {"volumeID": "foo"}},
        {"awsElasticBlockStore": {"volumeID": "bar"}},
    ),
    "rbd": (
        {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}},
        {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}},
    ),
    "iscsi": (
        {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01"}},
        {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01"}},
    ),
}
DISK_CASES = {
    "nothing": (None, None, True),
    "one state": (None, 0, True),
    "same state": (0, 0, False),
    "different state": (1, 0, True),
}


def disk_pod(name: str, source: Obj | None, node_name: str | None = None) -> Obj:
    volumes = [{"name": "disk", **source}] if source is not None else []
    return kpod(name, ns="default", volumes=volumes, node_name=node_name)


@pytest.mark.parametrize("kind", DISKS, ids=DISKS.keys())
@pytest.mark.parametrize(("mine", "theirs", "fits"), DISK_CASES.values(), ids=DISK_CASES.keys())
def test_disk_conflicts(kind: str, mine: int | None, theirs: int | None, fits: bool) -> None:
    """TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts and
    TestISCSIDiskConflicts: a pod's inline disk against the one a pod on the node mounts."""
    sources = DISKS[kind]
    objects = [knode("n1")]
    if theirs is not None:
        objects.append(disk_pod("other", sources[theirs], "n1"))
    objects.append(disk_pod("p", sources[mine] if mine is not None else None))
    got = verdict(objects, "volumerestrictions", "p", "default")
    assert got == {"n1": () if fits else (DISK_CONFLICT,)}


@pytest.mark.parametrize(
    "source", [{"emptyDir": {}}], ids=["pod with a volume that doesn't have restrictions"]
)
def test_gce_disk_conflicts_without_restrictions(source: Obj) -> None:
    """TestGCEDiskConflicts' case of a volume no restriction applies to."""
    got = verdict([knode("n1"), disk_pod("p", source)], "volumerestrictions", "p", "default")
    assert got == {"n1": ()}


def rwop(name: str, mode: str = "ReadWriteOncePod") -> Obj:
    return kclaim(name, ns="default", size=None, modes=[mode])


ACCESS_MODES: dict[str, tuple[list[str], list[Obj], list[Obj], Any]] = {
    "nothing": ([], [], [], {"node-1": ()}),
    "failed to get PVC": (
        ["claim-with-rwop-1"],
        [],
        [],
        'persistentvolumeclaim "claim-with-rwop-1" not found',
    ),
    "no access mode conflict": (
        ["claim-with-rwop-1"],
        [kpod("pod-with-rwx", ns="default", claims=["claim-with-rwx"], node_name="node-1")],
        [rwop("claim-with-rwop-1"), rwop("claim-with-rwx", "ReadWriteMany")],
        {"node-1": ()},
    ),
    "access mode conflict, unschedulable": (
        ["claim-with-rwop-1"],
        [
            kpod(
                "pod-with-one-pvc", ns="default", claims=["claim-with-rwop-1"], node_name="node-1"
            ),
            kpod("pod-with-rwx", ns="default", claims=["claim-with-rwx"], node_name="node-1"),
        ],
        [rwop("claim-with-rwop-1"), rwop("claim-with-rwx", "ReadWriteMany")],
        {"node-1": (RWOP_CONFLICT,)},
    ),
    "two conflicts, unschedulable": (
        ["claim-with-rwop-1", "claim-with-rwop-2"],
        [
            kpod(
                "pod-with-two-pvcs",
                ns="default",
                claims=["claim-with-rwop-1", "claim-with-rwop-2"],
                node_name="node-1",
            ),
            kpod("pod-with-rwx", ns="default", claims=["claim-with-rwx"], node_name="node-1"),
        ],
        [
            rwop("claim-with-rwop-1"),
            rwop("claim-with-rwop-2"),
            rwop("claim-with-rwx", "ReadWriteMany"),
        ],
        {"node-1": (RWOP_CONFLICT,)},
    ),
}


@pytest.mark.parametrize(
    ("claims", "pods", "pvcs", "expected"), ACCESS_MODES.values(), ids=ACCESS_MODES.keys()
)
def test_access_mode_conflicts(
    claims: list[str], pods: list[Obj], pvcs: list[Obj], expected: Any
) -> None:
    """TestAccessModeConflicts: a ReadWriteOncePod claim another pod uses refuses the pod
    (resolvable: evicting that pod frees it)."""
    got = verdict(
        [knode("node-1"), *pvcs, *pods, kpod("new", ns="default", claims=claims)],
        "volumerestrictions",
        "new",
        "default",
    )
    assert got == expected
