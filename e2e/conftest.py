"""Where the end-to-end suite runs, and its fixtures.

* ``SLUICE_E2E_EMULATOR=1``: every test gets a fresh in-process API emulator (the
  embedded cluster's store served over HTTP) on a random port. This is how ``make test``
  runs the suite (through ``tests/test_e2e_emulator.py``).
* otherwise, ``KUBECONFIG`` naming an existing file: the suite runs against that
  cluster (``make e2e``). It installs the CRDs, and each test works in a namespace of
  its own with fake Nodes of its own, and deletes what it created.
* otherwise every test is skipped.

On a real cluster, ``sluice run`` and ``sluice controller`` run as their ServiceAccounts
under the RBAC of ``manifests/`` (applied once per session; tokens from the TokenRequest
API), and a test fails if either logged a 403 (``SLUICE_E2E_SERVICE_ACCOUNTS=0``: as the
kubeconfig's user instead). ``SLUICE_E2E_K8S_STATE`` names the state directory of
``../shared/k8s/up`` when the cluster is that local control plane: the tests marked
``real_server`` kill and restart its API server through it (skipped otherwise).

``SLUICE_E2E_SCHEDULER_NAME`` (default ``sluice``) is the ``schedulerName`` the tests'
pods carry and the started schedulers serve (through a ``--config`` file when it is not
the default), so that the suite can run beside a deployed Sluice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from control_plane import (
    CONTROLLER_ACCOUNT,
    SCHEDULER_ACCOUNT,
    SYSTEM_NAMESPACE,
    ControllerProcess,
    LocalControlPlane,
    apply_manifests,
    forbidden_lines,
    port_reader_token,
    service_account_kubeconfig,
    wait_for_rbac,
)
from harness import (
    OWNER_CRD_DIR,
    Api,
    ApiFailure,
    Cluster,
    EmulatedApiServer,
    Faults,
    SchedulerProcess,
    core_path,
    install_crds,
)

from scheduler.serving.certificates import make_certificate

EMULATOR_ENV = "SLUICE_E2E_EMULATOR"
SCHEDULER_NAME = os.environ.get("SLUICE_E2E_SCHEDULER_NAME", "sluice")
K8S_STATE = os.environ.get("SLUICE_E2E_K8S_STATE", "")
SERVICE_ACCOUNTS = os.environ.get("SLUICE_E2E_SERVICE_ACCOUNTS", "1") not in ("", "0")
_CREATED_CRDS: list[str] = []
_STATE = {"crds_installed": False, "owner_crds_installed": False}


def e2e_mode() -> tuple[str, str | None]:
    """("emulator", None), ("cluster", KUBECONFIG) or ("skip", None)."""
    if os.environ.get(EMULATOR_ENV, "") not in ("", "0"):
        return "emulator", None
    kubeconfig = os.environ.get("KUBECONFIG", "")
    paths = [p for p in kubeconfig.split(os.pathsep) if p]
    if paths and any(Path(p).expanduser().is_file() for p in paths):
        return "cluster", kubeconfig
    return "skip", None


MODE, KUBECONFIG = e2e_mode()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "emulator(history=N): options of the per-test emulator (ignored against a real cluster)",
    )
    config.addinivalue_line(
        "markers",
        "faults(rate=R, lost_rate=L, kinds=(...), seed=S, watch_cut_after=T, watch_delay=D): "
        "sluice run talks to the API server through a fault_proxy.FaultProxy injecting these "
        "faults",
    )
    config.addinivalue_line("markers", "emulator_only: needs the emulator (skipped on a cluster)")
    config.addinivalue_line(
        "markers", "cluster_only: needs a real API server (admission webhooks, RBAC)"
    )
    config.addinivalue_line(
        "markers",
        "real_server: needs the local control plane of ../shared/k8s (SLUICE_E2E_K8S_STATE)",
    )


def pytest_report_header() -> str:
    where = {"emulator": "in-process API emulator", "skip": "nothing (skipped)"}.get(
        MODE, f"the cluster of KUBECONFIG={KUBECONFIG}"
    )
    accounts = "ServiceAccounts of manifests/" if _as_service_accounts() else "the kubeconfig user"
    return f"sluice e2e: against {where}; schedulerName {SCHEDULER_NAME}; as {accounts}"


def _as_service_accounts() -> bool:
    return MODE == "cluster" and SERVICE_ACCOUNTS and os.pathsep not in (KUBECONFIG or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_all = pytest.mark.skip(
        reason=f"no cluster: set KUBECONFIG to a cluster's kubeconfig, or {EMULATOR_ENV}=1"
    )
    skip_cluster = pytest.mark.skip(reason="needs the in-process emulator (not a real cluster)")
    skip_emulator = pytest.mark.skip(reason="needs a real API server (not the emulator)")
    skip_local = pytest.mark.skip(
        reason="needs the control plane of ../shared/k8s/up (set SLUICE_E2E_K8S_STATE)"
    )
    for item in items:
        if MODE == "skip":
            item.add_marker(skip_all)
        elif MODE == "emulator" and (
            item.get_closest_marker("cluster_only") or item.get_closest_marker("real_server")
        ):
            item.add_marker(skip_emulator)
        elif item.get_closest_marker("real_server") and not K8S_STATE:
            item.add_marker(skip_local)
        elif MODE == "cluster" and item.get_closest_marker("emulator_only"):
            item.add_marker(skip_cluster)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Delete the CRDs the suite created on a real cluster (not those it found)."""
    if MODE != "cluster" or not _CREATED_CRDS:
        return

    async def delete() -> None:
        api = await Api.connect(KUBECONFIG)
        try:
            for name in _CREATED_CRDS:
                with contextlib.suppress(ApiFailure):
                    await api.request(
                        "DELETE",
                        core_path(
                            "customresourcedefinitions", name=name, group="apiextensions.k8s.io/v1"
                        ),
                    )
        finally:
            await api.close()

    anyio.run(delete)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def api_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[EmulatedApiServer | None]:
    """The test's emulator (started), or None against a real cluster."""
    if MODE != "emulator":
        yield None
        return
    marker = request.node.get_closest_marker("emulator")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    server = EmulatedApiServer(tmp_path, history=int(options.get("history", 100_000)))
    await server.start()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(server.volume_controller.run)
            yield server
            tg.cancel_scope.cancel()
    finally:
        await server.stop()


