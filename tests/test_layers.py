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
