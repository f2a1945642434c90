"""The volume steps of a bind (issue 36 item 3), on the embedded cluster with its PV
controller: the writes of kube-scheduler's PreBind before the binding (a PV's claimRef
for a static match, a claim's selected-node for provisioning), the wait until the PV
controller has bound the claims, with a timeout and a reason; a refused or conflicting
write, a lost reply read back, a pod deleted while it waits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from scheduler import app
from scheduler.api.errors import AmbiguousError, ApiError, ServerError
from scheduler.api.volumes.prebind import ClaimTarget
from scheduler.config import PluginConfig, SchedulerConfiguration, TierConfig
from scheduler.logging import quiet
from scheduler.ports import ClusterPorts, VolumeWriter
from scheduler.sim.backend import SimBackend
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import load_scenario
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualTimeLoop
from scheduler.sim.volume_controller import PROVISIONING_ANNOTATION
from tests.builders import HOSTNAME, node, pod
from tests.volume_builders import claim_volumes, pv, pvc, storage_class

Obj = dict[str, Any]
LOST = AmbiguousError("HTTP 504 Timeout: the request did not complete")
PROVISIONER = "csi.example.com"


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet()


@dataclass
class FaultyVolumes:
    """The embedded cluster's VolumeWriter, with faults: ``before[call]`` runs before the
    next such call (``bind_volume`` or ``select_node``) with the store and the PV's or
    claim's name; ``fail[call]``
    raises instead of the next such call, ``lose[call]`` after it landed."""

    inner: VolumeWriter
    store: ObjectStore
    before: dict[str, list[Callable[[ObjectStore, str], None]]] = field(default_factory=dict)
    fail: dict[str, list[ApiError]] = field(default_factory=dict)
    lose: dict[str, list[ApiError]] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    """Seconds of clock time each such call takes."""
    calls: list[str] = field(default_factory=list)
    reads: int = 0

    async def _faults(self, call: str, name: str, write: Any) -> str:
        self.calls.append(call)
        if self.before.get(call):
            self.before[call].pop(0)(self.store, name)
        if self.latency.get(call):
            await anyio.sleep(self.latency[call])
        if self.fail.get(call):
            raise self.fail[call].pop(0)
        version = await write()
        if self.lose.get(call):
            raise self.lose[call].pop(0)
        return str(version)

    async def bind_volume(
        self, volume: str, claim: ClaimTarget, resource_version: str, *, by_controller: bool
    ) -> str:
        return await self._faults(
            "bind_volume",
            volume,
            lambda: self.inner.bind_volume(
                volume, claim, resource_version, by_controller=by_controller
            ),
        )

    async def select_node(self, claim: ClaimTarget, node: str, resource_version: str) -> str:
        return await self._faults(
            "select_node", claim.name, lambda: self.inner.select_node(claim, node, resource_version)
        )

    async def read_volume(self, name: str) -> Any:
        self.reads += 1
        return await self.inner.read_volume(name)

    async def read_volume_claim(self, namespace: str, name: str) -> Any:
        self.reads += 1
        return await self.inner.read_volume_claim(namespace, name)


def config(timeout: int = 600) -> SchedulerConfiguration:
    """The defaults, with volumebinding's ``bindTimeoutSeconds``."""
    base = SchedulerConfiguration()
    tiers = tuple(
        TierConfig(
            tuple(
                PluginConfig(p.name, {"bindTimeoutSeconds": timeout})
                if p.name == "volumebinding"
                else p
                for p in t.plugins
            )
        )
        for t in base.tiers
    )
    return dataclasses.replace(base, tiers=tiers)


@dataclass
class Run:
    sim: Simulation
    volumes: FaultyVolumes

    def claim(self, name: str) -> Obj:
        return self.sim.store.get("PersistentVolumeClaim", "default", name)

    def condition(self, name: str) -> str:
        got = self.sim.store.get("Pod", "default", name)
        for c in (got.get("status") or {}).get("conditions") or ():
            if c.get("type") == "PodScheduled":
                return str(c.get("message") or "")
        return ""

    def events(self, name: str) -> list[str]:
        return [
            str(e.get("note"))
            for e in self.sim.store.list("Event")[0]
            if (e.get("regarding") or {}).get("name") == name
        ]


