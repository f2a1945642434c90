"""The CustomResourceDefinitions the embedded cluster serves, read into a catalog (layer 0,
schema).

:func:`load_crds` reads the ``apiextensions.k8s.io/v1`` CustomResourceDefinitions in
``crds/`` (or ``scheduler/_crds`` in a wheel) into a :class:`CrdCatalog`, refusing a
definition whose schema is not structural; :meth:`CrdCatalog.check` does what the API server
does on create: default, validate, and raise :class:`~scheduler.api.errors.InvalidObjectError`
(422) with the server's message. The default catalog holds Sluice's own kinds, the other
schedulers' CRDs of ``crds/upstream/*/`` and the alpha ``scheduling.k8s.io/v1alpha2`` kinds
of Kubernetes in CRD shape (``builtin/``, whose Go checks are :mod:`.builtin_rules`). Kinds
are keyed by kind key (:func:`~scheduler.api.group_apis.kind_key`: four APIs have a
``PodGroup``). Reading the files is the only I/O, once for the default catalog, which is
cached.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

import yaml

from scheduler.api import labels as L
from scheduler.api.errors import FieldCause, InvalidInputError, InvalidObjectError
from scheduler.api.group_apis import kind_key
from scheduler.schema.builtin_rules import builtin_causes
from scheduler.schema.structural import structural_violations
from scheduler.schema.validator import (  # the package's shared helpers
    DNS_SUBDOMAIN,
    DNS_SUBDOMAIN_MESSAGE,
    _go_quote,
    _invalid,
    _required,
    _sorted_unique,
    _unsupported,
    apply_defaults,
    validate,
)

GROUP: Final = L.GROUP
VERSION: Final = L.VERSION
API_VERSION: Final = L.API_VERSION


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

    @property
    def key(self) -> str:
        """The kind key objects of this kind are kept under (``PodGroup`` for Sluice's,
        ``PodGroup.scheduling.volcano.sh`` for Volcano's)."""
        return kind_key(self.api_version, self.kind)


@dataclass(frozen=True, slots=True)
class CrdCatalog:
    """The custom resource kinds the cluster serves, by kind key, Sluice's own first."""

    crds: Mapping[str, CrdInfo] = field(hash=False)

    def get(self, kind: str) -> CrdInfo | None:
        """The definition of the kind key ``kind``, or None if it is not a custom kind of
        this catalog."""
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
        """The kind keys of the catalog, sorted."""
        return tuple(sorted(self.crds))

    def is_custom(self, kind: str) -> bool:
        """Whether the kind key ``kind`` is one of the catalog's custom kinds (so
        :meth:`check` applies)."""
        return kind in self.crds

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` (by its apiVersion and kind) is of a custom kind of the catalog."""
        return kind_key(str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")) in self.crds

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
        info = self.crds.get(kind_key(str(obj.get("apiVersion") or ""), kind))
        if info is None:
            cause = _unsupported("kind", raw_kind, sorted({i.kind for i in self.crds.values()}))
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
        elif len(name) > 253 or DNS_SUBDOMAIN.fullmatch(name) is None:
            detail = DNS_SUBDOMAIN_MESSAGE
            if len(name) > 253:
                detail = "must be no more than 253 characters"
            causes.append(_invalid("metadata.name", name, detail))
        defaulted = apply_defaults(obj, info.schema)
        if not info.namespaced and isinstance(defaulted.get("metadata"), dict):
            defaulted["metadata"].pop("namespace", None)
        causes.extend(validate(defaulted, info.schema))
        causes.extend(builtin_causes(info.key, defaulted))
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
    base: Traversable = (
        packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "crds"
    )
    crds: dict[str, CrdInfo] = {}
    _load_into(crds, base)
    upstream = base / "upstream"
    if upstream.is_dir():
        for project in sorted(upstream.iterdir(), key=lambda entry: entry.name):
            if project.is_dir():
                _load_into(crds, project)
    _load_into(crds, importlib.resources.files("scheduler.schema") / "builtin")
    return CrdCatalog(crds=crds)


def _load_directory(directory: Traversable) -> CrdCatalog:
    crds: dict[str, CrdInfo] = {}
    _load_into(crds, directory)
    return CrdCatalog(crds=crds)


def _load_into(crds: dict[str, CrdInfo], directory: Traversable) -> None:
    if not directory.is_dir():
        raise InvalidInputError(str(directory), None, "is not a directory")
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
            if info.key in crds:
                raise InvalidInputError(source, "spec.names.kind", f"duplicate kind {info.key}")
            crds[info.key] = info


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
