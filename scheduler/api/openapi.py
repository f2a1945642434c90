"""The custom resource definitions of Sluice and an OpenAPI v3 schema validator (layer 0).

This module is how the embedded cluster refuses a bad PodGroup, Queue or Topology the way the
Kubernetes API server does, naming the field. It has three parts:

* :func:`load_crds` reads the ``apiextensions.k8s.io/v1`` CustomResourceDefinitions in
  ``crds/`` (or ``scheduler/_crds`` in a wheel) into a :class:`CrdCatalog`, refusing a
  definition whose schema is not structural (:func:`structural_violations`).
* :func:`apply_defaults` and :func:`validate` implement the subset of OpenAPI v3.0 (with the
  Kubernetes ``x-kubernetes-*`` extensions) that CRD schemas use. Causes are
  :class:`~scheduler.api.errors.FieldCause` values whose path and message read like the API
  server's, e.g. ``spec.minMember: Invalid value: -1: spec.minMember in body should be greater
  than or equal to 0``.
* :meth:`CrdCatalog.check` does what the API server does on create: default, validate, and
  raise :class:`~scheduler.api.errors.InvalidObjectError` (422) with the server's message.

Pure Python (stdlib and PyYAML), no asyncio. Reading the CRD files is the only I/O, and it
happens once for the default catalog, which is cached.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final, TypeGuard

import yaml

from scheduler.api import labels as L
from scheduler.api.errors import FieldCause, InvalidInputError, InvalidObjectError

__all__ = [
    "API_VERSION",
    "GROUP",
    "QUANTITY_PATTERN",
    "VERSION",
    "CrdCatalog",
    "CrdInfo",
    "PrinterColumn",
    "apply_defaults",
    "load_crds",
    "structural_violations",
    "validate",
]

GROUP: Final = L.GROUP
VERSION: Final = L.VERSION
API_VERSION: Final = L.API_VERSION

#: The pattern Kubernetes puts on every int-or-string resource quantity in a CRD schema.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_COMBINATORS: Final = ("allOf", "anyOf", "oneOf", "not")
_ROOT_FIELDS: Final = frozenset({"apiVersion", "kind", "metadata"})
_NOT_DECLARED: Final = "field not declared in schema"
_DATE_TIME: Final = re.compile(
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]"
    r"([01][0-9]|2[0-3]):[0-5][0-9](:([0-5][0-9]|60)(\.[0-9]+)?)?"
    r"([Zz]|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])?",
    re.ASCII,
)
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII
)
_DNS_SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


# --------------------------------------------------------------------------------------------
# The catalog


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry: what ``kubectl get`` shows for the kind."""

    name: str
    type: str
    json_path: str
    description: str = ""
    format: str = ""
    priority: int = 0


