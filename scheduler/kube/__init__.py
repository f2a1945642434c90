"""Layer 4: the Kubernetes backend, the only package that imports kubernetes_asyncio.

One job a module:

* :mod:`.client_config`: where the client configuration comes from (``--kubeconfig``,
  ``KUBECONFIG``, in-cluster);
* :mod:`.resource_paths`: the resource table (paths of every kind used) and content types;
* :mod:`.api_errors`: library errors translated into :mod:`scheduler.api.errors`' tree;
* :mod:`.ratelimit`: the client-side token bucket and the rate-limited ``ApiClient``;
* :mod:`.client`: the one rate-limited raw-JSON client of the process;
* :mod:`.informers`: list+watch of every kind the scheduler needs into the cache
  (:mod:`.informer_backoff`: the delays of its retries);
* :mod:`.backend`: the ports (Binder, Evictor, StatusWriter, EventRecorder);
* :mod:`.events`: the event recorder (series, per-object limit, background writer);
* :mod:`.leader`: leader election on a Lease;
* :mod:`.timestamps`: MicroTime formatting.
"""

from scheduler.kube.api_errors import api_errors, error_from_status, translate_error
from scheduler.kube.backend import KubeBackend
from scheduler.kube.client import DEFAULT_BURST, DEFAULT_QPS, DEFAULT_TIMEOUT, KubeClient
from scheduler.kube.client_config import load_configuration
from scheduler.kube.events import EventSettings, KubeEventRecorder
from scheduler.kube.informers import (
    SCHEDULER_RESOURCES,
    Backoff,
    CacheSink,
    Informer,
    InformerSet,
    InformerSettings,
    InformerStats,
)
from scheduler.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLost,
    LeaseRecord,
    default_identity,
)
from scheduler.kube.ratelimit import TokenBucket
from scheduler.kube.resource_paths import Resource

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "SCHEDULER_RESOURCES",
    "Backoff",
    "CacheSink",
    "EventSettings",
    "Informer",
    "InformerSet",
    "InformerSettings",
    "InformerStats",
    "KubeBackend",
    "KubeClient",
    "KubeEventRecorder",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeadershipLost",
    "LeaseRecord",
    "Resource",
    "TokenBucket",
    "api_errors",
    "default_identity",
    "error_from_status",
    "load_configuration",
    "translate_error",
]