async def _service_accounts(api: Api, directory: Path) -> dict[str, str]:
    """Once per session on a real cluster: the RBAC of ``manifests/`` applied, and a
    kubeconfig for each ServiceAccount (``scheduler``, ``controller``)."""
    if "accounts" not in _ACCOUNTS:
        assert KUBECONFIG is not None
        await apply_manifests(api)
        await wait_for_rbac(api)
        _ACCOUNTS["accounts"] = {
            role: str(
                await service_account_kubeconfig(
                    api, KUBECONFIG, directory / f"{role}.kubeconfig", name=account
                )
            )
            for role, account in (
                ("scheduler", SCHEDULER_ACCOUNT),
                ("controller", CONTROLLER_ACCOUNT),
            )
        }
    return _ACCOUNTS["accounts"]


_ACCOUNTS: dict[str, dict[str, str]] = {}


@pytest.fixture
def control_plane() -> LocalControlPlane:
    """The local control plane of ``../shared/k8s/up`` (tests marked ``real_server``)."""
    assert K8S_STATE, "real_server tests run only with SLUICE_E2E_K8S_STATE"
    return LocalControlPlane(Path(K8S_STATE))


@pytest.fixture
async def cluster(
    api_server: EmulatedApiServer | None,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Cluster]:
    """A namespace of its own on the API server, the pod informer and recorder, and the
    fake kubelet running; everything deleted afterwards."""
    kubeconfig = api_server.kubeconfig if api_server is not None else KUBECONFIG
    api = await Api.connect(kubeconfig)
    try:
        if not _STATE["crds_installed"]:  # once per session on a cluster; each emulator: a no-op
            _CREATED_CRDS.extend(await install_crds(api))
            _STATE["crds_installed"] = MODE == "cluster"
        c = Cluster(api, kubeconfig, scheduler_name=SCHEDULER_NAME, emulator=api_server)
        if MODE == "cluster":  # sluice run's port guarded as deployed, read with this token
            if "port" not in _ACCOUNTS:
                _ACCOUNTS["port"] = {"token": await port_reader_token(api)}
            c.port_token = _ACCOUNTS["port"]["token"]
        if _as_service_accounts():
            accounts = await _service_accounts(api, tmp_path_factory.mktemp("accounts"))
            c.scheduler_kubeconfig = accounts["scheduler"]
            c.controller_kubeconfig = accounts["controller"]
            c.lease_namespace = SYSTEM_NAMESPACE
        marker = request.node.get_closest_marker("faults")
        proxy = None
        if marker is not None:
            proxy = await c.put_behind_proxy(
                Faults(**marker.kwargs), tmp_path_factory.mktemp("proxy")
            )
        await c.setup()
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(c.run)
                yield c
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if proxy is not None:
                    await proxy.stop()
                if api_server is None:  # an emulator is thrown away whole
                    await c.cleanup()
    finally:
        await api.close()


