"""The cache's DRA objects: claim writes assumed until the events show them (or known not
to have landed), the inventory rebuilt only when slices or classes change, and pods told
when no claim holds devices for them any more."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler.api.dra.codec import claim_from_object
from scheduler.api.dra.model import (
    EXTENDED_CLAIM_ANNOTATION,
    Allocation,
    ClaimBinding,
    DeviceID,
    DeviceRequest,
    DeviceResult,
    ExtendedClaim,
    RequestMapping,
    Subrequest,
)
from scheduler.cache.dra_store import DraStore
from tests.dra_builders import claim, device_class, gpus, resource_slice

Obj = dict[str, Any]


def store_with(*objects: Obj) -> DraStore:
    store = DraStore()
    for obj in objects:
        store.handle(obj["kind"], "ADDED", obj)
    return store


def binding(pod: str = "p", device: str = "gpu-0") -> ClaimBinding:
    allocation = Allocation((DeviceResult("gpu", DeviceID("gpu.example.com", "n1", device)),))
    return ClaimBinding("default", "c", "claim-default-c", pod, f"default/{pod}", allocation, True)


def view_claim(store: DraStore) -> Any:
    view = store.view()
    assert view is not None
    return view.claims["default/c"]


@pytest.mark.parametrize(
    ("event", "landed", "assumed_after"),
    [
        pytest.param(None, False, True, id="no-event-yet"),
        pytest.param(claim("c"), False, True, id="older-event-keeps-it"),
        pytest.param(claim("c"), True, False, id="landed-next-event-drops-it"),
        pytest.param(
            claim("c", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["p"]),
            False,
            False,
            id="shown-by-the-event",
        ),
    ],
)
def test_an_assumed_write_lasts_until_the_events_show_it(
    event: Obj | None, landed: bool, assumed_after: bool
) -> None:
    store = store_with(claim("c"))
    b = binding()
    store.assume(b)
    assert view_claim(store).allocation == b.allocation
    assert view_claim(store).reserved_for_pod("default/p")
    if landed:
        store.landed(b)
    if event is not None:
        store.handle("ResourceClaim", "MODIFIED", event)
    assert store.assumed("default/c") is assumed_after


def test_forget_undoes_a_write_that_did_not_land_but_not_one_that_did() -> None:
    store = store_with(claim("c"))
    b = binding()
    store.assume(b)
    store.forget(b)
    assert view_claim(store).allocation is None
    store.assume(b)
    store.landed(b)
    store.forget(b)
    assert view_claim(store).allocation == b.allocation, "it landed: kept"


def test_pods_are_told_when_their_devices_are_released() -> None:
    store = store_with(claim("c", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["p", "q"]))
    released: list[str] = []
    store.on_released = released.append
    assert store.holds_devices("default/p")
    store.handle(
        "ResourceClaim",
        "MODIFIED",
        claim("c", allocated=[("gpu", "gpu-0")], node="n1", reserved_for=["q"]),
    )
    assert released == ["default/p"]
    store.handle("ResourceClaim", "MODIFIED", claim("c"))
    assert released == ["default/p", "default/q"]
    assert not store.holds_devices("default/q")


def test_the_inventory_is_rebuilt_only_when_slices_or_classes_change() -> None:
    store = store_with(device_class(), resource_slice("s", gpus(2), node="n1"), claim("c"))
    first = store.inventory()
    store.handle("ResourceClaim", "MODIFIED", claim("c", allocated=[("gpu", "gpu-0")], node="n1"))
    assert store.inventory() is first
    store.handle("ResourceSlice", "MODIFIED", resource_slice("s", gpus(3), node="n1"))
    assert store.inventory() is not first and len(store.inventory()) == 3


@pytest.mark.parametrize(
    ("before", "after", "wakes"),
    [
        pytest.param(None, claim("c"), True, id="new-claim"),
        pytest.param(
            claim("c"), claim("c", allocated=[("gpu", "gpu-0")], node="n1"), False, id="allocated"
        ),
        pytest.param(
            claim("c", allocated=[("gpu", "gpu-0")], node="n1"), claim("c"), True, id="released"
        ),
    ],
)
def test_which_claim_events_may_help_a_waiting_pod(
    before: Obj | None, after: Obj, wakes: bool
) -> None:
    store = store_with(*([before] if before else []))
    assert store.handle("ResourceClaim", "MODIFIED" if before else "ADDED", after) is wakes
    assert claim_from_object(after).key == "default/c"


def test_a_pod_told_the_name_of_its_claim_is_news_for_its_job() -> None:
    """The claim controller creates the claim, then names it in the pod's status: a job
    parked while it waited ("waiting for the ResourceClaim ... to be created") must be
    tried again then, not after parking's timeout."""
    from tests.builders import cache_with, pod
    from tests.dra_builders import claims_spec

    raw = pod("p", resourceClaims=claims_spec(templates=["t"]))
    cache = cache_with(raw)
    cache.take_fresh_jobs()
    generation = cache.generation
    named = {
        **raw,
        "status": {
            **raw["status"],
            "resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-x"}],
        },
    }
    cache.handle("Pod", "MODIFIED", named)
    assert cache.take_fresh_jobs() == {"default/p"}
    assert cache.generation == generation, "news for its own job only"
    cache.handle("Pod", "MODIFIED", named)
    assert cache.take_fresh_jobs() == set()


