"""The kopf handlers of ``sluice controller`` and the kopf settings they run with (layer 4).

:func:`build_registry` returns a :class:`kopf.OperatorRegistry` holding:

* startup: :func:`configure_settings` (the settings below), and a background task that
  creates the cluster-scoped Queue ``default`` (``weight: 1``) if it is missing, retrying
  until it succeeds (the create passes through this controller's own webhook, which kopf only
  starts after the startup handlers); cleanup stops that task;
* login: :func:`~scheduler.controllers.credentials.obtain_credentials`;
* an index of Queues (name -> ``spec.parent``) for the cycle check, and an event handler on
  Queues that starts that task again when ``default`` is deleted (and once more when kopf
  has first listed the Queues, for a deletion made before its watch began);
* two validating admission handlers, for PodGroups and Queues, that refuse with the messages
  of :mod:`scheduler.controllers.validation`. Their ids are the URL paths the
  ValidatingWebhookConfiguration of ``manifests/webhook.yaml`` calls;
* the pod grouper (:mod:`scheduler.controllers.grouper`): an event handler on Pods hands
  every pod that waits for it to :class:`~scheduler.controllers.grouper.PodGrouper`, whose
  workers the startup handler starts and cleanup stops. Its writes (a PodGroup, a label or
  an annotation on the pod) are its own calls, not kopf's.

kopf itself writes nothing onto users' objects: there are no on-create/update/delete handlers, no
daemons and no timers (the only kinds that make kopf add a finalizer or store progress), the
progress and diff-base storages are no-ops, so no ``last-handled-configuration`` annotation
and no ``status.kopf`` either, and kopf's finalizer name is one of our own, so kopf never
removes another operator's finalizer. Peering is off (one replica; ``standalone``) and so is
the dynamic scanning of CRDs and namespaces, which keeps the RBAC small.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import kopf

from scheduler.api.labels import DEFAULT_QUEUE, SCHEDULER_NAME
from scheduler.controllers.api_client import ApiClient, ApiStatusError, QueueClient
from scheduler.controllers.credentials import obtain_credentials
from scheduler.controllers.grouper import GrouperApi, PodGrouper
from scheduler.controllers.validation import parent_of, validate_pod_group, validate_queue
from scheduler.schema import API_VERSION, GROUP, VERSION

__all__ = [
    "DEFAULT_CERT_DIR",
    "DEFAULT_QUEUE_OBJECT",
    "FINALIZER",
    "GROUP_PODS",
    "INDEX_QUEUE_PARENTS",
    "WATCH_SERVER_TIMEOUT",
    "WEBHOOK_POD_GROUP",
    "WEBHOOK_QUEUE",
    "Controller",
    "ControllerOptions",
    "NoDiffBaseStorage",
    "NoProgressStorage",
    "build_registry",
    "configure_settings",
    "obtain_credentials",
]

T = TypeVar("T")

#: The handler ids of the admission handlers; kopf serves each on ``/<id>``.
WEBHOOK_POD_GROUP: Final = "validate-podgroup"
WEBHOOK_QUEUE: Final = "validate-queue"
#: The handler id of the pod grouper's event handler on Pods.
GROUP_PODS: Final = "group-pods"
#: The kwarg name under which kopf hands the Queue index to handlers.
INDEX_QUEUE_PARENTS: Final = "queue_parents"
#: kopf removes its finalizer from objects that no handler needs it on. A name no one else
#: uses means it never touches anyone's finalizer (and it never adds this one).
FINALIZER: Final = f"controller.{GROUP}/unused"
#: Where the webhook's certificate (``tls.crt``, ``tls.key``) is mounted from its Secret.
DEFAULT_CERT_DIR: Final = "/etc/sluice/webhook-certs"

DEFAULT_QUEUE_OBJECT: Final[Mapping[str, Any]] = {
    "apiVersion": API_VERSION,
    "kind": "Queue",
    "metadata": {"name": DEFAULT_QUEUE},
    "spec": {"weight": 1},
}

#: The watches' ``timeoutSeconds``: an integer, as the API server requires.
WATCH_SERVER_TIMEOUT: Final[int] = 540

#: Waits between attempts to create ``default``; the last one repeats for as long as it takes.
KEEPER_DELAYS: Final = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
#: Seconds between the keeper's checks that the Queue ``default`` exists (a GET), the
#: first once kopf has listed the Queues or after this long, whichever comes first: a
#: deletion no watch event showed is made good within it.
RECHECK_EVERY: Final = 10.0


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """How ``sluice controller`` runs.

    ``namespace``: when set, only PodGroups in that namespace are validated (the others are
    admitted as they are); Queues are cluster-scoped and always validated. ``dev``: a
    controller run outside the cluster: text logs, and the webhook on 127.0.0.1 unless
    ``webhook_address`` says otherwise (``run_controller`` puts a self-signed certificate
    in ``cert_dir`` when none is there). ``webhook_address``: where the webhook listens
    (default every interface, as a pod's Service needs). ``scheduler_name``: the pod grouper
    groups the pods of this ``schedulerName``.
    """

    kubeconfig: str | None = None
    namespace: str | None = None
    dev: bool = False
    webhook_port: int = 9443
    cert_dir: str = DEFAULT_CERT_DIR
    webhook_address: str | None = None
    scheduler_name: str = SCHEDULER_NAME

    @property
    def address(self) -> str:
        """Where the webhook listens."""
        if self.webhook_address:
            return self.webhook_address
        return "127.0.0.1" if self.dev else "0.0.0.0"

    @property
    def certfile(self) -> Path:
        return Path(self.cert_dir) / "tls.crt"

    @property
    def pkeyfile(self) -> Path:
        return Path(self.cert_dir) / "tls.key"


# --------------------------------------------------------------------------------------------
# Settings


class NoProgressStorage(kopf.ProgressStorage):
    """Keeps no handler progress anywhere: nothing is written onto objects."""

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        return None

    def store(
        self,
        *,
        key: kopf.HandlerId,
        record: kopf.ProgressRecord,
        body: kopf.Body,
        patch: kopf.Patch,
    ) -> None:
        return None

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        return None

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        return None

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return copy.deepcopy(essence)


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """Keeps no last-handled state: no ``last-handled-configuration`` annotation."""

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def webhook_server(options: ControllerOptions) -> kopf.WebhookServer:
    """The admission server: TLS on ``address``:``webhook_port`` with the certificate of
    ``cert_dir`` (mounted from its Secret; with ``--dev`` possibly a self-signed one).

    Not kopf's ``WebhookAutoServer``, even with ``--dev``: it needs ``certvalidator``,
    whose ``oscrypto`` cannot load OpenSSL 3 (see :mod:`.certificates`)."""
    return kopf.WebhookServer(
        addr=options.address,
        port=options.webhook_port,
        certfile=options.certfile,
        pkeyfile=options.pkeyfile,
    )


def configure_settings(settings: kopf.OperatorSettings, options: ControllerOptions) -> None:
    """Set kopf up so that it writes nothing onto users' objects and needs little RBAC."""
    settings.persistence.progress_storage = NoProgressStorage()
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.persistence.finalizer = FINALIZER
    settings.peering.standalone = True
    settings.peering.mandatory = False
    settings.scanning.disabled = True
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "sluice-controller"
    # Every request has a deadline: a half-open connection must not hang the controller.
    settings.networking.connect_timeout = 10.0
    settings.networking.request_timeout = 60.0
    settings.watching.connect_timeout = 10.0
    # kopf sends server_timeout as the watch's timeoutSeconds, str() of the value: the API
    # server parses it as an integer and refuses "540.0" (400 BadRequest), which stops the
    # watcher and the whole operator. An int is sent as "540".
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = 600.0
    settings.admission.server = webhook_server(options)
    # settings.admission.managed stays None: manifests/webhook.yaml carries the configuration.


# --------------------------------------------------------------------------------------------
# The controller


def _refusal(kind: str, obj: Mapping[str, Any], messages: Sequence[str]) -> kopf.AdmissionError:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return kopf.AdmissionError(
        f'{kind} "{name or ""}" is invalid: ' + "; ".join(messages), code=422
    )


def _spec_unchanged(
    operation: str | None, old: Mapping[str, Any] | None, obj: Mapping[str, Any]
) -> bool:
    """An update that leaves the spec alone (labels, finalizers, deletion) is never refused.

    Otherwise an object created before the webhook existed could not even lose a finalizer.
    """
    if operation != "UPDATE":
        return False
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        return True
    return old is not None and old.get("spec") == obj.get("spec")


class Controller:
    """The state behind the handlers: options, kopf's settings, the current credentials, the
    pod grouper.

    ``client_factory``, ``api_factory`` and ``sleep`` are seams for tests.
    """

    def __init__(
        self,
        options: ControllerOptions,
        *,
        client_factory: Callable[[kopf.ConnectionInfo], QueueClient] = QueueClient,
        api_factory: Callable[[kopf.ConnectionInfo], GrouperApi] = ApiClient,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.options = options
        #: kopf's settings, once the startup handler has them (watch and admission handlers
        #: are not given them; only ``networking.trust_env`` is read from them here).
        self.settings = kopf.OperatorSettings()
        self._client_factory = client_factory
        self._api_factory = api_factory
        self._sleep = sleep
        self._credentials: kopf.ConnectionInfo | None = None
        self._login_lock = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None
        self._queues_listed = asyncio.Event()
        """Set once kopf has listed the Queues (see :meth:`_keep_checking`)."""
        self._recheck: asyncio.Task[None] | None = None
        self._api: tuple[kopf.ConnectionInfo, GrouperApi] | None = None
        self.grouper = PodGrouper(
            self.api_client, self._relogin, scheduler_name=options.scheduler_name
        )
        self._grouping: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- startup and login

    async def configure(self, *, settings: kopf.OperatorSettings, **_: Any) -> None:
        """Startup: the kopf settings of :func:`configure_settings`."""
        configure_settings(settings, self.options)
        self.settings = settings

    async def login(self, *, logger: kopf.Logger, **_: Any) -> kopf.ConnectionInfo:
        """The login handler: fresh credentials for kopf, kept for our own calls too."""
        async with self._login_lock:
            self._credentials = await obtain_credentials(
                self.options, settings=self.settings, logger=logger
            )
            return self._credentials

    async def api_client(self) -> GrouperApi:
        """The client of the pod grouper: one session, made again after each login."""
        credentials = self._credentials
        if credentials is None:
            credentials = await self.login(logger=LOG)
        current = self._api
        if current is not None and current[0] is credentials:
            return current[1]
        api = self._api_factory(credentials)
        self._api = (credentials, api)
        if current is not None:
            await _close(current[1])
        return api

    async def _relogin(self) -> kopf.ConnectionInfo:
        return await self.login(logger=LOG)

    async def _call(self, logger: kopf.Logger, fn: Callable[[QueueClient], Awaitable[T]]) -> T:
        """Run ``fn`` with a client; log in again once if the credentials have expired."""
        for attempt in (1, 2):
            credentials = self._credentials
            if credentials is None or attempt == 2:
                credentials = await self.login(logger=logger)
            async with self._client_factory(credentials) as client:
                try:
                    return await fn(client)
                except ApiStatusError as exc:
                    if exc.status != 401 or attempt == 2:
                        raise
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------- the default queue

    async def _create_default(self, logger: kopf.Logger) -> bool:
        async def create(client: QueueClient) -> bool:
            if await client.get(DEFAULT_QUEUE) is not None:
                return False
            return await client.create(copy.deepcopy(DEFAULT_QUEUE_OBJECT))

        created = await self._call(logger, create)
        if created:
            logger.info(f"Created the Queue {DEFAULT_QUEUE!r} (weight 1).")
        return created

    def keep_default_queue(self, logger: kopf.Logger) -> asyncio.Task[None]:
        """Make sure the Queue ``default`` exists, in the background, retrying until it does.

        Not inside a startup handler: in a cluster the create goes through this controller's
        own admission webhook (failurePolicy Fail), which kopf starts only after the startup
        handlers have finished, so a create awaited there could never succeed.
        """
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.create_task(
                self._create_default_until_done(logger), name="sluice default queue"
            )
        return self._keeper

    async def _create_default_until_done(self, logger: kopf.Logger) -> None:
        delays = itertools.chain(KEEPER_DELAYS, itertools.repeat(KEEPER_DELAYS[-1]))
        for attempt in itertools.count(1):
            try:
                await self._create_default(logger)
                return
            except (ApiStatusError, aiohttp.ClientError, TimeoutError, kopf.LoginError) as exc:
                delay = next(delays)
                logger.warning(
                    f"Cannot create the Queue {DEFAULT_QUEUE!r} yet (attempt {attempt}): "
                    f"{exc!s:.300}; trying again in {delay:g}s."
                )
                await self._sleep(delay)

    async def _keep_checking(self, logger: kopf.Logger) -> None:
        """At startup, the keeper's check may come before kopf has listed the Queues: a
        deletion of ``default`` in between is in no watch event (and when no Queue is left
        at all, kopf's list calls no handler, so its end is not seen either). So check once
        more when kopf first calls the filter of :meth:`on_queue_event` (it does so only
        once its Queue index is filled), or after :data:`RECHECK_EVERY` seconds, and then
        every :data:`RECHECK_EVERY` seconds (a GET while ``default`` exists): whatever a
        watch missed is made good within that long. Deletions the watch shows are made
        good at once (:meth:`on_queue_event`). Until cancelled (:meth:`stop`)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queues_listed.wait(), RECHECK_EVERY)
        while True:
            self.keep_default_queue(logger)
            await asyncio.sleep(RECHECK_EVERY)  # real time: the injected sleep is the retries'

    async def start(self, *, logger: kopf.Logger, **_: Any) -> None:
        """Startup: begin making sure the Queue ``default`` exists (and again once kopf has
        listed the Queues, and every :data:`RECHECK_EVERY` seconds); start the pod
        grouper."""
        self.keep_default_queue(logger)
        self._recheck = asyncio.create_task(
            self._keep_checking(logger), name="sluice default queue, checked again"
        )
        self.start_grouping()

    def start_grouping(self) -> asyncio.Task[None]:
        """The pod grouper's workers, in a task of this controller (one at a time). Should
        it end by an error, the error is logged and the workers are started again."""
        if self._grouping is None or self._grouping.done():
            self._grouping = asyncio.create_task(self.grouper.run(), name="sluice pod grouper")
            self._grouping.add_done_callback(self._grouping_ended)
        return self._grouping

    def _grouping_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task is not self._grouping:
            return
        LOG.error("The pod grouper stopped; starting it again.", exc_info=task.exception())
        self.start_grouping()

    async def stop(self, **_: Any) -> None:
        """Cleanup: stop trying to create the Queue ``default``; stop the pod grouper."""
        keeper, self._keeper = self._keeper, None
        grouping, self._grouping = self._grouping, None
        recheck, self._recheck = self._recheck, None
        for task in (recheck, keeper, grouping):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        api, self._api = self._api, None
        if api is not None:
            await _close(api[1])

    # ----------------------------------------------------------------- the pod grouper

    def is_pod_to_group(self, *, body: Mapping[str, Any], **_: Any) -> bool:
        """The ``when`` filter of :meth:`on_pod_event` (synchronous, as kopf wants): a pod
        that waits for the grouper, or one it holds (to see it go)."""
        return self.grouper.wants(body) or self.grouper.holds(body)

    async def on_pod_event(self, *, type: str | None, body: Mapping[str, Any], **_: Any) -> None:
        """Hand the pod's newest version to the grouper (or tell it the pod is gone)."""
        if type == "DELETED":
            self.grouper.forget(body)
        else:
            self.grouper.offer(body)

    def is_default_queue_deleted(self, *, type: str | None, name: str | None, **_: Any) -> bool:
        """The ``when`` filter of :meth:`on_queue_event` (strictly synchronous, as kopf wants).
        kopf calls it for every Queue event, the first listing's included, once it has
        listed the Queues: that it is called at all tells so."""
        self._queues_listed.set()
        return type == "DELETED" and name == DEFAULT_QUEUE

    async def on_queue_event(self, *, logger: kopf.Logger, **_: Any) -> None:
        """Re-create ``default`` when it is deleted."""
        logger.warning(f"The Queue {DEFAULT_QUEUE!r} was deleted; creating it again.")
        self.keep_default_queue(logger)

    # ----------------------------------------------------------------- the queue index

    @staticmethod
    def index_queue_parents(
        *, name: str | None, spec: Mapping[str, Any], **_: Any
    ) -> dict[str, str]:
        """Index handler: Queue name -> ``spec.parent`` ("" at the root)."""
        if not name:
            return {}
        parent = spec.get("parent")
        return {name: parent if isinstance(parent, str) else ""}

    async def _known_queues(
        self, obj: Mapping[str, Any], index: Mapping[str, Iterable[str]], logger: kopf.Logger
    ) -> dict[str, Any]:
        """The queues on ``obj``'s chain of parents: from the index, or fetched when missing.

        The index lags the API server a little (and is empty for a moment at startup); a
        parent it does not know is looked up, so a just-created parent is not refused as
        missing and a chain through it is followed in full.
        """
        known: dict[str, Any] = {
            name: {"spec": {"parent": parent}}
            for name, parents in index.items()
            for parent in parents
        }
        meta = obj.get("metadata")
        seen = {meta.get("name") if isinstance(meta, Mapping) else None}
        current = parent_of(obj)
        while current and current not in seen:
            seen.add(current)
            if current not in known:
                try:
                    fetched = await self._call(logger, functools.partial(_get_queue, current))
                except (ApiStatusError, aiohttp.ClientError, TimeoutError) as exc:
                    raise kopf.AdmissionError(
                        f"spec.parent: cannot look up queue {current} now ({exc}); try again",
                        code=503,
                    ) from exc
                if fetched is None:
                    break
                known[current] = fetched
            entry = known[current]
            current = parent_of(entry) if isinstance(entry, Mapping) else ""
        return known

    # ----------------------------------------------------------------- admission

    async def validate_pod_group(
        self,
        *,
        body: Mapping[str, Any],
        namespace: str | None,
        operation: str | None = None,
        old: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        """Validating admission of PodGroups (CREATE, UPDATE)."""
        if self.options.namespace and namespace != self.options.namespace:
            return
        obj = dict(body)
        if _spec_unchanged(operation, old, obj):
            return
        messages = validate_pod_group(obj)
        if messages:
            raise _refusal("PodGroup", obj, messages)

    async def validate_queue(
        self,
        *,
        body: Mapping[str, Any],
        logger: kopf.Logger,
        operation: str | None = None,
        old: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Validating admission of Queues (CREATE, UPDATE)."""
        obj = dict(body)
        if _spec_unchanged(operation, old, obj):
            return
        index: Mapping[str, Iterable[str]] = kwargs.get(INDEX_QUEUE_PARENTS) or {}
        known = await self._known_queues(obj, index, logger)
        messages = validate_queue(obj, known)
        if messages:
            raise _refusal("Queue", obj, messages)


LOG = logging.getLogger("sluice.controller")


async def _close(api: object) -> None:
    close = getattr(api, "close", None)
    if close is not None:
        await close()


async def _get_queue(name: str, client: QueueClient) -> dict[str, Any] | None:
    return await client.get(name)


def build_registry(
    options: ControllerOptions, *, controller: Controller | None = None
) -> kopf.OperatorRegistry:
    """A fresh registry with every handler of the controller (nothing global is touched)."""
    ctl = controller if controller is not None else Controller(options)
    registry = kopf.OperatorRegistry()
    operations: list[kopf.Operation] = ["CREATE", "UPDATE"]

    kopf.on.startup(id="configure", registry=registry)(ctl.configure)
    kopf.on.startup(id="keep-default-queue", registry=registry)(ctl.start)
    kopf.on.cleanup(id="stop", registry=registry)(ctl.stop)
    kopf.on.login(id="login", registry=registry, errors=kopf.ErrorsMode.PERMANENT)(ctl.login)
    kopf.index(
        group=GROUP, version=VERSION, plural="queues", id=INDEX_QUEUE_PARENTS, registry=registry
    )(ctl.index_queue_parents)
    kopf.on.event(
        group=GROUP,
        version=VERSION,
        plural="queues",
        id="recreate-default-queue",
        when=ctl.is_default_queue_deleted,
        registry=registry,
    )(ctl.on_queue_event)
    kopf.on.event(
        group="",
        version="v1",
        plural="pods",
        id=GROUP_PODS,
        when=ctl.is_pod_to_group,
        registry=registry,
    )(ctl.on_pod_event)
    kopf.on.validate(
        group=GROUP,
        version=VERSION,
        plural="podgroups",
        id=WEBHOOK_POD_GROUP,
        operations=operations,
        registry=registry,
    )(ctl.validate_pod_group)
    kopf.on.validate(
        group=GROUP,
        version=VERSION,
        plural="queues",
        id=WEBHOOK_QUEUE,
        operations=operations,
        registry=registry,
    )(ctl.validate_queue)
    return registry
