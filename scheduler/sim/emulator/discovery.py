"""The discovery documents of the Kubernetes API emulator (layer 4).

What ``kubectl`` and the clients read before they call a resource: the root list of
paths, ``/version`` (:data:`SERVER_VERSION`), ``/api`` (``APIVersions``), ``/apis``
(``APIGroupList``) and ``/apis/<group>`` (``APIGroup``), the ``APIResourceList`` of a
group/version (each resource with its verbs and short names, its ``status``
subresource when the store has one, and the binding and eviction subresources of pods),
and just enough OpenAPI v3 for kubectl (no schemas). Each function builds one document
from the served resources, keyed by (group, version, plural name); the request handlers
(:mod:`.emulator`) route to them and send the result. Pure: a group/version that is not
served raises :class:`~.emulator_http.HttpError` (404).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from scheduler.schema import CrdCatalog
from scheduler.sim.emulator.resource_catalog import ACTION_SUBRESOURCES, ResourceInfo
from scheduler.sim.emulator.responses import JSON_PATCH, MERGE, NOT_FOUND_MESSAGE, HttpError

__all__ = [
    "SERVER_VERSION",
    "ServedResources",
    "api_group",
    "api_group_list",
    "api_versions",
    "openapi_v3",
    "resource_list",
    "root_paths",
    "served_markers",
]

#: The Kubernetes version ``/version`` reports.
SERVER_VERSION: Final[Mapping[str, str]] = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-sluice-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_STATUS_VERBS: Final = ("get", "patch", "update")

#: The served resources by (group, version, plural name).
ServedResources = Mapping[tuple[str, str, str], ResourceInfo]


def root_paths(resources: ServedResources) -> dict[str, Any]:
    """The document at ``/``: every path served."""
    paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
    paths += sorted({f"/apis/{g}" for g, _, _ in resources if g})
    paths += sorted({f"/apis/{g}/{v}" for g, v, _ in resources if g})
    return {"paths": paths}


def api_versions(server_address: str) -> dict[str, Any]:
    """The ``APIVersions`` at ``/api``; ``server_address`` is ``host:port``."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group_list(resources: ServedResources) -> dict[str, Any]:
    """The ``APIGroupList`` at ``/apis``."""
    groups = [
        g for name in sorted({g for g, _, _ in resources if g}) if (g := api_group(resources, name))
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(resources: ServedResources, name: str) -> dict[str, Any] | None:
    """The versions of group ``name`` (the body of an ``APIGroup``), None if not served."""
    versions = sorted({v for g, v, _ in resources if g == name})
    if not versions:
        return None
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def resource_list(
    resources: ServedResources,
    group: str,
    version: str,
    has_status_subresource: Callable[[str], bool],
) -> dict[str, Any]:
    """The ``APIResourceList`` of a group/version; ``has_status_subresource`` tells, by the
    kind in the store, which resources have a ``status`` subresource."""
    served = [r for (g, v, _), r in sorted(resources.items()) if g == group and v == version]
    if not served:
        raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
    entries: list[dict[str, Any]] = []
    for res in served:
        entry: dict[str, Any] = {
            "name": res.name,
            "singularName": res.singular,
            "namespaced": res.namespaced,
            "kind": res.kind,
            "verbs": list(res.verbs),
        }
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.categories:
            entry["categories"] = list(res.categories)
        entries.append(entry)
        if res.view == "plain" and has_status_subresource(res.kind_in_store):
            entries.append(
                {
                    "name": f"{res.name}/status",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": list(_STATUS_VERBS),
                }
            )
        for (owner, sub), (sub_group, sub_version, kind) in ACTION_SUBRESOURCES.items():
            if owner == res.name and not res.group:
                sub_entry: dict[str, Any] = {
                    "name": f"{owner}/{sub}",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": kind,
                    "verbs": ["create"],
                }
                if sub_group:
                    sub_entry["group"] = sub_group
                    sub_entry["version"] = sub_version
                entries.append(sub_entry)
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }


def openapi_v3(resources: ServedResources, rest: list[str]) -> dict[str, Any]:
    """Just enough OpenAPI v3 for kubectl: every resource's PATCH operation, with its
    group-version-kind and a ``fieldValidation`` parameter, so that ``kubectl create``
    and ``apply`` leave validation to the server. No schemas."""
    versions = sorted({(g, v) for g, v, _ in resources})
    if not rest:
        index = {
            _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=0"}
            for g, v in versions
        }
        return {"paths": index}
    wanted = "/".join(rest)
    for group, version in versions:
        if _gv_path(group, version) == wanted:
            break
    else:
        raise HttpError(404, "NotFound", NOT_FOUND_MESSAGE)
    paths: dict[str, Any] = {}
    for (g, v, _), res in sorted(resources.items()):
        if (g, v) != (group, version):
            continue
        scope = "/namespaces/{namespace}" if res.namespaced else ""
        media = [JSON_PATCH, MERGE]
        paths[f"/{_gv_path(g, v)}{scope}/{res.name}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{res.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": g, "version": v, "kind": res.kind},
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string"}}
                    for name in ("dryRun", "fieldManager", "fieldValidation")
                ],
                "requestBody": {"content": {m: {"schema": {"type": "object"}} for m in media}},
                "responses": {"200": {"description": "OK"}},
            }
        }
    document: dict[str, Any] = {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
    return document


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def served_markers(catalog: CrdCatalog, resources: Iterable[ResourceInfo]) -> list[dict[str, Any]]:
    """The objects that tell a client what is served, as a cluster holds them: a
    ``CustomResourceDefinition`` (``Established``) for each kind of ``catalog``, and an
    ``APIService`` (``Available``) for each group/version of ``resources``. Created in the
    store when the emulator starts, so that a scheduler watching them (for other
    schedulers' APIs) finds them installed."""
    ready = "2026-01-01T00:00:00Z"
    out: list[dict[str, Any]] = []
    for key in catalog.kinds():
        info = catalog.get(key)
        if info is None:
            continue
        names: dict[str, Any] = {
            "kind": info.kind,
            "listKind": f"{info.kind}List",
            "plural": info.plural,
            "singular": info.singular,
        }
        if info.short_names:
            names["shortNames"] = list(info.short_names)
        out.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{info.plural}.{info.group}"},
                "spec": {
                    "group": info.group,
                    "names": names,
                    "scope": "Namespaced" if info.namespaced else "Cluster",
                    "versions": [{"name": info.version, "served": True, "storage": True}],
                },
                "status": {
                    "acceptedNames": names,
                    "storedVersions": [info.version],
                    "conditions": [
                        _true("NamesAccepted", "NoConflicts", ready),
                        _true("Established", "InitialNamesAccepted", ready),
                    ],
                },
            }
        )
    for group, version in sorted({(r.group, r.version) for r in resources}):
        out.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": 1000,
                    "versionPriority": 100,
                },
                "status": {"conditions": [_true("Available", "Local", ready)]},
            }
        )
    return out


def _true(kind: str, reason: str, at: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason, "lastTransitionTime": at}
