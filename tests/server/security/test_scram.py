"""SCRAM and PLAIN exchanges without a broker: RFC 7677's vector, Kafka's credential text, failures."""

from __future__ import annotations

import base64

import pytest

from tidelog.protocol.sasl_client import plain_message
from tidelog.protocol.scram import (
    SCRAM_MECHANISMS,
    SaslAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramServer,
    failure_message,
)
from tidelog.server.security.plain import PlainServer

SHA256 = SCRAM_MECHANISMS["SCRAM-SHA-256"]
SHA512 = SCRAM_MECHANISMS["SCRAM-SHA-512"]

# RFC 7677 section 3
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC_CREDENTIAL = ScramCredential.from_password(
    SHA256, "pencil", iterations=4096, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
)


def lookup(users: dict[tuple[str, str], ScramCredential]):  # type: ignore[no-untyped-def]
    return lambda user, mechanism: users.get((user, mechanism))


def test_server_reproduces_rfc7677_exchange() -> None:
    server = ScramServer(
        SHA256, lookup({("user", "SCRAM-SHA-256"): RFC_CREDENTIAL}), server_nonce=RFC_SERVER_NONCE
    )
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.username == "user"


def test_client_reproduces_rfc7677_exchange() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(SaslAuthenticationError):
        client.verify_server_final(b"v=" + base64.b64encode(b"\0" * 32))


def test_credential_text_is_kafkas_zookeeper_format() -> None:
    text = RFC_CREDENTIAL.to_config()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_config(text) == RFC_CREDENTIAL
    with pytest.raises(ValueError, match="not a SCRAM credential"):
        ScramCredential.from_config("salt=AA==,iterations=4096")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_client_and_server_agree(mechanism) -> None:  # type: ignore[no-untyped-def]
    users = lookup({("alice", mechanism.name): ScramCredential.from_password(mechanism, "s3cret")})
    server = ScramServer(mechanism, users)
    client = ScramClient(mechanism, "alice", "s3cret")
    final = server.evaluate(client.final_message(server.evaluate(client.first_message())))
    client.verify_server_final(final)
    assert server.username == "alice"


def _fails(server: ScramServer, token: bytes) -> str:
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(token)
    return str(info.value)


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    users = lookup({("alice", "SCRAM-SHA-512"): ScramCredential.from_password(SHA512, "right")})
    messages = []
    first_replies = []
    for user, password in (("alice", "wrong"), ("mallory", "whatever"), ("mallory", "whatever")):
        server = ScramServer(SHA512, users)
        client = ScramClient(SHA512, user, password)
        first = server.evaluate(client.first_message())
        first_replies.append(first.split(b",", 1)[1])
        messages.append(_fails(server, client.final_message(first)))
    assert messages == [failure_message("SCRAM-SHA-512")] * 3
    assert (
        messages[0]
        == "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    )
    assert first_replies[1] == first_replies[2]  # an unknown user's salt does not change between attempts


@pytest.mark.parametrize(
    "client_first",
    [
        b"y,,n=user,r=abc",  # client supports channel binding
        b"p=tls-unique,,n=user,r=abc",  # client requires it
        b"n,a=admin,n=user,r=abc",  # authzid of someone else
        b"n,,n=user,r=abc,tokenauth=true",  # delegation token extension
        b"n,,n=,r=abc",
        b"n,,r=abc,n=user",
        b"n,,n=us=er,r=abc",
        b"\xff\xfe",
        b"",
        b"n,,",
    ],
)
def test_malformed_client_first_fails(client_first: bytes) -> None:
    server = ScramServer(SHA256, lookup({("user", "SCRAM-SHA-256"): RFC_CREDENTIAL}))
    assert _fails(server, client_first) == failure_message("SCRAM-SHA-256")
    assert _fails(server, RFC_CLIENT_FINAL) == failure_message(
        "SCRAM-SHA-256"
    )  # a failed exchange stays failed


def test_authzid_equal_to_user_is_accepted() -> None:
    server = ScramServer(SHA256, lookup({("user", "SCRAM-SHA-256"): RFC_CREDENTIAL}))
    assert server.evaluate(b"n,a=user,n=user,r=abc").startswith(b"r=abc")


def test_replayed_client_final_fails_in_a_new_exchange() -> None:
    """The RFC's client-final carries the RFC server's nonce; a new exchange issued another one."""
    server = ScramServer(SHA256, lookup({("user", "SCRAM-SHA-256"): RFC_CREDENTIAL}))
    server.evaluate(RFC_CLIENT_FIRST)
    assert _fails(server, RFC_CLIENT_FINAL) == failure_message("SCRAM-SHA-256")


@pytest.mark.parametrize(
    "client_final",
    [
        RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # channel binding data differs from the header
        RFC_CLIENT_FINAL[:-10],  # truncated proof
        RFC_CLIENT_FINAL.rsplit(b",p=", 1)[0],  # no proof
        b"garbage",
    ],
)
def test_malformed_client_final_fails(client_final: bytes) -> None:
    server = ScramServer(
        SHA256, lookup({("user", "SCRAM-SHA-256"): RFC_CREDENTIAL}), server_nonce=RFC_SERVER_NONCE
    )
    server.evaluate(RFC_CLIENT_FIRST)
    assert _fails(server, client_final) == failure_message("SCRAM-SHA-256")


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    users = lookup({("alice", "SCRAM-SHA-256"): ScramCredential.from_password(SHA256, "right")})
    ok = PlainServer(users)
    assert ok.evaluate(plain_message("alice", "right")) == b""
    assert ok.username == "alice"
    assert PlainServer(users).evaluate(b"alice\0alice\0right") == b""
    for token in (
        plain_message("alice", "wrong"),
        plain_message("bob", "right"),
        b"admin\0alice\0right",
        b"x",
    ):
        with pytest.raises(SaslAuthenticationError, match=r"mechanism PLAIN$"):
            PlainServer(users).evaluate(token)
