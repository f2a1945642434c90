"""The end-to-end harness: a Kubernetes API server, fake nodes, a fake kubelet, and
``sluice run`` as a subprocess.

Everything here talks to the API server over HTTP through kubernetes-asyncio, given a
kubeconfig, so the same tests run against a real cluster and against the in-process
emulator (:class:`EmulatedApiServer`, which is only used when no cluster is named).
Nothing here imports ``scheduler.kube``: the harness must not share the client code it
is testing.

* :class:`Api`: raw JSON requests and watches (``_preload_content=False``, no models).
* :class:`Cluster`: one test's view of the cluster: a namespace of its own, fake Nodes
  labelled with the test's run id (and every pod gets a nodeSelector for that label, so
  pods never land on real nodes), PodGroups, Queues, PriorityClasses, PDBs, a live cache
  of the namespace's pods (:class:`PodInformer`) and a recorder of everything that
  happened to them (:class:`PodRecorder`); :meth:`Cluster.cleanup` deletes all of it.
* :class:`FakeKubelet`: plays the kubelet through the API for the fake nodes: bound pods
  are marked Running and Ready, graceful deletions are finished with grace 0, and (on a
  real cluster) node Leases are renewed so the node lifecycle controller leaves the
  nodes Ready.
* :class:`SchedulerProcess`: ``sluice run`` in a subprocess, its output in a log file,
  ``/readyz``, ``/metrics``, SIGTERM and SIGKILL.
* :func:`wait_for`: poll a condition with a timeout and a useful failure message.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
import anyio
import anyio.abc
import yaml
from fault_proxy import FaultProxy, Faults
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

T = TypeVar("T")

REPO: Final = Path(__file__).resolve().parent.parent
CRD_DIR: Final = REPO / "crds"
OWNER_CRD_DIR: Final = Path(__file__).resolve().parent / "owner-crds"
"""Upstream CRDs of pods' owners (PyTorchJob, JobSet) for the pod grouper's tests."""
GROUP: Final = "scheduling.sluice.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
POD_GROUP_LABEL: Final = f"{GROUP}/pod-group"
QUEUE_LABEL: Final = f"{GROUP}/queue"
RUN_LABEL: Final = "e2e.sluice.dev/run"
HARNESS_USER_AGENT: Final = "sluice-e2e-harness"
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"
JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"

# --------------------------------------------------------------------------- quantities

_SUFFIXES: Final[Mapping[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
}
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity (``100m``, ``2``, ``500Mi``, ``1e3``) as a Decimal."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a pod asks of its node: the sum of its containers' requests (cpu, memory) and
    one ``pods`` slot; init containers' maximum when larger, as the scheduler counts."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = defaultdict(Decimal)
    for c in spec.get("containers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] += quantity(v)
    for c in spec.get("initContainers") or ():
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total[k], quantity(v))
    total["pods"] += 1
    return dict(total)


# --------------------------------------------------------------------------- waiting


async def gather_bounded(calls: Sequence[Callable[[], Awaitable[T]]], concurrency: int) -> list[T]:
    """Run ``calls``, at most ``concurrency`` at a time; their results, in order."""
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await calls[i]()

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return results


async def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    detail: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``condition`` (sync or async) until it returns something truthy; return it.

    After ``timeout`` seconds fail the test with ``what``, the last value and, if given,
    ``detail()`` (sync or async: what to show of the state to explain the failure).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = condition()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            break
        await anyio.sleep(interval)
    extra = ""
    if detail is not None:
        shown = detail()
        if inspect.isawaitable(shown):
            shown = await shown
        extra = f"\n{shown}"
    raise AssertionError(
        f"timed out after {timeout:g} s waiting for {what} (last: {last!r}){extra}"
    )


async def hold_for(
    condition: Callable[[], Any], *, seconds: float, what: str, interval: float = 0.1
) -> None:
    """Check that ``condition`` (sync or async) stays truthy for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if not value:
            raise AssertionError(f"{what} stopped holding (got {value!r})")
        if time.monotonic() >= deadline:
            return
        await anyio.sleep(interval)


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the API


