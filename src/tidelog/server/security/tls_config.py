"""TLS settings of a listener (Kafka's ``ssl.*`` keys, PEM only) and the ``ssl.SSLContext`` built from them.

Invariants:

- A listener's settings are the broker's ``ssl.*`` values with its ``listener.name.<name>.ssl.*``
  overrides laid over them (Kafka's per-listener prefix; the name matched case-insensitively).
- Keystores and truststores are PEM (Kafka's ``ssl.keystore.type=PEM``): ``ssl.keystore.location`` is one
  file with the private key and the certificate chain (the key encrypted with ``ssl.key.password`` when
  set), or ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` give them inline; the truststore is
  ``ssl.truststore.location`` (a CA bundle) or ``ssl.truststore.certificates`` inline. JKS or PKCS12 is
  refused, saying PEM is what tidelog reads.
- Every problem is found when the context is built, at start-up, and is a
  :class:`~tidelog.server.config.ConfigError` naming the (possibly listener-prefixed) key to blame: no
  keystore on a TLS listener, a file that cannot be read, a key that does not decrypt or does not match the
  certificate, an unknown protocol or cipher suite.
- Protocol versions are ``ssl.enabled.protocols`` capped by ``ssl.protocol`` (``TLSv1.2`` means at most
  1.2); TLS below 1.2 is never enabled. ``ssl.cipher.suites`` restricts the TLS 1.2 suites (OpenSSL names;
  TLS 1.3 suite names are accepted and leave TLS 1.3's defaults, which Python cannot restrict).
- A server context asks for a client certificate per ``ssl.client.auth`` (required: the handshake fails
  without a valid one; requested: verified if sent); a client context (inter-broker) always verifies the
  server against the truststore (the system's CAs without one), checks its host name when
  ``ssl.endpoint.identification.algorithm`` is ``https``, and presents the keystore when there is one.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.server.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from tidelog.server.config.listeners import TLS_PROTOCOLS, split_listener_override

from .ssl_principal import SslPrincipalMapper

__all__ = [
    "ListenerTls",
    "TlsSettings",
    "check_tls",
    "client_context",
    "inter_broker_tls",
    "listener_tls",
    "server_context",
    "tls_settings",
]

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_PROTOCOL_CAPS = {
    "TLS": ssl.TLSVersion.TLSv1_3,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TLS13_SUITES = ("TLS_AES_", "TLS_CHACHA20_")
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The ``ssl.*`` values in force for one listener, and the key each came from (for error messages)."""

    listener_name: str
    values: Mapping[str, object]
    keys: Mapping[str, str] = field(default_factory=dict)
    """Base key -> the key it was set by (``listener.name.ssl.ssl.keystore.location`` or the base key)."""

    def get(self, key: str) -> object:
        return self.values[key]

    def text(self, key: str) -> str | None:
        value = self.values[key]
        return None if value is None or value == "" else str(value)

    def key(self, key: str) -> str:
        return self.keys.get(key, key)


def tls_settings(config: BrokerConfig, listener_name: str) -> TlsSettings:
    """The ``ssl.*`` settings of ``listener_name``: the broker's, with its ``listener.name.<name>.*``
    overrides over them."""
    name = listener_name.upper()
    values: dict[str, object] = {
        key: getattr(config, definition.attr)
        for key, definition in BROKER_CONFIGS.items()
        if key.startswith("ssl.")
    }
    keys: dict[str, str] = {}
    for raw_key, raw_value in config.originals.items():
        split = split_listener_override(raw_key)
        if split is None or split[0] != name or not split[1].startswith("ssl."):
            continue
        base = split[1]
        if base in BROKER_CONFIGS:
            values[base] = BROKER_CONFIGS[base].parse(raw_value)
            keys[base] = raw_key
    return TlsSettings(name, values, keys)


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """What an SSL or SASL_SSL listener needs to accept a connection."""

    context: ssl.SSLContext
    client_auth: str
    principal_mapper: SslPrincipalMapper


