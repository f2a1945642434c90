"""Devices for many nodes in a few words: the node annotation of scenarios (layer 4).

A scenario may give a Node DRA devices without writing a ResourceSlice for it::

    metadata:
      annotations:
        sim.sluice.dev/devices: >-
          {driver: gpu.example.com, count: 8,
           attributes: {model: a100}, capacity: {memory: 80Gi}}

The value is a YAML map, or a list of maps, each with ``driver`` (required), ``count``
(required, at least 1), ``name`` (the devices' name prefix; default ``dev``: devices are
``dev-0`` .. ``dev-7``), ``attributes`` (name to a bool, int or string; versions as
``{version: 1.2.3}``) and ``capacity`` (name to a quantity). Every device also gets the
int attribute ``index``. :func:`node_slices` turns each map into one ResourceSlice of the
node (named ``<node>-<driver>``, pool ``<node>``, generation 1), created and deleted with
the node. Put the annotation in a YAML anchor to give a thousand nodes the same devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from scheduler.api.errors import ScenarioError

DEVICES_ANNOTATION = "sim.sluice.dev/devices"


def _attribute(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def node_slices(node: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    """The ResourceSlices the annotation of ``node`` describes (none without it)."""
    meta = node.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(DEVICES_ANNOTATION)
    if text is None:
        return []
    field = f"metadata.annotations[{DEVICES_ANNOTATION}]"
    label = f"{where}: Node {meta.get('name')}"
    try:
        parsed = yaml.safe_load(str(text))
    except yaml.YAMLError as exc:
        raise ScenarioError(label, field, f"not YAML: {exc}") from exc
    specs = parsed if isinstance(parsed, list) else [parsed]
    out = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, Mapping):
            raise ScenarioError(label, field, f"entry {i} must be a map with driver and count")
        driver = spec.get("driver")
        count = spec.get("count")
        if not isinstance(driver, str) or not driver:
            raise ScenarioError(label, field, f"entry {i}: driver is required")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ScenarioError(label, field, f"entry {i}: count must be a positive integer")
        prefix = str(spec.get("name") or "dev")
        attributes = {str(k): _attribute(v) for k, v in (spec.get("attributes") or {}).items()}
        capacity = {str(k): {"value": str(v)} for k, v in (spec.get("capacity") or {}).items()}
        devices = []
        for d in range(count):
            device: dict[str, Any] = {
                "name": f"{prefix}-{d}",
                "attributes": {**attributes, "index": {"int": d}},
            }
            if capacity:
                device["capacity"] = capacity
            devices.append(device)
        name = f"{meta['name']}-{driver.replace('.', '-')}"
        timing = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k in ("sim.sluice.dev/arrival", "sim.sluice.dev/departure")
        }
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name, **({"annotations": timing} if timing else {})},
                "spec": {
                    "driver": driver,
                    "nodeName": meta["name"],
                    "pool": {"name": meta["name"], "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    return out
