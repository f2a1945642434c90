"""Is a CustomResourceDefinition on the API server the one of ``crds/``? (layer 5, doctor)

:func:`crd_differences` compares the ``spec`` of the file with the server's: every field
must be equal, with the one default the API server adds (``conversion: {strategy: None}``)
applied to the file first. Versions are matched by name, so a difference reads as
``spec.versions[v1alpha1].schema.openAPIV3Schema.properties.spec...``. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
        _diff_entries(want, got, lambda key: f"{path}.{key}", out)
    elif isinstance(want, list) and isinstance(got, list):
        if _named(want) and _named(got):  # versions, printer columns: by name
            named = {v["name"]: v for v in want}, {v["name"]: v for v in got}
            _diff_entries(*named, lambda name: f"{path}[{name}]", out)
        elif len(want) != len(got):
            out.append(f"{path} ({len(got)} items on the server, {len(want)} in the file)")
        else:
            for i, (w, g) in enumerate(zip(want, got, strict=True)):
                _diff(w, g, f"{path}[{i}]", out)
    elif want != got:
        out.append(path)


def _diff_entries(
    want: Mapping[str, Any], got: Mapping[str, Any], where: Callable[[str], str], out: list[str]
) -> None:
    for key in sorted(set(want) | set(got)):
        if key not in got:
            out.append(f"{where(key)} (missing on the server)")
        elif key not in want:
            out.append(f"{where(key)} (not in the file)")
        else:
            _diff(want[key], got[key], where(key), out)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, Mapping) and "name" in i for i in items)


def established(crd: Mapping[str, Any]) -> bool:
    """Whether its ``Established`` condition is True (the API server serves it)."""
    for condition in (crd.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Established":
            return bool(condition.get("status") == "True")
    return False