class ApiFailure(Exception):
    """A non-2xx reply (``status``; the ``Status`` object in ``body``), or ``status`` 0
    when the server could not be reached or did not answer in time."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = str(self.body.get("reason") or "")
        super().__init__(f"{what}: HTTP {status} {self.reason}: {self.body.get('message', '')}")


class Api:
    """Raw JSON over one kubernetes-asyncio ``ApiClient`` (authentication, TLS and the
    server address come from the kubeconfig). Every request has a timeout."""

    def __init__(self, client: ApiClient, *, timeout: float = 30.0) -> None:
        self.client = client
        self.timeout = timeout

    @classmethod
    async def connect(cls, kubeconfig: str | None, *, timeout: float = 30.0) -> Api:
        configuration = Configuration()
        await kube_config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration
        )
        client = ApiClient(configuration)
        client.user_agent = HARNESS_USER_AGENT
        return cls(client, timeout=timeout)

    async def close(self) -> None:
        await self.client.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str,
        timeout: float | aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, "Content-Type": content_type}
        try:
            return await self.client.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiFailure(0, {"message": repr(exc)}, f"{method} {path}") from exc

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One request; the decoded JSON reply. Raises :class:`ApiFailure`."""
        resp = await self._send(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout or self.timeout,
        )
        try:
            raw = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiFailure(0, {"message": repr(exc)}, f"{method} {path}") from exc
        finally:
            resp.release()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"message": raw[:300].decode("utf-8", "replace")}
        if not 200 <= resp.status < 300:
            raise ApiFailure(resp.status, doc, f"{method} {path}")
        return doc if isinstance(doc, dict) else {"value": doc}

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int = 60
    ) -> AsyncIterator[dict[str, Any]]:
        """The lines of one watch from ``resource_version`` until the server ends it.
        ``ERROR`` lines are yielded as they come (the caller decides)."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        limit = aiohttp.ClientTimeout(total=timeout_seconds + 15, sock_connect=10)
        resp = await self._send(
            "GET", path, query=query, body=None, content_type=JSON, timeout=limit
        )
        try:
            if resp.status != 200:
                raw = await resp.read()
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"message": raw[:300].decode("utf-8", "replace")}
                raise ApiFailure(resp.status, body, f"watch {path}")
            while True:
                try:
                    line = await resp.content.readline()
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    raise ApiFailure(0, {"message": repr(exc)}, f"watch {path}") from exc
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            resp.release()


def core_path(
    plural: str, namespace: str | None = None, name: str = "", sub: str = "", *, group: str = ""
) -> str:
    """The URL path of a collection, an object or a subresource (``group`` ``g/v``;
    core v1 when empty)."""
    base = f"/apis/{group}" if group else "/api/v1"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name:
        base += f"/{name}"
        if sub:
            base += f"/{sub}"
    return base


def custom_path(plural: str, namespace: str | None = None, name: str = "", sub: str = "") -> str:
    return core_path(plural, namespace, name, sub, group=API_VERSION)


# --------------------------------------------------------------------------- list+watch


class ListWatch:
    """List, then watch, forever, for one collection: ``on_sync(items)`` after every
    (re)list, ``on_event(type, obj)`` for every ADDED/MODIFIED/DELETED. Relists on 410,
    reconnects on any other failure (the API server restarting, a cut watch)."""

    def __init__(
        self,
        api: Api,
        path: str,
        on_sync: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.api = api
        self.path = path
        self.on_sync = on_sync
        self.on_event = on_event
        self.resource_version = ""
        self.synced = anyio.Event()
        self.relists = 0
        self.reconnects = 0

    async def _list(self) -> None:
        doc = await self.api.request("GET", self.path, timeout=60)
        self.resource_version = str((doc.get("metadata") or {}).get("resourceVersion") or "")
        self.on_sync([i for i in doc.get("items") or () if isinstance(i, dict)])
        self.synced.set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        started = False
        must_list = True
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                    if not started:
                        started = True
                        task_status.started()
                async for line in self.api.watch(self.path, resource_version=self.resource_version):
                    kind, obj = line.get("type"), line.get("object") or {}
                    if kind == "ERROR":
                        code = int(obj.get("code") or 500)
                        raise ApiFailure(code, obj, f"watch {self.path}")
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(kind, obj)
                    if rv:
                        self.resource_version = rv
            except ApiFailure as exc:
                if exc.status == 410:
                    must_list = True
                    self.relists += 1
                else:
                    self.reconnects += 1
                    await anyio.sleep(0.2)


# --------------------------------------------------------------------------- pods seen


def condition(pod: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == kind:
            return dict(c)
    return None


def is_running(pod: Mapping[str, Any]) -> bool:
    ready = condition(pod, "Ready")
    return (pod.get("status") or {}).get("phase") == "Running" and bool(
        ready and ready.get("status") == "True"
    )


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


@dataclass
class PodHistory:
    """What the watch showed of one pod (one uid) over its life."""

    name: str
    uid: str
    node: str = ""
    nominated: list[str] = field(default_factory=list)
    conditions: list[tuple[str, str, str]] = field(default_factory=list)
    """Every distinct (type, status, reason) seen, in order."""
    deleted: bool = False
    last: dict[str, Any] = field(default_factory=dict)

    def saw(self, kind: str, status: str = "True", reason: str | None = None) -> bool:
        return any(
            c[0] == kind and c[1] == status and (reason is None or c[2] == reason)
            for c in self.conditions
        )


class PodRecorder:
    """Keeps the history of every pod of the namespace and checks two invariants on every
    watch event: a pod's ``spec.nodeName`` never changes once set (no pod is bound twice),
    and no fake node ever holds pods asking for more than it has (counting pods that are
    terminating, as the kubelet and the scheduler do)."""

    def __init__(self, nodes: Mapping[str, Mapping[str, Decimal]]) -> None:
        self.nodes = nodes
        self.by_uid: dict[str, PodHistory] = {}
        self.current: dict[str, dict[str, Any]] = {}
        self.violations: list[str] = []
        self.events = 0

    def history(self, name: str) -> PodHistory | None:
        """The history of the latest pod of that name."""
        found = [h for h in self.by_uid.values() if h.name == name]
        return found[-1] if found else None

    def observe(self, kind: str, pod: dict[str, Any]) -> None:
        self.events += 1
        uid, name = uid_of(pod), name_of(pod)
        h = self.by_uid.get(uid)
        if h is None:
            h = self.by_uid[uid] = PodHistory(name, uid)
        node = node_of(pod)
        if h.node and node != h.node:
            self.violations.append(f"pod {name} ({uid}) was on {h.node!r}, now on {node!r}")
        if node:
            h.node = node
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and (not h.nominated or h.nominated[-1] != nominated):
            h.nominated.append(str(nominated))
        for c in (pod.get("status") or {}).get("conditions") or ():
            key = (str(c.get("type")), str(c.get("status")), str(c.get("reason") or ""))
            if key not in h.conditions:
                h.conditions.append(key)
        h.last = pod
        previous = self.current.get(name)
        if kind == "DELETED":
            h.deleted = True
            if previous is not None and uid_of(previous) == uid:
                del self.current[name]
        else:
            self.current[name] = pod
        touched = {node_of(pod), node_of(previous) if previous else ""} - {""}
        for n in touched:
            self._check_node(n)

    def sync(self, pods: Iterable[dict[str, Any]]) -> None:
        listed = {name_of(p): p for p in pods}
        for name, old in list(self.current.items()):
            if name not in listed or uid_of(listed[name]) != uid_of(old):
                self.observe("DELETED", old)
        for p in listed.values():
            self.observe("MODIFIED", p)

    def usage(self, node: str) -> dict[str, Decimal]:
        total: dict[str, Decimal] = defaultdict(Decimal)
        for p in self.current.values():
            if node_of(p) == node and (p.get("status") or {}).get("phase") not in (
                "Succeeded",
                "Failed",
            ):
                for k, v in pod_requests(p).items():
                    total[k] += v
        return dict(total)

    def _check_node(self, node: str) -> None:
        allocatable = self.nodes.get(node)
        if allocatable is None:
            return
        used = self.usage(node)
        for resource, amount in used.items():
            if resource in allocatable and amount > allocatable[resource]:
                self.violations.append(
                    f"node {node} over-allocated: {resource} {amount} > {allocatable[resource]}"
                )


class PodInformer:
    """A live copy of the namespace's pods, fed by one list+watch, handed on in order to
    listeners (the recorder, the fake kubelet)."""

    def __init__(self, api: Api, namespace: str) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self.sync_listeners: list[Callable[[list[dict[str, Any]]], None]] = []
        self.list_watch = ListWatch(api, core_path("pods", namespace), self._sync, self._event)

    def _sync(self, items: list[dict[str, Any]]) -> None:
        self.pods = {name_of(p): p for p in items}
        for listener in self.sync_listeners:
            listener(items)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        name = name_of(obj)
        if kind == "DELETED":
            current = self.pods.get(name)
            if current is not None and uid_of(current) == uid_of(obj):
                del self.pods[name]
        else:
            self.pods[name] = obj
        for listener in self.listeners:
            listener(kind, obj)


# --------------------------------------------------------------------------- the kubelet


class FakeKubelet:
    """The kubelet of the fake nodes, played through the API.

    For every pod of the namespace bound to one of ``nodes``: not Running yet -> a
    strategic-merge patch of its status (phase Running, Ready, ContainersReady,
    Initialized); being deleted -> deleted again with ``gracePeriodSeconds: 0`` (what
    the kubelet does when the containers have stopped). Calls run in ``workers``
    concurrent tasks and are retried until they succeed or the pod is gone. With
    ``node_leases``, the nodes' Leases in ``kube-node-lease`` are renewed every
    ``lease_interval`` seconds (the heartbeat a real cluster's node lifecycle
    controller checks).
    """

    def __init__(
        self,
        api: Api,
        namespace: str,
        nodes: Mapping[str, Any],
        *,
        workers: int = 16,
        node_leases: bool = False,
        lease_interval: float = 10.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.nodes = nodes
        self.workers = workers
        self.node_leases = node_leases
        self.lease_interval = lease_interval
        send, receive = anyio.create_memory_object_stream[tuple[str, str, str]](math.inf)
        self._send = send
        self._receive = receive
        self._queued: set[tuple[str, str, str]] = set()
        self.started = 0
        self.finished = 0
        self.failures = 0

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED" or node_of(pod) not in self.nodes:
            return
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            self._enqueue(("finish", name_of(pod), uid_of(pod)))
        elif phase not in ("Succeeded", "Failed") and not is_running(pod):
            self._enqueue(("start", name_of(pod), uid_of(pod)))

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        for p in pods:
            self.on_pod("MODIFIED", p)

    def _enqueue(self, item: tuple[str, str, str]) -> None:
        if item not in self._queued:
            self._queued.add(item)
            self._send.send_nowait(item)

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(self.workers):
                tg.start_soon(self._worker)
            if self.node_leases:
                tg.start_soon(self._heartbeat)

    async def _worker(self) -> None:
        async for item in self._receive:
            action, name, uid = item
            try:
                await self._do(action, name, uid)
            except ApiFailure as exc:
                if exc.status in (404, 409):  # gone, or another pod of that name now
                    self._queued.discard(item)
                    continue
                self.failures += 1
                await anyio.sleep(0.2)
                self._queued.discard(item)
                self._enqueue(item)
                continue
            self._queued.discard(item)

    async def _do(self, action: str, name: str, uid: str) -> None:
        if action == "start":
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            conditions = [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("Initialized", "ContainersReady", "Ready")
            ]
            body = {
                "metadata": {"uid": uid},
                "status": {
                    "phase": "Running",
                    "startTime": now,
                    "conditions": conditions,
                },
            }
            await self.api.request(
                "PATCH",
                core_path("pods", self.namespace, name, "status"),
                body=body,
                content_type=STRATEGIC_MERGE_PATCH,
            )
            self.started += 1
        else:
            options = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": uid},
            }
            await self.api.request("DELETE", core_path("pods", self.namespace, name), body=options)
            self.finished += 1

    async def _heartbeat(self) -> None:
        namespace = "kube-node-lease"
        while True:
            for node in list(self.nodes):
                now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
                path = core_path("leases", namespace, group="coordination.k8s.io/v1")
                lease = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": node, "namespace": namespace},
                    "spec": {
                        "holderIdentity": node,
                        "leaseDurationSeconds": 40,
                        "renewTime": now,
                    },
                }
                with contextlib.suppress(ApiFailure):
                    try:
                        await self.api.request("POST", path, body=lease)
                    except ApiFailure as exc:
                        if exc.status != 409:
                            raise
                        await self.api.request(
                            "PATCH",
                            f"{path}/{node}",
                            body={"spec": {"renewTime": now}},
                            content_type=MERGE_PATCH,
                        )
            await anyio.sleep(self.lease_interval)


# --------------------------------------------------------------------------- the cluster


def load_crds(directory: Path = CRD_DIR, pattern: str = "*.yaml") -> list[dict[str, Any]]:
    """The CRDs of ``directory`` (``crds/``; ``pattern`` ``upstream/*/*.yaml``: the other
    schedulers' CRDs, as their projects publish them)."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob(pattern)):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return docs


UPSTREAM_CRDS: Final = "upstream/*/*.yaml"


async def install_crds(
    api: Api,
    *,
    timeout: float = 60.0,
    crds: list[dict[str, Any]] | None = None,
    directory: Path | None = None,
) -> list[str]:
    """Create or replace ``crds`` (by default those of ``directory``, or those of
    ``crds/`` and the other schedulers' of ``crds/upstream/``) and wait until they are
    served (the emulator serves them built in, and keeps the CRD objects as any cluster
    does). Returns the names of the CRDs created (not those that existed)."""
    crd_api = "apiextensions.k8s.io/v1"
    if crds is None:
        crds = (
            load_crds(directory)
            if directory is not None
            else [*load_crds(), *load_crds(pattern=UPSTREAM_CRDS)]
        )
    served = await api.get_or_none(f"/apis/{API_VERSION}")
    if await api.get_or_none(f"/apis/{crd_api}") is None:
        if served is None:
            raise RuntimeError(
                f"the API server serves neither {API_VERSION} nor {crd_api}: cannot install CRDs"
            )
        return []
    created: list[str] = []
    for crd in crds:
        name = crd["metadata"]["name"]
        path = core_path("customresourcedefinitions", group=crd_api)
        try:
            await api.request("POST", path, body=crd)
            created.append(name)
        except ApiFailure as exc:
            if exc.status != 409:
                raise
            existing = await api.request("GET", f"{path}/{name}")
            replacement = {
                **crd,
                "metadata": {
                    **crd["metadata"],
                    "resourceVersion": existing["metadata"]["resourceVersion"],
                },
            }
            await api.request("PUT", f"{path}/{name}", body=replacement)
    wanted: dict[str, set[str]] = defaultdict(set)
    for c in crds:
        for v in c["spec"]["versions"]:
            if v.get("served"):
                wanted[f"{c['spec']['group']}/{v['name']}"].add(c["spec"]["names"]["plural"])

    async def all_served() -> bool:
        for group_version, plurals in wanted.items():
            doc = await api.get_or_none(f"/apis/{group_version}")
            if not plurals <= {r.get("name") for r in (doc or {}).get("resources") or ()}:
                return False
        return True

    await wait_for(all_served, timeout=timeout, what=f"the CRDs of {', '.join(wanted)} served")
    return created


@dataclass
class NodeSpec:
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 110

    def allocatable(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}


class Cluster:
    """One test's view of the cluster named by a kubeconfig.

    Namespaced objects live in :attr:`namespace` (``e2e-<run id>``); cluster-scoped ones
    (Nodes, Queues, PriorityClasses) are named ``<run id>-...``. Every pod gets
    ``schedulerName`` :attr:`scheduler_name`, a nodeSelector for the run's fake nodes and
    ``automountServiceAccountToken: false``. :meth:`cleanup` deletes all of it.
    """

    def __init__(
        self,
        api: Api,
        kubeconfig: str | None,
        *,
        scheduler_name: str = "sluice",
        emulator: EmulatedApiServer | None = None,
        run_id: str | None = None,
    ) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.scheduler_name = scheduler_name
        self.emulator = emulator
        self.run_id = run_id or f"e2e{uuid.uuid4().hex[:8]}"
        self.namespace = f"e2e-{self.run_id}"
        self.scheduler_kubeconfig = kubeconfig
        """What ``sluice run`` connects with: the ServiceAccount's on a real cluster."""
        self.controller_kubeconfig = kubeconfig
        """What ``sluice controller`` connects with."""
        self.proxy: FaultProxy | None = None
        """The fault-injecting front the scheduler talks through (tests marked ``faults``)."""
        self.lease_namespace = self.namespace
        """Where the schedulers' Lease lives (``sluice-system`` under the RBAC of
        ``manifests/``, whose Role allows Leases there only)."""
        self.nodes: dict[str, dict[str, Decimal]] = {}
        self.queues: list[str] = []
        self.priority_classes: list[str] = []
        self.default_queue_created = False
        self.informer = PodInformer(api, self.namespace)
        self.recorder = PodRecorder(self.nodes)
        self.informer.listeners.append(self.recorder.observe)
        self.informer.sync_listeners.append(self.recorder.sync)
        self.kubelet = FakeKubelet(api, self.namespace, self.nodes, node_leases=emulator is None)
        self.informer.listeners.append(self.kubelet.on_pod)
        self.informer.sync_listeners.append(self.kubelet.on_sync)
        self._created_pods = 0

    @property
    def emulated(self) -> bool:
        return self.emulator is not None

    @property
    def faults(self) -> Faults:
        """What the fault proxy did (a test marked ``faults`` only)."""
        assert self.proxy is not None, "the test has no fault proxy (mark it with faults(...))"
        return self.proxy.faults

    async def put_behind_proxy(self, faults: Faults, workdir: Path) -> FaultProxy:
        """From now on ``sluice run`` talks to the API server through a :class:`FaultProxy`
        that acts as :attr:`scheduler_kubeconfig`'s user and injects ``faults``. The
        harness's own calls (and the fake kubelet's) stay direct. Stopped by the fixture."""
        proxy = FaultProxy(self.scheduler_kubeconfig, workdir, faults)
        await proxy.start()
        self.proxy = proxy
        self.scheduler_kubeconfig = proxy.kubeconfig
        return proxy

    def name(self, suffix: str) -> str:
        """A cluster-wide name unique to this run."""
        return f"{self.run_id}-{suffix}"

    # ----------------------------------------------------------------- set up, clean up

    async def setup(self) -> None:
        """Namespace (with its default ServiceAccount: no controller manager may create
        it), then the default Queue if missing."""
        await self.api.request(
            "POST",
            core_path("namespaces"),
            body={
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.namespace, "labels": {RUN_LABEL: self.run_id}},
            },
        )
        if not self.emulated:
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            try:
                await self.api.request(
                    "POST", core_path("serviceaccounts", self.namespace), body=sa
                )
            except ApiFailure as exc:
                if exc.status not in (404, 409):  # 404: a server without ServiceAccounts
                    raise
        if await self.api.get_or_none(custom_path("queues", None, "default")) is None:
            await self.create_queue("default", weight=1, raw_name=True)
            self.default_queue_created = True

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The pod informer and the fake kubelet, until cancelled."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.informer.list_watch.run)
            tg.start_soon(self.kubelet.run)
            task_status.started()

    async def cleanup(self) -> None:
        """Delete everything this run created (pods at once, with grace 0, since no real
        kubelet will finish them), best effort."""
        suppress = contextlib.suppress(ApiFailure)
        with suppress:
            doc = await self.api.request("GET", core_path("pods", self.namespace))
            async with anyio.create_task_group() as tg:
                for p in doc.get("items") or ():
                    tg.start_soon(
                        self._delete_quietly, core_path("pods", self.namespace, name_of(p))
                    )
        if not self.emulated:
            with suppress:
                await self.api.request(
                    "DELETE",
                    custom_path("podgroups", self.namespace),
                )
        for node in list(self.nodes):
            await self._delete_quietly(core_path("nodes", None, node))
            if not self.emulated:
                await self._delete_quietly(
                    core_path("leases", "kube-node-lease", node, group="coordination.k8s.io/v1")
                )
        for q in self.queues:
            await self._delete_quietly(custom_path("queues", None, q))
        for pc in self.priority_classes:
            await self._delete_quietly(
                core_path("priorityclasses", None, pc, group="scheduling.k8s.io/v1")
            )
        if self.lease_namespace != self.namespace:
            await self._delete_quietly(
                core_path(
                    "leases",
                    self.lease_namespace,
                    f"sluice-{self.run_id}",
                    group="coordination.k8s.io/v1",
                )
            )
        await self._delete_quietly(core_path("namespaces", None, self.namespace))

    async def _delete_quietly(self, path: str) -> None:
        with contextlib.suppress(ApiFailure):
            await self.api.request("DELETE", path, body={"gracePeriodSeconds": 0})

    # ----------------------------------------------------------------- nodes

    def node_manifest(
        self, suffix: str, spec: NodeSpec | None = None, *, labels: Mapping[str, str] = ()
    ) -> dict[str, Any]:
        """A fake Node (capacity, allocatable, Ready) labelled for this run, and known from
        now on to the recorder and the fake kubelet; not created."""
        spec = spec or NodeSpec()
        name = self.name(suffix)
        allocatable = spec.allocatable()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "sluice e2e fake kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.0-sluice-e2e"},
        }
        self.nodes[name] = {k: quantity(v) for k, v in allocatable.items()}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    RUN_LABEL: self.run_id,
                    "kubernetes.io/hostname": name,
                    "type": "sluice-e2e-fake",
                    **dict(labels),
                },
            },
            "spec": {},
            "status": status,
        }

    async def create_node(
        self, suffix: str, spec: NodeSpec | None = None, *, labels: Mapping[str, str] = ()
    ) -> str:
        """Create :meth:`node_manifest`, without the not-ready taint a real API server's
        admission adds; returns its name."""
        node = self.node_manifest(suffix, spec, labels=labels)
        name = node["metadata"]["name"]
        created = await self.api.request("POST", core_path("nodes"), body=node)
        # A real API server may drop status on create: write it through the status
        # subresource, then remove the not-ready taint that admission adds.
        await self.api.request(
            "PATCH",
            core_path("nodes", None, name, "status"),
            body={"status": node["status"]},
            content_type=STRATEGIC_MERGE_PATCH,
        )
        taints = (created.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if not str(t.get("key", "")).startswith("node.kubernetes.io/")]
        if kept != taints:
            await self.api.request(
                "PATCH",
                core_path("nodes", None, name),
                body={"spec": {"taints": kept or None}},
                content_type=MERGE_PATCH,
            )
        return name

    async def create_nodes(
        self, count: int, spec: NodeSpec | None = None, *, prefix: str = "n", concurrency: int = 16
    ) -> list[str]:
        """``count`` nodes named ``<prefix>0`` ..., ``concurrency`` at a time; their names."""
        return await gather_bounded(
            [lambda i=i: self.create_node(f"{prefix}{i}", spec) for i in range(count)],
            concurrency,
        )

    # ----------------------------------------------------------------- pods

    def pod_manifest(
        self,
        name: str,
        *,
        cpu: str = "100m",
        memory: str = "64Mi",
        priority: tuple[str, int] | None = None,
        group: str | None = None,
        queue: str | None = None,
        labels: Mapping[str, str] = (),
        node_selector: Mapping[str, str] = (),
        scheduler_name: str | None = None,
        scheduling_gates: Sequence[str] = (),
        resource_claims: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """A pod for this run. ``priority`` is (PriorityClass name, its value): the name is
        written, and the API server's Priority admission (the emulator's too) sets the
        value. ``scheduling_gates`` names its ``spec.schedulingGates`` (as Kueue creates
        the pods of a workload it has not admitted yet); ``resource_claims`` is its
        ``spec.resourceClaims`` (DRA)."""
        meta_labels = {RUN_LABEL: self.run_id, **dict(labels)}
        if group:
            meta_labels[POD_GROUP_LABEL] = group
        if queue:
            meta_labels[QUEUE_LABEL] = queue
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name or self.scheduler_name,
            "nodeSelector": {RUN_LABEL: self.run_id, **dict(node_selector)},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE_IMAGE,
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        }
        if priority is not None:
            spec["priorityClassName"] = priority[0]
        if scheduling_gates:
            spec["schedulingGates"] = [{"name": g} for g in scheduling_gates]
        if resource_claims:
            spec["resourceClaims"] = [dict(c) for c in resource_claims]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": meta_labels},
            "spec": spec,
        }

    async def create_pod(self, name: str, **options: Any) -> dict[str, Any]:
        self._created_pods += 1
        return await self.api.request(
            "POST", core_path("pods", self.namespace), body=self.pod_manifest(name, **options)
        )

    async def create_pods(
        self, names: Iterable[str], *, concurrency: int = 16, **options: Any
    ) -> None:
        """Create many pods, ``concurrency`` requests at a time."""
        await gather_bounded(
            [lambda n=n: self.create_pod(n, **options) for n in names], concurrency
        )

    async def delete_pod(self, name: str, *, grace: int | None = None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        await self.api.request("DELETE", core_path("pods", self.namespace, name), body=body)

    async def patch_pod(self, name: str, patch: Any, *, json_patch: bool = False) -> None:
        """Patch a pod's main resource: a strategic-merge patch, or (``json_patch``) a
        list of JSON-patch operations."""
        kind = "json-patch+json" if json_patch else "strategic-merge-patch+json"
        await self.api.request(
            "PATCH",
            core_path("pods", self.namespace, name),
            body=patch,
            content_type=f"application/{kind}",
        )

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(core_path("pods", self.namespace, name))

    async def list_pods(self) -> list[dict[str, Any]]:
        doc = await self.api.request("GET", core_path("pods", self.namespace))
        return [p for p in doc.get("items") or () if isinstance(p, dict)]

    def pod(self, name: str) -> dict[str, Any] | None:
        """The latest state the pod watch showed (None: absent)."""
        return self.informer.pods.get(name)

    def bound(self, names: Iterable[str]) -> dict[str, str]:
        """name -> node of those of ``names`` the watch shows bound."""
        out = {}
        for n in names:
            p = self.informer.pods.get(n)
            if p is not None and node_of(p):
                out[n] = node_of(p)
        return out

    def all_bound(self, names: Sequence[str]) -> bool:
        return len(self.bound(names)) == len(names)

    def all_running(self, names: Sequence[str]) -> bool:
        return all((p := self.informer.pods.get(n)) is not None and is_running(p) for n in names)

    def describe_pods(self, names: Iterable[str] | None = None) -> str:
        """One line per pod (for failure messages): node, phase, conditions."""
        lines = []
        for n in sorted(names if names is not None else self.informer.pods):
            p = self.informer.pods.get(n)
            if p is None:
                lines.append(f"  {n}: absent")
                continue
            conds = [
                f"{c.get('type')}={c.get('status')}({c.get('reason', '')})"
                for c in (p.get("status") or {}).get("conditions") or ()
            ]
            status = p.get("status") or {}
            lines.append(
                f"  {n}: node={node_of(p) or '-'} phase={status.get('phase')} "
                f"nominated={status.get('nominatedNodeName', '-')} {' '.join(conds)}"
            )
        return "\n".join(lines[:60]) + ("\n  ..." if len(lines) > 60 else "")

    # ----------------------------------------------------------------- other objects

    async def create_queue(
        self, suffix: str, *, weight: int = 1, raw_name: bool = False, **spec: Any
    ) -> str:
        name = suffix if raw_name else self.name(suffix)
        body = {
            "apiVersion": API_VERSION,
            "kind": "Queue",
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
            "spec": {"weight": weight, **spec},
        }
        await self.api.request("POST", custom_path("queues"), body=body)
        self.queues.append(name)
        return name

    async def get_queue(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(custom_path("queues", None, name))

    async def create_pod_group(
        self, name: str, *, min_member: int, queue: str | None = None, **spec: Any
    ) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {RUN_LABEL: self.run_id},
            },
            "spec": {"minMember": min_member, **({"queue": queue} if queue else {}), **spec},
        }
        return await self.api.request("POST", custom_path("podgroups", self.namespace), body=body)

    async def get_pod_group(self, name: str) -> dict[str, Any] | None:
        return await self.api.get_or_none(custom_path("podgroups", self.namespace, name))

    async def create_priority_class(self, suffix: str, value: int) -> tuple[str, int]:
        """A PriorityClass for this run; returns (name, value) for :meth:`pod_manifest`."""
        name = self.name(suffix)
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {RUN_LABEL: self.run_id}},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        await self.api.request(
            "POST", core_path("priorityclasses", group="scheduling.k8s.io/v1"), body=body
        )
        self.priority_classes.append(name)
        return name, value

    async def create_pdb(
        self, name: str, *, selector: Mapping[str, str], min_available: int
    ) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(selector)}},
        }
        await self.api.request(
            "POST", core_path("poddisruptionbudgets", self.namespace, group="policy/v1"), body=body
        )

    async def events(self) -> list[dict[str, Any]]:
        """The namespace's Events, in the events.k8s.io/v1 shape (``regarding``, ``note``),
        from events.k8s.io/v1 and core v1 both (a scheduler may write either)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        doc = await self.api.request(
            "GET", core_path("events", self.namespace, group="events.k8s.io/v1")
        )
        for e in doc.get("items") or ():
            seen.add(uid_of(e) or name_of(e))
            out.append(e)
        core = await self.api.request("GET", core_path("events", self.namespace))
        for e in core.get("items") or ():
            if (uid_of(e) or name_of(e)) in seen:
                continue
            out.append(
                {
                    **e,
                    "regarding": e.get("involvedObject") or {},
                    "note": e.get("message", ""),
                    "reportingController": (e.get("source") or {}).get("component", ""),
                }
            )
        return out

    async def get_lease(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return await self.api.get_or_none(
            core_path(
                "leases", namespace or self.lease_namespace, name, group="coordination.k8s.io/v1"
            )
        )


# --------------------------------------------------------------------------- the scheduler


def sluice_command() -> list[str]:
    """How to start ``sluice``: ``$SLUICE_E2E_COMMAND`` (split on spaces), else the
    ``sluice`` script next to this Python, else the one on PATH."""
    override = os.environ.get("SLUICE_E2E_COMMAND")
    if override:
        return override.split()
    beside = Path(sys.executable).with_name("sluice")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("sluice")
    if found is None:
        raise RuntimeError(
            "no `sluice` command found (install the package, or set SLUICE_E2E_COMMAND)"
        )
    return [found]


_counter = itertools.count()


class SchedulerProcess:
    """``sluice run`` as a subprocess of the test; stdout and stderr go to ``log_path``."""

    def __init__(
        self,
        kubeconfig: str | None,
        log_dir: Path,
        *,
        leader_elect: bool = False,
        lease_namespace: str = "",
        lease_name: str = "sluice-scheduler",
        feature_gates: str = "",
        config: Path | None = None,
        extra_args: Sequence[str] = (),
        verbosity: int = 2,
    ) -> None:
        self.port = free_port()
        self.index = next(_counter)
        self.log_path = log_dir / f"sluice-run-{self.index}.log"
        argv = [*sluice_command(), "run", "--port", str(self.port), "--bind-address", "127.0.0.1"]
        if kubeconfig and os.pathsep not in kubeconfig:
            argv += ["--kubeconfig", kubeconfig]
        if leader_elect:
            argv += [
                "--leader-elect",
                "--leader-elect-resource-namespace",
                lease_namespace,
                "--leader-elect-resource-name",
                lease_name,
            ]
        if feature_gates:
            argv += ["--feature-gates", feature_gates]
        if config is not None:
            argv += ["--config", str(config)]
        argv += [*extra_args, "-v", str(verbosity)]
        self.argv = argv
        self.proc: anyio.abc.Process | None = None
        self.peak_rss_kib = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.returncode

    async def start(self) -> SchedulerProcess:
        with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
            self.proc = await anyio.open_process(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    async def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait for ``/readyz`` to answer 200 (the informers have synced)."""

        async def ready() -> bool:
            if self.returncode is not None:
                raise AssertionError(
                    f"sluice run exited with {self.returncode} before it was ready\n{self.tail()}"
                )
            try:
                return (await self.http_get("/readyz"))[0] == 200
            except (aiohttp.ClientError, OSError, TimeoutError):
                return False

        await wait_for(ready, timeout=timeout, what="sluice run /readyz", detail=self.tail)

    async def http_get(self, path: str) -> tuple[int, str]:
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"http://127.0.0.1:{self.port}{path}") as resp,
        ):
            return resp.status, await resp.text()

    async def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """A sample of ``/metrics`` (the sum over series when ``labels`` match several)."""
        _, text = await self.http_get("/metrics")
        total: float | None = None
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not match or match.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
            if labels and any(got.get(k) != v for k, v in labels.items()):
                continue
            total = (total or 0.0) + float(match.group(3))
        return total

    def sample_rss(self) -> int:
        """Read VmHWM (peak resident set, KiB) of the process from /proc; 0 if unknown."""
        if self.proc is None or self.returncode is not None:
            return self.peak_rss_kib
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
        return self.peak_rss_kib

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; SIGKILL after ``timeout`` (then raise). Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.returncode is None:
            self.sample_rss()
            self.proc.send_signal(signal.SIGTERM)
        with anyio.move_on_after(timeout):
            return await self.proc.wait()
        self.proc.kill()
        await self.proc.wait()
        raise AssertionError(
            f"sluice run did not stop within {timeout} s of SIGTERM\n{self.tail()}"
        )

    async def kill(self) -> None:
        """SIGKILL (no chance to release anything) and reap."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def aclose(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(AssertionError):
                await self.terminate(timeout=10)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON log lines (others, such as tracebacks, skipped)."""
        out = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def identity(self) -> str | None:
        """The Lease identity this process led with, from its log (None: never led)."""
        for r in self.log_records():
            if r.get("event") == "became leader":
                return str(r.get("identity"))
        return None

    def tail(self, lines: int = 40) -> str:
        text = self.log_text().splitlines()[-lines:]
        return (
            f"--- {self.log_path} (pid {self.proc.pid if self.proc else '-'}, "
            f"exit {self.returncode}) ---\n" + "\n".join(text)
        )


def rebinds_in_log(proc: SchedulerProcess) -> list[str]:
    """Log lines of binds refused because the pod was already bound (a 409)."""
    return [
        json.dumps(r)
        for r in proc.log_records()
        if r.get("call") == "bind" and "already assigned" in str(r.get("error", ""))
    ]


# --------------------------------------------------------------------------- the emulator


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
        from scheduler.sim.claims import SimClaimController
        from scheduler.sim.emulator import ApiEmulator
        from scheduler.sim.store import ObjectStore

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


__all__ = [
    "Api",
    "ApiFailure",
    "Cluster",
    "EmulatedApiServer",
    "FakeKubelet",
    "FaultProxy",
    "Faults",
    "NodeSpec",
    "PodRecorder",
    "SchedulerProcess",
    "hold_for",
    "install_crds",
    "load_crds",
    "quantity",
    "rebinds_in_log",
    "wait_for",
]