# Extended resources served by DRA (KEP-5004) ------------------------------------------------


def extended_binding() -> ClaimBinding:
    """The write of p's extended-resource claim, before the claim exists."""
    allocation = Allocation(
        (DeviceResult("container-0-request-0", DeviceID("gpu.example.com", "n1", "gpu-0")),)
    )
    made = ExtendedClaim(
        (DeviceRequest("container-0-request-0", Subrequest("x", "gpu.example.com")),),
        (RequestMapping("main", "example.com/gpu", "container-0-request-0"),),
    )
    return ClaimBinding("default", "", "", "p", "default/p", allocation, True, extended=made)


def made_claim(**status: Any) -> Obj:
    """The claim the loop created for p (``allocated``/``reserved_for`` as for claim())."""
    out = claim("p-extended-resources-abcde", owner_pod="p", **status)
    out["metadata"]["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
    return out


CREATED = "default/p-extended-resources-abcde"
ASSUMED = "default/<extended-resources>/default/p"


@pytest.mark.parametrize(
    ("events", "landed", "shown"),
    [
        pytest.param([], False, ASSUMED, id="assumed-before-it-exists"),
        pytest.param([("ADDED", made_claim())], True, ASSUMED, id="created-not-written-yet"),
        pytest.param(
            [
                ("ADDED", made_claim()),
                ("MODIFIED", made_claim(allocated=[("r", "gpu-0")], node="n1")),
            ],
            True,
            ASSUMED,
            id="allocated-not-reserved-yet",
        ),
        pytest.param(
            [("MODIFIED", made_claim(allocated=[("r", "gpu-0")], node="n1", reserved_for=["p"]))],
            True,
            CREATED,
            id="shown-allocated-and-reserved",
        ),
        pytest.param(
            [("ADDED", made_claim()), ("DELETED", made_claim())], True, None, id="created-deleted"
        ),
    ],
)
def test_an_extended_claim_is_assumed_until_the_events_show_it(
    events: list[tuple[str, Obj]], landed: bool, shown: str | None
) -> None:
    store = store_with(device_class())
    b = extended_binding()
    store.assume(b)
    if landed:
        store.landed(replace(b, name="p-extended-resources-abcde", uid="claim-x"))
    for event, obj in events:
        store.handle("ResourceClaim", event, obj)
    view = store.view()
    assert view is not None
    assert view.extended_claims.get("default/p") == shown
    if shown == ASSUMED:
        assumed = view.claims[ASSUMED]
        assert assumed.allocation == b.allocation and assumed.reserved_for_pod("default/p")


def test_forget_drops_an_extended_claim_that_was_never_written() -> None:
    store = store_with(device_class())
    b = extended_binding()
    store.assume(b)
    store.forget(b)
    view = store.view()
    assert view is not None and view.extended_claims == {} and ASSUMED not in view.claims


def test_snapshot_nodes_count_the_devices_serving_an_extended_resource() -> None:
    """A node whose own allocatable lacks example.com/gpu counts the devices of the class
    naming it as its allocatable (while a pod asks it); when the class goes, the copy
    reused by the next snapshot gets its own allocatable back."""
    from tests.builders import cache_with, node, pod

    requests = {"cpu": "100m", "example.com/gpu": "1"}
    asking = pod("p", containers=[{"name": "main", "resources": {"requests": requests}}])
    own = node("own")
    own["status"]["allocatable"]["example.com/gpu"] = "4"
    cls = device_class(extended_resource="example.com/gpu")
    cache = cache_with(node("dra"), own, cls, resource_slice("s", gpus(3), node="dra"), asking)
    snap = cache.snapshot()
    assert {n: x.allocatable.get("example.com/gpu", 0) for n, x in snap.nodes.items()} == {
        "dra": 3,
        "own": 4,
    }
    assert snap.dra is not None and snap.dra.extended == {
        "dra": {"example.com/gpu": cls["metadata"]["name"]}
    }
    cache.handle("DeviceClass", "DELETED", cls)
    again = cache.snapshot()
    assert again.nodes["dra"].allocatable.get("example.com/gpu", 0) == 0
    assert cache.full_snapshot().nodes["dra"].allocatable == again.nodes["dra"].allocatable