def simulate(
    objects: list[Obj],
    tmp_path: Path,
    *,
    faults: Callable[[FaultyVolumes], None] = lambda v: None,
    timeout: int = 600,
    until: float = 120.0,
    after: Callable[[Simulation], None] | None = None,
) -> Run:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    resolved = app.resolve(config(timeout))
    made: list[FaultyVolumes] = []

    def build(cache: Any, ports: ClusterPorts) -> Any:
        backend = ports.volumes
        assert isinstance(backend, SimBackend)
        volumes = FaultyVolumes(backend, backend.store)
        faults(volumes)
        made.append(volumes)
        return app.build_loop(resolved, cache, dataclasses.replace(ports, volumes=volumes))

    sim = Simulation(load_scenario([str(path)]), build, until=until)
    if after is not None:
        after(sim)
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    return Run(sim, made[0])


def nodes() -> list[Obj]:
    return [node(n, labels={HOSTNAME: n}) for n in ("n1", "n2")]


def vpod(name: str, *claims: str) -> Obj:
    return pod(name, volumes=claim_volumes(*claims))


def user(obj: Obj) -> Obj:
    """``obj`` as a user writes it (no status, uid, resourceVersion)."""
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {
        k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")
    }
    return out


def local_cluster(*extra: Obj) -> list[Obj]:
    """n1 and n2, class ``local`` (WaitForFirstConsumer), one local PV on n2, claim c."""
    return [
        *nodes(),
        storage_class(),
        user(pv("on-n2", node="n2")),
        user(pvc("c")),
        *extra,
    ]


def provisioned_cluster(setting: str = "", *extra: Obj) -> list[Obj]:
    """n1 and n2, class ``nvme`` (WaitForFirstConsumer, provisioned), claim c."""
    klass = storage_class("nvme", provisioner=PROVISIONER)
    if setting:
        klass["metadata"]["annotations"] = {PROVISIONING_ANNOTATION: setting}
    return [*nodes(), klass, user(pvc("c", storage_class="nvme")), *extra]


def test_a_static_match_writes_the_claim_ref_then_binds_once_the_claim_is_bound(
    tmp_path: Path,
) -> None:
    order: list[str] = []

    def watch(sim: Simulation) -> None:
        def seen(ev: Any) -> None:
            if ev.kind == "PersistentVolumeClaim" and ev.obj["spec"].get("volumeName"):
                order.append("claim bound")
            elif ev.kind == "Pod" and ev.obj["spec"].get("nodeName"):
                order.append("pod bound")

        sim.store.subscribe(seen)

    run = simulate(local_cluster(vpod("p", "c")), tmp_path, after=watch)
    assert run.sim.result.bindings == {"default/p": "n2"}
    assert run.volumes.calls == ["bind_volume"]
    assert run.claim("c")["spec"]["volumeName"] == "on-n2"
    assert order.index("claim bound") < order.index("pod bound")


