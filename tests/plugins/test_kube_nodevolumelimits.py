"""kube-scheduler's NodeVolumeLimits table (``csi_test.go``, TestCSILimits) ported as a
table (tests/conformance/index.yaml names each case): whether the plugin alone lets the
new pod onto the node, given the pods there and the node's CSINode. Cases about
VolumeAttachments and in-tree volumes migrated to CSI are not ported (Sluice reads
neither). Case ids are kube's case names."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.plugins.volumes.limits import MAX_VOLUME_COUNT
from tests.plugins.kube_volume_tables import Obj, kclaim, kclass, knode, kpod, kvolume, verdict

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
AWS_IN_TREE = "kubernetes.io/aws-ebs"
HOSTPATH_IN_TREE = "kubernetes.io/hostpath"
SC = "csi-sc"
NODE = "node-for-max-pd-test-1"
NS = "default"


def fixtures(drivers: list[str]) -> list[Obj]:
    """kube's listers: four PVs and claims per driver (``csi-<driver>-<j>``), claims
    ``csi-4`` (a class, no PV), ``csi-5`` (neither), ``csi-6`` (a class, a PV that does
    not exist), and the class of the first driver."""
    out: list[Obj] = []
    for driver in drivers:
        for j in range(4):
            name = f"csi-{driver}-{j}"
            if driver == AWS_IN_TREE:
                pv = kvolume(name, source={"awsElasticBlockStore": {"volumeID": name}})
            elif driver == HOSTPATH_IN_TREE:
                pv = kvolume(name, source={"hostPath": {"path": "/tmp"}})
            else:
                pv = kvolume(name, csi=(driver, name))
            out += [pv, kclaim(name, ns=NS, size=None, volume=name)]
    out += [
        kclaim("csi-4", ns=NS, size=None, storage_class=SC),
        kclaim("csi-5", ns=NS, size=None),
        kclaim("csi-6", ns=NS, size=None, storage_class=SC, volume="missing-in-action"),
        kclass(SC, mode="Immediate", provisioner=drivers[0]),
    ]
    return out


def csi_node(drivers: list[str], limit: int | None, source: str) -> list[Obj]:
    """The node's CSINode as kube's getNodeWithPodAndVolumeLimits makes it."""
    if source not in ("csinode", "csinode-with-no-limit"):
        return []
    listed = []
    for d in drivers:
        entry: Obj = {"name": d, "nodeID": NODE}
        if source == "csinode":
            entry["allocatable"] = {"count": limit}
        listed.append(entry)
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": NODE},
            "spec": {"drivers": listed},
        }
    ]


def running(name: str, *claims: str) -> Obj:
    return kpod(name, ns=NS, claims=claims, node_name=NODE)


def ephemeral_pod(
    name: str,
    uid: str,
    volumes: list[str],
    *,
    ns: str = "test",
    node_name: str | None = None,
    extra: list[Obj] | None = None,
) -> Obj:
    vols = list(extra or []) + [
        {"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in volumes
    ]
    return kpod(name, ns=ns, volumes=vols, uid=uid, node_name=node_name)


def ephemeral_claim(pod: str, volume: str, uid: str, *, owned: bool = True) -> Obj:
    return kclaim(
        f"{pod}-{volume}", ns="test", size=None, storage_class=SC, owner=uid if owned else ""
    )


CONFIG_AND_SECRET = [
    {"name": "c", "configMap": {"name": "c"}},
    {"name": "s", "secret": {"secretName": "s"}},
]

# (new pod, pods on the node, extra objects, limit, drivers, limit source, expected)
CSI_LIMITS: dict[str, tuple[Obj, list[Obj], list[Obj], int | None, list[str], str, Any]] = {
    "fits when node volume limit >= new pods CSI volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("running", f"csi-{EBS}-3"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        4,
        [EBS],
        "csinode",
        True,
    ),
    "doesn't when node volume limit <= pods CSI volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("running", f"csi-{EBS}-3"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        2,
        [EBS],
        "csinode",
        False,
    ),
    "should when driver does not support volume limits": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("running", f"csi-{EBS}-3"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        2,
        [EBS],
        "csinode-with-no-limit",
        True,
    ),
    "count pending PVCs towards volume limit <= pods CSI volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("pending", "csi-4"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        2,
        [EBS],
        "csinode",
        False,
    ),
    "count multiple pending pvcs towards volume limit >= pods CSI volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("pending", "csi-4"),
            running("pending-2", "csi-4"),
            running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"),
        ],
        [],
        4,
        [EBS],
        "csinode",
        True,
    ),
    "should count PVCs with invalid PV name but valid SC": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("missing-pv", "csi-6"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        2,
        [EBS],
        "csinode",
        False,
    ),
    "don't count pvcs with missing SC towards volume limit": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [running("running", f"csi-{EBS}-3"), running("no-sc", "csi-5")],
        [],
        2,
        [EBS],
        "csinode",
        True,
    ),
    "count pvcs with the same type towards volume limit": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("gce-two", f"csi-{GCE}-1", f"csi-{GCE}-2"),
            running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"),
        ],
        [],
        2,
        [EBS, GCE],
        "csinode",
        False,
    ),
    "don't count pvcs with different type towards volume limit": (
        kpod("new", ns=NS, claims=[f"csi-{GCE}-1", f"csi-{GCE}-2"]),
        [running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"), running("running", f"csi-{EBS}-3")],
        [],
        2,
        [EBS, GCE],
        "csinode",
        True,
    ),
    "nil csi node": (
        kpod(
            "new",
            ns=NS,
            volumes=[{"name": "inline", "awsElasticBlockStore": {"volumeID": "aws-inline1"}}],
        ),
        [running("in-tree-two", f"csi-{AWS_IN_TREE}-1", f"csi-{AWS_IN_TREE}-2")],
        [],
        None,
        [AWS_IN_TREE, EBS],
        "none",
        True,
    ),
    "should not limit pod if volume used does not report limits": (
        kpod("new", ns=NS, claims=[f"csi-{AWS_IN_TREE}-0"]),
        [running("in-tree-two", f"csi-{AWS_IN_TREE}-1", f"csi-{AWS_IN_TREE}-2")],
        [],
        2,
        [AWS_IN_TREE, EBS],
        "csinode-with-no-limit",
        True,
    ),
    "should not count non-migratable in-tree volumes": (
        kpod("new", ns=NS, claims=[f"csi-{HOSTPATH_IN_TREE}-0"]),
        [running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [],
        2,
        [HOSTPATH_IN_TREE, EBS],
        "csinode",
        True,
    ),
    "ephemeral volume missing": (
        ephemeral_pod("abc", "12345", ["xyz"]),
        [],
        [],
        None,
        [EBS],
        "csinode-with-no-limit",
        'looking up PVC test/abc-xyz: persistentvolumeclaims "abc-xyz" not found',
    ),
    "ephemeral volume not owned": (
        ephemeral_pod("abc", "12345", ["xyz"]),
        [],
        [ephemeral_claim("abc", "xyz", "12345", owned=False)],
        None,
        [EBS],
        "csinode-with-no-limit",
        "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)",
    ),
    "ephemeral volume unbound": (
        ephemeral_pod("abc", "12345", ["xyz"]),
        [],
        [ephemeral_claim("abc", "xyz", "12345")],
        None,
        [EBS],
        "csinode-with-no-limit",
        True,
    ),
    "ephemeral doesn't when node volume limit <= pods CSI volume": (
        ephemeral_pod("abc", "12345", ["xyz"]),
        [running("running", f"csi-{EBS}-3"), running("two", f"csi-{EBS}-1", f"csi-{EBS}-2")],
        [ephemeral_claim("abc", "xyz", "12345")],
        2,
        [EBS],
        "csinode",
        False,
    ),
    "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("running", f"csi-{EBS}-3"),
            ephemeral_pod("abc", "12345II", ["x", "y"], node_name=NODE),
        ],
        [ephemeral_claim("abc", "x", "12345II"), ephemeral_claim("abc", "y", "12345II")],
        2,
        [EBS],
        "csinode",
        False,
    ),
    (
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent "
        "volume, ephemeral disabled"
    ): (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("running", f"csi-{EBS}-3"),
            ephemeral_pod("abc", "12345", ["xyz"], node_name=NODE),
            running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"),
        ],
        [ephemeral_claim("abc", "xyz", "12345")],
        3,
        [EBS],
        "csinode",
        False,
    ),
    "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("running", f"csi-{EBS}-3"),
            ephemeral_pod("abc", "12345", ["xyz"], node_name=NODE),
            running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"),
        ],
        [ephemeral_claim("abc", "xyz", "12345")],
        3,
        [EBS],
        "csinode",
        False,
    ),
    "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume": (
        kpod("new", ns=NS, claims=[f"csi-{EBS}-0"]),
        [
            running("running", f"csi-{EBS}-3"),
            ephemeral_pod("abc", "12345", ["xyz"], node_name=NODE),
            running("two", f"csi-{EBS}-1", f"csi-{EBS}-2"),
        ],
        [ephemeral_claim("abc", "xyz", "12345")],
        5,
        [EBS],
        "csinode",
        True,
    ),
    "skip Filter when the pod only uses secrets and configmaps": (
        kpod("new", ns=NS, volumes=CONFIG_AND_SECRET),
        [],
        [],
        2,
        [EBS],
        "csinode",
        True,
    ),
    "don't skip Filter when the pod has pvcs": (
        kpod(
            "new",
            ns=NS,
            volumes=[
                *CONFIG_AND_SECRET,
                {"name": "p", "persistentVolumeClaim": {"claimName": f"csi-{EBS}-0"}},
            ],
        ),
        [],
        [],
        2,
        [EBS],
        "csinode",
        True,
    ),
    "don't skip Filter when the pod has ephemeral volumes": (
        ephemeral_pod("abc", "", ["xyz"], extra=CONFIG_AND_SECRET),
        [],
        [],
        None,
        [EBS],
        "csinode-with-no-limit",
        'looking up PVC test/abc-xyz: persistentvolumeclaims "abc-xyz" not found',
    ),
}


@pytest.mark.parametrize(
    ("new", "pods", "extra", "limit", "drivers", "source", "expected"),
    CSI_LIMITS.values(),
    ids=CSI_LIMITS.keys(),
)
def test_csi_limits(  # noqa: PLR0917
    new: Obj,
    pods: list[Obj],
    extra: list[Obj],
    limit: int | None,
    drivers: list[str],
    source: str,
    expected: Any,
) -> None:
    """TestCSILimits: True, the pod fits the node; False, the node is over a driver's
    attach limit with it; a text, the node refuses it for that reason."""
    objects = [
        knode(NODE),
        *fixtures(drivers),
        *csi_node(drivers, limit, source),
        *extra,
        *pods,
        new,
    ]
    meta = new["metadata"]
    got = verdict(objects, "nodevolumelimits", meta["name"], meta["namespace"])
    if expected is True:
        assert got == {NODE: ()}
    elif expected is False:
        assert got == {NODE: (MAX_VOLUME_COUNT,)}
    else:
        assert got == {NODE: (expected,)}
