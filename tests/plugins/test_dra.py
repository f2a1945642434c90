"""Tests of scheduler.plugins.dra: claims found as kube-scheduler finds them, the filter's
reasons, allocation on placement (undone by rollback), shared claims, pinning, and the
claim writes handed to the bind."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.dra.model import FINALIZER
from scheduler.config import PluginConfig
from scheduler.framework.effects import Bind, EvictReason
from scheduler.framework.session import Session
from scheduler.plugins.dra import DraPlugin
from tests.builders import cached_session, node, pod, task_of
from tests.dra_builders import (
    claim,
    claim_template,
    claims_spec,
    device_class,
    gpus,
    request,
    resource_slice,
)

Obj = dict[str, Any]
PLUGINS = [PluginConfig("predicates"), PluginConfig("dra")]


def gpu_pod(name: str, *claims: str, templates: tuple[str, ...] = (), **kw: Any) -> Obj:
    return pod(name, resourceClaims=claims_spec(*claims, templates=templates), **kw)


def cluster(*extra: Obj, devices: int = 1) -> list[Obj]:
    """n1 with ``devices`` GPUs, n2 with none, the GPU class."""
    return [
        node("n1"),
        node("n2"),
        device_class(),
        resource_slice("n1-gpu", gpus(devices), node="n1"),
        *extra,
    ]


def open_(objects: list[Obj]) -> Session:
    return cached_session(objects, PLUGINS)


def plugin(session: Session) -> DraPlugin:
    return next(p for _, p in session.plugins if isinstance(p, DraPlugin))


def fit_text(session: Session, name: str, releasing: bool = False) -> str:
    return session.fit(task_of(session, name), releasing=releasing).explain()


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        pytest.param(
            cluster(gpu_pod("p", "c")),
            "0/2 nodes are available: 2 waiting for ResourceClaim default/c to be created.",
            id="claim-missing",
        ),
        pytest.param(
            cluster(claim_template("t"), gpu_pod("p", templates=("t",))),
            "0/2 nodes are available: 2 waiting for the ResourceClaim of pod claim 't' "
            "(template t) to be created.",
            id="template-claim-not-made-yet",
        ),
        pytest.param(
            cluster(claim("c"), gpu_pod("p", "c")),
            "1/2 nodes are available: 1 cannot allocate claim default/c, request gpu, class "
            "gpu.example.com: no matching device.",
            id="one-node-has-devices",
        ),
        pytest.param(
            cluster(claim("c", request(count=2)), gpu_pod("p", "c")),
            "0/2 nodes are available: 2 cannot allocate claim default/c, request gpu, class "
            "gpu.example.com: no matching device.",
            id="too-few-devices",
        ),
        pytest.param(
            cluster(claim("c", request(device_class="nope")), gpu_pod("p", "c")),
            "0/2 nodes are available: 2 ResourceClaim default/c, request gpu: DeviceClass nope "
            "does not exist.",
            id="class-missing",
        ),
        pytest.param(
            cluster(claim("c", request(selectors=["device.driver =="])), gpu_pod("p", "c")),
            "CEL compile error",
            id="selector-does-not-compile",
        ),
        pytest.param(
            cluster(claim("c", allocated=[("gpu", "gpu-0")], node="n2"), gpu_pod("p", "c")),
            "1/2 nodes are available: 1 node(s) did not match the allocation of "
            "ResourceClaim default/c.",
            id="allocated-claim-pins-its-pods",
        ),
        pytest.param(
            cluster(
                claim("c", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["q"]),
                claim("d"),
                pod("q", node="n1", resourceClaims=claims_spec("c")),
                gpu_pod("p", "d"),
            ),
            "0/2 nodes are available: 1 cannot allocate claim default/d, request gpu, class "
            "gpu.example.com: matching devices are in use, 1 cannot allocate claim default/d, "
            "request gpu, class gpu.example.com: no matching device.",
            id="device-held-by-a-running-pod",
        ),
    ],
)
def test_filter_reasons(objects: list[Obj], expected: str) -> None:
    session = open_(objects)
    assert expected in fit_text(session, "p")


def test_claim_of_another_pod_from_a_template_is_refused() -> None:
    raw = gpu_pod("p", templates=("t",))
    raw["status"]["resourceClaimStatuses"] = [{"name": "t", "resourceClaimName": "p-t-abcde"}]
    session = open_(cluster(claim_template("t"), claim("p-t-abcde", owner_pod="other"), raw))
    assert "was not created for this pod" in fit_text(session, "p")


def test_claim_made_from_a_template_is_found_through_the_pod_status() -> None:
    raw = gpu_pod("p", templates=("t",))
    raw["status"]["resourceClaimStatuses"] = [{"name": "t", "resourceClaimName": "p-t-abcde"}]
    session = open_(cluster(claim_template("t"), claim("p-t-abcde", owner_pod="p"), raw))
    assert fit_text(session, "p").startswith("1/2 nodes are available")


def test_placement_allocates_distinct_devices_and_rollback_frees_them() -> None:
    session = open_(
        cluster(claim("a"), claim("b"), gpu_pod("p", "a"), gpu_pod("q", "b"), devices=2)
    )
    dra = plugin(session)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        stmt.allocate(task_of(session, "q"), "n1")
        got = [dra.allocation(k) for k in ("default/a", "default/b")]
        assert [a.results[0].id.device for a in got if a] == ["gpu-0", "gpu-1"]
        stmt.discard()
    assert dra.allocation("default/a") is None and dra.allocation("default/b") is None
    assert fit_text(session, "q").startswith("1/2")


def test_second_pod_waits_for_the_only_device() -> None:
    session = open_(cluster(claim("a"), claim("b"), gpu_pod("p", "a"), gpu_pod("q", "b")))
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        assert "matching devices are in use" in fit_text(session, "q")


def test_bind_carries_the_allocation_and_the_reservation() -> None:
    session = open_(cluster(claim("a"), gpu_pod("p", "a")))
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind)
    (binding,) = effect.claims
    assert (binding.key, binding.pod_name, binding.pod_uid) == ("default/a", "p", "default/p")
    assert binding.allocation is not None and binding.add_finalizer
    assert [str(d) for d in binding.allocation.devices] == ["gpu.example.com/n1/gpu-0"]
    assert binding.allocation.node_name == "n1"
    assert FINALIZER == "resource.kubernetes.io/delete-protection"


def test_shared_claim_is_allocated_once_and_pins_its_other_pods() -> None:
    session = open_(cluster(claim("shared"), gpu_pod("p", "shared"), gpu_pod("q", "shared")))
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        assert fit_text(session, "q") == (
            "1/2 nodes are available: 1 node(s) did not match the allocation of "
            "ResourceClaim default/shared."
        )
        stmt.allocate(task_of(session, "q"), "n1")
        bind_p, bind_q = stmt.commit()
    assert isinstance(bind_p, Bind) and isinstance(bind_q, Bind)
    assert bind_p.claims[0].allocation == bind_q.claims[0].allocation
    assert plugin(session).holders("default/shared") == {"default/p", "default/q"}


def test_claim_already_reserved_for_the_pod_writes_nothing() -> None:
    objects = cluster(
        claim("a", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["p"]), gpu_pod("p", "a")
    )
    session = open_(objects)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind) and effect.claims == ()


def test_allocated_claim_of_another_pod_is_reserved_for_this_one_too() -> None:
    objects = cluster(
        claim("a", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["q"]),
        pod("q", node="n1", resourceClaims=claims_spec("a")),
        gpu_pod("p", "a"),
    )
    session = open_(objects)
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        (effect,) = stmt.commit()
    assert isinstance(effect, Bind)
    (binding,) = effect.claims
    assert binding.allocation is None and not binding.add_finalizer


def test_victims_devices_count_as_released_for_the_preemptor() -> None:
    objects = cluster(
        claim("v", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["victim"]),
        claim("c"),
        pod("victim", node="n1", resourceClaims=claims_spec("v")),
        gpu_pod("p", "c", priority=100),
    )
    session = open_(objects)
    with session.statement() as stmt:
        stmt.evict(task_of(session, "victim"), EvictReason.PREEMPTED)
        assert "matching devices are in use" in fit_text(session, "p")
        assert fit_text(session, "p", releasing=True).startswith("1/2")
        stmt.pipeline(task_of(session, "p"), "n1")
        alloc = plugin(session).allocation("default/c")
        assert alloc is not None and [r.id.device for r in alloc.results] == ["gpu-0"]


def test_no_dra_objects_costs_nothing_for_pods_without_claims() -> None:
    session = cached_session([node("n1"), pod("p")], PLUGINS)
    assert fit_text(session, "p") == "1/1 nodes are available."


def test_a_nominated_preemptor_is_given_the_devices_its_victim_releases() -> None:
    """Next cycle, after the preemption: the victim releasing, the preemptor nominated;
    the preemptor's claim is allocated in the session on the victim's device (kept for it
    against pods of lower priority), not left without devices."""
    from scheduler.app import builtin_registry
    from scheduler.config import SchedulerConfiguration, TierConfig
    from scheduler.framework.effects import Evict, Nominate, Preemption
    from scheduler.framework.session import open_session
    from tests.builders import cache_with

    cache = cache_with(
        *cluster(
            claim("v", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["victim"]),
            claim("c"),
            claim("other"),
        ),
        pod("victim", node="n1", resourceClaims=claims_spec("v")),
        gpu_pod("p", "c", priority=100),
        gpu_pod("low", "other", priority=1),
    )
    victim, preemptor = cache.tasks["default/victim"], cache.tasks["default/p"]
    evict = Evict(victim.clone(), "n1", EvictReason.PREEMPTED, preemptor=preemptor.clone())
    cache.assume(Preemption((Nominate(preemptor.clone(), "n1"),), (evict,)))
    config = SchedulerConfiguration(actions=(), tiers=(TierConfig(tuple(PLUGINS)),))
    session = open_session(cache.snapshot(), builtin_registry().resolve(config))
    alloc = plugin(session).allocation("default/c")
    assert alloc is not None and [r.id.device for r in alloc.results] == ["gpu-0"]
    assert "matching devices are in use" in fit_text(session, "low", releasing=True)


def _nominated_after_preemption(*, victim_claim_released: bool) -> Session:
    """The cycle after a preemption: the victim gone or releasing, the preemptor nominated
    to n1; the victim's claim still allocated, or released by the claim controller."""
    from scheduler.app import builtin_registry
    from scheduler.config import SchedulerConfiguration, TierConfig
    from scheduler.framework.effects import Evict, Nominate, Preemption
    from scheduler.framework.session import open_session
    from tests.builders import cache_with

    held = claim("v", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["victim"])
    cache = cache_with(
        *cluster(held, claim("c")),
        pod("victim", node="n1", resourceClaims=claims_spec("v")),
        gpu_pod("p", "c", priority=100),
    )
    victim, preemptor = cache.tasks["default/victim"], cache.tasks["default/p"]
    evict = Evict(victim.clone(), "n1", EvictReason.PREEMPTED, preemptor=preemptor.clone())
    cache.assume(Preemption((Nominate(preemptor.clone(), "n1"),), (evict,)))
    if victim_claim_released:
        cache.handle(
            "Pod",
            "DELETED",
            {
                "kind": "Pod",
                "metadata": {"name": "victim", "namespace": "default", "uid": "default/victim"},
            },
        )
        cache.handle("ResourceClaim", "MODIFIED", claim("v"))
    config = SchedulerConfiguration(actions=(), tiers=(TierConfig(tuple(PLUGINS)),))
    return open_session(cache.snapshot(), builtin_registry().resolve(config))


