"""TLS of ``sluice run``'s port (layer 3, serving), as kube-scheduler serves its own:
the certificate and key given (``--tls-cert-file``, ``--tls-private-key-file``), or else
one made at start for ``localhost``, ``127.0.0.1`` and the host's name, signed by a CA made
with it and thrown away (clients of a self-made certificate cannot verify it; they skip
verification, as scrapers of kube-scheduler's self-signed port do). TLS 1.2 at least.

The files are read once, at start: after a certificate's renewal, restart the process.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.api.errors import ConfigError

__all__ = ["ServingCertificate", "server_context"]


@dataclass(frozen=True, slots=True)
class ServingCertificate:
    """Where the port's certificate comes from."""

    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            given, missing = (
                ("--tls-cert-file", "--tls-private-key-file")
                if self.cert_file
                else ("--tls-private-key-file", "--tls-cert-file")
            )
            raise ConfigError("sluice run", missing, f"is needed with {given}")

    @property
    def self_made(self) -> bool:
        return not self.cert_file


def server_context(
    certificate: ServingCertificate, *, hosts: Sequence[str] = ()
) -> tuple[ssl.SSLContext, str]:
    """The server's TLS context and a few words for the log saying which certificate it
    serves. ``hosts``: names the self-made certificate is for besides ``localhost``,
    ``127.0.0.1`` and this host's name. Raises ConfigError naming the flag when a given
    file cannot be read or the pair does not match."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not certificate.self_made:
        assert certificate.cert_file is not None and certificate.key_file is not None
        for flag, path in (
            ("--tls-cert-file", certificate.cert_file),
            ("--tls-private-key-file", certificate.key_file),
        ):
            if not Path(path).is_file():
                raise ConfigError("sluice run", flag, f"{path}: no such file")
        try:
            context.load_cert_chain(certificate.cert_file, certificate.key_file)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                "sluice run",
                "--tls-cert-file",
                f"cannot load {certificate.cert_file} with {certificate.key_file}: {exc}",
            ) from exc
        return context, f"certificate {certificate.cert_file}"
    from scheduler.serving.certificates import make_certificate  # cryptography: only here

    names = ["localhost", "127.0.0.1", socket.gethostname()]
    names += [h for h in hosts if h and h not in names and h not in ("0.0.0.0", "::")]
    directory = Path(tempfile.mkdtemp(prefix="sluice-serving-"))
    try:
        made = make_certificate(directory, names, days=365, ca_name="sluice-serving-ca")
        context.load_cert_chain(made.cert, made.key)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return context, f"a self-made certificate for {', '.join(names)}"
