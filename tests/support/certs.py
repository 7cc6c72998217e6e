"""Test certificates made at test time (never committed): CAs, a broker certificate for 127.0.0.1 and
localhost, client certificates, written as PEM files.

- ``CertificateAuthority.create(directory, "Test CA")`` makes a self-signed CA (``ca.cert``, its PEM path);
  ``ca.issue(...)`` a leaf certificate signed by it, written as ``<stem>.key`` (private key, optionally
  encrypted), ``<stem>.pem`` (the certificate) and ``<stem>.keystore.pem`` (key + certificate + CA: what
  Kafka's ``ssl.keystore.type=PEM`` ``ssl.keystore.location`` holds).
- ``tls_material(directory)`` makes the usual set for a test module: a CA, a broker keystore, clients
  ``alice`` (subject ``CN=alice,OU=eng,O=acme`` in Java's RFC 2253 order) and ``bob`` from that CA, and
  ``mallory`` from another CA.
- EC P-256 keys: generating them costs milliseconds, so a module can make its own.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Issued", "TlsMaterial", "name", "tls_material"]

_ATTRIBUTES = {
    "CN": NameOID.COMMON_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "C": NameOID.COUNTRY_NAME,
}


def name(dn: str) -> x509.Name:
    """An x509 name from a simple RFC 2253 string (``CN=alice,OU=eng,O=acme``; no escaped commas): the
    certificate holds the parts in reverse order, so Java (and tidelog) print it back as written."""
    parts = [part.split("=", 1) for part in dn.split(",")]
    return x509.Name([x509.NameAttribute(_ATTRIBUTES[key.strip()], value) for key, value in reversed(parts)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    path.chmod(0o600)


@dataclass(frozen=True)
class Issued:
    """A leaf certificate's files."""

    key: Path
    cert: Path
    keystore: Path
    """Private key, certificate and the CA's certificate in one PEM file."""
    key_password: str | None = None


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    cert: Path
    """The CA certificate's PEM file (a truststore / ``ssl.ca.location``)."""

    @classmethod
    def create(cls, directory: Path, common_name: str) -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        path = directory / f"{common_name.replace(' ', '-').lower()}.ca.pem"
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return cls(directory, key, certificate, path)

    def issue(
        self,
        stem: str,
        subject: str,
        *,
        hosts: tuple[str, ...] = (),
        key_password: str | None = None,
    ) -> Issued:
        """A certificate for ``subject`` (RFC 2253 string), valid for ``hosts`` (DNS names or IP addresses)
        as a server and as a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        key_path = self.directory / f"{stem}.key"
        cert_path = self.directory / f"{stem}.pem"
        keystore = self.directory / f"{stem}.keystore.pem"
        _write_key(key_path, key, key_password)
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        cert_path.write_bytes(cert_pem)
        keystore.write_bytes(
            key_path.read_bytes() + cert_pem + self.certificate.public_bytes(serialization.Encoding.PEM)
        )
        keystore.chmod(0o600)
        return Issued(key_path, cert_path, keystore, key_password)


@dataclass(frozen=True)
class TlsMaterial:
    ca: CertificateAuthority
    broker: Issued
    """For 127.0.0.1 and localhost, subject ``CN=localhost,O=tidelog``."""
    alice: Issued
    """Client ``CN=alice,OU=eng,O=acme``."""
    bob: Issued
    """Client ``CN=bob,OU=ops,O=acme``, key encrypted with password ``bob-secret``."""
    other_ca: CertificateAuthority
    mallory: Issued
    """Client ``CN=mallory,O=acme`` signed by ``other_ca``: no broker trusting ``ca`` accepts it."""


def tls_material(directory: Path) -> TlsMaterial:
    ca = CertificateAuthority.create(directory, "tidelog test CA")
    other = CertificateAuthority.create(directory / "other", "other CA")
    return TlsMaterial(
        ca=ca,
        broker=ca.issue("broker", "CN=localhost,O=tidelog", hosts=("127.0.0.1", "localhost")),
        alice=ca.issue("alice", "CN=alice,OU=eng,O=acme"),
        bob=ca.issue("bob", "CN=bob,OU=ops,O=acme", key_password="bob-secret"),
        other_ca=other,
        mallory=other.issue("mallory", "CN=mallory,O=acme"),
    )
