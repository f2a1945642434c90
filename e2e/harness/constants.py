"""Names the harness shares: paths, labels, content types.

A part of the end-to-end harness (:mod:`harness`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, TypeVar

T = TypeVar("T")

E2E: Final = Path(__file__).resolve().parent.parent
REPO: Final = E2E.parent
CRD_DIR: Final = REPO / "crds"
OWNER_CRD_DIR: Final = E2E / "owner-crds"
"""Upstream CRDs of pods' owners (PyTorchJob, JobSet) for the pod grouper's tests."""
GROUP: Final = "scheduling.sluice.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
POD_GROUP_LABEL: Final = f"{GROUP}/pod-group"
QUEUE_LABEL: Final = f"{GROUP}/queue"
RUN_LABEL: Final = "e2e.sluice.dev/run"
HARNESS_USER_AGENT: Final = "sluice-e2e-harness"
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"
JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
