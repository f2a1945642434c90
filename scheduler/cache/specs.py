"""Parsed pod specs shared by the pods that have the same one (layer 2, cache).

Job: most pods of a cluster come from a few templates (a Job's, a Deployment's), so most
specs are equal but for the pod's name and node. Parsing a spec (requests summed over
containers, affinity, tolerations, ports) is most of the cost of turning a pod into a
task: 11,000 pods took 0.17 s of the 0.5 s the cache spent on them. :class:`SpecMemo`
parses each distinct spec once and hands the same immutable
:class:`~scheduler.api.pod.PodSpecView` to every pod that has it, which also keeps one
copy in memory instead of one per pod.

Contracts: :meth:`SpecMemo.key` is a compact, hashable image of what
:func:`~scheduler.api.pod.parse_pod_spec` reads, plus the fields whose change makes the
cache build a new task (priority, scheduler name, preemption policy): equal keys mean
equal parses. A view whose ``problem`` names its pod, and a spec that does not parse, are
never shared. At most :data:`MAX_SPECS` views are kept (the least recently used go);
used from the cache's one thread only.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from scheduler.api.pod import PodSpecView

MAX_SPECS: Final = 4096
"""Distinct specs kept; a pod whose spec went out is parsed again when next changed."""

SPEC_FIELDS: Final = (
    "containers",
    "initContainers",
    "overhead",
    "resources",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "priority",
    "schedulerName",
    "preemptionPolicy",
    "resourceClaims",
)
"""The fields of a pod's spec a task is made from (besides its node, its gates and the
volumes :func:`scheduler_volumes` keeps)."""

VOLUME_SOURCES: Final = frozenset(
    {
        "persistentVolumeClaim",
        "ephemeral",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "iscsi",
        "rbd",
    }
)
"""The volume sources the scheduler reads (:mod:`scheduler.api.volumes.refs`)."""


def scheduler_volumes(spec: Mapping[str, Any]) -> object:
    """The entries of ``spec.volumes`` the scheduler reads (None when there are none): the
    others (a service account token's, whose name differs per pod; configMaps) must not
    keep pods that differ only there from sharing one parse."""
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        return volumes  # None, or what the parser will refuse
    kept = [v for v in volumes if not isinstance(v, Mapping) or not VOLUME_SOURCES.isdisjoint(v)]
    return kept or None


_encode = msgspec.json.Encoder().encode


class SpecMemo:
    def __init__(self, limit: int = MAX_SPECS) -> None:
        self._limit = limit
        self._views: OrderedDict[bytes, PodSpecView] = OrderedDict()

    def __len__(self) -> int:
        return len(self._views)

    @staticmethod
    def key(spec: Mapping[str, Any]) -> bytes | tuple[object, ...]:
        """The image of ``spec`` that decides its parse (bytes); for a spec holding a value
        JSON cannot hold (a date a YAML scenario parsed), the fields themselves (never
        shared, still comparable to tell whether the spec changed)."""
        fields = [spec.get(f) for f in SPEC_FIELDS]
        fields.append(scheduler_volumes(spec))
        try:
            return _encode(fields)
        except (TypeError, msgspec.EncodeError):
            return tuple(fields)

    def view(
        self, key: bytes | tuple[object, ...], parse: Callable[[], PodSpecView]
    ) -> PodSpecView:
        """The parse of the spec of ``key``: the one made already, or ``parse()`` (which
        raises what the parser raises)."""
        if not isinstance(key, bytes):
            return parse()
        found = self._views.get(key)
        if found is not None:
            self._views.move_to_end(key)
            return found
        view = parse()
        if not view.problem:  # a problem names the pod it is about
            self._views[key] = view
            if len(self._views) > self._limit:
                self._views.popitem(last=False)
        return view
