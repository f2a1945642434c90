"""Storage on the embedded cluster: what the API server defaults and refuses (checked
against a v1.36 server), and the PV controller's part (binding, provisioning, release,
protection), driven on the virtual clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from scheduler.api.errors import InvalidObjectError
from scheduler.sim.storage import PV_PROTECTION, PVC_PROTECTION
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualClock, run_virtual
from scheduler.sim.volume_controller import PROVISIONING_ANNOTATION, SimVolumeController
from tests.builders import HOSTNAME, node, pod
from tests.volume_builders import claim_volumes, pv, pvc, storage_class

Obj = dict[str, Any]
SELECTED = "volume.kubernetes.io/selected-node"
PROVISIONER = "csi.example.com"


def fresh(obj: Obj) -> Obj:
    """``obj`` as a user writes it: no status, uid or resourceVersion."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {
        k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")
    }
    return out


# What the API server defaults and refuses -----------------------------------------------


def test_defaults_and_protection_finalizers() -> None:
    store = ObjectStore(lambda: 1.0e9)
    claim = store.create(fresh(pvc("c", storage_class="local")))
    volume = store.create(fresh(pv("v", node="n1")))
    klass = store.create({"kind": "StorageClass", "metadata": {"name": "s"}, "provisioner": "x"})
    assert claim["status"] == {"phase": "Pending"}
    assert claim["spec"]["volumeMode"] == "Filesystem"
    assert claim["metadata"]["finalizers"] == [PVC_PROTECTION]
    assert volume["status"] == {"phase": "Pending"}
    assert volume["spec"]["volumeMode"] == "Filesystem"
    assert volume["metadata"]["finalizers"] == [PV_PROTECTION]
    assert (klass["reclaimPolicy"], klass["volumeBindingMode"]) == ("Delete", "Immediate")


REFUSED = {
    "pv-without-capacity": (
        {
            "kind": "PersistentVolume",
            "metadata": {"name": "v"},
            "spec": {"accessModes": ["ReadWriteOnce"], "local": {"path": "/x"}},
        },
        ["spec.capacity: Required value", "Local volume requires node affinity"],
    ),
    "pv-without-source-or-modes": (
        {
            "kind": "PersistentVolume",
            "metadata": {"name": "v"},
            "spec": {"capacity": {"storage": "1Gi"}},
        },
        ["spec.accessModes: Required value", "spec: Required value: must specify a volume type"],
    ),
    "claim-without-modes-or-size": (
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": {}},
        ["at least 1 access mode is required", "spec.resources[storage]: Required value"],
    ),
    "class-without-provisioner": (
        {"kind": "StorageClass", "metadata": {"name": "s"}},
        ['StorageClass.storage.k8s.io "s" is invalid: provisioner: Required value'],
    ),
}


