"""The namespaces of the Kubernetes API emulator (layer 4).

The store has no Namespace objects: a namespace exists while some namespaced object is
in it, and :data:`DEFAULT_NAMESPACES` (``default`` and the ``kube-*`` ones) always do,
as do those created through the API until deleted. :func:`namespace_names` lists them,
:func:`new_namespace` builds the ``Namespace`` object served for one (a uid derived from
its name, ``resourceVersion`` 1, created when the emulator started, Active), and
:func:`delete_namespaced_objects` empties one when it is deleted (every namespaced
object in it, without grace). The emulator keeps the objects it has served
(:mod:`.emulator`); namespaces are not watched.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterable
from typing import Final

from scheduler.api.errors import ApiError
from scheduler.sim.store import ApiObject, ObjectStore

__all__ = ["DEFAULT_NAMESPACES", "delete_namespaced_objects", "namespace_names", "new_namespace"]

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