@pytest.fixture
async def owner_crds(cluster: Cluster) -> None:
    """The upstream CRDs of ``e2e/owner-crds`` (PyTorchJob, JobSet) installed, once per
    session on a cluster (deleted at its end if the suite created them); the emulator
    serves them built in."""
    if not _STATE["owner_crds_installed"]:
        _CREATED_CRDS.extend(await install_crds(cluster.api, directory=OWNER_CRD_DIR))
        _STATE["owner_crds_installed"] = MODE == "cluster"


StartScheduler = Callable[..., Awaitable[SchedulerProcess]]


@pytest.fixture
async def start_scheduler(
    cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[StartScheduler]:
    """``await start_scheduler(leader_elect=..., feature_gates=..., config=..., ready=True)``:
    a ``sluice run`` subprocess against the test's cluster, waited on until ready
    (``/readyz``). Stopped with SIGTERM after the test; when the test failed, the tail
    of each one's log is printed (pytest shows it with the failure)."""
    started: list[SchedulerProcess] = []
    config = None
    if SCHEDULER_NAME != "sluice":
        config = tmp_path / "scheduler-config.yaml"
        config.write_text(
            "apiVersion: scheduling.sluice.dev/v1alpha1\n"
            "kind: SchedulerConfiguration\n"
            f"schedulerName: {SCHEDULER_NAME}\n"
        )

    async def start(*, ready: bool = True, **options: Any) -> SchedulerProcess:
        if options.get("leader_elect"):
            options.setdefault("lease_namespace", cluster.lease_namespace)
            options.setdefault("lease_name", f"sluice-{cluster.run_id}")
        options.setdefault("config", config)
        options.setdefault("port_token", cluster.port_token)
        proc = SchedulerProcess(cluster.scheduler_kubeconfig, tmp_path, **options)
        started.append(proc)
        await proc.start()
        if ready:
            await proc.wait_ready()
        return proc

    try:
        yield start
    finally:
        with anyio.CancelScope(shield=True):
            for proc in started:
                await proc.aclose()
        _report(request, started)


def _report(request: pytest.FixtureRequest, started: list[SchedulerProcess]) -> None:
    """Print the tails of the logs of a failed test; fail a test whose processes were
    refused a call by RBAC (403)."""
    failed = any(
        getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
        for when in ("setup", "call")
    )
    if failed:
        for proc in started:
            print(proc.tail(60))
    refused = [
        f"{p.log_path.name}: {line}"
        for p in started
        for line in forbidden_lines(
            p.log_text(),
            tolerated_until=getattr(p, "forbidden_tolerated_until", ""),
            tolerated=getattr(p, "forbidden_tolerated", ()),
        )
    ]
    assert not refused, "403 Forbidden under the RBAC of manifests/:\n" + "\n".join(refused[:20])


@pytest.fixture
async def start_controller(
    cluster: Cluster, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Awaitable[ControllerProcess]]]:
    """``await start_controller(cert_dir=..., dev=..., ready=True)``: ``sluice controller``
    against the test's cluster (as its ServiceAccount on a real cluster, unless
    ``kubeconfig`` is given), its webhook on 127.0.0.1. Stopped with SIGTERM after the test."""
    started: list[SchedulerProcess] = []

    async def start(
        *, ready: bool = True, kubeconfig: str | None = None, **options: Any
    ) -> ControllerProcess:
        if not options.get("dev") and options.get("cert_dir") is None:
            options["cert_dir"] = make_certificate(tmp_path / "certs").ca.parent
        options.setdefault("scheduler_name", SCHEDULER_NAME)
        proc = ControllerProcess(kubeconfig or cluster.controller_kubeconfig, tmp_path, **options)
        started.append(proc)
        await proc.start()
        if ready:
            await proc.wait_ready()
        return proc

    try:
        yield start
    finally:
        with anyio.CancelScope(shield=True):
            for proc in started:
                await proc.aclose()
        _report(request, started)
