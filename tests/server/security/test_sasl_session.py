"""The per-connection SASL state machine and the SASL config keys, without sockets (time as ``now_ms``)."""

from __future__ import annotations

import re

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest
from tidelog.protocol.sasl_client import plain_message
from tidelog.protocol.scram import SCRAM_MECHANISMS, ScramClient, ScramCredential
from tidelog.server.config import BrokerConfig
from tidelog.server.config.errors import ConfigError
from tidelog.server.dispatch import KafkaPrincipal
from tidelog.server.security.sasl_config import (
    inter_broker_login,
    parse_jaas_config,
    sasl_listener_settings,
    sasl_session_factory,
)
from tidelog.server.security.sasl_session import SaslListenerSettings, SaslSession, SaslStateError

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]
USERS = {
    ("alice", "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "a-pw"),
    ("bob", "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "b-pw"),
}


def session(reauth_ms: int = 0) -> SaslSession:
    settings = SaslListenerSettings(("PLAIN", "SCRAM-SHA-256"), max_token_bytes=1024, max_reauth_ms=reauth_ms)
    return SaslSession(settings, lambda user, mechanism: USERS.get((user, mechanism)))


def login_plain(s: SaslSession, user: str, password: str, now_ms: int) -> int:
    handshake = s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="PLAIN"), now_ms)
    assert handshake is not None
    assert handshake.response.error_code == ErrorCode.NONE
    reply = s.receive(
        ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=plain_message(user, password)), now_ms
    )
    assert reply is not None
    return reply.response.error_code  # type: ignore[no-any-return]


def test_only_api_versions_and_sasl_before_authentication() -> None:
    s = session()
    assert s.receive(ApiKey.API_VERSIONS, None, 0) is None  # served as usual
    with pytest.raises(SaslStateError):
        s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 0)


def test_only_sasl_authenticate_during_the_exchange() -> None:
    s = session()
    assert s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 0) is not None
    with pytest.raises(SaslStateError):  # mid-exchange: only SaslAuthenticate
        s.receive(ApiKey.API_VERSIONS, None, 0)


def test_scram_exchange_to_the_end() -> None:
    s = session()
    client = ScramClient(SHA256, "alice", "a-pw")
    s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 0)
    first = s.receive(ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=client.first_message()), 0)
    assert first is not None
    assert s.principal is None
    final = s.receive(
        ApiKey.SASL_AUTHENTICATE,
        SaslAuthenticateRequest(auth_bytes=client.final_message(first.response.auth_bytes)),
        0,
    )
    assert final is not None
    assert not final.close
    client.verify_server_final(final.response.auth_bytes)
    assert s.principal == KafkaPrincipal("User", "alice")
    assert s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 10**12) is None  # no reauth: never expires
    # SASL requests now reach the ordinary handlers (ILLEGAL_SASL_STATE there)
    assert s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="PLAIN"), 0) is None


def test_failure_answers_and_closes() -> None:
    s = session()
    s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="PLAIN"), 0)
    reply = s.receive(
        ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=b"x" * 1025), 0
    )  # oversize
    assert reply is not None
    assert reply.close
    assert reply.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    with pytest.raises(SaslStateError):
        s.receive(ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=b""), 0)


def test_session_expires_without_reauthentication() -> None:
    s = session(reauth_ms=1000)
    assert login_plain(s, "alice", "a-pw", now_ms=5000) == ErrorCode.NONE
    assert s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 5999) is None
    with pytest.raises(SaslStateError, match="expired"):
        s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 6000)


def test_reauthentication_extends_the_session() -> None:
    s = session(reauth_ms=1000)
    assert login_plain(s, "alice", "a-pw", now_ms=0) == ErrorCode.NONE
    assert login_plain(s, "alice", "a-pw", now_ms=1500) == ErrorCode.NONE  # late, but a re-authentication
    assert s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 2400) is None
    with pytest.raises(SaslStateError):
        s.receive(ApiKey.METADATA, MetadataRequest(topics=[]), 2500)


def test_reauthentication_cannot_change_the_principal() -> None:
    s = session(reauth_ms=1000)
    assert login_plain(s, "alice", "a-pw", now_ms=0) == ErrorCode.NONE
    assert login_plain(s, "bob", "b-pw", now_ms=500) == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert s.principal == KafkaPrincipal("User", "alice")


def test_reauthentication_with_another_mechanism_is_refused() -> None:
    s = session(reauth_ms=1000)
    login_plain(s, "alice", "a-pw", now_ms=0)
    reply = s.receive(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 10)
    assert reply is not None
    assert reply.close
    assert reply.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM


SASL = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}


def test_listener_settings_defaults_and_overrides() -> None:
    config = BrokerConfig.from_mapping(
        {
            **SASL,
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.connections.max.reauth.ms": "60000",
            "sasl.server.max.receive.size": "4096",
        }
    )
    assert sasl_listener_settings(config, "SASL_PLAINTEXT") == SaslListenerSettings(("PLAIN",), 4096, 60000)
    default = BrokerConfig.from_mapping(SASL)
    assert sasl_listener_settings(default, "SASL_PLAINTEXT") == SaslListenerSettings(
        ("SCRAM-SHA-256", "SCRAM-SHA-512"), 524288, 0
    )
    new_session = sasl_session_factory(default, lambda user, mechanism: None)
    plain, sasl = default.broker_listeners
    assert new_session(plain) is None
    assert isinstance(new_session(sasl), SaslSession)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "Kerberos (GSSAPI) is not supported"),
        (
            {"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"},
            "OAUTHBEARER is not supported",
        ),
        ({"sasl.enabled.mechanisms": "SCRAM-SHA-1"}, "unknown SASL mechanism 'SCRAM-SHA-1'"),
        ({"sasl.enabled.mechanisms": ""}, "a SASL listener needs at least one mechanism"),
    ],
)
def test_unsupported_mechanisms_are_config_errors(props: dict[str, str], message: str) -> None:
    config = BrokerConfig.from_mapping({**SASL, **props})
    with pytest.raises(ConfigError, match=re.escape(message)):
        sasl_session_factory(config, lambda user, mechanism: None)


def test_jaas_line_and_inter_broker_login() -> None:
    line = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="p\\"w;x";'
    login = parse_jaas_config("k", line)
    assert login.login_module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert login.options == {"username": "admin", "password": 'p"w;x'}
    assert "p\\" not in repr(login)
    with pytest.raises(ConfigError, match="ends with ';'"):
        parse_jaas_config("k", 'x.Module required username="a"')
    config = BrokerConfig.from_mapping(
        {
            **SASL,
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": line,
        }
    )
    assert inter_broker_login(config, "SASL_PLAINTEXT") == ("SCRAM-SHA-512", "admin", 'p"w;x')
    with pytest.raises(ConfigError, match="GSSAPI"):
        inter_broker_login(BrokerConfig.from_mapping(SASL), "SASL_PLAINTEXT")
