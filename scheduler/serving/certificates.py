"""Self-made serving certificates (layer 3, serving): ``sluice run``'s guarded port when
no certificate is given, ``sluice controller --dev``'s webhook, and the tests'.

kopf makes its own self-signed certificate with ``certbuilder`` and ``oscrypto``, and its
auto server guesses the cluster with ``certvalidator``; ``oscrypto`` 1.3 (the last release)
cannot read the version of OpenSSL 3, so neither works here. This module makes the same
kind of certificate with ``cryptography``: a CA, and a serving certificate it signs for
the given hosts (IP addresses and DNS names). The CA's PEM is what a webhook
configuration's ``caBundle`` carries, and what a client of the port may trust.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Certificate", "make_certificate"]


@dataclass(frozen=True, slots=True)
class Certificate:
    """Files written by :func:`make_certificate` (PEM)."""

    ca: Path
    """The CA certificate: the ``caBundle`` of a webhook configuration, what a client trusts."""
    cert: Path
    """The serving certificate (``tls.crt``)."""
    key: Path
    """Its private key (``tls.key``)."""


def make_certificate(
    directory: Path,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    *,
    days: int = 30,
    ca_name: str = "sluice-webhook-ca",
) -> Certificate:
    """Write ``ca.crt``, ``tls.crt`` and ``tls.key`` into ``directory`` (created if
    missing; existing files are replaced): a new CA named ``ca_name``, and a serving
    certificate signed by it whose subject alternative names are ``hosts`` (IP addresses
    and DNS names; the first is also its common name). The key file is made 0600."""
    eku, name_oid = ExtendedKeyUsageOID, NameOID
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    issuer = x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, ca_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(issuer)
        .issuer_name(issuer)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[Any] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(name_oid.COMMON_NAME, hosts[0])]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([eku.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    pem = serialization.Encoding.PEM
    out = Certificate(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    out.ca.write_bytes(ca.public_bytes(pem))
    out.cert.write_bytes(cert.public_bytes(pem))
    out.key.touch(mode=0o600)
    out.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return out
