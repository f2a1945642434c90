"""Structural schemas (layer 0, schema): what the API server requires of a CRD schema
before it accepts the definition (:func:`structural_violations`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.api.errors import FieldCause
from scheduler.schema.validator import (  # the package's shared helpers
    _COMBINATORS,
    _TYPES,
    _compile,
    _invalid,
    _json_type,
    _required,
    _sorted_unique,
    _unsupported,
    _Validator,
)

# --------------------------------------------------------------------------------------------
# Structural schemas


def structural_violations(
    schema: Mapping[str, Any], path: str = "openAPIV3Schema"
) -> tuple[FieldCause, ...]:
    """Why ``schema`` is not a structural schema as ``apiextensions.k8s.io/v1`` requires.

    Empty when it is. Checked: every node under ``properties``, ``items`` and
    ``additionalProperties`` (and the root, which must be an object) has a known ``type``,
    unless it sets ``x-kubernetes-int-or-string`` (then it has no type) or
    ``x-kubernetes-preserve-unknown-fields``; arrays have one ``items`` schema; no node has
    both ``properties`` and ``additionalProperties``, nor ``additionalProperties: false``;
    ``allOf``/``anyOf``/``oneOf``/``not`` carry no types or defaults (save the
    ``anyOf: [{type: integer}, {type: string}]`` of int-or-string); patterns compile;
    defaults are valid for their node; the root's ``metadata`` says no more than its type.
    Paths are like the API server's: ``openAPIV3Schema.properties[spec].type``.
    """
    out: list[FieldCause] = []
    if not isinstance(schema, Mapping):
        return (_invalid(path, _json_type(schema), "must be an object schema"),)
    if schema.get("type") != "object":
        out.append(FieldCause(f"{path}.type", 'Unsupported value: must be "object" at the root'))
    _structural_node(schema, path, out)
    properties = schema.get("properties")
    metadata = properties.get("metadata") if isinstance(properties, Mapping) else None
    if isinstance(metadata, Mapping):
        extra = sorted(set(metadata) - {"type", "description", "properties"})
        meta_props = metadata.get("properties")
        if isinstance(meta_props, Mapping):
            extra += sorted(set(meta_props) - {"name", "generateName"})
        if extra:
            out.append(
                FieldCause(
                    f"{path}.properties[metadata]",
                    "Forbidden: must not specify anything other than name and generateName, "
                    f"but metadata is implicitly specified (found {', '.join(map(str, extra))})",
                )
            )
    return _sorted_unique(out)


def _structural_node(node: Mapping[str, Any], path: str, out: list[FieldCause]) -> None:
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    node_type = node.get("type")
    if int_or_string and node_type is not None:
        out.append(
            FieldCause(f"{path}.type", "Forbidden: must be empty with x-kubernetes-int-or-string")
        )
    elif node_type is None or node_type == "":
        if not int_or_string and not preserve:
            out.append(_required(f"{path}.type", "must not be empty for specified object fields"))
    elif node_type not in _TYPES:
        out.append(_unsupported(f"{path}.type", node_type, _TYPES))
    if node_type == "array" and "items" not in node:
        out.append(_required(f"{path}.items", "must be specified"))
    items = node.get("items")
    if items is not None:
        if isinstance(items, Mapping):
            _structural_node(items, f"{path}.items", out)
        else:
            out.append(
                FieldCause(
                    f"{path}.items", "Forbidden: items must be a schema object and not an array"
                )
            )
    properties = node.get("properties")
    if properties is not None:
        if not isinstance(properties, Mapping):
            out.append(FieldCause(f"{path}.properties", "Invalid value: must be a mapping"))
        else:
            for key, child in properties.items():
                where = f"{path}.properties[{key}]"
                if isinstance(child, Mapping):
                    _structural_node(child, where, out)
                else:
                    out.append(FieldCause(where, "Invalid value: must be a schema object"))
    additional = node.get("additionalProperties")
    if additional is not None:
        if properties is not None:
            out.append(
                FieldCause(
                    f"{path}.additionalProperties",
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                )
            )
        if additional is False:
            out.append(FieldCause(f"{path}.additionalProperties", "Forbidden: must not be false"))
        elif isinstance(additional, Mapping):
            _structural_node(additional, f"{path}.additionalProperties", out)
    pattern = node.get("pattern")
    if pattern is not None and (not isinstance(pattern, str) or _compile(pattern) is None):
        out.append(_invalid(f"{path}.pattern", pattern, "must be a valid regular expression"))
    _structural_combinators(node, path, int_or_string, out)
    if "default" in node:
        _structural_default(node, path, out)


def _structural_combinators(
    node: Mapping[str, Any], path: str, int_or_string: bool, out: list[FieldCause]
) -> None:
    for keyword in _COMBINATORS:
        value = node.get(keyword)
        if value is None:
            continue
        branches = [value] if keyword == "not" else value
        if not isinstance(branches, list):
            out.append(FieldCause(f"{path}.{keyword}", "Invalid value: must be a list"))
            continue
        if keyword == "anyOf" and int_or_string and _is_int_or_string_any_of(branches):
            continue
        for index, branch in enumerate(branches):
            where = f"{path}.{keyword}" if keyword == "not" else f"{path}.{keyword}[{index}]"
            if not isinstance(branch, Mapping):
                out.append(FieldCause(where, "Invalid value: must be a schema object"))
                continue
            for forbidden in ("type", "default", "nullable", "additionalProperties"):
                if forbidden in branch:
                    out.append(
                        FieldCause(
                            f"{where}.{forbidden}",
                            "Forbidden: must be empty to be structural",
                        )
                    )


def _structural_default(node: Mapping[str, Any], path: str, out: list[FieldCause]) -> None:
    default = node.get("default")
    if default is None and node.get("nullable") is not True:
        out.append(_invalid(f"{path}.default", None, "must not be null for a non-nullable field"))
        return
    checker = _Validator(whole_object=False)
    checker.node(default, node, "", strict=True)
    for cause in checker.causes:
        where = f"{path}.default" if cause.field == "<root>" else f"{path}.default.{cause.field}"
        out.append(FieldCause(where, cause.message))


def _is_int_or_string_any_of(branches: Sequence[Any]) -> bool:
    types = [branch.get("type") if isinstance(branch, Mapping) else None for branch in branches]
    return sorted(map(str, types)) == ["integer", "string"] and all(
        isinstance(branch, Mapping) and set(branch) == {"type"} for branch in branches
    )