def test_provisioning_annotates_the_claim_and_binds_once_a_pv_was_made_there(
    tmp_path: Path,
) -> None:
    run = simulate(provisioned_cluster("3s", vpod("p", "c")), tmp_path)
    (node_name,) = run.sim.result.bindings.values()
    claim = run.claim("c")
    assert run.volumes.calls == ["select_node"]
    assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node_name
    made = run.sim.store.get("PersistentVolume", "", claim["spec"]["volumeName"])
    terms = made["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [node_name]
    bound_at = next(e["t"] for e in run.sim.result.timeline if e.get("event") == "bind")
    assert bound_at >= 3.0  # after the provisioner took its time


def test_a_wait_past_the_timeout_says_so_forgets_the_bind_and_tries_again(
    tmp_path: Path,
) -> None:
    run = simulate(provisioned_cluster("50s", vpod("p", "c")), tmp_path, timeout=20)
    events = run.events("p")
    assert any(
        "timed out after 20s waiting for the PV controller to bind PersistentVolumeClaim(s) "
        "default/c" in e
        for e in events
    ), events
    # the claim keeps its selected node: the pod is bound there once the PV is made
    node_name = run.claim("c")["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    assert run.sim.result.bindings == {"default/p": node_name}
    bound_at = next(e["t"] for e in run.sim.result.timeline if e.get("event") == "bind")
    assert bound_at >= 50.0


def test_a_provisioner_that_gives_up_makes_the_pod_say_so(tmp_path: Path) -> None:
    run = simulate(provisioned_cluster("fail", vpod("p", "c")), tmp_path, until=30.0)
    assert run.sim.result.bindings == {}
    assert "provisioning failed for PersistentVolumeClaim default/c" in run.condition("p")


def test_a_refused_write_says_why_and_the_pod_is_tried_again(tmp_path: Path) -> None:
    run = simulate(
        local_cluster(vpod("p", "c")),
        tmp_path,
        faults=lambda v: v.fail.update(bind_volume=[ServerError("injected refusal")]),
    )
    assert run.sim.result.bindings == {"default/p": "n2"}
    assert run.volumes.calls == ["bind_volume", "bind_volume"]
    assert any(
        "Binding rejected: writing PersistentVolume on-n2: injected refusal" in e
        for e in run.events("p")
    )


def test_a_pv_taken_meanwhile_is_not_taken_over(tmp_path: Path) -> None:
    """The PV chosen changed between the cycle and the write (another claim got it): the
    write is refused by its resourceVersion and the pod goes to the other PV."""
    taken: list[str] = []

    def take(store: ObjectStore, volume: str) -> None:
        other = store.get("PersistentVolumeClaim", "default", "other")
        ref = {"namespace": "default", "name": "other", "uid": other["metadata"]["uid"]}
        store.patch("PersistentVolume", "", volume, {"spec": {"claimRef": ref}})
        taken.append(volume)

    run = simulate(
        local_cluster(user(pv("on-n1", node="n1")), user(pvc("other")), vpod("p", "c")),
        tmp_path,
        faults=lambda v: v.before.update(bind_volume=[take]),
    )
    (first,) = taken
    second = "on-n1" if first == "on-n2" else "on-n2"
    assert run.volumes.calls == ["bind_volume", "bind_volume"]
    assert run.sim.store.get("PersistentVolume", "", first)["spec"]["claimRef"]["name"] == "other"
    assert run.claim("c")["spec"]["volumeName"] == second
    assert run.sim.result.bindings == {"default/p": second[-2:]}


@pytest.mark.parametrize("landed", [True, False], ids=["took-effect", "did-not"])
def test_a_lost_reply_is_read_back(tmp_path: Path, landed: bool) -> None:
    def faults(v: FaultyVolumes) -> None:
        if landed:
            v.lose["bind_volume"] = [LOST]
        else:
            v.fail["bind_volume"] = [LOST]

    run = simulate(local_cluster(vpod("p", "c")), tmp_path, faults=faults)
    assert run.sim.result.bindings == {"default/p": "n2"}
    assert run.volumes.reads >= 1
    # taken effect: one write; not: written again by the next attempt
    assert run.volumes.calls == ["bind_volume"] * (1 if landed else 2)


def test_a_pod_deleted_while_it_waits_is_not_bound(tmp_path: Path) -> None:
    objects = provisioned_cluster("30s", vpod("p", "c"))
    objects[-1]["metadata"]["annotations"] = {"sim.sluice.dev/departure": "5s"}
    run = simulate(objects, tmp_path)
    assert run.sim.result.bindings == {}
    assert run.volumes.calls == ["select_node"]


def test_two_pods_of_one_claim_make_its_write_once(tmp_path: Path) -> None:
    """A gang's two members share one ReadWriteMany claim: both binds carry the same
    claimRef write; it is made once (the second would meet a conflict) and both pods go
    where its PV is."""
    shared = user(pvc("c", modes=("ReadWriteMany",)))
    volume = user(pv("on-n2", node="n2", modes=("ReadWriteMany",)))
    gang = {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 2},
    }
    members = [vpod(f"w-{i}", "c") for i in range(2)]
    for m in members:
        m["metadata"]["labels"] = {"scheduling.sluice.dev/pod-group": "g"}
    run = simulate(
        [*nodes(), storage_class(), volume, shared, gang, *members],
        tmp_path,
        faults=lambda v: v.latency.update(bind_volume=1.0),
    )
    assert run.sim.result.bindings == {"default/w-0": "n2", "default/w-1": "n2"}
    assert run.volumes.calls == ["bind_volume"]
    assert not any("Binding rejected" in e for p in ("w-0", "w-1") for e in run.events(p))
