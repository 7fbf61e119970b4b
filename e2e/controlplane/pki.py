"""The control plane's certificates, made by the test with ``cryptography``.

One CA signs everything: the API server's serving certificate, the admin client
certificate every component and the tests use (group ``system:masters``), Crossplane's
webhook serving certificate, the function's serving certificate and Crossplane's client
certificate for calling functions (mTLS). The service-account signing key is a separate
RSA key. Each server or client directory is laid out as Kubernetes mounts a TLS Secret
(``tls.crt``, ``tls.key``, ``ca.crt``), which is what Crossplane's ``--tls-*-certs-dir``
and the function SDK's ``--tls-server-certs-dir`` read.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LOOPBACK_SANS = ("localhost", "127.0.0.1")


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


@dataclass(frozen=True)
class Leaf:
    """A directory holding ``tls.crt``, ``tls.key`` and the CA's ``ca.crt``."""

    dir: Path

    @property
    def cert(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def key(self) -> Path:
        return self.dir / "tls.key"

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"


class CA:
    """A throw-away certificate authority valid for a day."""

    def __init__(self, root: Path, name: str = "function-cluster-plugin e2e CA") -> None:
        self.root = root
        now = dt.datetime.now(dt.UTC)
        self._start, self._end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=1)
        self._key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._start)
            .not_valid_after(self._end)
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
            .sign(self._key, hashes.SHA256())
        )
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / "ca.crt"
        self.path.write_bytes(_pem_cert(self.cert))

    @property
    def pem(self) -> bytes:
        return _pem_cert(self.cert)

    def leaf(
        self,
        name: str,
        *,
        server: bool = False,
        client: bool = False,
        organization: str = "",
        sans: tuple[str, ...] = LOOPBACK_SANS,
    ) -> Leaf:
        """A certificate for ``name`` under ``root/name``: serving (with ``sans``), client, or both."""
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, name)]
        if organization:
            attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._start)
            .not_valid_after(self._end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(s) for s in sans]), critical=False
            )
        cert = builder.sign(self._key, hashes.SHA256())
        leaf = Leaf(self.root / name)
        leaf.dir.mkdir(parents=True, exist_ok=True)
        leaf.cert.write_bytes(_pem_cert(cert))
        leaf.key.write_bytes(_pem_key(key))
        leaf.key.chmod(0o600)
        leaf.ca.write_bytes(self.pem)
        return leaf


def signing_key(path: Path) -> Path:
    """The service-account token signing key (PEM, private; the API server derives the public half)."""
    path.write_bytes(_pem_key(_key()))
    path.chmod(0o600)
    return path
