"""``python -m bench cel``: the two maintained CEL libraries of PyPI on DRA's selectors.

Measures what choosing the library of :mod:`scheduler.api.dra.cel_selectors` rests on:
``common-expression-language`` (``import cel``, a CEL interpreter written in Rust, the one
Sluice uses) and ``cel-python`` (``import celpy``, pure Python; not a dependency of
Sluice: ``pip install cel-python`` to compare). For each library installed: on the
selectors of kube's own tests (staging/src/k8s.io/dynamic-resource-allocation/cel/
compile_test.go, the cases that need no cost limit or list-type attributes), whether each
gives the expected answer (a match, no match, or an error), then the time to compile a
selector and to evaluate one on a device. Kubernetes' ``quantity`` and ``semver``
functions are given to both the same way (maps holding the exact value). One JSON line.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from scheduler.api.dra.cel_selectors import KUBERNETES_FUNCTIONS, quantity_of, version_of
from scheduler.api.dra.model import Version

DRIVER = "dra.example.com"
MI = Fraction(2**20)

# (name, expression, attributes, capacity, expected: True | False | "error")
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], bool | str]] = [
    ("true", "true", {}, {}, True),
    ("false", "false", {}, {}, False),
    ("syntax-error", "?!", {}, {}, "error"),
    (
        "runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        {},
        {},
        "error",
    ),
    ("domain-check-negative", '"no-such-domain" in device.attributes', {}, {}, False),
    (
        "domain-check-positive",
        '"dra.example.com" in device.attributes',
        {"something": True},
        {},
        True,
    ),
    ("real-driver-name", 'device.driver == "dra.example.com"', {}, {}, True),
    (
        "driver-name-qualifier",
        'device.attributes["dra.example.com"].name',
        {"name": True},
        {},
        True,
    ),
    (
        "driver-name-qualifier-map-lookup",
        'device.attributes["dra.example.com"]["name"]',
        {"name": True},
        {},
        True,
    ),
    (
        "qualified-attribute-name",
        'device.attributes["other.example.com"].name',
        {"other.example.com/name": True},
        {},
        True,
    ),
    ("int", 'device.attributes["dra.example.com"].name > 0', {"name": 1}, {}, True),
    ("string", 'device.attributes["dra.example.com"].name == "fish"', {"name": "fish"}, {}, True),
    (
        "version",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        {"name": Version("1.0.0")},
        {},
        True,
    ),
    (
        "quantity",
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {},
        {"name": MI},
        True,
    ),
    (
        "check-positive",
        '"name" in device.capacity["dra.example.com"] && '
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {},
        {"name": MI},
        True,
    ),
    (
        "all",
        'device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) && '
        'device.attributes["dra.example.com"].bool && '
        'device.attributes["dra.example.com"].int > 0 && '
        'device.attributes["dra.example.com"].string == "fish" && '
        'device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) && '
        'device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki"))',
        {"bool": True, "int": 1, "string": "fish", "version": Version("1.0.0")},
        {"quantity": MI},
        True,
    ),
    (
        "check_attribute_domains",
        'device.attributes.exists_one(x, x == "dra.example.com")',
        {"services": "some_example_value"},
        {},
        True,
    ),
    (
        "regexp_attribute",
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        {"services": "asymetric"},
        {},
        True,
    ),
    (
        "check_capacity_ids",
        'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
        {},
        {"memory": MI},
        True,
    ),
    (
        "bind",
        'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
        {"name": True},
        {},
        True,
    ),
    (
        "split_attribute",
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        {"services": "some_example_value"},
        {},
        True,
    ),
]

TYPICAL = (
    'device.driver == "dra.example.com" && device.attributes["dra.example.com"].model == "a100"'
)


def _variables(attributes: dict[str, Any], capacity: dict[str, Any]) -> dict[str, Any]:
    def nested(flat: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
        out: dict[str, dict[str, Any]] = {}
        for name, value in flat.items():
            full = name if "/" in name else f"{DRIVER}/{name}"
            domain, _, ident = full.rpartition("/")
            out.setdefault(domain, {})[ident] = convert(value)
        return out

    return {
        "device": {
            "driver": DRIVER,
            "attributes": nested(
                attributes, lambda v: version_of(v) if isinstance(v, Version) else v
            ),
            "capacity": nested(capacity, quantity_of),
        }
    }


class RustCel:
    name = "common-expression-language"

    def __init__(self) -> None:
        self.cel = importlib.import_module("cel")

    def compile(self, expression: str) -> Any:
        return self.cel.compile(expression)

    def context(self, variables: dict[str, Any]) -> Any:
        ctx = self.cel.Context(variables=variables)
        self.cel.stdlib.add_stdlib_to_context(ctx)
        for name, fn in KUBERNETES_FUNCTIONS.items():
            ctx.add_function(name, fn)
        return ctx

    def run(self, program: Any, context: Any) -> Any:
        return program.execute(context)


class PyCel:
    name = "cel-python"

    def __init__(self) -> None:
        self.celpy = importlib.import_module("celpy")
        self.env = self.celpy.Environment()
        types = importlib.import_module("celpy.celtypes")

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                plain = [_plain(a) for a in args]
                return self.celpy.json_to_cel(fn(*plain))

            return call

        self.functions = {name: wrap(fn) for name, fn in KUBERNETES_FUNCTIONS.items()}
        self._bool = types.BoolType

    def compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression), functions=self.functions)

    def context(self, variables: dict[str, Any]) -> Any:
        return {k: self.celpy.json_to_cel(v) for k, v in variables.items()}

    def run(self, program: Any, context: Any) -> Any:
        out = program.evaluate(context)
        if isinstance(out, Exception):
            raise out
        return bool(out) if isinstance(out, self._bool) else out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | float | str):
        return type(value).__mro__[-2](value) if not isinstance(value, bool) else bool(value)
    return value


def measure(lib: Any) -> dict[str, Any]:
    wrong: list[str] = []
    for name, expression, attributes, capacity, expected in CASES:
        try:
            got: bool | str = lib.run(
                lib.compile(expression), lib.context(_variables(attributes, capacity))
            )
            if not isinstance(got, bool):
                got = "error"
        except Exception:  # every library raises its own errors
            got = "error"
        if got != expected:
            wrong.append(f"{name}: {got} (expected {expected})")
    t = time.perf_counter()
    for _ in range(200):
        program = lib.compile(TYPICAL)
    compile_us = (time.perf_counter() - t) / 200 * 1e6
    contexts = [
        lib.context(_variables({"model": "a100" if i % 2 else "h100", "index": i}, {"memory": MI}))
        for i in range(500)
    ]
    samples = []
    for _ in range(3):
        t = time.perf_counter()
        for c in contexts:
            lib.run(program, c)
        samples.append((time.perf_counter() - t) / len(contexts) * 1e6)
    return {
        "library": lib.name,
        "cases": len(CASES),
        "wrong": wrong,
        "compile_us": round(compile_us, 1),
        "evaluate_us": round(statistics.median(samples), 2),
    }


def main() -> int:
    out = []
    for make in (RustCel, PyCel):
        try:
            lib = make()
        except ImportError as exc:
            out.append({"library": make.name, "installed": False, "error": str(exc)})
            continue
        out.append(measure(lib))
    sys.stdout.write(json.dumps({"workload": "cel-libraries", "results": out}) + "\n")
    return 0
