"""The in-process API emulator, used when no cluster is named.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

import functools
import time
import uuid
from pathlib import Path
from typing import Any

from harness.constants import OWNER_CRD_DIR


@functools.cache
def _emulated_catalog() -> Any:
    """The CRDs of ``crds/`` and of :data:`OWNER_CRD_DIR`, which the emulator serves built
    in (read once: the upstream files are large)."""
    from scheduler.schema import CrdCatalog
    from scheduler.schema import load_crds as load_catalog

    return CrdCatalog({**load_catalog().crds, **load_catalog(OWNER_CRD_DIR).crds})


class EmulatedApiServer:
    """A fresh in-process API emulator (the embedded cluster's object store served over
    HTTP) on a random port, with a kubeconfig for it. ``history`` bounds the store's
    watch history (a small one makes resumed watches fail with 410 sooner). Must be
    started and stopped on the test's event loop."""

    def __init__(
        self, workdir: Path, *, history: int = 100_000, bookmark_interval: float = 5.0
    ) -> None:
        from scheduler.loop.system_clock import SystemClock
        from scheduler.sim.claim_controller import SimClaimController
        from scheduler.sim.emulator import ApiEmulator
        from scheduler.sim.store import ObjectStore
        from scheduler.sim.volume_controller import SimVolumeController

        catalog = _emulated_catalog()

        def validate(obj: dict[str, Any]) -> dict[str, Any]:
            return catalog.check(obj) if catalog.is_custom(str(obj.get("kind"))) else obj

        self.store = ObjectStore(time.time, validator=validate, history=history)
        self.emulator = ApiEmulator(
            self.store, catalog=catalog, bookmark_interval=bookmark_interval
        )
        # The controller manager's resourceclaim controller, as `up --controller-manager`
        # runs it for the real server (claims from templates, reservations released).
        SimClaimController(self.store).attach()
        self.volume_controller = SimVolumeController(self.store, SystemClock())
        """The PV controller and a provisioner (sim/volume_controller.py), as
        `up --controller-manager` runs the real PV controller: run by the ``api_server``
        fixture's task group."""
        self.kubeconfig_path = workdir / "kubeconfig"
        self.port = 0

    @property
    def kubeconfig(self) -> str:
        return str(self.kubeconfig_path)

    async def start(self) -> None:
        from scheduler.sim.kubeconfig import write_kubeconfig

        url = await self.emulator.start()
        self.port = self.emulator.served_port
        write_kubeconfig(self.kubeconfig_path, url)

    async def stop(self) -> None:
        """Stop serving: every watch is cut mid-stream, new connections are refused."""
        await self.emulator.stop()

    async def resume(self) -> None:
        """Serve again, on the same port."""
        self.emulator.port = self.port
        await self.emulator.start()

    def churn(self, writes: int) -> None:
        """Make ``writes`` writes in the store that no test looks at (ConfigMap-like
        objects of their own kind), to push older revisions out of a short history."""
        for i in range(writes):
            self.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "E2EChurn",
                    "metadata": {
                        "name": f"churn-{uuid.uuid4().hex[:6]}-{i}",
                        "namespace": "default",
                    },
                }
            )
