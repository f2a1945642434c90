"""The custom resource definitions of Sluice and the OpenAPI v3 validator behind them (layer
0, beside ``api``).

This package is how the embedded cluster (and the controller's webhook) refuses a bad
PodGroup, Queue or Topology the way the Kubernetes API server does, naming the field:

* :mod:`.catalog`: the CRDs of ``crds/`` read into a :class:`CrdCatalog`
  (:func:`load_crds`), and :meth:`CrdCatalog.check`, the API server's create;
* :mod:`.structural`: what makes a CRD schema acceptable (:func:`structural_violations`);
* :mod:`.validator`: defaulting (:func:`apply_defaults`) and validation (:func:`validate`).
"""

from __future__ import annotations

from scheduler.schema.catalog import (
    API_VERSION,
    GROUP,
    VERSION,
    CrdCatalog,
    CrdInfo,
    PrinterColumn,
    load_crds,
)
from scheduler.schema.structural import structural_violations
from scheduler.schema.validator import QUANTITY_PATTERN, apply_defaults, validate

__all__ = [
    "API_VERSION",
    "GROUP",
    "QUANTITY_PATTERN",
    "VERSION",
    "CrdCatalog",
    "CrdInfo",
    "PrinterColumn",
    "apply_defaults",
    "load_crds",
    "structural_violations",
    "validate",
]
