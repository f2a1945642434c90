"""Is a CustomResourceDefinition on the API server the one of ``crds/``? (layer 5, doctor)

:func:`crd_differences` compares the ``spec`` of the file with the server's: every field
must be equal, with the one default the API server adds (``conversion: {strategy: None}``)
applied to the file first. Versions are matched by name, so a difference reads as
``spec.versions[v1alpha1].schema.openAPIV3Schema.properties.spec...``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["crd_differences", "established"]

_SERVER_DEFAULTS: Mapping[str, Any] = {"conversion": {"strategy": "None"}}


def crd_differences(file_spec: Mapping[str, Any], server_spec: Mapping[str, Any]) -> list[str]:
    """Paths where the server's spec differs from the file's (empty: the same)."""
    expected = {**_SERVER_DEFAULTS, **file_spec}
    out: list[str] = []
    _diff(expected, dict(server_spec), "spec", out)
    return out


def _diff(want: Any, got: Any, path: str, out: list[str]) -> None:
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        for key in sorted(set(want) | set(got)):
            where = f"{path}.{key}"
            if key not in got:
                out.append(f"{where} (missing on the server)")
            elif key not in want:
                out.append(f"{where} (not in the file)")
            else:
                _diff(want[key], got[key], where, out)
        return
    if isinstance(want, list) and isinstance(got, list):
        if _named(want) and _named(got):
            wanted = {v["name"]: v for v in want}
            there = {v["name"]: v for v in got}
            for name in sorted(set(wanted) | set(there)):
                where = f"{path}[{name}]"
                if name not in there:
                    out.append(f"{where} (missing on the server)")
                elif name not in wanted:
                    out.append(f"{where} (not in the file)")
                else:
                    _diff(wanted[name], there[name], where, out)
            return
        if len(want) != len(got):
            out.append(f"{path} ({len(got)} items on the server, {len(want)} in the file)")
            return
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            _diff(w, g, f"{path}[{i}]", out)
        return
    if want != got:
        out.append(path)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, Mapping) and "name" in i for i in items)


def established(crd: Mapping[str, Any]) -> bool:
    """Whether its ``Established`` condition is True (the API server serves it)."""
    for condition in (crd.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Established":
            return bool(condition.get("status") == "True")
    return False