@pytest.mark.parametrize("released", [False, True], ids=["victim-holds-it", "released"])
def test_a_nominated_preemptor_is_bound_only_once_its_victims_device_is_released(
    released: bool,
) -> None:
    session = _nominated_after_preemption(victim_claim_released=released)
    fits = session.fit(task_of(session, "p")).feasible[session.table.row["n1"]]
    assert bool(fits) is released
    if released:
        with session.statement() as stmt:
            stmt.allocate(task_of(session, "p"), "n1")
            (effect,) = stmt.commit()
        assert isinstance(effect, Bind)
        (binding,) = effect.claims
        assert binding.allocation is not None
        assert [r.id.device for r in binding.allocation.results] == ["gpu-0"]


def test_a_pod_whose_claim_could_not_be_allocated_is_never_bound_without_it() -> None:
    from scheduler.api.errors import PluginError

    session = open_(cluster(claim("a"), claim("b"), gpu_pod("p", "a"), gpu_pod("q", "b")))
    with session.statement() as stmt:
        stmt.allocate(task_of(session, "p"), "n1")
        stmt.allocate(task_of(session, "q"), "n1")  # no filter asked: no device left
        with pytest.raises(PluginError, match="not allocated"):
            stmt.commit()


def test_a_claim_that_cannot_be_read_is_named_with_why() -> None:
    bad = claim("c", request(count=0))  # count 0: refused, as the API server would
    session = open_(cluster(bad, gpu_pod("p", "c")))
    text = fit_text(session, "p")
    assert "ResourceClaim default/c cannot be read" in text
    assert "count: must be at least 1" in text


