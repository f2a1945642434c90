"""Layer 4: the Kubernetes backend, the only package that imports kubernetes_asyncio.

* :mod:`.client`: configuration (``--kubeconfig``, ``KUBECONFIG``, in-cluster), the
  rate-limited client every request goes through, error translation;
* :mod:`.informers`: list+watch of every kind the scheduler needs into the cache;
* :mod:`.backend`: the ports (Binder, Evictor, StatusWriter, EventRecorder);
* :mod:`.leader`: leader election on a Lease;
* :mod:`.timestamps`: MicroTime formatting.
"""

from scheduler.kube.backend import EventSettings, EvictionMode, KubeBackend, KubeEventRecorder
from scheduler.kube.client import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    DEFAULT_TIMEOUT,
    KubeClient,
    Resource,
    SystemClock,
    TokenBucket,
    api_errors,
    error_from_status,
    load_configuration,
    translate_error,
)
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

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "SCHEDULER_RESOURCES",
    "Backoff",
    "CacheSink",
    "EventSettings",
    "EvictionMode",
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
    "SystemClock",
    "TokenBucket",
    "api_errors",
    "default_identity",
    "error_from_status",
    "load_configuration",
    "translate_error",
]
