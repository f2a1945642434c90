"""The kopf registry, settings and handlers of `sluice controller`, without starting kopf."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import kopf
import pytest
import yaml

from scheduler.controllers import operator
from scheduler.controllers.api_client import ApiStatusError
from scheduler.controllers.main import run_controller
from scheduler.controllers.operator import (
    DEFAULT_CERT_DIR,
    DEFAULT_QUEUE_OBJECT,
    FINALIZER,
    GROUP_PODS,
    INDEX_QUEUE_PARENTS,
    WEBHOOK_POD_GROUP,
    WEBHOOK_QUEUE,
    Controller,
    ControllerOptions,
    NoDiffBaseStorage,
    NoProgressStorage,
    build_registry,
    configure_settings,
    obtain_credentials,
)
from scheduler.serving.certificates import make_certificate
from scheduler.sim.kubeconfig import write_kubeconfig

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
GROUP = "scheduling.sluice.dev"
VERSION = "v1alpha1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------------------------
# The registry


def test_registry_has_the_expected_handlers() -> None:
    registry = build_registry(ControllerOptions())
    activities = {h.id: h.activity for h in registry._activities.get_all_handlers()}
    assert activities == {
        "configure": kopf._core.intents.causes.Activity.STARTUP,
        "keep-default-queue": kopf._core.intents.causes.Activity.STARTUP,
        "stop": kopf._core.intents.causes.Activity.CLEANUP,
        "login": kopf._core.intents.causes.Activity.AUTHENTICATION,
    }
    webhooks = {
        h.id: (h.selector.group, h.selector.version, h.selector.plural, sorted(h.operations or []))
        for h in registry._webhooks.get_all_handlers()
        if h.selector is not None
    }
    assert webhooks == {
        WEBHOOK_POD_GROUP: (GROUP, VERSION, "podgroups", ["CREATE", "UPDATE"]),
        WEBHOOK_QUEUE: (GROUP, VERSION, "queues", ["CREATE", "UPDATE"]),
    }
    assert all(
        h.reason == kopf._core.intents.causes.WebhookType.VALIDATING
        for h in registry._webhooks.get_all_handlers()
    )
    indexes = [
        (h.id, h.selector.plural) for h in registry._indexing.get_all_handlers() if h.selector
    ]
    assert indexes == [(INDEX_QUEUE_PARENTS, "queues")]
    watching = [
        (h.id, h.selector.plural) for h in registry._watching.get_all_handlers() if h.selector
    ]
    assert watching == [("recreate-default-queue", "queues"), (GROUP_PODS, "pods")]


def test_registry_has_nothing_that_writes_onto_objects() -> None:
    """No on-create/update/delete handlers (progress, diff-base, finalizers), daemons or timers."""
    registry = build_registry(ControllerOptions())
    assert list(registry._changing.get_all_handlers()) == []
    assert list(registry._spawning.get_all_handlers()) == []


def test_registry_is_not_the_global_one() -> None:
    build_registry(ControllerOptions())
    ids = {h.id for h in kopf.get_default_registry()._webhooks.get_all_handlers()}
    assert not ids & {WEBHOOK_POD_GROUP, WEBHOOK_QUEUE}


def test_webhook_paths_in_the_manifest_are_the_handler_ids() -> None:
    doc = yaml.safe_load((MANIFESTS / "webhook.yaml").read_text())
    paths = {
        w["rules"][0]["resources"][0]: w["clientConfig"]["service"]["path"] for w in doc["webhooks"]
    }
    assert paths == {"podgroups": f"/{WEBHOOK_POD_GROUP}", "queues": f"/{WEBHOOK_QUEUE}"}


# --------------------------------------------------------------------------------------------
# Settings


def test_settings_write_nothing_and_need_little_rbac() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, ControllerOptions())
    assert isinstance(settings.persistence.progress_storage, NoProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBaseStorage)
    assert settings.persistence.finalizer == FINALIZER
    assert settings.peering.standalone is True
    assert settings.scanning.disabled is True
    assert settings.admission.managed is None
    assert settings.networking.request_timeout is not None
    server = settings.admission.server
    assert type(server) is kopf.WebhookServer
    assert server.port == 9443
    assert str(server.certfile) == f"{DEFAULT_CERT_DIR}/tls.crt"
    assert str(server.pkeyfile) == f"{DEFAULT_CERT_DIR}/tls.key"


@pytest.mark.parametrize(
    ("options", "address"),
    [
        pytest.param(ControllerOptions(), "0.0.0.0", id="in-cluster-every-interface"),
        pytest.param(ControllerOptions(dev=True), "127.0.0.1", id="dev-loopback"),
        pytest.param(
            ControllerOptions(dev=True, webhook_address="10.1.2.3"), "10.1.2.3", id="dev-given"
        ),
    ],
)
def test_the_webhook_server_listens_where_told(options: ControllerOptions, address: str) -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, options)
    server = settings.admission.server
    assert type(server) is kopf.WebhookServer  # never the auto server: it needs certvalidator
    assert server.addr == address


def test_watch_timeouts_are_sent_as_integers() -> None:
    """kopf sends str(server_timeout) as timeoutSeconds; the API server refuses "540.0"."""
    settings = kopf.OperatorSettings()
    configure_settings(settings, ControllerOptions())
    assert str(settings.watching.server_timeout) == "540"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_dev_certificate_serves_tls_the_ca_verifies(tmp_path: Path, host: str) -> None:
    made = make_certificate(tmp_path, ["127.0.0.1", "localhost"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(made.cert, made.key)
    client = ssl.create_default_context(cafile=str(made.ca))

    async def handshake() -> dict[str, Any]:
        listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server)
        port = listener.sockets[0].getsockname()[1]
        async with listener:
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname=host
            )
            peer: dict[str, Any] = writer.get_extra_info("peercert")
            writer.close()
            return peer

    peer = asyncio.run(handshake())
    assert ("IP Address" if host[0].isdigit() else "DNS", host) in peer["subjectAltName"]
    assert oct(made.key.stat().st_mode & 0o777) == "0o600"


def test_no_op_storages_leave_the_patch_empty() -> None:
    body = kopf.Body({"metadata": {"name": "q"}, "spec": {"weight": 1}})
    patch = kopf.Patch()
    progress = NoProgressStorage()
    record: kopf.ProgressRecord = {"started": "2025-01-01T00:00:00", "success": True}
    progress.store(key=kopf.HandlerId("h"), record=record, body=body, patch=patch)
    progress.purge(key=kopf.HandlerId("h"), body=body, patch=patch)
    progress.touch(body=body, patch=patch, value="x")
    assert progress.fetch(key=kopf.HandlerId("h"), body=body) is None
    diffbase = NoDiffBaseStorage()
    diffbase.store(body=body, patch=patch, essence=diffbase.build(body=body))
    assert diffbase.fetch(body=body) is None
    assert not patch


# --------------------------------------------------------------------------------------------
# Credentials and the fake API


def test_credentials_from_an_explicit_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")  # restored after the test
    path = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:6443")
    info = asyncio.run(
        obtain_credentials(
            ControllerOptions(kubeconfig=str(path)),
            settings=kopf.OperatorSettings(),
            logger=operator.logging.getLogger("test"),
        )
    )
    assert info.server == "http://127.0.0.1:6443"


class FakeApi:
    """Stands for QueueClient: queues by name, scripted failures, and every call made."""

    def __init__(self, queues: dict[str, Any] | None = None) -> None:
        self.queues: dict[str, Any] = dict(queues or {})
        self.failures: list[ApiStatusError] = []
        self.calls: list[tuple[str, str]] = []

    def __call__(self, info: kopf.ConnectionInfo) -> FakeApi:
        return self

    async def __aenter__(self) -> FakeApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def _fail(self, method: str) -> None:
        if self.failures:
            raise self.failures.pop(0)

    async def get(self, name: str) -> dict[str, Any] | None:
        self.calls.append(("get", name))
        self._fail("GET")
        return self.queues.get(name)

    async def create(self, body: dict[str, Any]) -> bool:
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        self._fail("POST")
        if name in self.queues:
            return False
        self.queues[name] = body
        return True


def controller(api: FakeApi, sleeps: list[float] | None = None, **options: Any) -> Controller:
    async def sleep(delay: float) -> None:
        if sleeps is not None:
            sleeps.append(delay)

    return Controller(ControllerOptions(**options), client_factory=api, sleep=sleep)  # type: ignore[arg-type]


LOG = operator.logging.getLogger("test.controller")


def status(code: int) -> ApiStatusError:
    return ApiStatusError("POST", "/apis/x", code, '{"message": "nope"}')


# --------------------------------------------------------------------------------------------
# The default queue


@pytest.mark.anyio
async def test_default_queue_is_created_when_missing(logins: list[int]) -> None:
    api = FakeApi()
    await controller(api).keep_default_queue(LOG)
    assert api.queues == {"default": DEFAULT_QUEUE_OBJECT}
    assert api.calls == [("get", "default"), ("create", "default")]
    assert DEFAULT_QUEUE_OBJECT["spec"] == {"weight": 1}


@pytest.mark.anyio
async def test_default_queue_is_left_alone_when_present(logins: list[int]) -> None:
    api = FakeApi({"default": {"spec": {"weight": 5}}})
    await controller(api).keep_default_queue(LOG)
    assert api.queues["default"] == {"spec": {"weight": 5}}
    assert api.calls == [("get", "default")]


@pytest.mark.anyio
async def test_default_queue_creation_retries_until_it_succeeds(logins: list[int]) -> None:
    # 500: the webhook (this very controller) is not serving yet; 403: RBAC not yet applied.
    api = FakeApi()
    api.failures = [status(500), status(403), status(500), status(500)]
    sleeps: list[float] = []
    await controller(api, sleeps).keep_default_queue(LOG)
    assert "default" in api.queues
    assert sleeps == [1.0, 2.0, 4.0, 8.0]


@pytest.mark.anyio
async def test_expired_credentials_log_in_again(logins: list[int]) -> None:
    api = FakeApi()
    api.failures = [status(401)]
    await controller(api).keep_default_queue(LOG)
    assert "default" in api.queues
    assert len(logins) == 2


@pytest.mark.anyio
async def test_conflict_on_create_means_it_exists(logins: list[int]) -> None:
    api = FakeApi()
    ctl = controller(api)
    original = api.get

    async def racing_get(name: str) -> dict[str, Any] | None:
        found = await original(name)
        api.queues.setdefault("default", {"spec": {"weight": 2}})  # someone else created it
        return found

    api.get = racing_get  # type: ignore[method-assign]
    await ctl.keep_default_queue(LOG)
    assert api.queues["default"] == {"spec": {"weight": 2}}


@pytest.mark.anyio
async def test_start_and_stop(logins: list[int]) -> None:
    api = FakeApi()
    blocked = asyncio.Event()

    async def never(name: str) -> dict[str, Any] | None:
        await blocked.wait()
        return None

    api.get = never  # type: ignore[method-assign]
    ctl = controller(api)
    await ctl.start(logger=LOG)
    keeper = ctl.keep_default_queue(LOG)
    assert ctl.keep_default_queue(LOG) is keeper  # one task at a time
    await asyncio.sleep(0)
    await ctl.stop()
    assert keeper.cancelled()


async def _until_made_again(api: FakeApi) -> None:
    """Let the controller run until the Queue ``default`` exists again (at most 1 s)."""
    for _ in range(100):
        await asyncio.sleep(0.01)
        if "default" in api.queues:
            return


@pytest.mark.anyio
async def test_a_deletion_before_kopf_has_listed_the_queues_is_healed(logins: list[int]) -> None:
    """The startup check finds ``default``; it is deleted before kopf's first list of
    Queues (so no watch event tells of it); once kopf has listed them (it calls the
    handler's filter), the keeper checks again and creates it."""
    api = FakeApi({"default": {"spec": {"weight": 1}}})
    ctl = controller(api)
    await ctl.start(logger=LOG)
    assert ctl._keeper is not None
    await ctl._keeper
    api.queues.pop("default")
    await asyncio.sleep(0.01)
    assert api.calls == [("get", "default")]  # not listed yet: no second check
    assert ctl.is_default_queue_deleted(type=None, name="other") is False  # the listing
    await _until_made_again(api)
    await ctl.stop()
    assert api.calls == [("get", "default"), ("get", "default"), ("create", "default")]


@pytest.mark.parametrize(
    ("event", "name", "matches"),
    [
        pytest.param("DELETED", "default", True, id="default-deleted"),
        pytest.param("DELETED", "training", False, id="other-deleted"),
        pytest.param("MODIFIED", "default", False, id="default-modified"),
        pytest.param(None, "default", False, id="initial-listing"),
    ],
)
def test_only_the_deletion_of_default_is_handled(
    event: str | None, name: str, matches: bool
) -> None:
    assert controller(FakeApi()).is_default_queue_deleted(type=event, name=name) is matches


@pytest.mark.anyio
async def test_deleted_default_is_created_again(logins: list[int]) -> None:
    api = FakeApi()
    ctl = controller(api)
    await ctl.on_queue_event(logger=LOG)
    assert ctl._keeper is not None
    await ctl._keeper
    assert "default" in api.queues


# --------------------------------------------------------------------------------------------
# Admission


def queue(name: str, parent: str = "", **spec: Any) -> dict[str, Any]:
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod_group(ns: str = "team-a", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": ns},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("name", "spec", "parents"),
    [
        pytest.param("a", {"parent": "b"}, {"a": "b"}, id="child"),
        pytest.param("a", {}, {"a": ""}, id="root"),
        pytest.param("a", {"parent": 7}, {"a": ""}, id="bad-parent"),
        pytest.param(None, {}, {}, id="no-name"),
    ],
)
def test_index_of_parents(name: str | None, spec: dict[str, Any], parents: dict[str, str]) -> None:
    assert Controller.index_queue_parents(name=name, spec=spec) == parents


@pytest.mark.anyio
async def test_queue_refused_with_the_field_in_the_message(logins: list[int]) -> None:
    ctl = controller(FakeApi())
    index = {"default": [""], "b": ["a"]}
    with pytest.raises(kopf.AdmissionError) as refused:
        await ctl.validate_queue(
            body=kopf.Body(queue("a", "b")),
            logger=LOG,
            operation="CREATE",
            **{INDEX_QUEUE_PARENTS: index},
        )
    assert (
        str(refused.value) == 'Queue "a" is invalid: spec.parent: queue a -> b -> a forms a cycle'
    )
    assert refused.value.code == 422


@pytest.mark.anyio
async def test_queue_parent_missing_from_the_index_is_looked_up(logins: list[int]) -> None:
    # The index lags: "b" (child of "a") exists in the API server but is not indexed yet.
    api = FakeApi({"b": queue("b", "a")})
    ctl = controller(api)
    with pytest.raises(kopf.AdmissionError, match=r"queue a -> b -> a forms a cycle"):
        await ctl.validate_queue(
            body=kopf.Body(queue("a", "b")),
            logger=LOG,
            operation="UPDATE",
            old=None,
            **{INDEX_QUEUE_PARENTS: {"a": [""]}},
        )
    assert api.calls == [("get", "b")]


@pytest.mark.anyio
async def test_queue_with_a_fetched_parent_passes(logins: list[int]) -> None:
    api = FakeApi({"team": queue("team")})
    await controller(api).validate_queue(
        body=kopf.Body(queue("a", "team")), logger=LOG, operation="CREATE"
    )
    assert api.calls == [("get", "team")]


@pytest.mark.anyio
async def test_queue_with_a_missing_parent_is_refused(logins: list[int]) -> None:
    api = FakeApi()
    with pytest.raises(kopf.AdmissionError, match=r"spec.parent: queue nope does not exist"):
        await controller(api).validate_queue(
            body=kopf.Body(queue("a", "nope")), logger=LOG, operation="CREATE"
        )


@pytest.mark.anyio
async def test_queue_lookup_failure_is_a_retriable_refusal(logins: list[int]) -> None:
    api = FakeApi()
    api.failures = [status(503)]
    with pytest.raises(kopf.AdmissionError, match=r"cannot look up queue team now") as refused:
        await controller(api).validate_queue(
            body=kopf.Body(queue("a", "team")), logger=LOG, operation="CREATE"
        )
    assert refused.value.code == 503


@pytest.mark.anyio
async def test_valid_objects_are_admitted_without_calls(logins: list[int]) -> None:
    api = FakeApi()
    ctl = controller(api)
    index = {"default": [""]}
    await ctl.validate_queue(
        body=kopf.Body(queue("a", "default", weight=2)),
        logger=LOG,
        operation="CREATE",
        **{INDEX_QUEUE_PARENTS: index},
    )
    await ctl.validate_pod_group(
        body=kopf.Body(pod_group(minMember=2)), namespace="team-a", operation="CREATE"
    )
    assert api.calls == []
    assert logins == []


@pytest.mark.anyio
async def test_pod_group_refused(logins: list[int]) -> None:
    with pytest.raises(kopf.AdmissionError) as refused:
        await controller(FakeApi()).validate_pod_group(
            body=kopf.Body(pod_group(minMember=3, minTaskMember={"a": 2, "b": 3})),
            namespace="team-a",
            operation="CREATE",
        )
    assert str(refused.value) == (
        'PodGroup "gang" is invalid: spec.minTaskMember: sum 5 exceeds spec.minMember 3'
    )
    assert refused.value.code == 422


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(
            pod_group(minMember=-1),
            {**pod_group(minMember=-1), "metadata": {"name": "gang", "labels": {"x": "y"}}},
            id="metadata-only-update",
        ),
        pytest.param(
            pod_group(minMember=-1),
            {
                **pod_group(minMember=-2),
                "metadata": {"name": "gang", "deletionTimestamp": "2025-01-01T00:00:00Z"},
            },
            id="being-deleted",
        ),
    ],
)
async def test_updates_that_leave_the_spec_alone_are_admitted(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    await controller(FakeApi()).validate_pod_group(
        body=kopf.Body(new), old=kopf.Body(old), namespace="team-a", operation="UPDATE"
    )


@pytest.mark.anyio
async def test_spec_change_of_an_invalid_object_is_refused() -> None:
    with pytest.raises(kopf.AdmissionError, match=r"spec\.minMember"):
        await controller(FakeApi()).validate_pod_group(
            body=kopf.Body(pod_group(minMember=-2)),
            old=kopf.Body(pod_group(minMember=-1)),
            namespace="team-a",
            operation="UPDATE",
        )


@pytest.mark.anyio
async def test_namespace_option_limits_pod_group_validation() -> None:
    ctl = controller(FakeApi(), namespace="team-a")
    await ctl.validate_pod_group(
        body=kopf.Body(pod_group("other", minMember=-1)), namespace="other", operation="CREATE"
    )
    with pytest.raises(kopf.AdmissionError):
        await ctl.validate_pod_group(
            body=kopf.Body(pod_group(minMember=-1)), namespace="team-a", operation="CREATE"
        )


# --------------------------------------------------------------------------------------------
# run_controller


def test_run_controller_without_a_certificate_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_controller(
        kubeconfig=None, namespace=None, dev=False, verbose=0, cert_dir=str(tmp_path)
    )
    assert code == 2
    assert "webhook certificate not found" in capsys.readouterr().err


@pytest.mark.anyio
async def test_a_deletion_no_event_shows_is_healed_by_the_next_check(
    logins: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Queue is left after the deletion, so kopf's list calls no handler and its end
    is never seen: the keeper checks again after RECHECK_EVERY anyway, and then every
    RECHECK_EVERY (the e2e test once waited 30 s for the Queue and timed out)."""
    monkeypatch.setattr(operator, "RECHECK_EVERY", 0.02)
    api = FakeApi({"default": {"spec": {"weight": 1}}})
    ctl = controller(api)
    await ctl.start(logger=LOG)
    assert ctl._keeper is not None
    await ctl._keeper
    api.queues.pop("default")
    await _until_made_again(api)
    assert "default" in api.queues
    api.queues.pop("default")  # again, later: the next check makes it again too
    await _until_made_again(api)
    await ctl.stop()
    assert api.calls.count(("create", "default")) == 2
