"""One list of everything the scheduler reads, once (layer 4, kube).

For the commands that look at a cluster without watching it: ``sluice explain`` and
``sluice snapshot`` (the scheduler's whole view), ``kubectl sluice`` (queues, PodGroups).
:func:`list_objects` pages through one resource (``limit`` 500 and ``continue``) and gives
each item its ``apiVersion`` and ``kind`` (a list's items have neither);
:func:`list_view` lists every resource of :data:`SCHEDULER_VIEW` the cluster serves: the
kinds the informers watch and the other schedulers' PodGroups and Queues where their CRDs
are installed (``sluice snapshot`` adds the Workloads of the Workload API). A resource
the cluster does not serve (404) is left out and named in :attr:`View.unserved`; any other
failure (a 403 under the caller's RBAC) raises the ApiError naming the resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from scheduler.api.errors import NotFoundError
from scheduler.kube.client import KubeClient
from scheduler.kube.informers import SCHEDULER_RESOURCES
from scheduler.kube.optional import OPTIONAL_KINDS
from scheduler.kube.resource_paths import WORKLOADS, Resource

__all__ = ["SCHEDULER_VIEW", "SNAPSHOT_VIEW", "View", "list_objects", "list_view"]

SCHEDULER_VIEW: Final[tuple[Resource, ...]] = (
    *SCHEDULER_RESOURCES,
    *(k.resource for k in OPTIONAL_KINDS),
)
"""Every resource whose objects the scheduler reads (what its ClusterRole lets it list)."""

SNAPSHOT_VIEW: Final[tuple[Resource, ...]] = (*SCHEDULER_VIEW, WORKLOADS)
"""What ``sluice snapshot`` lists: the scheduler's view, and the Workloads that the
Workload API's PodGroups name (a scenario must hold them, as the API server's admission
wants them)."""

PAGE: Final[int] = 500


async def list_objects(
    client: KubeClient, resource: Resource, namespace: str | None = None
) -> list[dict[str, Any]]:
    """Every object of ``resource`` (in ``namespace``, or all), with ``apiVersion`` and
    ``kind`` set. Raises NotFoundError when the cluster does not serve it."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = [("limit", str(PAGE))] + ([("continue", token)] if token else [])
        doc = await client.request(
            "GET", resource.path(namespace), query=query, kind=resource.plural
        )
        items.extend(
            {"apiVersion": resource.api_version, "kind": resource.kind, **item}
            for item in doc.get("items") or ()
        )
        token = str((doc.get("metadata") or {}).get("continue") or "")
        if not token:
            return items


@dataclass
class View:
    """Objects by kind key (:attr:`~scheduler.kube.resource_paths.Resource.key`), and the
    resources the cluster does not serve."""

    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unserved: list[Resource] = field(default_factory=list)


async def list_view(client: KubeClient, resources: Iterable[Resource] = SCHEDULER_VIEW) -> View:
    """Every object of each of ``resources`` that the cluster serves (see the module
    docstring), one resource after the other."""
    view = View()
    for resource in resources:
        try:
            view.objects[resource.key] = await list_objects(client, resource)
        except NotFoundError:
            view.unserved.append(resource)
    return view
