"""Status never goes back in time (issue 40 point 3): a status write for one object
never lands after a newer one, whatever the calls' latency, lost replies or a failover.

A real-server run saw a gang's PodGroup condition return to an older message after a
newer one. This plays it end to end on the embedded cluster, with a fake at the I/O
boundary for what the cluster alone cannot play (a write that the server applies after
its client gave up on it); the dispatcher's tests (tests/dispatch/test_dispatcher.py)
play the other ways, one each (concurrent writes, a lost reply written again, a failover)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import anyio

from scheduler import app
from scheduler.api.errors import ApiError, ServerError
from scheduler.logging import quiet
from scheduler.ports import ObjectRef, StatusWriter
from scheduler.sim.runner import Simulation
from scheduler.sim.scenario import Arrival, Scenario
from scheduler.sim.store import ObjectStore
from scheduler.sim.virtual_time import VirtualTimeLoop
from tests.builders import node, pod, pod_group


class LateFirstWrite:
    """A StatusWriter whose first PodGroup status write fails at once for its caller (a
    lost reply: the client timed out) and reaches the store ``delay`` seconds later, as
    a request the API server was still working on. Every other call goes through."""

    def __init__(self, inner: StatusWriter, store: ObjectStore, delay: float) -> None:
        self.inner = inner
        self.store = store
        self.delay = delay
        self.late: list[tuple[Mapping[str, Any], str]] = []
        """Each late write as it reached the store: its status, and what the store said."""
        self._held = False

    async def patch_pod_status(self, pod: ObjectRef, patch: Mapping[str, Any]) -> None:
        await self.inner.patch_pod_status(pod, patch)

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any], **kw: Any) -> Any:
        if self._held or ref.kind != "PodGroup":
            return await self.inner.patch_status(ref, status, **kw)
        self._held = True
        meta: dict[str, Any] = {"uid": ref.uid}
        if kw.get("resource_version"):
            meta["resourceVersion"] = kw["resource_version"]
        body = {"metadata": meta, "status": dict(status)}

        def land() -> None:
            try:
                self.store.patch(
                    "PodGroup",
                    ref.namespace,
                    ref.name,
                    body,
                    patch_type="merge",
                    subresource="status",
                )
            except ApiError as exc:
                self.late.append((status, type(exc).__name__))
            else:
                self.late.append((status, "applied"))

        asyncio.get_running_loop().call_later(self.delay, land)
        raise ServerError("the client timed out (the server is still working on it)")


def _unschedulable(obj: Mapping[str, Any]) -> str:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Unschedulable":
            return str(c.get("message"))
    return ""


def test_a_late_write_whose_client_gave_up_does_not_overwrite_a_newer_status() -> None:
    """The gang of two pods of 3 CPU does not fit the one node of 4 CPU: its status says
    Unschedulable, in a write that times out for the client but lands 25 s later. At 2 s
    a second node comes, the gang is placed and its status says Running. The late write
    must not land over it; on the old code it did, and stayed: the gang runs while its
    PodGroup says it cannot be scheduled."""
    quiet()
    late: list[LateFirstWrite] = []

    def build(cache: Any, ports: Any) -> Any:
        writer = LateFirstWrite(ports.status, ports.status.store, delay=25.0)
        late.append(writer)
        return app.build_loop(app.resolve(), cache, replace(ports, status=writer))

    arrivals = [
        Arrival(0.0, node("n1", cpu="4"), "test"),
        Arrival(0.0, pod_group("pg", min_member=2), "test"),
        Arrival(0.0, pod("a", cpu="3", group="pg"), "test"),
        Arrival(0.0, pod("b", cpu="3", group="pg"), "test"),
        Arrival(2.0, node("n2", cpu="4"), "test"),
        Arrival(35.0, pod("z", cpu="100m"), "test"),  # keeps the run going past the late write
    ]
    sim = Simulation(Scenario(arrivals=arrivals), build, until=45.0)
    anyio.run(sim.run, backend_options={"loop_factory": VirtualTimeLoop})
    assert sorted(sim.result.bindings) == ["default/a", "default/b", "default/z"]
    assert late and late[0].late, "the late write never reached the store"
    assert _unschedulable({"status": late[0].late[0][0]}), late[0].late
    status = sim.store.get("PodGroup", "default", "pg")["status"]
    assert status["phase"] == "Running", (status, late[0].late)
    assert [c["type"] for c in status["conditions"]] == ["Scheduled"], status
