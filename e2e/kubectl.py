"""The real ``kubectl`` of ``../shared/k8s`` (v1.36.2), for the tests of ``kubectl sluice``.

:func:`kubectl_binary` finds it: ``$SLUICE_KUBECTL``; else the one ``../shared/k8s/up``
unpacked (``$SLUICE_K8S_CACHE/bin``, default ``~/.cache/sluice-k8s/v1.36.2/bin``); else it
unpacks ``kubectl.xz`` of ``$SLUICE_K8S_DIR`` (default ``../shared/k8s``) into that cache
after checking it against ``SHA256SUMS``, as ``up`` does. None when there is none.
"""

from __future__ import annotations

import hashlib
import lzma
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION = "v1.36.2"


def _cache() -> Path:
    explicit = os.environ.get("SLUICE_K8S_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "sluice-k8s" / VERSION


def kubectl_binary() -> Path | None:
    explicit = os.environ.get("SLUICE_KUBECTL")
    if explicit:
        return Path(explicit)
    cached = _cache() / "bin" / "kubectl"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    shipped = Path(os.environ.get("SLUICE_K8S_DIR") or ROOT.parent / "shared" / "k8s")
    packed = shipped / "kubectl.xz"
    sums = shipped / "SHA256SUMS"
    if not packed.is_file() or not sums.is_file():
        return None
    digest = hashlib.sha256(packed.read_bytes()).hexdigest()
    listed = {
        line.split()[-1].lstrip("*"): line.split()[0]
        for line in sums.read_text().split("\n")
        if line.strip()
    }
    if listed.get("kubectl.xz") != digest:
        raise RuntimeError(f"{packed}: its SHA-256 is not the one {sums} lists")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".tmp")
    partial.write_bytes(lzma.decompress(packed.read_bytes()))
    partial.chmod(0o755)
    partial.replace(cached)
    return cached
