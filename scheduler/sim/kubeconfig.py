"""A kubeconfig for the Kubernetes API emulator (layer 4, sim).

:func:`write_kubeconfig` writes the smallest kubeconfig that both ``kubectl`` and
``kubernetes_asyncio.config.load_kube_config`` accept for a plain-HTTP server such as
:class:`~scheduler.sim.emulator.ApiEmulator`: one cluster, one user without credentials,
one context (namespace ``default``), made the current context.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

__all__ = ["kubeconfig_dict", "write_kubeconfig"]


def kubeconfig_dict(server_url: str, *, context: str = "sluice-sim") -> dict[str, Any]:
    """The kubeconfig document for ``server_url`` (``http://127.0.0.1:PORT``)."""
    if not server_url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https://, got {server_url!r}")
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": server_url.rstrip("/")}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [
            {
                "name": context,
                "context": {"cluster": context, "user": context, "namespace": "default"},
            }
        ],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(
    path: str | os.PathLike[str], server_url: str, *, context: str = "sluice-sim"
) -> Path:
    """Write a kubeconfig pointing at ``server_url`` to ``path`` and return the path.

    The file is replaced atomically and readable by its owner only, as kubectl expects.
    Parent directories are created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig_dict(server_url, context=context), sort_keys=False)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
