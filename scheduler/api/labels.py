"""Label, annotation and condition names users and the cluster see (layer 0)."""

from __future__ import annotations

GROUP = "scheduling.sluice.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
SCHEDULER_NAME = "sluice"

POD_GROUP_LABEL = f"{GROUP}/pod-group"
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
TASK_ROLE_LABEL = f"{GROUP}/task-role"
QUEUE_LABEL = f"{GROUP}/queue"
TOPOLOGY_ANNOTATION = f"{GROUP}/topology"
"""On another API's PodGroup: the Topology its network topology constraint refers to."""
PREEMPTABLE_LABEL = f"{GROUP}/preemptable"
# The pod grouper (``sluice controller``, scheduler/controllers/grouper.py): a pod, or any
# owner up its chain, labelled ``group-by-owner: "false"`` is not grouped by its owner; a
# pod the grouper leaves alone gets the annotation ``gang-of-one`` saying why; a PodGroup it
# makes says where its minimum comes from in the annotation ``minimum``.
GROUP_BY_OWNER_LABEL = f"{GROUP}/group-by-owner"
GANG_OF_ONE_ANNOTATION = f"{GROUP}/gang-of-one"
MINIMUM_ANNOTATION = f"{GROUP}/minimum"
GPU_MEMORY_LABEL = f"{GROUP}/gpu-memory"
GPU_MEMORY_ANNOTATION = f"{GROUP}/gpu-memory"
GPU_INDEX_ANNOTATION = f"{GROUP}/gpu-index"

DEFAULT_QUEUE = "default"
DEFAULT_ROLE = ""

SYSTEM_NAMESPACE = "kube-system"
SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})

# Pod conditions written by the scheduler.
POD_SCHEDULED = "PodScheduled"
DISRUPTION_TARGET = "DisruptionTarget"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
REASON_SCHEDULING_GATED = "SchedulingGated"
REASON_PREEMPTION = "PreemptionByScheduler"
