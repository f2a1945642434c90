"""The checks kube-apiserver v1.36 makes in Go on ``scheduling.k8s.io/v1alpha2`` objects
(layer 0, schema).

The OpenAPI schema of these built-in kinds (``builtin/``) gives their structure; the API
server then refuses, with these messages (each read from a real kube-apiserver v1.36.2):

* a scheduling policy that is not exactly one of ``basic`` and ``gang``:
  ``spec.schedulingPolicy: Invalid value: "": must specify one of: `basic`, `gang``` (or
  ``"{basic, gang}": must specify exactly one of: ...``);
* a gang's ``minCount`` of 0 (``Required value``) or below (``Invalid value: -1: must be
  greater than or equal to 1``);
* a Workload without ``podGroupTemplates`` (``Required value``), a template whose name is
  not a DNS label.

:func:`builtin_causes` returns them for an object of one of these kinds (by kind key), and
nothing for any other kind; :meth:`~scheduler.schema.CrdCatalog.check` adds them to the
schema's. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from scheduler.api.errors import FieldCause
from scheduler.api.group_apis import KUBERNETES

__all__ = ["DNS_LABEL", "DNS_LABEL_MESSAGE", "builtin_causes"]

_POD_GROUP: Final = KUBERNETES.pod_group_key
_WORKLOAD: Final = f"Workload.{KUBERNETES.group}"
DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def _policy(policy: object, path: str) -> list[FieldCause]:
    policy = policy if isinstance(policy, Mapping) else {}
    chosen = [k for k in ("basic", "gang") if policy.get(k) is not None]
    if not chosen:
        return [FieldCause(path, 'Invalid value: "": must specify one of: `basic`, `gang`')]
    if len(chosen) > 1:
        return [
            FieldCause(
                path, 'Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`'
            )
        ]
    gang = policy.get("gang")
    if not isinstance(gang, Mapping):
        return []
    count = gang.get("minCount", 0)
    if count == 0:
        return [FieldCause(f"{path}.gang.minCount", "Required value")]
    if isinstance(count, int) and not isinstance(count, bool) and count < 0:
        return [
            FieldCause(
                f"{path}.gang.minCount",
                f"Invalid value: {count}: must be greater than or equal to 1",
            )
        ]
    return []


def builtin_causes(key: str, obj: Mapping[str, Any]) -> list[FieldCause]:
    """What kube-apiserver refuses in ``obj``, a (defaulted) object of kind key ``key``,
    beyond its schema."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if key == _POD_GROUP:
        return _policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
    if key != _WORKLOAD:
        return []
    templates = spec.get("podGroupTemplates")
    if not isinstance(templates, list) or not templates:
        return [FieldCause("spec.podGroupTemplates", "Required value")]
    causes: list[FieldCause] = []
    for i, template in enumerate(templates):
        if not isinstance(template, Mapping):
            continue
        path = f"spec.podGroupTemplates[{i}]"
        name = template.get("name")
        if isinstance(name, str) and name and DNS_LABEL.fullmatch(name) is None:
            causes.append(
                FieldCause(f"{path}.name", f'Invalid value: "{name}": {DNS_LABEL_MESSAGE}')
            )
        causes.extend(_policy(template.get("schedulingPolicy"), f"{path}.schedulingPolicy"))
    return causes