A100 = 'device.attributes["gpu.example.com"].model == "a100"'


@pytest.mark.parametrize(
    ("models", "scores", "chosen"),
    [
        pytest.param(
            {"n1": "h100", "n2": "a100"}, [87.5, 100.0], "n2", id="first-alternative-wins"
        ),
        pytest.param({"n1": "a100", "n2": "a100"}, [100.0, 100.0], "n1", id="both-alike"),
    ],
)
def test_nodes_giving_earlier_alternatives_score_higher(
    models: dict[str, str], scores: list[float], chosen: str
) -> None:
    """kube-scheduler's DRA score: per firstAvailable request, 8 less the index of the
    alternative a node would give (an a100 first: 8; any GPU: 7), normalized to 100 over
    the rows scored; the node giving the first alternative is chosen."""
    import numpy as np

    from tests.dra_builders import first_available

    objects = [
        node("n1"),
        node("n2"),
        device_class(),
        *[resource_slice(f"{n}-gpu", gpus(1, model=m), node=n) for n, m in models.items()],
        claim("c", first_available("gpu", request("a100", selectors=[A100]), request("any"))),
        gpu_pod("p", "c"),
    ]
    session = open_(objects)
    task = task_of(session, "p")
    got = plugin(session).score(task, session.table, np.arange(len(session.table)), False)
    assert got.tolist() == scores
    picked = session.select_node(task, session.fit(task))
    assert picked is not None and picked.name == chosen
