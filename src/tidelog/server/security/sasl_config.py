"""SASL settings of a listener from Kafka's keys, and the broker's own login from a JAAS line.

Invariants:

- A listener's mechanisms are ``listener.name.<listener>.sasl.enabled.mechanisms`` if set, else
  ``sasl.enabled.mechanisms``; likewise ``connections.max.reauth.ms``. Only PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512 are served: GSSAPI, OAUTHBEARER or any other name is a :class:`ConfigError` at start-up,
  never a listener that silently refuses everyone.
- The broker's own credentials (SASL between brokers) come from
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``, parsed as Kafka's
  JAAS line ``<LoginModule> required username="..." password="...";``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.protocol.scram import CredentialLookup
from tidelog.server.config import BrokerConfig, Listener
from tidelog.server.config.broker_config import LISTENER_PREFIX
from tidelog.server.config.errors import ConfigError

from .sasl_session import SaslListenerSettings, SaslSession

__all__ = [
    "SUPPORTED_MECHANISMS",
    "JaasLogin",
    "inter_broker_login",
    "listener_override",
    "parse_jaas_config",
    "sasl_listener_settings",
    "sasl_session_factory",
]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_UNSUPPORTED = {
    "GSSAPI": "Kerberos (GSSAPI) is not supported by tidelog; use SCRAM-SHA-512 or SCRAM-SHA-256",
    "OAUTHBEARER": "OAUTHBEARER is not supported by tidelog; use SCRAM-SHA-512 or SCRAM-SHA-256",
}


def listener_override(config: BrokerConfig, listener_name: str, key: str) -> str | None:
    """``listener.name.<listener>.<key>`` as configured (listener names are matched lower-case, as Kafka)."""
    return config.originals.get(f"{LISTENER_PREFIX}{listener_name.lower()}.{key}")


def _mechanisms(key: str, values: tuple[str, ...]) -> tuple[str, ...]:
    for name in values:
        if name in _UNSUPPORTED:
            raise ConfigError(f"{key}: {_UNSUPPORTED[name]}", key=key)
        if name not in SUPPORTED_MECHANISMS:
            raise ConfigError(
                f"{key}: unknown SASL mechanism {name!r} (supported: {', '.join(SUPPORTED_MECHANISMS)})",
                key=key,
            )
    if not values:
        raise ConfigError(f"{key} is empty: a SASL listener needs at least one mechanism", key=key)
    return values


def sasl_listener_settings(config: BrokerConfig, listener_name: str) -> SaslListenerSettings:
    """The SASL settings of ``listener_name``; raises :class:`ConfigError` naming the key at fault."""
    key = "sasl.enabled.mechanisms"
    raw = listener_override(config, listener_name, key)
    if raw is None:
        mechanisms = _mechanisms(key, config.sasl_enabled_mechanisms)
    else:
        key = f"{LISTENER_PREFIX}{listener_name.lower()}.{key}"
        mechanisms = _mechanisms(key, tuple(m.strip() for m in raw.split(",") if m.strip()))
    reauth_raw = listener_override(config, listener_name, "connections.max.reauth.ms")
    reauth_ms = config.connections_max_reauth_ms
    if reauth_raw is not None:
        try:
            reauth_ms = int(reauth_raw)
        except ValueError:
            reauth_ms = -1
        if reauth_ms < 0:
            raise ConfigError(
                f"{LISTENER_PREFIX}{listener_name.lower()}.connections.max.reauth.ms must be a non-negative number"
                f" of milliseconds, not {reauth_raw!r}"
            )
    return SaslListenerSettings(mechanisms, config.sasl_server_max_receive_size, reauth_ms)


@dataclass(frozen=True, slots=True)
class JaasLogin:
    """One JAAS login line: the login module, its control flag and its options."""

    login_module: str
    options: dict[str, str]

    def __repr__(self) -> str:  # never print a password
        return f"JaasLogin({self.login_module!r}, user={self.options.get('username')!r})"


_JAAS_HEAD = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*")
_JAAS_OPTION = re.compile(r"\s*([\w.-]+)\s*=\s*(\"(?:[^\"\\]|\\.)*\"|[^\s;\"]+)\s*")


def parse_jaas_config(key: str, text: str) -> JaasLogin:
    """Parse Kafka's one-module JAAS line; raises :class:`ConfigError` (without echoing the value)."""
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise ConfigError(f"{key}: expected '<LoginModule> required key=\"value\" ...;'", key=key)
    pos = head.end()
    options: dict[str, str] = {}
    while (option := _JAAS_OPTION.match(text, pos)) is not None:
        value = option.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[option.group(1)] = value
        pos = option.end()
    if text[pos:].strip() != ";":
        raise ConfigError(
            f"{key}: a JAAS line ends with ';' after its options (one login module only)", key=key
        )
    return JaasLogin(head.group(1), options)


def inter_broker_login(config: BrokerConfig, listener_name: str) -> tuple[str, str, str]:
    """``(mechanism, username, password)`` this broker authenticates with on ``listener_name``."""
    mechanism = config.sasl_mechanism_inter_broker_protocol
    _mechanisms("sasl.mechanism.inter.broker.protocol", (mechanism,))
    key = f"{LISTENER_PREFIX}{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.originals.get(key)
    if text is None:
        key, text = "sasl.jaas.config", config.sasl_jaas_config
    if text is None:
        raise ConfigError(
            f"{LISTENER_PREFIX}{listener_name.lower()}.{mechanism.lower()}.sasl.jaas.config is needed: the broker's"
            " own username and password for SASL between brokers",
            key=key,
        )
    login = parse_jaas_config(key, text)
    try:
        return mechanism, login.options["username"], login.options["password"]
    except KeyError as exc:
        raise ConfigError(f"{key}: the JAAS line has no {exc.args[0]}=", key=key) from None


def sasl_session_factory(
    config: BrokerConfig, credentials: CredentialLookup
) -> Callable[[Listener], SaslSession | None]:
    """For each accepted connection, a fresh :class:`SaslSession` on a SASL_* listener, ``None`` on others.

    Every SASL listener's settings are checked here, once: a bad one is a :class:`ConfigError` at start-up.
    """
    settings = {
        listener.name: sasl_listener_settings(config, listener.name)
        for listener in config.broker_listeners
        if listener.security_protocol.startswith("SASL_")
    }

    def new_session(listener: Listener) -> SaslSession | None:
        found = settings.get(listener.name)
        return None if found is None else SaslSession(found, credentials)

    return new_session