@dataclass(frozen=True, slots=True)
class CrdInfo:
    """What Sluice needs to know about one custom resource kind (its storage version).

    ``schema`` is the version's ``openAPIV3Schema`` as read from YAML. It is shared by every
    user of the catalog: treat it as read-only.
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    schema: Mapping[str, Any] = field(hash=False, repr=False)
    has_status_subresource: bool = False
    printer_columns: tuple[PrinterColumn, ...] = ()

    @property
    def api_version(self) -> str:
        """``group/version``, the value ``apiVersion`` must have."""
        return f"{self.group}/{self.version}"

    @property
    def group_kind(self) -> str:
        """``Kind.group``, as the API server names the kind in messages."""
        return f"{self.kind}.{self.group}"


@dataclass(frozen=True, slots=True)
class CrdCatalog:
    """The custom resource kinds the cluster serves, by kind."""

    crds: Mapping[str, CrdInfo] = field(hash=False)

    def get(self, kind: str) -> CrdInfo | None:
        """The definition of ``kind``, or None if it is not a custom kind of this catalog."""
        return self.crds.get(kind)

    def by_plural(self, plural: str) -> CrdInfo | None:
        """The definition whose resource (plural) name is ``plural``, or None."""
        for info in self.crds.values():
            if info.plural == plural:
                return info
        return None

    def resolve(self, name: str) -> CrdInfo | None:
        """What ``kubectl get NAME`` means: kind, plural, singular or short name, any case."""
        wanted = name.lower()
        for info in self.crds.values():
            names = (info.kind.lower(), info.plural, info.singular, *info.short_names)
            if wanted in names:
                return info
        return None

    def kinds(self) -> tuple[str, ...]:
        """The kinds of the catalog, sorted."""
        return tuple(sorted(self.crds))

    def is_custom(self, kind: str) -> bool:
        """Whether ``kind`` is one of the catalog's custom kinds (so :meth:`check` applies)."""
        return kind in self.crds

    def check(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Admit ``obj`` as the API server admits a create of a custom object.

        Returns a new object with schema defaults filled in (``obj`` is not changed) and, for
        a cluster-scoped kind, ``metadata.namespace`` removed, as the server clears it.

        Raises :class:`InvalidObjectError` (422) carrying every cause, sorted by field, when:
        ``apiVersion`` is not the kind's ``group/version``; ``metadata.name`` is missing or not
        a DNS subdomain; or the defaulted object fails :func:`validate`. The message is the
        server's: ``PodGroup.scheduling.sluice.dev "gang-a" is invalid: spec.minMember: ...``,
        with several causes as ``is invalid: [cause1, cause2]``. A ``kind`` outside the catalog
        is refused the same way, with a cause on ``kind`` (use :meth:`is_custom` first).
        Never raises anything else, whatever ``obj`` holds.
        """
        raw_kind = obj.get("kind") if isinstance(obj, Mapping) else None
        kind = raw_kind if isinstance(raw_kind, str) else ""
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        raw_name = metadata.get("name") if isinstance(metadata, Mapping) else None
        name = raw_name if isinstance(raw_name, str) else ""
        info = self.crds.get(kind)
        if info is None:
            cause = _unsupported("kind", raw_kind, self.kinds())
            raise InvalidObjectError(
                f"{kind or 'Object'} {_go_quote(name)} is invalid: {cause}",
                kind=kind,
                name=name,
                causes=(cause,),
            )
        causes: list[FieldCause] = []
        api_version = obj.get("apiVersion")
        if api_version is None:
            causes.append(_required("apiVersion"))
        elif api_version != info.api_version:
            causes.append(_unsupported("apiVersion", api_version, (info.api_version,)))
        if not name:
            causes.append(_required("metadata.name", "name or generateName is required"))
        elif len(name) > 253 or _DNS_SUBDOMAIN.fullmatch(name) is None:
            detail = _DNS_SUBDOMAIN_MESSAGE
            if len(name) > 253:
                detail = "must be no more than 253 characters"
            causes.append(_invalid("metadata.name", name, detail))
        defaulted = apply_defaults(obj, info.schema)
        if not info.namespaced and isinstance(defaulted.get("metadata"), dict):
            defaulted["metadata"].pop("namespace", None)
        causes.extend(validate(defaulted, info.schema))
        if causes:
            ordered = _sorted_unique(causes)
            body = str(ordered[0]) if len(ordered) == 1 else f"[{', '.join(map(str, ordered))}]"
            raise InvalidObjectError(
                f"{info.group_kind} {_go_quote(name)} is invalid: {body}",
                kind=info.kind,
                name=name,
                causes=ordered,
            )
        return defaulted


def load_crds(directory: Path | None = None) -> CrdCatalog:
    """Read every CustomResourceDefinition in the ``*.yaml``/``*.yml`` files of ``directory``.

    Without ``directory``: the package's ``_crds`` (where a wheel puts ``crds/``) if it exists,
    else the repository's ``crds/``; that catalog is read once and cached.

    Each file may hold several YAML documents; each document must be an
    ``apiextensions.k8s.io/v1`` CustomResourceDefinition with a storage version whose schema
    is structural. Raises :class:`InvalidInputError` naming the file and field otherwise, or
    when two definitions have the same kind.
    """
    if directory is None:
        return _default_catalog()
    return _load_directory(directory)


@functools.cache
def _default_catalog() -> CrdCatalog:
    packaged = importlib.resources.files("scheduler") / "_crds"
    if packaged.is_dir():
        return _load_directory(packaged)
    return _load_directory(Path(__file__).resolve().parents[2] / "crds")


def _load_directory(directory: Traversable) -> CrdCatalog:
    if not directory.is_dir():
        raise InvalidInputError(str(directory), None, "is not a directory")
    crds: dict[str, CrdInfo] = {}
    entries = sorted(directory.iterdir(), key=lambda entry: entry.name)
    for entry in entries:
        if not entry.name.endswith((".yaml", ".yml")) or not entry.is_file():
            continue
        source = str(entry)
        try:
            documents = list(yaml.safe_load_all(entry.read_text(encoding="utf-8")))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise InvalidInputError(source, None, f"is not valid YAML: {exc}") from exc
        for document in documents:
            if document is None:
                continue
            info = _parse_crd(document, source)
            if info.kind in crds:
                raise InvalidInputError(source, "spec.names.kind", f"duplicate kind {info.kind}")
            crds[info.kind] = info
    return CrdCatalog(crds=crds)


def _parse_crd(document: Any, source: str) -> CrdInfo:
    """One CRD document as a :class:`CrdInfo`; raises InvalidInputError naming the field."""
    if not isinstance(document, Mapping):
        raise InvalidInputError(source, None, "a document is not a mapping")
    if (
        document.get("apiVersion") != "apiextensions.k8s.io/v1"
        or document.get("kind") != "CustomResourceDefinition"
    ):
        raise InvalidInputError(
            source, "kind", "is not an apiextensions.k8s.io/v1 CustomResourceDefinition"
        )
    spec = _mapping(document, "spec", source, "spec")
    names = _mapping(spec, "names", source, "spec.names")
    group = _string(spec, "group", source, "spec.group")
    kind = _string(names, "kind", source, "spec.names.kind")
    plural = _string(names, "plural", source, "spec.names.plural")
    singular = names.get("singular", kind.lower())
    short_names = names.get("shortNames", [])
    if not isinstance(singular, str) or not isinstance(short_names, list):
        raise InvalidInputError(source, "spec.names", "singular and shortNames must be strings")
    if not all(isinstance(short, str) for short in short_names):
        raise InvalidInputError(source, "spec.names.shortNames", "must be a list of strings")
    metadata = document.get("metadata")
    crd_name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if crd_name != f"{plural}.{group}":
        raise InvalidInputError(source, "metadata.name", f"must be {plural}.{group}")
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        raise InvalidInputError(source, "spec.scope", 'must be "Namespaced" or "Cluster"')
    versions = spec.get("versions")
    if not isinstance(versions, list):
        raise InvalidInputError(source, "spec.versions", "must be a list")
    storage = [
        (index, version)
        for index, version in enumerate(versions)
        if isinstance(version, Mapping) and version.get("storage") is True
    ]
    if not storage:
        raise InvalidInputError(source, "spec.versions", "no version has storage: true")
    index, version = storage[0]
    where = f"spec.versions[{index}]"
    version_name = _string(version, "name", source, f"{where}.name")
    schema_holder = _mapping(version, "schema", source, f"{where}.schema")
    schema = _mapping(schema_holder, "openAPIV3Schema", source, f"{where}.schema.openAPIV3Schema")
    violations = structural_violations(schema, f"{where}.schema.openAPIV3Schema")
    if violations:
        first = violations[0]
        raise InvalidInputError(source, first.field, f"not a structural schema: {first.message}")
    subresources = version.get("subresources")
    has_status = isinstance(subresources, Mapping) and subresources.get("status") is not None
    columns = version.get("additionalPrinterColumns", [])
    if not isinstance(columns, list):
        raise InvalidInputError(source, f"{where}.additionalPrinterColumns", "must be a list")
    printer_columns = tuple(
        _printer_column(column, source, f"{where}.additionalPrinterColumns[{position}]")
        for position, column in enumerate(columns)
    )
    return CrdInfo(
        group=group,
        version=version_name,
        kind=kind,
        plural=plural,
        singular=singular,
        short_names=tuple(short_names),
        namespaced=scope == "Namespaced",
        schema=schema,
        has_status_subresource=has_status,
        printer_columns=printer_columns,
    )


def _printer_column(column: Any, source: str, where: str) -> PrinterColumn:
    if not isinstance(column, Mapping):
        raise InvalidInputError(source, where, "must be a mapping")
    priority = column.get("priority", 0)
    description = column.get("description", "")
    column_format = column.get("format", "")
    if not isinstance(priority, int) or not isinstance(description, str):
        raise InvalidInputError(source, where, "priority must be an integer, description a string")
    if not isinstance(column_format, str):
        raise InvalidInputError(source, f"{where}.format", "must be a string")
    return PrinterColumn(
        name=_string(column, "name", source, f"{where}.name"),
        type=_string(column, "type", source, f"{where}.type"),
        json_path=_string(column, "jsonPath", source, f"{where}.jsonPath"),
        description=description,
        format=column_format,
        priority=priority,
    )


def _mapping(parent: Mapping[str, Any], key: str, source: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if not isinstance(value, Mapping):
        raise InvalidInputError(source, where, "must be a mapping")
    return value


def _string(parent: Mapping[str, Any], key: str, source: str, where: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidInputError(source, where, "must be a non-empty string")
    return value


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


# --------------------------------------------------------------------------------------------
# Defaulting


def apply_defaults(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` with the schema's ``default`` values filled in.

    As the API server does on create: a field that is absent, or null while not ``nullable``,
    gets its default; defaulting then continues inside it, through ``properties``,
    ``additionalProperties`` and ``items``. Nodes whose value has the wrong type are left as
    they are (validation reports them). ``obj`` and ``schema`` are not changed; the result
    shares nothing with them. Mappings come back as dicts and sequences as lists.
    """
    copied = _thaw(obj)
    if not isinstance(copied, dict):
        return {}
    _fill_defaults(copied, schema)
    return copied


def _thaw(value: Any) -> Any:
    """A deep copy made of plain dicts and lists (``copy.deepcopy`` fails on mapping proxies)."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(item) for item in value]
    return value


def _fill_defaults(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        for key, child in declared.items():
            if not isinstance(child, Mapping):
                continue
            absent = key not in value or (value[key] is None and child.get("nullable") is not True)
            if absent and "default" in child:
                value[key] = _thaw(child["default"])
            if key in value:
                _fill_defaults(value[key], child)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key, item in value.items():
                if key not in declared:
                    _fill_defaults(item, additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _fill_defaults(item, items)


# --------------------------------------------------------------------------------------------
# Validation


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[FieldCause, ...]:
    """Every way ``obj`` breaks ``schema``, sorted by field path (indices in numeric order).

    ``obj`` is a whole API object: ``apiVersion``, ``kind`` and ``metadata`` at its top are
    allowed whether the schema declares them or not, and the fields inside ``metadata`` are
    never reported as undeclared (the API server validates ObjectMeta on its own).

    Supported: ``type`` (object, array, string, integer, number, boolean; an integral number
    is an integer), ``nullable``, ``properties``, ``required``, ``additionalProperties``
    (true, false or a schema), ``items``, ``minimum``/``maximum`` with the OpenAPI v3.0
    boolean ``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
    ``minLength``/``maxLength``, ``pattern`` (on strings only), ``enum``,
    ``minItems``/``maxItems``, ``format: date-time`` (a loose RFC 3339 check; other formats
    are ignored), ``allOf``/``anyOf``/``oneOf``/``not``, ``x-kubernetes-int-or-string`` and
    ``x-kubernetes-preserve-unknown-fields``. A field that is not declared, where neither
    ``additionalProperties`` nor preserve-unknown-fields allows it, is a cause
    (``spec.minMembr: field not declared in schema``), as with strict field validation.

    Messages are the API server's: ``spec.minMember: Invalid value: -1: spec.minMember in
    body should be greater than or equal to 0``, ``spec.levels: Required value``. Never
    raises on a bad object; a node under a type error is not looked into further.
    """
    checker = _Validator(whole_object=True)
    try:
        checker.node(obj, schema, "", strict=True)
    except RecursionError:
        checker.causes.append(
            FieldCause("<root>", "Internal error: the object is nested too deeply")
        )
    return _sorted_unique(checker.causes)


class _Validator:
    """One validation run; collects causes instead of stopping at the first."""

    def __init__(self, *, whole_object: bool) -> None:
        self.whole_object = whole_object
        self.causes: list[FieldCause] = []

    def node(self, value: Any, schema: Mapping[str, Any], path: str, *, strict: bool) -> None:
        """Check ``value`` at ``path``; ``strict`` reports undeclared fields."""
        if value is None and schema.get("nullable") is True:
            return
        types = _declared_types(schema)
        if types and not any(_has_type(value, expected) for expected in types):
            actual = _json_type(value)
            self.causes.append(
                _invalid(
                    path,
                    actual,
                    f"{_subject(path)} must be of type {','.join(types)}: {_go_quote(actual)}",
                )
            )
            return
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_json_equal(value, allowed) for allowed in enum):
            self.causes.append(_unsupported(path, value, enum))
        if isinstance(value, str):
            self._string(value, schema, path)
        elif _is_number(value):
            self._number(value, schema, path)
        elif isinstance(value, list | tuple):
            self._array(value, schema, path, strict=strict)
        elif isinstance(value, Mapping):
            self._object(value, schema, path, strict=strict)
        self._combinators(value, schema, path)

    def _string(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        min_length = schema.get("minLength")
        if _is_int(min_length) and len(value) < min_length:
            self.causes.append(
                _invalid(
                    path,
                    value,
                    f"{_subject(path)} should be at least {min_length} chars long",
                )
            )
        max_length = schema.get("maxLength")
        if _is_int(max_length) and len(value) > max_length:
            unit = "byte" if max_length == 1 else "bytes"
            self.causes.append(
                FieldCause(_name(path), f"Too long: may not be more than {max_length} {unit}")
            )
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            compiled = _compile(pattern)
            if compiled is not None and compiled.search(value) is None:
                self.causes.append(
                    _invalid(path, value, f"{_subject(path)} should match '{pattern}'")
                )
        if schema.get("format") == "date-time" and _DATE_TIME.fullmatch(value) is None:
            self.causes.append(
                _invalid(
                    path,
                    value,
                    f"{_subject(path)} must be of type date-time: {_go_quote(value)}",
                )
            )

    def _number(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        subject = _subject(path)
        maximum = schema.get("maximum")
        if _is_number(maximum):
            exclusive = schema.get("exclusiveMaximum") is True
            if value > maximum or (exclusive and value == maximum):
                relation = "less than" if exclusive else "less than or equal to"
                self.causes.append(
                    _invalid(path, value, f"{subject} should be {relation} {_go_float(maximum)}")
                )
        elif _is_number(schema.get("exclusiveMaximum")):
            bound = schema["exclusiveMaximum"]
            if value >= bound:
                self.causes.append(
                    _invalid(path, value, f"{subject} should be less than {_go_float(bound)}")
                )
        minimum = schema.get("minimum")
        if _is_number(minimum):
            exclusive = schema.get("exclusiveMinimum") is True
            if value < minimum or (exclusive and value == minimum):
                relation = "greater than" if exclusive else "greater than or equal to"
                self.causes.append(
                    _invalid(path, value, f"{subject} should be {relation} {_go_float(minimum)}")
                )
        elif _is_number(schema.get("exclusiveMinimum")):
            bound = schema["exclusiveMinimum"]
            if value <= bound:
                self.causes.append(
                    _invalid(path, value, f"{subject} should be greater than {_go_float(bound)}")
                )
        multiple_of = schema.get("multipleOf")
        if _is_number(multiple_of) and multiple_of > 0:
            if isinstance(value, int) and isinstance(multiple_of, int):
                ok = value % multiple_of == 0
            else:
                quotient = value / multiple_of
                ok = math.isfinite(quotient) and float(quotient).is_integer()
            if not ok:
                self.causes.append(
                    _invalid(
                        path,
                        value,
                        f"{subject} should be a multiple of {_go_float(multiple_of)}",
                    )
                )

    def _array(
        self, value: Sequence[Any], schema: Mapping[str, Any], path: str, *, strict: bool
    ) -> None:
        min_items = schema.get("minItems")
        if _is_int(min_items) and len(value) < min_items:
            self.causes.append(
                _invalid(
                    path,
                    len(value),
                    f"{_subject(path)} should have at least {min_items} items",
                )
            )
        max_items = schema.get("maxItems")
        if _is_int(max_items) and len(value) > max_items:
            noun = "item" if max_items == 1 else "items"
            self.causes.append(
                FieldCause(
                    _name(path), f"Too many: {len(value)}: must have at most {max_items} {noun}"
                )
            )
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.node(item, items, f"{path}[{index}]", strict=strict)

    def _object(
        self, value: Mapping[Any, Any], schema: Mapping[str, Any], path: str, *, strict: bool
    ) -> None:
        properties = schema.get("properties")
        declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        if isinstance(required, list):
            for key in required:
                if key not in value:
                    self.causes.append(_required(_child(path, str(key))))
        additional = schema.get("additionalProperties")
        open_ended = (
            not strict
            or additional is True
            or schema.get("x-kubernetes-preserve-unknown-fields") is True
            or (self.whole_object and path == "metadata")
        )
        for key, item in value.items():
            where = _child(path, str(key))
            child = declared.get(key) if isinstance(key, str) else None
            if isinstance(child, Mapping):
                self.node(item, child, where, strict=strict)
            elif isinstance(additional, Mapping):
                self.node(item, additional, where, strict=strict)
            elif open_ended or (self.whole_object and path == "" and key in _ROOT_FIELDS):
                continue
            else:
                self.causes.append(FieldCause(where, _NOT_DECLARED))

    def _combinators(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        subject = _subject(path)
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for branch in all_of:
                if isinstance(branch, Mapping):
                    self.node(value, branch, path, strict=False)
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and any_of:
            failures = [self._trial(value, branch, path) for branch in any_of]
            if all(failures):
                self.causes.append(
                    _invalid(path, value, f"{subject} must validate at least one schema (anyOf)")
                )
                for causes in failures:
                    self.causes.extend(causes)
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and one_of:
            passing = sum(1 for branch in one_of if not self._trial(value, branch, path))
            if passing != 1:
                self.causes.append(
                    _invalid(
                        path,
                        value,
                        f"{subject} must validate one and only one schema (oneOf)",
                    )
                )
        negated = schema.get("not")
        if isinstance(negated, Mapping) and not self._trial(value, negated, path):
            self.causes.append(
                _invalid(path, value, f"{subject} must not validate the schema (not)")
            )

    def _trial(self, value: Any, branch: Any, path: str) -> list[FieldCause]:
        """The causes ``branch`` alone finds in ``value``; a non-schema branch always fails."""
        if not isinstance(branch, Mapping):
            return [FieldCause(_name(path), "Internal error: a branch is not a schema")]
        trial = _Validator(whole_object=self.whole_object)
        trial.node(value, branch, path, strict=False)
        return trial.causes


def _declared_types(schema: Mapping[str, Any]) -> tuple[str, ...]:
    if schema.get("x-kubernetes-int-or-string") is True:
        return ("integer", "string")
    declared = schema.get("type")
    if isinstance(declared, str) and declared:
        return (declared,)
    return ()


def _json_type(value: Any) -> str:
    """The JSON type name of a decoded value, as the API server names it in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _has_type(value: Any, expected: str) -> bool:
    actual = _json_type(value)
    if actual == expected:
        return True
    if expected == "number":
        return actual == "integer"
    if expected == "integer" and actual == "number":
        return math.isfinite(value) and float(value).is_integer()
    return False


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_equal(left: Any, right: Any) -> bool:
    """Equality of decoded JSON values: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    return type(left) is type(right) and bool(left == right)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str] | None:
    """The compiled pattern, or None if it is not a valid regular expression."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


# --------------------------------------------------------------------------------------------
# Causes, worded as the API server words them (k8s.io/apimachinery field.Error)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _name(path: str) -> str:
    return path or "<root>"


def _subject(path: str) -> str:
    """How a message names the value: ``spec.x in body``, or ``body`` for the whole of it."""
    return f"{path} in body" if path else "body"


def _invalid(path: str, value: Any, detail: str) -> FieldCause:
    return FieldCause(_name(path), f"Invalid value: {_go_value(value)}: {detail}")


def _required(path: str, detail: str = "") -> FieldCause:
    return FieldCause(_name(path), f"Required value: {detail}" if detail else "Required value")


def _unsupported(path: str, value: Any, allowed: Iterable[Any]) -> FieldCause:
    quoted = ", ".join(
        _go_quote(item if isinstance(item, str) else json.dumps(item)) for item in allowed
    )
    return FieldCause(
        _name(path), f"Unsupported value: {_go_value(value)}: supported values: {quoted}"
    )


def _go_quote(text: str) -> str:
    """Close to Go's ``%q``: a double-quoted string with JSON escapes."""
    return json.dumps(text, ensure_ascii=False)


def _go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: numbers and booleans bare, the rest quoted."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    try:
        return json.dumps(_thaw(value), sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _go_float(number: float) -> str:
    """A number as Go's ``%v`` prints a float64: ``0``, ``1.5``, ``1e+06``, ``1e-05``."""
    number = float(number)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign = "-" if number < 0 else ""
    parts = Decimal(repr(abs(number))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    assert isinstance(parts.exponent, int)  # finite, checked above
    point = len(digits) + parts.exponent
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _sorted_unique(causes: Iterable[FieldCause]) -> tuple[FieldCause, ...]:
    """Causes without duplicates, by path (``[10]`` after ``[9]``) then message."""
    unique = dict.fromkeys(causes)
    return tuple(sorted(unique, key=lambda cause: (_natural(cause.field), cause.message)))


def _natural(path: str) -> tuple[tuple[int, str], ...]:
    return tuple(
        (int(part), "") if part.isascii() and part.isdigit() else (-1, part)
        for part in re.split(r"([0-9]+)", path)
    )
