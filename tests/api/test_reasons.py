"""Every reason users read is built in one module with a stable code (issue 24 point 4)."""

from __future__ import annotations

import ast
from pathlib import Path

from scheduler.api import reasons
from scheduler.api.reasons import Reason, ReasonCode

ROOT = Path(__file__).resolve().parents[2] / "scheduler"


def test_only_the_reasons_module_builds_reasons() -> None:
    """Everywhere else asks its functions: no free text reaches users unbuilt."""
    found = []
    for path in ROOT.rglob("*.py"):
        if path == ROOT / "api" / "reasons.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "Reason")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "Reason")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_every_code_is_built_by_some_function() -> None:
    source = (ROOT / "api" / "reasons.py").read_text()
    unused = [c.name for c in ReasonCode if source.count(f"ReasonCode.{c.name}") < 1]
    assert unused == []


def test_codes_are_camel_case_words_and_unique() -> None:
    values = [c.value for c in ReasonCode]
    assert len(set(values)) == len(values)
    assert all(v[0].isupper() and v.isalnum() for v in values)


def test_a_sentence_added_keeps_the_code() -> None:
    base = reasons.nodes_unavailable("0/2 nodes are available: 2 Insufficient cpu.")
    more = reasons.nothing_helps(base, "preemption: none helps.")
    assert more.code is ReasonCode.NODES_UNAVAILABLE
    assert more.message == "0/2 nodes are available: 2 Insufficient cpu. preemption: none helps."
    alone = reasons.nothing_helps(None, "preemption: none helps.")
    assert alone == Reason(ReasonCode.PREEMPTION_CANNOT_HELP, "preemption: none helps.")
    assert str(alone) == "preemption: none helps."
