"""The Kubernetes API emulator's writes: create, update, patch, delete, binding and
eviction (layer 4, sim emulator).

:class:`Writes` answers the writing requests of :class:`~scheduler.sim.emulator.ApiEmulator`
on its store, after the admission the API server does: the Priority admission of pods
(:mod:`scheduler.sim.admission`), custom objects validated and defaulted by their CRD
schema (an update checked with what it cannot change taken from the stored object), a
``scheduling.k8s.io`` PodGroup naming a missing Workload refused, a
CustomResourceDefinition of a served kind ``Established`` at once. Merge and strategic
merge patches of built-in kinds go to the store's own copy-on-write patch (the hot path
of status updates); JSON patches, and patches of custom objects, are applied here to the
served view and replace the object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, Literal

from aiohttp import web

from scheduler.api.errors import ConflictError, InvalidObjectError, NotFoundError
from scheduler.api.group_apis import KUBERNETES
from scheduler.schema import CrdCatalog
from scheduler.sim.admission import AdmissionError, admit_pod_priority
from scheduler.sim.emulator.discovery import served_markers
from scheduler.sim.emulator.jsonpatch import apply_json_patch
from scheduler.sim.emulator.list_selectors import parse_filter, select
from scheduler.sim.emulator.params import int_param
from scheduler.sim.emulator.resource_catalog import ResourceInfo
from scheduler.sim.emulator.responses import (
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    HttpError,
    bad_request,
    success,
)
from scheduler.sim.emulator.views import unview, view
from scheduler.sim.emulator.wire import Target, incoming, json_response, parse_json
from scheduler.sim.patch import merge_patch, strategic_merge_patch
from scheduler.sim.store import ApiObject, ObjectStore

__all__ = ["Writes"]

PatchKind = Literal["merge", "strategic", "json"]


class Writes:
    def __init__(self, store: ObjectStore, catalog: CrdCatalog) -> None:
        self._store = store
        self._catalog = catalog

    def create(self, t: Target, body: dict[str, Any]) -> web.StreamResponse:
        obj = incoming(t, body)
        if t.res.kind == "Pod" and not t.sub:
            classes, _ = self._store.list("PriorityClass")
            try:
                obj = admit_pod_priority(obj, classes)
            except AdmissionError as exc:
                name = (obj.get("metadata") or {}).get("name", "")
                raise HttpError(403, "Forbidden", f'pods "{name}" is forbidden: {exc}') from exc
        if t.res.kind == "CustomResourceDefinition":
            obj = self._establish(obj)
        created = self._store.create(unview(t.res, self._admit(t.res, obj)))
        return json_response(201, view(t.res, created))

    def _establish(self, crd: dict[str, Any]) -> dict[str, Any]:
        """A CustomResourceDefinition of a kind the emulator serves is ``Established`` at
        once, as the API server's controllers make it; any other is stored, not served."""
        spec = crd.get("spec") or {}
        name = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        for marker in served_markers(self._catalog, ()):
            if marker["metadata"]["name"] == name:
                return {**crd, "status": marker["status"]}
        return crd

    def replace(self, t: Target, body: dict[str, Any]) -> web.StreamResponse:
        stored = unview(t.res, incoming(t, body, t.name))
        if t.res.crd is not None:
            old = self._store.get(t.res.kind_in_store, t.namespace or "", t.name)
            stored = self._admit_update(t, old, stored)
        updated = self._store.replace(stored, subresource=t.sub or None)
        return json_response(200, view(t.res, updated))

    def _admit_update(self, t: Target, old: ApiObject, new: dict[str, Any]) -> dict[str, Any]:
        """Validate an update of a custom object as the API server does: what the write
        cannot change (status through the main resource, the rest through ``status``) is
        taken from the stored object first. Returns the object to hand to the store."""
        if not self._store.has_status_subresource(t.res.kind_in_store):
            return self._admit(t.res, new)
        if t.sub == "status":
            candidate = {**old, "metadata": new.get("metadata"), "status": new.get("status")}
        else:
            candidate = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                candidate["status"] = old["status"]
        return self._admit(t.res, candidate)

    async def patch(self, request: web.Request, t: Target) -> web.StreamResponse:
        content_type = request.content_type
        kind: PatchKind
        if content_type == MERGE:
            kind = "merge"
        elif content_type == STRATEGIC and t.res.crd is None:
            kind = "strategic"
        elif content_type == JSON_PATCH:
            kind = "json"
        elif content_type != STRATEGIC:  # not a patch at all: the server's generic refusal
            raise HttpError(415, "UnsupportedMediaType", "415: Unsupported Media Type")
        else:  # a patch type the resource does not take (strategic merge of a custom object)
            accepted = [JSON_PATCH, MERGE] + ([] if t.res.crd else [STRATEGIC])
            raise HttpError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}",
            )
        patch = parse_json(await request.text())
        res, namespace = t.res, t.namespace or ""
        if kind != "json" and not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        if kind != "json" and res.crd is None and res.view == "plain":
            # the store's own copy-on-write patch: the hot path of status updates
            updated = self._store.patch(
                res.kind_in_store,
                namespace,
                t.name,
                patch,
                patch_type=kind,
                subresource=t.sub or None,
            )
            return json_response(200, view(res, updated))
        stored = self._store.get(res.kind_in_store, namespace, t.name)
        old = view(res, stored)
        if kind == "json":
            new = apply_json_patch(old, patch)
        elif kind == "merge":
            new = merge_patch(old, patch)
        else:
            new = strategic_merge_patch(old, patch)
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise InvalidObjectError("a patch must leave an object with metadata", kind=res.kind)
        new["metadata"] = {**new["metadata"], "name": t.name}
        if res.namespaced:
            new["metadata"]["namespace"] = namespace
        new = unview(res, new)
        if res.crd is not None:
            new = self._admit_update(t, stored, new)
        updated = self._store.replace(new, subresource=t.sub or None)
        return json_response(200, view(res, updated))

    def delete(
        self, t: Target, name: str, options: Mapping[str, Any], query: Mapping[str, str]
    ) -> web.StreamResponse:
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = int_param(query, "gracePeriodSeconds")
        pre = options.get("preconditions") or {}
        kind, namespace = t.res.kind_in_store, t.namespace or ""
        last = self._store.delete(
            kind,
            namespace,
            name,
            grace_period_seconds=None if grace is None else int(grace),
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
        )
        still = self._store.try_get(kind, namespace, name)
        if still is not None:
            return json_response(200, view(t.res, still))
        if t.res.return_deleted:
            return json_response(200, view(t.res, last))
        details: dict[str, Any] = {"name": name, "kind": t.res.name}
        if t.res.group:
            details["group"] = t.res.group
        if last["metadata"].get("uid"):
            details["uid"] = last["metadata"]["uid"]
        return json_response(200, success(200, details))

    def delete_collection(
        self, request: web.Request, t: Target, options: Mapping[str, Any]
    ) -> web.StreamResponse:
        items, _ = select(self._store, t.res, t.namespace, parse_filter(request.query))
        grace = options.get("gracePeriodSeconds")
        if grace is None and request.query.get("gracePeriodSeconds"):
            grace = request.query["gracePeriodSeconds"]
        deleted: list[ApiObject] = []
        for obj in items:
            meta = obj["metadata"]
            with contextlib.suppress(NotFoundError):
                deleted.append(
                    view(
                        t.res,
                        self._store.delete(
                            t.res.kind_in_store,
                            meta.get("namespace", ""),
                            meta["name"],
                            grace_period_seconds=None if grace is None else int(grace),
                        ),
                    )
                )
        body = {
            "kind": f"{t.res.kind}List",
            "apiVersion": t.res.api_version,
            "metadata": {"resourceVersion": str(self._store.resource_version)},
            "items": deleted,
        }
        return json_response(200, body)

    def bind(self, t: Target, name: str, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Binding") != "Binding":
            raise bad_request(f"expected a Binding, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        target = body.get("target") or {}
        node = target.get("name") if isinstance(target, Mapping) else None
        if not name or (meta.get("name") and meta["name"] != name):
            raise bad_request("the Binding's metadata.name must name the pod on the URL")
        if not isinstance(node, str) or not node:
            raise InvalidObjectError(
                f'Binding "{name}" is invalid: target.name: Required value',
                kind="Binding",
                name=name,
            )
        self._store.bind(
            t.namespace or "default",
            name,
            node,
            uid=meta.get("uid") or None,
            annotations=meta.get("annotations") or None,
        )
        return json_response(201, success(201))

    def evict(self, t: Target, body: Mapping[str, Any]) -> web.StreamResponse:
        if body.get("kind", "Eviction") != "Eviction":
            raise bad_request(f"expected an Eviction, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise bad_request("the Eviction's metadata.name must name the pod on the URL")
        options = body.get("deleteOptions") or {}
        pre = options.get("preconditions") or {}
        namespace = t.namespace or "default"
        if pre.get("resourceVersion"):
            current = self._store.get("Pod", namespace, t.name)["metadata"].get("resourceVersion")
            if str(pre["resourceVersion"]) != current:
                raise ConflictError(
                    f"Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: {current}",
                    kind="Pod",
                    name=t.name,
                )
        grace = options.get("gracePeriodSeconds")
        self._store.evict(
            namespace,
            t.name,
            uid=pre.get("uid") or None,
            grace_period_seconds=None if grace is None else int(grace),
        )
        return json_response(201, success(201))

    def _admit(self, res: ResourceInfo, obj: dict[str, Any]) -> dict[str, Any]:
        """Validate and default a custom object with its CRD schema (422 if invalid); a
        ``scheduling.k8s.io`` PodGroup naming a Workload that does not exist is refused
        (403), as the API server's admission does."""
        if res.crd is None:
            return obj
        checked = self._catalog.check(obj)
        if res.kind_in_store == KUBERNETES.pod_group_key:
            spec = checked.get("spec") or {}
            workload = ((spec.get("podGroupTemplateRef") or {}).get("workload") or {}).get(
                "workloadName"
            )
            meta = checked.get("metadata") or {}
            kind = f"Workload.{KUBERNETES.group}"
            if (
                workload
                and self._store.try_get(kind, str(meta.get("namespace") or ""), workload) is None
            ):
                raise HttpError(
                    403,
                    "Forbidden",
                    f'podgroups.scheduling.k8s.io "{meta.get("name", "")}" is forbidden: '
                    f'PodGroup rejected: Workload "{workload}" not found',
                )
        return checked
