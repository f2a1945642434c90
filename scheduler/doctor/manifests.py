"""What ``manifests/`` installs, read by ``sluice doctor`` (layer 5, doctor): every access
each ServiceAccount is granted (from the RBAC objects and their bindings, so the list the
doctor checks is the manifests' own and cannot drift from them), the admission webhook's
configuration, and the CRDs of ``crds/``.

The files come with the package (``scheduler/_manifests`` and ``scheduler/_crds`` in a
wheel, the repository's ``manifests/`` and ``crds/`` in a checkout). The manifests name
the namespace ``sluice-system``; :func:`load_install` moves what lives there to the
namespace Sluice is installed in.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

import yaml

from scheduler.api.errors import InvalidInputError

__all__ = [
    "MANIFESTS_NAMESPACE",
    "Access",
    "Install",
    "crd_documents",
    "load_install",
    "manifests_directory",
]

MANIFESTS_NAMESPACE: Final = "sluice-system"
"""The namespace ``manifests/`` installs into."""
_OPTIONAL: Final = frozenset({"certificate.yaml", "kustomization.yaml"})


@dataclass(frozen=True, slots=True, order=True)
class Access:
    """One thing a ServiceAccount is allowed: ``verb`` on ``group``/``resource``
    (``subresource``), in ``namespace`` ("" everywhere), as the rule of ``source`` says."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    source: str = ""

    def __str__(self) -> str:
        what = f"{self.group}/{self.resource}" if self.group else self.resource
        if self.subresource:
            what += f"/{self.subresource}"
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{where}"


@dataclass(frozen=True)
class Install:
    """What ``manifests/`` puts in the cluster, as the doctor checks it."""

    namespace: str
    accounts: Mapping[str, tuple[Access, ...]]
    """ServiceAccount name -> what its bindings grant, sorted."""
    webhook: Mapping[str, Any] | None
    """The ValidatingWebhookConfiguration (its service moved to :attr:`namespace`)."""
    scheduler_selector: Mapping[str, str]
    """The labels of the scheduler's pods (its Deployment's selector)."""
    scheduler_deployment: str = "sluice-scheduler"
    """The scheduler's Deployment: its pods' names (their hosts' names) start with it."""


def manifests_directory() -> Traversable:
    """The package's ``_manifests`` (a wheel), else the repository's ``manifests/``."""
    packaged = importlib.resources.files("scheduler") / "_manifests"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "manifests"


def _crds_directory() -> Traversable:
    packaged = importlib.resources.files("scheduler") / "_crds"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "crds"


def _documents(directory: Traversable, names: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in names:
        entry = directory
        for part in name.split("/"):
            entry = entry / part
        try:
            docs = list(yaml.safe_load_all(entry.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            raise InvalidInputError(name, None, f"cannot read the manifest: {exc}") from exc
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind"):
                yield name, doc


def crd_documents() -> list[tuple[str, dict[str, Any]]]:
    """(file name, CustomResourceDefinition) of Sluice's own CRDs (``crds/*.yaml``; the
    other schedulers' of ``crds/upstream`` are theirs to install)."""
    directory = _crds_directory()
    names = sorted(e.name for e in directory.iterdir() if e.name.endswith(".yaml"))
    return [
        (n, d) for n, d in _documents(directory, names) if d["kind"] == "CustomResourceDefinition"
    ]


def _expand(rules: list[dict[str, Any]], namespace: str, source: str) -> Iterator[Access]:
    for rule in rules:
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                plural, _, sub = str(resource).partition("/")
                for verb in rule.get("verbs") or ():
                    yield Access(verb, group, plural, sub, namespace, source)


def load_install(
    namespace: str = MANIFESTS_NAMESPACE, directory: Traversable | None = None
) -> Install:
    """Read the manifests of ``directory`` (default :func:`manifests_directory`): the
    top-level files and the scheduler's Deployment, without the optional certificate.
    Raises InvalidInputError naming a file that cannot be read, or a binding whose role is
    not among the manifests (its grants could not be listed)."""
    root = directory or manifests_directory()
    names = sorted(
        e.name for e in root.iterdir() if e.name.endswith(".yaml") and e.name not in _OPTIONAL
    )
    docs = list(_documents(root, [*names, "scheduler/deployment.yaml"]))

    def here(ns: str | None) -> str:
        return namespace if ns == MANIFESTS_NAMESPACE else (ns or "")

    roles = {
        (d["kind"], here(d["metadata"].get("namespace")), d["metadata"]["name"]): (source, d)
        for source, d in docs
        if d["kind"] in ("ClusterRole", "Role")
    }
    accounts: dict[str, set[Access]] = {
        d["metadata"]["name"]: set() for _, d in docs if d["kind"] == "ServiceAccount"
    }
    for source, binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        bound_in = here(binding["metadata"].get("namespace"))
        ref = binding["roleRef"]
        key = (ref["kind"], bound_in if ref["kind"] == "Role" else "", ref["name"])
        if key not in roles:
            raise InvalidInputError(
                source, "roleRef", f"{ref['kind']} {ref['name']} is not among the manifests"
            )
        role_source, role = roles[key]
        for subject in binding.get("subjects") or ():
            if subject.get("kind") != "ServiceAccount":
                continue
            granted = accounts.setdefault(subject["name"], set())
            granted.update(_expand(role.get("rules") or [], bound_in, role_source))
    webhook = next((d for _, d in docs if d["kind"] == "ValidatingWebhookConfiguration"), None)
    if webhook is not None:
        for hook in webhook.get("webhooks") or ():
            service = (hook.get("clientConfig") or {}).get("service")
            if service:
                service["namespace"] = here(service.get("namespace"))
    deployment = next(
        d
        for source, d in docs
        if source == "scheduler/deployment.yaml" and d["kind"] == "Deployment"
    )
    return Install(
        namespace=namespace,
        accounts={name: tuple(sorted(granted)) for name, granted in accounts.items()},
        webhook=webhook,
        scheduler_selector=dict(deployment["spec"]["selector"]["matchLabels"]),
        scheduler_deployment=deployment["metadata"]["name"],
    )
