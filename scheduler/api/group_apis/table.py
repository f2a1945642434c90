"""The one table of gang APIs: each API's implementation of the protocol (layer 0).

The cache reads PodGroups and Queues through it (by the kind key its objects come under),
the status reporter writes their status through it (by job id, or by the Queue object's
kind key), ``kubectl sluice`` shows them through it. Nothing outside this package imports
an API's module.
"""

from __future__ import annotations

from typing import Final

from scheduler.api.group_apis import api_of_job
from scheduler.api.group_apis.coscheduling import SchedulerPluginsGroups
from scheduler.api.group_apis.kubernetes import KubernetesGroups
from scheduler.api.group_apis.protocol import GroupApiProtocol
from scheduler.api.group_apis.sluice import SluiceGroups
from scheduler.api.group_apis.volcano import VolcanoGroups

__all__ = ["BY_GROUP_KIND", "BY_QUEUE_KIND", "GROUP_APIS", "of_job"]

GROUP_APIS: Final[tuple[GroupApiProtocol, ...]] = (
    SluiceGroups(),
    VolcanoGroups(),
    SchedulerPluginsGroups(),
    KubernetesGroups(),
)
"""Every API, in the order of :data:`~scheduler.api.group_apis.APIS` (Sluice's first)."""

BY_GROUP_KIND: Final[dict[str, GroupApiProtocol]] = {g.api.pod_group_key: g for g in GROUP_APIS}
"""Each API by the kind key of its PodGroups."""
BY_QUEUE_KIND: Final[dict[str, GroupApiProtocol]] = {
    g.api.queue_key: g for g in GROUP_APIS if g.api.queue_kind
}
"""The APIs with queues by the kind key of their Queues, Sluice's first: of two Queues of
one name, the first API's is used."""
_BY_NAME: Final[dict[str, GroupApiProtocol]] = {g.api.name: g for g in GROUP_APIS}


def of_job(job_id: str) -> GroupApiProtocol:
    """The API whose PodGroup job ``job_id`` is (Sluice's for a lone pod's)."""
    return _BY_NAME[api_of_job(job_id).name]