def listener_tls(config: BrokerConfig) -> dict[str, ListenerTls]:
    """The TLS setup of every client listener whose protocol is SSL or SASL_SSL, by listener name; raises
    :class:`ConfigError` (naming the key) for the first listener that cannot be set up."""
    out: dict[str, ListenerTls] = {}
    for listener in config.broker_listeners:
        if listener.security_protocol not in TLS_PROTOCOLS:
            continue
        settings = tls_settings(config, listener.name)
        rules_key = settings.key("ssl.principal.mapping.rules")
        try:
            mapper = SslPrincipalMapper(settings.text("ssl.principal.mapping.rules"))
        except ValueError as exc:
            raise ConfigError(f"Invalid value for configuration {rules_key}: {exc}", key=rules_key) from None
        client_auth = str(settings.get("ssl.client.auth")).lower()
        out[listener.name] = ListenerTls(server_context(settings), client_auth, mapper)
    return out


def inter_broker_tls(config: BrokerConfig, listener_name: str) -> ssl.SSLContext | None:
    """The client context for connecting to other brokers on ``listener_name`` (None: a plain listener)."""
    protocol = config.listener_security_protocol_map.get(listener_name.upper(), listener_name.upper())
    if protocol not in TLS_PROTOCOLS:
        return None
    return client_context(tls_settings(config, listener_name))


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server-side context for a TLS listener (see the module invariants)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, settings)
    _ciphers(context, settings)
    if not _load_keystore(context, settings):
        key = settings.key("ssl.keystore.location")
        raise ConfigError(
            f"listener {settings.listener_name} uses TLS but has no keystore: set {key} (a PEM file with the "
            "private key and certificate chain) or ssl.keystore.key and ssl.keystore.certificate.chain",
            key=key,
        )
    auth_key = settings.key("ssl.client.auth")
    client_auth = str(settings.get("ssl.client.auth")).lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(
            f"Invalid value {client_auth} for configuration {auth_key}: String must be one of: required, "
            "requested, none",
            key=auth_key,
        )
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, settings, ssl.Purpose.CLIENT_AUTH)
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client-side context to reach a TLS listener of another broker (see the module invariants)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, settings)
    _ciphers(context, settings)
    _load_keystore(context, settings)
    context.check_hostname = (
        str(settings.get("ssl.endpoint.identification.algorithm") or "").lower() == "https"
    )
    context.verify_mode = ssl.CERT_REQUIRED
    _load_truststore(context, settings, ssl.Purpose.SERVER_AUTH)
    return context


# -- pieces ----------------------------------------------------------------------------------------------


def _versions(context: ssl.SSLContext, settings: TlsSettings) -> None:
    protocol_key = settings.key("ssl.protocol")
    protocol = str(settings.get("ssl.protocol"))
    cap = _PROTOCOL_CAPS.get(protocol)
    if cap is None:
        raise ConfigError(
            f"Invalid value {protocol} for configuration {protocol_key}: tidelog supports TLS, TLSv1.2 and "
            "TLSv1.3",
            key=protocol_key,
        )
    enabled_key = settings.key("ssl.enabled.protocols")
    enabled = settings.get("ssl.enabled.protocols")
    assert isinstance(enabled, tuple)
    versions = sorted(_VERSIONS[name] for name in enabled if name in _VERSIONS and _VERSIONS[name] <= cap)
    if not versions:
        raise ConfigError(
            f"{enabled_key} ({', '.join(enabled)}) enables no TLS version at or below {protocol_key} "
            f"({protocol})",
            key=enabled_key,
        )
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _ciphers(context: ssl.SSLContext, settings: TlsSettings) -> None:
    suites = settings.get("ssl.cipher.suites")
    assert isinstance(suites, tuple)
    tls12 = [suite for suite in suites if not suite.startswith(_TLS13_SUITES)]
    if not tls12:
        return
    key = settings.key("ssl.cipher.suites")
    try:
        context.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise ConfigError(
            f"Invalid value {','.join(suites)} for configuration {key}: no cipher suite OpenSSL knows "
            "(use OpenSSL names, e.g. ECDHE-RSA-AES128-GCM-SHA256)",
            key=key,
        ) from None


