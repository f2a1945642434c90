"""Resources as immutable integer vectors (layer 0).

A :class:`Resource` maps resource names to integers in canonical units: milli-CPU for
``cpu``, bytes for ``memory`` and ``ephemeral-storage``, counts for ``pods`` and for any
extended resource such as ``nvidia.com/gpu``. No floats: comparisons are exact.
Zero entries are dropped, so two equal vectors compare equal.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping
from typing import Any

from scheduler.api.errors import QuantityError
from scheduler.api.quantity import format_bytes, format_milli, parse_quantity, to_milli, to_units

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
GPU = "nvidia.com/gpu"

_BYTE_RESOURCES = frozenset({MEMORY, EPHEMERAL_STORAGE})

MAX_AMOUNT = 2**50
"""The largest amount of one resource a node is counted with (1Pi bytes, 2**50 milli-CPU).
A Quantity has no upper bound, but the node table holds 64-bit integers and sums them
over nodes and pods: a node offering more is capped to this, and a pod asking more is
unschedulable (:func:`over_max`)."""


def over_max(res: Mapping[str, int]) -> list[str]:
    """The names of the resources of which ``res`` holds more than :data:`MAX_AMOUNT`."""
    return sorted(name for name, amount in res.items() if amount > MAX_AMOUNT)


_AMOUNTS: dict[tuple[str, str], int] = {}
"""Parsed amounts by (resource, text): a cluster repeats a handful of quantities."""


def canonical_amount(name: str, value: object, *, obj: str = "", field: str = "") -> int:
    """Parse one quantity of resource ``name`` into its canonical integer unit."""
    if isinstance(value, str):
        hit = _AMOUNTS.get((name, value))
        if hit is not None:
            return hit
    q = parse_quantity(value, obj=obj, field=field)
    if q < 0:
        raise QuantityError(obj, field, f"must not be negative, got {value!r}")
    amount = to_milli(q) if name == CPU else to_units(q)
    if isinstance(value, str) and len(_AMOUNTS) < 65536:
        _AMOUNTS[(name, value)] = amount
    return amount


def parse_limits(raw: object, *, obj: str = "", field: str = "") -> dict[str, int]:
    """A map of resource name to canonical amount, keeping explicit zeros (a limit of 0
    closes that resource, where a missing name is unbounded). For queue limits."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise QuantityError(obj, field, "must be a map of resource name to quantity")
    return {
        str(name): canonical_amount(str(name), v, obj=obj, field=f"{field}.{name}")
        for name, v in raw.items()
    }


class Resource(Mapping[str, int]):
    """An immutable vector of resource amounts. Missing names read as 0."""

    __slots__ = ("_hash", "_v")

    def __init__(self, amounts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = amounts.items() if isinstance(amounts, Mapping) else amounts
        self._v: dict[str, int] = {k: v for k, v in items if v}
        self._hash: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None, *, obj: str = "", field: str = "") -> Resource:
        """Build from a Kubernetes resource list such as ``{"cpu": "500m", "memory": "1Gi"}``."""
        if not raw:
            return ZERO
        if not isinstance(raw, Mapping):
            raise QuantityError(obj, field, "must be a map of resource name to quantity")
        return cls(
            {
                name: canonical_amount(name, v, obj=obj, field=f"{field}.{name}")
                for name, v in raw.items()
            }
        )

    # Mapping protocol
    def __getitem__(self, name: str) -> int:
        return self._v.get(name, 0)

    def items(self) -> ItemsView[str, int]:
        return self._v.items()

    def __contains__(self, name: object) -> bool:
        return name in self._v

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        return self._v.get(name, default)

    @property
    def amounts(self) -> Mapping[str, int]:
        """The non-zero amounts as a plain mapping (read-only by contract): the fastest
        way to read many entries in a hot loop."""
        return self._v

    def __iter__(self) -> Iterator[str]:
        return iter(self._v)

    def __len__(self) -> int:
        return len(self._v)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resource):
            return self._v == other._v
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._v.items()))
        return self._hash

    # Arithmetic
    def __add__(self, other: Mapping[str, int]) -> Resource:
        items = other._v if isinstance(other, Resource) else other
        if not items:
            return self
        if not self._v:
            return other if isinstance(other, Resource) else Resource(other)
        v = dict(self._v)
        for k, n in items.items():
            v[k] = v.get(k, 0) + n
        return Resource._trusted(v)

    @classmethod
    def _trusted(cls, v: dict[str, int]) -> Resource:
        """Wrap ``v`` (owned by the caller, never shared) dropping zeros, without copying."""
        r = cls.__new__(cls)
        r._v = {k: n for k, n in v.items() if n} if 0 in v.values() else v
        r._hash = None
        return r

    def __sub__(self, other: Mapping[str, int]) -> Resource:
        """Exact difference; entries may go negative (use :meth:`clamp` for idle views)."""
        items = other._v if isinstance(other, Resource) else other
        if not items:
            return self
        v = dict(self._v)
        for k, n in items.items():
            v[k] = v.get(k, 0) - n
        return Resource._trusted(v)

    def scale(self, factor: int) -> Resource:
        return Resource({k: n * factor for k, n in self._v.items()})

    def clamp(self) -> Resource:
        """Negative entries become zero."""
        return Resource({k: n for k, n in self._v.items() if n > 0})

    def max(self, other: Mapping[str, int]) -> Resource:
        """Per-name maximum."""
        v = dict(self._v)
        for k, n in other.items():
            if n > v.get(k, 0):
                v[k] = n
        return Resource(v)

    def min(self, other: Mapping[str, int]) -> Resource:
        """Per-name minimum (a name missing from either side reads 0)."""
        return Resource({k: min(n, other.get(k, 0)) for k, n in self._v.items()})

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every amount of ``self`` is at most the same amount of ``capacity``."""
        cap = capacity._v if isinstance(capacity, Resource) else capacity
        return all(n <= cap.get(k, 0) for k, n in self._v.items())

    def insufficient(self, capacity: Mapping[str, int]) -> list[str]:
        """Names whose amount exceeds ``capacity``, sorted."""
        return sorted(k for k, n in self._v.items() if n > capacity.get(k, 0))

    def is_zero(self) -> bool:
        return not self._v

    def any_negative(self) -> bool:
        return any(n < 0 for n in self._v.values())

    def to_dict(self) -> dict[str, int]:
        return dict(self._v)

    def to_quantities(self) -> dict[str, str]:
        """Kubernetes quantity strings, for status fields and messages."""
        out: dict[str, str] = {}
        for k in sorted(self._v):
            n = self._v[k]
            if k == CPU:
                out[k] = format_milli(n)
            elif k in _BYTE_RESOURCES:
                out[k] = format_bytes(n)
            else:
                out[k] = str(n)
        return out

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in sorted(self.to_quantities().items()))
        return f"Resource({inner})"


ZERO = Resource()


class ResourceSum:
    """A mutable running total, for summing many Resources without building each step."""

    __slots__ = ("_v",)

    def __init__(self) -> None:
        self._v: dict[str, int] = {}

    def add(self, res: Resource) -> None:
        v = self._v
        for k, n in res._v.items():
            v[k] = v.get(k, 0) + n

    def result(self) -> Resource:
        return Resource._trusted(dict(self._v))