@pytest.mark.parametrize("obj,words", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_api_server_refuses(obj: Obj, words: list[str]) -> None:
    store = ObjectStore(lambda: 1.0e9)
    with pytest.raises(InvalidObjectError) as err:
        store.create(obj)
    for w in words:
        assert w in str(err.value)


UPDATES = {
    "claim-class-changed": ("PersistentVolumeClaim", {"spec": {"storageClassName": "x"}}, False),
    "claim-volume-name-set-once": ("PersistentVolumeClaim", {"spec": {"volumeName": "v"}}, True),
    "claim-request-grown": (
        "PersistentVolumeClaim",
        {"spec": {"resources": {"requests": {"storage": "2Gi"}}}},
        True,
    ),
    "claim-annotated": (
        "PersistentVolumeClaim",
        {"metadata": {"annotations": {SELECTED: "n1"}}},
        True,
    ),
    "class-mode-changed": ("StorageClass", {"volumeBindingMode": "Immediate"}, False),
}


@pytest.mark.parametrize("kind,patch,allowed", UPDATES.values(), ids=UPDATES.keys())
def test_updates(kind: str, patch: Obj, allowed: bool) -> None:
    store = ObjectStore(lambda: 1.0e9)
    store.create(fresh(pvc("c")))
    store.create(fresh(storage_class("local")))
    ns = "default" if kind == "PersistentVolumeClaim" else ""
    name = "c" if kind == "PersistentVolumeClaim" else "local"
    if allowed:
        store.patch(kind, ns, name, patch)
        return
    with pytest.raises(InvalidObjectError, match=r"immutable|forbidden"):
        store.patch(kind, ns, name, patch)
    # a claim whose volumeName is set keeps it
    store.patch("PersistentVolumeClaim", "default", "c", {"spec": {"volumeName": "v"}})
    with pytest.raises(InvalidObjectError):
        store.patch("PersistentVolumeClaim", "default", "c", {"spec": {"volumeName": "w"}})


# The PV controller ------------------------------------------------------------------------


def run(
    objects: Sequence[Obj], *steps: Callable[[ObjectStore], object], delay: float = 0.0
) -> ObjectStore:
    """Create ``objects`` (uids kept), run the controller until it has nothing left to
    do, then each step, settling after each."""

    async def main() -> ObjectStore:
        clock = VirtualClock()
        store = ObjectStore(clock.wall)
        for obj in objects:
            store.create(fresh(obj) | {"metadata": obj["metadata"]}, restore=True)
        controller = SimVolumeController(store, clock, sync_delay=delay)
        async with anyio.create_task_group() as tg:
            await tg.start(controller.run)
            for step in (lambda _: None, *steps):
                step(store)
                await anyio.sleep(0)
                while controller.pending():
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        return store

    return run_virtual(main)


def get(store: ObjectStore, kind: str, name: str) -> Obj:
    ns = "default" if kind == "PersistentVolumeClaim" else ""
    return store.get(kind, ns, name)


def phase(store: ObjectStore, kind: str, name: str) -> str:
    return str(get(store, kind, name)["status"]["phase"])


def test_pvs_become_available_and_an_immediate_claim_binds_to_the_smallest_that_fits() -> None:
    store = run(
        [
            storage_class("fast", mode="Immediate", provisioner=PROVISIONER),
            pv("big", storage_class="fast", size="10Gi", csi=(PROVISIONER, "big")),
            pv("small", storage_class="fast", size="2Gi", csi=(PROVISIONER, "small")),
            pv("tiny", storage_class="fast", size="1Mi", csi=(PROVISIONER, "tiny")),
            pvc("c", storage_class="fast", size="1Gi"),
        ]
    )
    claim = get(store, "PersistentVolumeClaim", "c")
    assert claim["spec"]["volumeName"] == "small"
    assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    assert claim["status"]["phase"] == "Bound"
    assert claim["status"]["capacity"] == {"storage": "2Gi"}
    small = get(store, "PersistentVolume", "small")
    assert small["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    assert small["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] == "yes"
    assert (phase(store, "PersistentVolume", "small"), phase(store, "PersistentVolume", "big")) == (
        "Bound",
        "Available",
    )


def test_a_claim_waiting_for_its_first_consumer_binds_only_to_the_pv_the_scheduler_chose() -> None:
    def choose(store: ObjectStore) -> None:
        claim = get(store, "PersistentVolumeClaim", "c")
        store.patch(
            "PersistentVolume",
            "",
            "on-n2",
            {
                "spec": {
                    "claimRef": {
                        "namespace": "default",
                        "name": "c",
                        "uid": claim["metadata"]["uid"],
                    }
                }
            },
        )

    before = run([storage_class(), pv("on-n1", node="n1"), pv("on-n2", node="n2"), pvc("c")])
    assert phase(before, "PersistentVolumeClaim", "c") == "Pending"
    after = run([storage_class(), pv("on-n1", node="n1"), pv("on-n2", node="n2"), pvc("c")], choose)
    assert get(after, "PersistentVolumeClaim", "c")["spec"]["volumeName"] == "on-n2"
    assert phase(after, "PersistentVolume", "on-n1") == "Available"


def test_a_selected_node_gets_a_pv_provisioned_there_and_bound() -> None:
    def select(store: ObjectStore) -> None:
        store.patch(
            "PersistentVolumeClaim", "default", "c", {"metadata": {"annotations": {SELECTED: "n2"}}}
        )

    objects = [
        node("n2", labels={HOSTNAME: "host-2"}),
        storage_class("nvme", provisioner=PROVISIONER),
        pvc("c", storage_class="nvme", size="3Gi"),
    ]
    waiting = run(objects)
    assert "volume.kubernetes.io/storage-provisioner" not in (
        get(waiting, "PersistentVolumeClaim", "c")["metadata"].get("annotations") or {}
    )
    store = run(objects, select)
    claim = get(store, "PersistentVolumeClaim", "c")
    made = get(store, "PersistentVolume", claim["spec"]["volumeName"])
    assert (
        claim["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == PROVISIONER
    )
    assert made["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == PROVISIONER
    assert made["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": ["host-2"]}]}
    ]
    assert made["spec"]["csi"]["driver"] == PROVISIONER
    assert made["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert phase(store, "PersistentVolumeClaim", "c") == "Bound"


def test_a_provisioner_that_fails_removes_the_selected_node() -> None:
    klass = storage_class("nvme", provisioner=PROVISIONER)
    klass["metadata"]["annotations"] = {PROVISIONING_ANNOTATION: "fail"}
    store = run(
        [klass, pvc("c", storage_class="nvme")],
        lambda s: s.patch(
            "PersistentVolumeClaim", "default", "c", {"metadata": {"annotations": {SELECTED: "n1"}}}
        ),
    )
    claim = get(store, "PersistentVolumeClaim", "c")
    assert SELECTED not in claim["metadata"]["annotations"]
    assert phase(store, "PersistentVolumeClaim", "c") == "Pending"
    assert store.list("PersistentVolume")[0] == []


def test_a_slow_provisioner_takes_its_time() -> None:
    klass = storage_class("nvme", mode="Immediate", provisioner=PROVISIONER)
    klass["metadata"]["annotations"] = {PROVISIONING_ANNOTATION: "5s"}
    seen: list[float] = []

    async def main() -> None:
        clock = VirtualClock()
        store = ObjectStore(clock.wall)
        store.create(fresh(klass))
        store.subscribe(lambda ev: seen.append(clock.now()), kinds=("PersistentVolume",))
        controller = SimVolumeController(store, clock)
        async with anyio.create_task_group() as tg:
            await tg.start(controller.run)
            store.create(fresh(pvc("c", storage_class="nvme")))
            while not seen:
                await anyio.sleep(0.5)
            tg.cancel_scope.cancel()

    run_virtual(main)
    assert seen[0] == pytest.approx(5.0)


def test_a_claim_gone_releases_its_pv_or_deletes_a_provisioned_one() -> None:
    provisioned = pv("made", claim="default/c2", storage_class="nvme", csi=(PROVISIONER, "m"))
    provisioned["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": PROVISIONER}
    provisioned["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
    store = run(
        [
            pv("kept", claim="default/c1", csi=(PROVISIONER, "k")),
            pvc("c1", volume="kept", bound=True),
            provisioned,
            pvc("c2", volume="made", bound=True, storage_class="nvme"),
        ],
        lambda s: s.delete("PersistentVolumeClaim", "default", "c1"),
        lambda s: s.delete("PersistentVolumeClaim", "default", "c2"),
    )
    assert phase(store, "PersistentVolume", "kept") == "Released"
    assert store.try_get("PersistentVolume", "", "made") is None


def test_a_claim_in_use_stays_until_its_pod_is_gone() -> None:
    user = pod("p", node="n1", volumes=claim_volumes("c"))
    user["status"] = {"phase": "Running"}
    store = run(
        [
            storage_class(),
            pv("v", node="n1", claim="default/c"),
            pvc("c", volume="v", bound=True),
            user,
        ],
        lambda s: s.delete("PersistentVolumeClaim", "default", "c"),
    )
    assert get(store, "PersistentVolumeClaim", "c")["metadata"]["deletionTimestamp"]
    gone = run(
        [
            storage_class(),
            pv("v", node="n1", claim="default/c"),
            pvc("c", volume="v", bound=True),
            user,
        ],
        lambda s: s.delete("PersistentVolumeClaim", "default", "c"),
        lambda s: s.delete("Pod", "default", "p", grace_period_seconds=0),
    )
    assert gone.try_get("PersistentVolumeClaim", "default", "c") is None
    assert phase(gone, "PersistentVolume", "v") == "Released"


def test_a_claim_whose_pv_is_gone_is_lost() -> None:
    store = run(
        [pv("v", node="n1", claim="default/c"), pvc("c", volume="v", bound=True)],
        lambda s: s.patch("PersistentVolume", "", "v", {"metadata": {"finalizers": None}}),
        lambda s: s.delete("PersistentVolume", "", "v"),
    )
    assert phase(store, "PersistentVolumeClaim", "c") == "Lost"
