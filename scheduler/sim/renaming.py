"""What the anonymizer of ``sluice snapshot`` shares between its modules (layer 4, sim):
numberings, walking objects, the label keys selectors read, node names in node
selector terms. Pure functions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

HOSTNAME = "kubernetes.io/hostname"


def width(n: int) -> int:
    return max(4, len(str(n)))


def numbering(
    names: Iterable[str], prefix: str, order: Callable[[str], str] = str
) -> dict[str, str]:
    ordered = sorted(set(names), key=order)
    w = width(len(ordered))
    return {name: f"{prefix}{i:0{w}d}" for i, name in enumerate(ordered, 1)}


def walk(value: Any) -> Iterator[Mapping[str, Any]]:
    """Every mapping inside ``value``, depth first."""
    if isinstance(value, Mapping):
        yield value
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


def selector_keys(selector: Any) -> set[str]:
    """The label keys a label selector or node selector term reads."""
    keys: set[str] = set()
    for m in walk(selector):
        if isinstance(m.get("matchLabels"), Mapping):
            keys.update(m["matchLabels"])
        for e in m.get("matchExpressions") or ():
            if isinstance(e, Mapping) and "key" in e:
                keys.add(str(e["key"]))
        for k in m.get("matchLabelKeys") or ():
            keys.add(str(k))
    return keys


def node_terms(terms: Any, node: Callable[[str], str]) -> None:
    """Rename the node names that node selector terms match (``metadata.name`` fields,
    ``kubernetes.io/hostname`` labels)."""
    for m in walk(terms):
        for field in ("matchFields", "matchExpressions"):
            for e in m.get(field) or ():
                if e.get("key") in ("metadata.name", HOSTNAME) and isinstance(
                    e.get("values"), list
                ):
                    e["values"] = [node(str(v)) for v in e["values"]]
