"""Kinds the scheduler reads only where the cluster serves them (layer 4, kube).

Other schedulers' APIs (Volcano's, scheduler-plugins', the alpha ``scheduling.k8s.io/
v1alpha2`` of Kubernetes v1.36) are served only when their CustomResourceDefinition is
installed, or, for the built-in alpha API, when the API server was started with it on.
:class:`OptionalInformers` watches for each such kind the one object that says whether it
is served (:class:`OptionalKind`): its ``CustomResourceDefinition`` (``Established``, the
version served), or the ``APIService`` of its group version (``Available``), each through
a list+watch of that one name (``fieldSelector=metadata.name=...``). While a kind is served,
an :class:`~scheduler.kube.informers.Informer` lists and watches it into the sink; when it
stops being served, that informer is cancelled and the kind's objects are dropped from
the sink (``replace(kind, [])``). Each change is logged once (``API off``, ``API on``);
an API that is off costs one idle watch.

Contracts: :meth:`OptionalInformers.run` runs everything in one task group until
cancelled; it reports started (and sets :attr:`OptionalInformers.ready`) once every marker
has been listed and every kind served at that moment has been listed, so the first cycle
sees whatever is installed. Sink calls are synchronous, from the informers' tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from scheduler.api.group_apis import APIS, SLUICE
from scheduler.kube.client import KubeClient
from scheduler.kube.informers import CacheSink, Informer, InformerSettings
from scheduler.kube.resource_paths import (
    API_SERVICES,
    CUSTOM_RESOURCE_DEFINITIONS,
    Resource,
    pod_groups_of,
    queues_of,
)
from scheduler.logging import get_logger
from scheduler.ports import Clock

__all__ = ["OPTIONAL_KINDS", "OptionalInformers", "OptionalKind", "served"]

log = get_logger("sluice.kube.optional")


@dataclass(frozen=True, slots=True)
class OptionalKind:
    """A kind served only when installed: ``resource``, and the object that says so,
    ``marker_name`` of ``marker`` (CustomResourceDefinitions or APIServices)."""

    resource: Resource
    marker: Resource

    @property
    def marker_name(self) -> str:
        r = self.resource
        if self.marker is API_SERVICES:
            return f"{r.version}.{r.group}"
        return f"{r.plural}.{r.group}"


def _crd(resource: Resource) -> OptionalKind:
    return OptionalKind(resource, CUSTOM_RESOURCE_DEFINITIONS)


OPTIONAL_KINDS: Final[tuple[OptionalKind, ...]] = tuple(
    OptionalKind(resource, API_SERVICES) if api.builtin else _crd(resource)
    for api in APIS
    if api is not SLUICE
    for resource in (pod_groups_of(api), *((queues_of(api),) if api.queue_kind else ()))
)
"""Every kind the scheduler reads when the cluster serves it."""


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


def served(kind: OptionalKind, marker: Mapping[str, Any] | None) -> bool:
    """Is ``kind`` served, given its marker object (None: there is none)? A CRD must be
    ``Established`` and serve the kind's version; an APIService must be ``Available``."""
    if marker is None:
        return False
    if kind.marker is API_SERVICES:
        return _condition(marker, "Available")
    versions = (marker.get("spec") or {}).get("versions") or ()
    version_served = any(
        isinstance(v, Mapping) and v.get("name") == kind.resource.version and v.get("served")
        for v in versions
    )
    return version_served and _condition(marker, "Established")


class _MarkerSink:
    """Receives the one marker object of a kind and tells its owner of every change."""

    def __init__(self, owner: OptionalInformers, kind: OptionalKind) -> None:
        self._owner = owner
        self._kind = kind
        self.marker: Mapping[str, Any] | None = None

    def handle(self, kind: str, event: str, obj: Mapping[str, Any], /) -> None:
        del kind
        self.marker = None if event == "DELETED" else obj
        self._owner.changed(self._kind)

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]], /) -> None:
        del kind
        self.marker = next(iter(objects), None)
        self._owner.changed(self._kind)


class OptionalInformers:
    """The optional kinds of ``kinds`` into ``sink``, each while the cluster serves it."""

    def __init__(
        self,
        client: KubeClient,
        sink: CacheSink,
        *,
        kinds: Sequence[OptionalKind] = OPTIONAL_KINDS,
        settings: InformerSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.sink = sink
        self.kinds = tuple(kinds)
        self.settings = settings or InformerSettings()
        self.clock = clock
        self._markers = {k: _MarkerSink(self, k) for k in self.kinds}
        self._marker_informers = [
            Informer(
                client,
                k.marker,
                self._markers[k],
                settings=self.settings,
                clock=clock,
                field_selector=f"metadata.name={k.marker_name}",
            )
            for k in self.kinds
        ]
        self.informers: dict[str, Informer] = {}
        """The informers of the kinds served now, by kind key."""
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._on: dict[str, bool] = {}
        """What was last logged of each kind: served or not."""
        self._tg: TaskGroup | None = None
        self.ready = anyio.Event()

    def on(self, kind: OptionalKind) -> bool:
        """Is ``kind`` served (and so watched) now?"""
        return kind.resource.key in self.informers

    def synced(self) -> bool:
        """Every marker listed once, and every kind served now listed once."""
        return all(i.has_synced for i in self._marker_informers) and all(
            i.has_synced for i in self.informers.values()
        )

    def changed(self, kind: OptionalKind) -> None:
        """The marker of ``kind`` changed: start or stop watching it. Called by the marker
        informers, synchronously."""
        key = kind.resource.key
        now = served(kind, self._markers[kind].marker)
        if now and key not in self.informers:
            informer = Informer(
                self.client, kind.resource, self.sink, settings=self.settings, clock=self.clock
            )
            self.informers[key] = informer
            assert self._tg is not None, "a marker changed before run()"
            self._tg.start_soon(self._watch, key, informer, name=f"informer:{key}")
        elif not now and key in self.informers:
            del self.informers[key]
            scope = self._scopes.pop(key, None)
            if scope is not None:
                scope.cancel()
            self.sink.replace(key, [])
        if self._on.get(key) != now:
            self._on[key] = now
            what = (
                "CustomResourceDefinition"
                if kind.marker is CUSTOM_RESOURCE_DEFINITIONS
                else ("APIService")
            )
            if now:
                log.info("API on: watching its objects", kind=key, marker=kind.marker_name)
            else:
                log.info(
                    f"API off: its {what} is not installed or not ready; on when it is",
                    kind=key,
                    marker=kind.marker_name,
                )

    async def _watch(self, key: str, informer: Informer) -> None:
        with anyio.CancelScope() as scope:
            self._scopes[key] = scope
            await informer.run()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch the markers, and the kinds while served, until cancelled; started once
        the markers and the kinds served then are listed."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for informer in self._marker_informers:
                tg.start_soon(informer.run, name=f"informer:{informer.resource.key}:marker")
            for informer in self._marker_informers:
                await informer.synced.wait()
            for informer in list(self.informers.values()):
                await informer.synced.wait()
            self.ready.set()
            task_status.started()
