"""The end-to-end harness: a Kubernetes API server, fake nodes, a fake kubelet, and
``sluice run`` as a subprocess.

Everything here talks to the API server over HTTP through kubernetes-asyncio, given a
kubeconfig, so the same tests run against a real cluster and against the in-process
emulator (:class:`EmulatedApiServer`, which is only used when no cluster is named).
Nothing here imports ``scheduler.kube``: the harness must not share the client code it
is testing.

* :class:`Api`: raw JSON requests and watches (``_preload_content=False``, no models).
* :class:`Cluster`: one test's view of the cluster: a namespace of its own, fake Nodes
  labelled with the test's run id (and every pod gets a nodeSelector for that label, so
  pods never land on real nodes), PodGroups, Queues, PriorityClasses, PDBs, a live cache
  of the namespace's pods (:class:`PodInformer`) and a recorder of everything that
  happened to them (:class:`PodRecorder`); :meth:`Cluster.cleanup` deletes all of it.
* :class:`FakeKubelet`: plays the kubelet through the API for the fake nodes: bound pods
  are marked Running and Ready, graceful deletions are finished with grace 0, and (on a
  real cluster) node Leases are renewed so the node lifecycle controller leaves the
  nodes Ready.
* :class:`SchedulerProcess`: ``sluice run`` in a subprocess, its output in a log file,
  ``/readyz``, ``/metrics``, SIGTERM and SIGKILL.
* :func:`wait_for`: poll a condition with a timeout and a useful failure message.
"""

# The harness is split by what each part does; its public names are all here.
from fault_proxy import FaultProxy, Faults

from harness.api import Api, ApiFailure, ListWatch, core_path, custom_path
from harness.cluster import UPSTREAM_CRDS, Cluster, NodeSpec, install_crds, load_crds
from harness.constants import (
    API_VERSION,
    CRD_DIR,
    GROUP,
    HARNESS_USER_AGENT,
    JSON,
    MERGE_PATCH,
    OWNER_CRD_DIR,
    PAUSE_IMAGE,
    POD_GROUP_LABEL,
    QUEUE_LABEL,
    REPO,
    RUN_LABEL,
    STRATEGIC_MERGE_PATCH,
    VERSION,
    T,
)
from harness.emulated import EmulatedApiServer
from harness.kubelet import FakeKubelet
from harness.process import SchedulerProcess, rebinds_in_log, sluice_command
from harness.recorders import (
    PodHistory,
    PodInformer,
    PodRecorder,
    condition,
    is_running,
    name_of,
    node_of,
    pod_requests,
    quantity,
    uid_of,
    unix_seconds,
)
from harness.waiting import free_port, gather_bounded, hold_for, wait_for

__all__ = [
    "API_VERSION",
    "CRD_DIR",
    "GROUP",
    "HARNESS_USER_AGENT",
    "JSON",
    "MERGE_PATCH",
    "OWNER_CRD_DIR",
    "PAUSE_IMAGE",
    "POD_GROUP_LABEL",
    "QUEUE_LABEL",
    "REPO",
    "RUN_LABEL",
    "STRATEGIC_MERGE_PATCH",
    "UPSTREAM_CRDS",
    "VERSION",
    "Api",
    "ApiFailure",
    "Cluster",
    "EmulatedApiServer",
    "FakeKubelet",
    "FaultProxy",
    "Faults",
    "ListWatch",
    "NodeSpec",
    "PodHistory",
    "PodInformer",
    "PodRecorder",
    "SchedulerProcess",
    "T",
    "condition",
    "core_path",
    "custom_path",
    "free_port",
    "gather_bounded",
    "hold_for",
    "install_crds",
    "is_running",
    "load_crds",
    "name_of",
    "node_of",
    "pod_requests",
    "quantity",
    "rebinds_in_log",
    "sluice_command",
    "uid_of",
    "unix_seconds",
    "wait_for",
]
