"""The reasons the predicates give, in kube-scheduler's words (layer 2)."""

from __future__ import annotations

from scheduler.api.pod import Taint
from scheduler.api.resource import PODS

UNSCHEDULABLE = "node(s) were unschedulable"
NOT_READY = "node(s) were not ready"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNTOLERATED_TAINT = "node(s) had untolerated taint"
TOO_MANY_PODS = "Too many pods"
HOST_PORTS = "node(s) didn't have free ports for the requested pod ports"
POD_AFFINITY = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
"""A pod tolerating this taint may go to a cordoned node, as in kube-scheduler."""


def insufficient(resource: str) -> str:
    """The reason for a node short of ``resource``: ``Insufficient cpu``, ``Too many pods``."""
    return TOO_MANY_PODS if resource == PODS else f"Insufficient {resource}"
