"""The decision core never awaits (DESIGN section 2): no coroutine, no await anywhere in
scheduler/api, framework, plugins, actions and cache. The import contracts of
``lint-imports`` keep the core from importing asyncio and the like; this keeps it from
becoming asynchronous by itself."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "scheduler"
CORE = ("api", "framework", "plugins", "actions", "cache")
ASYNC = (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)


def async_nodes(source: str, filename: str) -> list[str]:
    """``file:line kind`` of every async construct in ``source``."""
    tree = ast.parse(source, filename)
    return [
        f"{filename}:{node.lineno} {type(node).__name__}"
        for node in ast.walk(tree)
        if isinstance(node, ASYNC)
    ]


@pytest.mark.parametrize("package", CORE)
def test_the_core_has_no_async_code(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"scheduler/{package} has no modules"
    found = [hit for f in files for hit in async_nodes(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def f():\n    return 1\n", 0),
        ("async def f():\n    return 1\n", 1),
        ("async def f(x):\n    await x\n", 2),
        ("async def f(x):\n    async for y in x:\n        pass\n", 2),
    ],
    ids=["plain", "coroutine", "await", "async-for"],
)
def test_the_check_sees_async_code(source: str, found: int) -> None:
    assert len(async_nodes(source, "m.py")) == found


def _contract(fragment: str) -> dict[str, object]:
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if fragment in c["name"])


def _modules_outside(package: Path) -> list[str]:
    """Every module of scheduler outside ``package`` (and but the root package)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if package in path.parents or path == ROOT / "__init__.py":
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _modules_inside(package: Path) -> list[str]:
    """Every module of ``package`` but its ``__init__``."""
    return [
        ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for path in sorted(package.rglob("*.py"))
        if path.name != "__init__.py"
    ]


ROOMS = [
    # (words of the contract's name, the package whose parts it guards, modules outside
    # it that the list may leave out: their own package's parents)
    ("scheduling queue", ROOT / "loop" / "queue", ["scheduler.loop"]),
    ("reaches its rooms", ROOT / "cache", []),
    ("outside the dispatcher", ROOT / "dispatch", []),
]
GANG_APIS = ("gang API", ROOT / "api" / "group_apis", ["scheduler.api"])
"""The gang APIs' package: only its table is the way in to an API's own module."""


@pytest.mark.parametrize(
    ("fragment", "package", "parents"),
    [*ROOMS, GANG_APIS],
    ids=["queue", "cache", "dispatch", "gang-apis"],
)
def test_a_rooms_contract_covers_every_module_outside_it(
    fragment: str, package: Path, parents: list[str]
) -> None:
    """``make contracts`` forbids every module but the room's own to reach its parts;
    its list of source modules must name (or contain) every module outside it."""
    contract = _contract(fragment)
    sources = [str(s) for s in contract["source_modules"]]  # type: ignore[attr-defined]
    missing = [
        module
        for module in _modules_outside(package)
        if not any(module == s or module.startswith(f"{s}.") for s in sources)
    ]
    assert missing in ([], parents), missing


@pytest.mark.parametrize(
    ("fragment", "package", "parents"), ROOMS, ids=["queue", "cache", "dispatch"]
)
def test_a_rooms_contract_guards_every_part(
    fragment: str, package: Path, parents: list[str]
) -> None:
    """... and its list of forbidden modules must name every part of the room."""
    contract = _contract(fragment)
    forbidden = {str(s) for s in contract["forbidden_modules"]}  # type: ignore[attr-defined]
    assert sorted(set(_modules_inside(package)) - forbidden) == []


WRITE_PORTS = frozenset({"binder", "evictor", "status", "events", "claims", "volumes"})
"""The fields of ``ClusterPorts`` that write to the API server (scheduler/ports.py)."""

WRITERS = ("dispatch", "kube", "sim")
"""The packages that may reach a write port: the dispatcher, which makes every write,
and the two backends, which implement the ports and build ``ClusterPorts``."""


def write_port_uses(source: str, filename: str) -> list[str]:
    """``file:line ports.X`` of every write port reached off a ports object (a name or
    attribute ending in ``ports``: ``ports.binder``, ``self._ports.status``)."""
    tree = ast.parse(source, filename)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in WRITE_PORTS:
            continue
        holder = node.value
        name = holder.id if isinstance(holder, ast.Name) else getattr(holder, "attr", "")
        if name.endswith("ports"):
            found.append(f"{filename}:{node.lineno} {name}.{node.attr}")
    return found


def test_only_the_dispatcher_reaches_the_write_ports() -> None:
    """Every write goes through the API dispatcher (scheduler/dispatch): no module outside
    it and the backends takes a write port (Binder, Evictor, StatusWriter, EventRecorder,
    ClaimWriter) off the ports; the loop, the status reporter, the binding cycle and the
    preemption executor hand typed calls to the dispatcher instead."""
    files = [f for f in sorted(ROOT.rglob("*.py")) if f.relative_to(ROOT).parts[0] not in WRITERS]
    assert len(files) > 100
    found = [hit for f in files for hit in write_port_uses(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("self._ports.status.patch_pod_status(ref, {})\n", 1),
        ("ports.binder.bind(ref, 'n', {})\n", 1),
        ("x = self.ports.claims\n", 1),
        ("self.ports.clock.now()\n", 0),
        ("self.status.report(session)\n", 0),
    ],
    ids=["status-writer", "binder", "claims", "clock", "not-a-port"],
)
def test_the_write_port_check_sees_a_write_port(source: str, found: int) -> None:
    assert len(write_port_uses(source, "m.py")) == found
