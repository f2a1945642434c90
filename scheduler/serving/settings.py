"""What the guard of ``sluice run``'s port lets through unasked, and how long it keeps
review answers (layer 3, serving): kube's defaults and flags. No aiohttp here, so that the
command line's parser can read the defaults cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api.errors import ConfigError

__all__ = [
    "DEFAULT_ALWAYS_ALLOW_GROUPS",
    "DEFAULT_ALWAYS_ALLOW_PATHS",
    "DEFAULT_TTL",
    "GuardSettings",
    "parse_paths",
]

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
"""kube's default ``--authorization-always-allow-paths``: the kubelet's probes."""
DEFAULT_ALWAYS_ALLOW_GROUPS = ("system:masters",)
"""kube's delegated authorization skips the review for these groups."""
DEFAULT_TTL = 10.0
"""Seconds kube's delegated authentication and authorization keep an answer."""


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """What the guard lets through without asking, and how long it keeps answers."""

    always_allow_paths: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_PATHS
    """Paths served to anyone: exact, or a prefix when ending in ``*`` (kube's rule)."""
    public_paths: tuple[str, ...] = ()
    """Exact paths of documents that hold no data and are the same for everyone, served to
    anyone too: the live page's HTML (``/ui``), which a browser must load before its
    script can send a token for the data (``/ui/state``, ``/ui/explain``)."""
    always_allow_groups: tuple[str, ...] = DEFAULT_ALWAYS_ALLOW_GROUPS
    token_ttl: float = DEFAULT_TTL
    """Seconds a token's review is kept (authenticated or not)."""
    allowed_ttl: float = DEFAULT_TTL
    """Seconds an allowing access review is kept."""
    denied_ttl: float = DEFAULT_TTL
    """Seconds a denying access review is kept."""
    cache_size: int = 4096

    def is_open(self, path: str) -> bool:
        """Whether ``path`` is served without authentication or authorization."""
        if path in self.public_paths:
            return True
        for allowed in self.always_allow_paths:
            if allowed.endswith("*"):
                if path.startswith(allowed[:-1]):
                    return True
            elif path == allowed:
                return True
        return False


def parse_paths(text: str, *, flag: str = "--authorization-always-allow-paths") -> tuple[str, ...]:
    """A comma-separated list of paths, each given a leading ``/`` if it has none (kube's
    leading slash is optional too). ``*`` may end a path only. Raises ConfigError naming
    ``flag``."""
    paths = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        if "*" in item[:-1]:
            raise ConfigError("sluice run", flag, f"{item!r}: '*' may only end a path")
        paths.append(item if item.startswith("/") else f"/{item}")
    return tuple(paths)
