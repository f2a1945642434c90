"""The Kubernetes API emulator: the embedded cluster served over HTTP (layer 4, sim).

:class:`ApiEmulator` is an in-process aiohttp server that serves the part of the Kubernetes
REST API that Sluice uses, in JSON, on top of an :class:`~scheduler.sim.store.ObjectStore`.
The real kubernetes-asyncio client and ``kubectl`` talk to it unchanged, which is how the
``scheduler.kube`` backend is tested without a cluster and how ``sluice simulate --serve``
exposes a simulated cluster.

Served (see :data:`.resource_catalog.BUILTIN_RESOURCES` and the CRD catalog):

* discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]``, ``/version``,
  ``/healthz``, ``/readyz``, ``/livez``; ``/openapi/v3`` holds only the operations kubectl
  looks for to leave validation to the server (no schemas), ``/openapi/v2`` answers 404;
* core v1 pods (``status``, ``binding``, ``eviction``), nodes (``status``), namespaces,
  events and the legacy ``bindings``; ``events.k8s.io/v1`` events (the store keeps events in
  this shape; core v1 events are converted both ways); ``scheduling.k8s.io/v1``
  priorityclasses; ``policy/v1`` poddisruptionbudgets; ``coordination.k8s.io/v1`` leases;
  ``batch/v1`` jobs and ``apps/v1`` deployments, replicasets and statefulsets, stored as
  written (no controller makes their pods); every kind of the CRD catalog
  (``scheduling.sluice.dev/v1alpha1`` podgroups, queues, topologies, with their ``status``
  subresource), validated and defaulted by the CRD schemas;
* verbs: get, list (``labelSelector``, ``fieldSelector`` on any dotted path, ``limit`` and
  ``continue``), watch (``watch=true|1|True``, ``resourceVersion``,
  ``allowWatchBookmarks``, ``timeoutSeconds``; a too-old resourceVersion gives an ``ERROR``
  event carrying a 410 ``Expired`` Status, as the API server does), create, update (PUT),
  patch (merge, strategic merge, RFC 6902 JSON patch), delete (``DeleteOptions`` in the
  body or query: grace period, uid and resourceVersion preconditions), deletecollection;
* ``Table`` responses (``Accept: ...;as=Table``) so that ``kubectl get`` prints columns;
* the Priority admission of pods on creation (:mod:`scheduler.sim.admission`):
  ``spec.priority`` from the PriorityClass, 403 Forbidden for an unknown class or a
  contradicting priority;
* namespaces deleted at once, without a Terminating phase: every object in it goes, and
  a create (a binding, an eviction, an Event) in it then meets the API server's 404
  ``namespaces "x" not found`` until it is created again.

Every :class:`~scheduler.api.errors.ApiError` becomes a Kubernetes ``Status`` with the
matching HTTP code. Not served: protobuf, server-side apply, dry run, authentication and
authorization, OpenAPI schemas, watches of namespaces (which are derived from the objects'
namespaces, plus ``default`` and the ``kube-*`` ones, and those created), the
``/api/v1/watch/...`` legacy paths, logs, exec and every other resource.

Deliberate differences: strategic merge patch is the store's (merge keys by field name,
see :mod:`scheduler.sim.patch`); a watch with a selector that resumes from a
resourceVersion older than the history knows counts an object it cannot place as having
matched (a spurious DELETED rather than a missed one); ``fieldValidation`` is ignored
(custom objects are always checked strictly). The emulator must run on the event loop
that owns the store (the store is not thread-safe), on real time (it does real network
I/O).

The package is split by job: the server, its routing and the namespaces
(:mod:`.server`); the reads (:mod:`.reads`) and the writes with their admission
(:mod:`.writes`); what their requests and responses share (:mod:`.wire`); the resource
catalog (:mod:`.resource_catalog`); media types, JSON and
``Status`` bodies (:mod:`.responses`); the discovery and OpenAPI documents
(:mod:`.discovery`); label and field selectors (:mod:`.list_selectors`); RFC 6902 JSON patch
(:mod:`.jsonpatch`); the core v1 view of events (:mod:`.views`); ``Table`` printing
(:mod:`.tables`); the lines of a watch (:mod:`.watch`); the derived namespaces
(:mod:`.namespaces`). The names callers use are re-exported here.
"""

from __future__ import annotations

from scheduler.sim.emulator.discovery import SERVER_VERSION
from scheduler.sim.emulator.jsonpatch import JsonPatchError, apply_json_patch
from scheduler.sim.emulator.list_selectors import parse_label_selector_string
from scheduler.sim.emulator.resource_catalog import BUILTIN_RESOURCES, ResourceInfo
from scheduler.sim.emulator.responses import status_of
from scheduler.sim.emulator.server import ApiEmulator
from scheduler.sim.emulator.tables import human_duration
from scheduler.sim.emulator.views import event_from_core, event_to_core

__all__ = [
    "BUILTIN_RESOURCES",
    "SERVER_VERSION",
    "ApiEmulator",
    "JsonPatchError",
    "ResourceInfo",
    "apply_json_patch",
    "event_from_core",
    "event_to_core",
    "human_duration",
    "parse_label_selector_string",
    "status_of",
]
