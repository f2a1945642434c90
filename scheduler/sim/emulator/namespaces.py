"""The namespaces of the Kubernetes API emulator (layer 4).

The store has no Namespace objects: a namespace exists while some namespaced object is
in it, and :data:`DEFAULT_NAMESPACES` (``default`` and the ``kube-*`` ones) always do,
as do those created through the API until deleted. :func:`namespace_names` lists them,
:func:`new_namespace` builds the ``Namespace`` object served for one (a uid derived from
its name, ``resourceVersion`` 1, created when the emulator started, Active), and
:func:`delete_namespaced_objects` empties one when it is deleted (every namespaced
object in it, without grace). The emulator keeps the objects it has served
(:mod:`.emulator`). :func:`watch_namespaces` serves a watch of them: it looks every
:data:`POLL` seconds and tells the namespaces that came (ADDED) and went (DELETED) since
the watch began, with bookmarks when asked; a namespace that came and went between two
looks is not told.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

import anyio
from aiohttp import web

from scheduler.api.errors import ApiError
from scheduler.sim.emulator.responses import dumps
from scheduler.sim.store import ApiObject, ObjectStore

__all__ = [
    "DEFAULT_NAMESPACES",
    "delete_namespaced_objects",
    "namespace_names",
    "new_namespace",
    "watch_namespaces",
]

POLL: Final = 0.2
"""Seconds between two looks of a namespace watch."""

#: The namespaces every cluster has; they cannot be deleted.
DEFAULT_NAMESPACES: Final = ("default", "kube-node-lease", "kube-public", "kube-system")
_NS_UUID: Final = uuid.UUID("6f1c1f7e-4b7e-4d5e-9a53-5c1c3e0d2a10")


def new_namespace(name: str, created: float) -> ApiObject:
    """The ``Namespace`` object of ``name``, created at Unix time ``created``."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(_NS_UUID, name)),
            "resourceVersion": "1",
            "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
            "labels": {"kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def namespace_names(store: ObjectStore, created: Iterable[str]) -> list[str]:
    """The namespaces that exist, sorted: the default ones, ``created`` and those of the
    store's namespaced objects."""
    names = set(DEFAULT_NAMESPACES) | set(created)
    for kind in store.kinds():
        if not store.is_cluster_scoped(kind):
            names.update(o["metadata"].get("namespace", "") for o in store.list(kind)[0])
    names.discard("")
    return sorted(names)


def delete_namespaced_objects(store: ObjectStore, namespace: str) -> None:
    """Delete every namespaced object in ``namespace`` at once; errors are ignored."""
    for kind in store.kinds():
        if store.is_cluster_scoped(kind):
            continue
        for item in store.list(kind, namespace)[0]:
            with contextlib.suppress(ApiError):
                store.delete(kind, namespace, item["metadata"]["name"], grace_period_seconds=0)


async def watch_namespaces(
    response: web.StreamResponse,
    names: Callable[[], list[str]],
    obj_of: Callable[[str], ApiObject],
    resource_version: Callable[[], int],
    *,
    initial: bool,
    timeout: float,
    bookmark_interval: float | None,
) -> None:
    """Write the events of a namespace watch on ``response`` (prepared) until ``timeout``:
    with ``initial`` (no resourceVersion asked), every namespace first as ADDED."""
    seen: set[str] = set() if initial else set(names())
    last_bookmark = time.monotonic()
    with anyio.move_on_after(timeout):
        while True:
            now = names()
            events: list[dict[str, Any]] = [
                {"type": "ADDED", "object": obj_of(n)} for n in now if n not in seen
            ]
            events += [{"type": "DELETED", "object": obj_of(n)} for n in sorted(seen - set(now))]
            seen = set(now)
            for event in events:
                await response.write(dumps(event) + b"\n")
            if bookmark_interval is not None and (
                time.monotonic() - last_bookmark >= bookmark_interval
            ):
                last_bookmark = time.monotonic()
                mark = {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"resourceVersion": str(resource_version())},
                }
                await response.write(dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
            await anyio.sleep(POLL)