def _check_type(settings: TlsSettings, key: str) -> None:
    value = str(settings.get(key) or "PEM")
    if value.upper() != "PEM":
        raise ConfigError(
            f"{settings.key(key)}={value} is not supported: tidelog reads PEM keystores and truststores only "
            f"(set {settings.key(key)}=PEM; convert a {value} store with openssl or keytool, see the README)",
            key=settings.key(key),
        )


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> bool:
    """Load the keystore, if one is configured; whether one was."""
    _check_type(settings, "ssl.keystore.type")
    location = settings.text("ssl.keystore.location")
    inline_key = settings.text("ssl.keystore.key")
    inline_chain = settings.text("ssl.keystore.certificate.chain")
    password = settings.text("ssl.key.password")
    if location is not None:
        key = settings.key("ssl.keystore.location")
        _readable(location, key)
        _load_chain(context, location, password, key, settings.key("ssl.key.password"))
        return True
    if inline_key is None and inline_chain is None:
        return False
    if inline_key is None or inline_chain is None:
        missing = "ssl.keystore.key" if inline_key is None else "ssl.keystore.certificate.chain"
        raise ConfigError(
            f"{settings.key(missing)} must be set with "
            f"{settings.key('ssl.keystore.certificate.chain' if inline_key is None else 'ssl.keystore.key')}",
            key=settings.key(missing),
        )
    with _private_file(inline_key.strip() + "\n" + inline_chain.strip() + "\n") as path:
        _load_chain(
            context, str(path), password, settings.key("ssl.keystore.key"), settings.key("ssl.key.password")
        )
    return True


def _load_chain(
    context: ssl.SSLContext, path: str, password: str | None, key: str, password_key: str
) -> None:
    try:
        # a callable, never None: OpenSSL would otherwise prompt on the terminal for an encrypted key
        context.load_cert_chain(path, password=lambda: password or "")
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if reason == "KEY_VALUES_MISMATCH":
            problem = "the private key does not match the certificate"
        elif _encrypted(path):
            problem = (
                f"the private key does not decrypt with {password_key}"
                if password
                else f"the private key is encrypted: set {password_key}"
            )
        else:
            problem = f"no PEM private key and certificate chain could be read ({reason})"
        raise ConfigError(f"{key} ({path}): {problem}", key=key) from None
    except OSError as exc:
        raise ConfigError(f"{key} ({path}) cannot be read: {exc.strerror or exc}", key=key) from None


def _encrypted(path: str) -> bool:
    try:
        return "ENCRYPTED" in Path(path).read_text(errors="replace")
    except OSError:
        return False


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings, purpose: ssl.Purpose) -> None:
    _check_type(settings, "ssl.truststore.type")
    location = settings.text("ssl.truststore.location")
    inline = settings.text("ssl.truststore.certificates")
    if location is not None:
        key = settings.key("ssl.truststore.location")
        _readable(location, key)
        try:
            context.load_verify_locations(cafile=location)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"{key} ({location}) holds no PEM CA certificate: {exc}", key=key) from None
    elif inline is not None:
        key = settings.key("ssl.truststore.certificates")
        try:
            context.load_verify_locations(cadata=inline)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"{key} holds no PEM CA certificate: {exc}", key=key) from None
    else:
        context.load_default_certs(purpose)


def _readable(location: str, key: str) -> None:
    try:
        with open(location, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{key} ({location}) cannot be read: {exc.strerror or exc}", key=key) from None


@contextlib.contextmanager
def _private_file(text: str) -> Iterator[Path]:
    """``text`` in a file only this process's user can read, removed afterwards (``load_cert_chain`` takes
    paths only)."""
    fd, name = tempfile.mkstemp(prefix="tidelog-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def check_tls(config: BrokerConfig, inter_broker_listener: str | None = None) -> None:
    """Build every TLS context ``config`` needs (its TLS listeners', and the inter-broker client's when
    ``inter_broker_listener`` is given), so that a bad TLS setting stops the start with a
    :class:`ConfigError` naming the key before anything else happens."""
    listener_tls(config)
    if inter_broker_listener is not None:
        inter_broker_tls(config, inter_broker_listener)
