"""The decision core never awaits (DESIGN section 2): no coroutine, no await anywhere in
scheduler/api, framework, plugins, actions and cache. The import contracts of
``lint-imports`` keep the core from importing asyncio and the like; this keeps it from
becoming asynchronous by itself."""

from __future__ import annotations

import ast
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


def _queue_contract() -> dict[str, object]:
    import tomllib

    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if "scheduling queue" in c["name"])


def test_the_queue_contract_covers_every_module_outside_the_queue() -> None:
    """``make contracts`` forbids every module but the scheduling queue's own to reach the
    queue's parts; its list of source modules must name (or contain) every module."""
    contract = _queue_contract()
    sources = [str(s) for s in contract["source_modules"]]  # type: ignore[attr-defined]
    queue = ROOT / "loop" / "queue"
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        if queue in path.parents or path == ROOT / "__init__.py":
            continue
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not any(module == s or module.startswith(f"{s}.") for s in sources):
            missing.append(module)
    assert missing in ([], ["scheduler.loop"]), missing
