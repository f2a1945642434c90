"""Status conditions as Kubernetes controllers write them (layer 0).

:func:`set_condition` replaces the condition of one type in a list and keeps the others,
as the API's own helpers (``meta.SetStatusCondition``, Volcano's
``UpdatePodGroupCondition``) do; its ``lastTransitionTime`` (and any field named in
``keep``) stays as it was unless status, reason or message changed, so that rewriting an
unchanged condition is not a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["set_condition"]


def set_condition(
    conditions: Iterable[Mapping[str, Any]],
    new: Mapping[str, Any],
    now: str,
    *,
    keep: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """``conditions`` with ``new`` in place of the condition of its type (appended if
    none). ``new`` gets ``lastTransitionTime`` = ``now`` (and each field of ``keep`` as
    given) unless the old condition had the same status, reason and message, whose
    values it then keeps."""
    out: list[dict[str, Any]] = []
    placed = False
    for old in conditions:
        if not isinstance(old, Mapping):
            continue
        if old.get("type") != new["type"]:
            out.append(dict(old))
            continue
        out.append(_transition(new, old, now, keep))
        placed = True
    if not placed:
        out.append(_transition(new, None, now, keep))
    return out


def _transition(
    new: Mapping[str, Any], old: Mapping[str, Any] | None, now: str, keep: tuple[str, ...]
) -> dict[str, Any]:
    cond = dict(new)
    same = old is not None and all(
        old.get(k) == new.get(k) for k in ("status", "reason", "message")
    )
    if same and old is not None:
        for k in ("lastTransitionTime", *keep):
            if k in old:
                cond[k] = old[k]
    else:
        cond.setdefault("lastTransitionTime", now)
    return cond
