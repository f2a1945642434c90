"""Where the client's configuration comes from (layer 4, kube).

In this order: an explicit ``--kubeconfig`` path, the ``KUBECONFIG`` environment variable
(read at call time, a ``:``-separated list is merged as kubectl does), the in-cluster
service account (when ``KUBERNETES_SERVICE_HOST`` is set), ``~/.kube/config``. The file is
always passed as ``config_file=``: the library reads ``KUBECONFIG`` once, at import.
Nothing is ever written back to a kubeconfig.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config.config_exception import ConfigException

from scheduler.api.errors import ConfigError

__all__ = ["load_configuration"]

_IN_CLUSTER_ENV: Final[str] = "KUBERNETES_SERVICE_HOST"
_DEFAULT_KUBECONFIG: Final[Path] = Path("~/.kube/config")


async def load_configuration(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Configuration:
    """The client configuration: ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster,
    else ``~/.kube/config``. Raises ConfigError (naming the source) when none works."""
    env = os.environ if environ is None else environ
    cfg = Configuration()
    path = os.fspath(kubeconfig) if kubeconfig else env.get("KUBECONFIG", "")
    source = path or "in-cluster configuration"
    try:
        if not path and env.get(_IN_CLUSTER_ENV):
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=cfg, environ=dict(env)
            )
            return cfg
        if not path:
            default = _DEFAULT_KUBECONFIG.expanduser()
            if not default.exists():
                raise ConfigError(
                    "kubeconfig",
                    None,
                    "no --kubeconfig, no KUBECONFIG, not in a cluster and no ~/.kube/config",
                )
            path = source = str(default)
        files = [Path(p).expanduser() for p in path.split(os.pathsep) if p]
        if not any(f.exists() for f in files):
            raise ConfigError(source, None, "no such file")
        await kube_config.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    except ConfigError:
        raise
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(source, None, f"cannot load the client configuration: {exc}") from exc
    return cfg
