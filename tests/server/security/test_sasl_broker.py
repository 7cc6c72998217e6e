"""SASL on a real broker: one module-scoped broker whose PLAINTEXT-named listener is SASL_PLAINTEXT with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 enabled, its first user written offline by ``tidelog users add
--data-dir`` before it starts.

- confluent-kafka (each mechanism), kafka-python and aiokafka log in, produce and consume exact values.
- A wrong password and an unknown user get the same answer; an unauthenticated socket gets only
  ApiVersions and SASL answers and is closed on Metadata; garbage, truncated and oversize tokens, a
  replayed SCRAM client-final, an unknown mechanism all end only their own connection, while an
  authenticated connection opened before keeps working.
- Users are managed with ``tidelog users`` (logging in with ``--command-config``) and with
  confluent-kafka's AdminClient, with KIP-554's error codes.
- KIP-368: on a broker with ``connections.max.reauth.ms=2000`` a librdkafka producer keeps its connection
  across several session lifetimes (it re-authenticates).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tests.cli.cli_support import failed, ok, tidelog_cli
from tests.support.round_trip import aiokafka_round_trip, confluent_consume
from tests.support.users import add_user_offline

from tidelog.client.wire import WireClient, WireError
from tidelog.protocol.codec import encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from tidelog.protocol.schema import Request, Response
from tidelog.protocol.scram import SCRAM_MECHANISMS, ScramClient, failure_message
from tidelog.server.config import BrokerConfig
from tidelog.server.entity_configs import FILE_NAME
from tidelog.server.security.inter_broker_sasl import inter_broker_authenticate
from tidelog.testing import Broker

pytestmark = [pytest.mark.timeout(180)]

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
SASL_CONFIG = {
    "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.server.max.receive.size": "65536",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    data_dir = tmp_path_factory.mktemp("sasl-data")
    assert "user admin: SCRAM-SHA-256, SCRAM-SHA-512 set (8192 iterations)" in add_user_offline(
        data_dir, ADMIN, ADMIN_PASSWORD
    )
    with Broker(SASL_CONFIG, data_dir=data_dir) as started:
        yield started


def client_config(
    broker: Broker, mechanism: str, user: str = ADMIN, password: str = ADMIN_PASSWORD
) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def wire(broker: Broker, login: tuple[str, str, str] | None = None) -> WireClient:
    return WireClient(broker.host, broker.port, timeout=10, sasl=login)


def test_offline_bootstrap_stores_only_salted_keys(broker: Broker) -> None:
    stored = json.loads((broker.data_dir / FILE_NAME).read_text())["entities"]["users/admin"]
    assert sorted(stored) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for value in stored.values():
        assert [part.split("=", 1)[0] for part in value.split(",")] == [
            "salt",
            "stored_key",
            "server_key",
            "iterations",
        ]
        assert value.endswith(",iterations=8192")
    assert ADMIN_PASSWORD not in (broker.data_dir / FILE_NAME).read_text()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_produces_and_consumes(broker: Broker, mechanism: str) -> None:
    topic = f"confluent-{mechanism.lower()}"
    producer = confluent_kafka.Producer(client_config(broker, mechanism))
    delivered: list[tuple[int, bytes]] = []
    for i in range(3):
        producer.produce(
            topic,
            f"{mechanism}-{i}".encode(),
            on_delivery=lambda e, m: delivered.append((m.offset(), m.value())),
        )
    assert producer.flush(30) == 0
    assert delivered == [(i, f"{mechanism}-{i}".encode()) for i in range(3)]
    got = confluent_consume(client_config(broker, mechanism), topic, 3, group_id=f"g-{mechanism}")
    assert got == [f"{mechanism}-{i}".encode() for i in range(3)]


def test_kafka_python_produces_and_consumes(broker: Broker) -> None:
    settings = {
        "bootstrap_servers": broker.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": ADMIN,
        "sasl_plain_password": ADMIN_PASSWORD,
    }
    producer = kafka.KafkaProducer(enable_idempotence=False, **settings)
    try:
        offsets = [
            producer.send("kafka-python-sasl", f"kp-{i}".encode()).get(timeout=30).offset for i in range(3)
        ]
    finally:
        producer.close(timeout=10)
    assert offsets == [0, 1, 2]
    consumer = kafka.KafkaConsumer(group_id=None, **settings)
    try:
        tp = kafka.TopicPartition("kafka-python-sasl", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    assert got == [b"kp-0", b"kp-1", b"kp-2"]


def test_aiokafka_produces_and_consumes(broker: Broker) -> None:
    settings = {
        "bootstrap_servers": broker.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": ADMIN,
        "sasl_plain_password": ADMIN_PASSWORD,
    }

    sent = [b"ak-0", b"ak-1", b"ak-2"]
    assert aiokafka_round_trip(settings, "aiokafka-sasl", sent, group_id="aiokafka-sasl-group") == sent


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_get_the_same_answer(broker: Broker, mechanism: str) -> None:
    answers = []
    for user, password in ((ADMIN, "wrong"), ("nobody", ADMIN_PASSWORD)):
        with pytest.raises(WireError) as info:
            wire(broker, (mechanism, user, password))
        answers.append(str(info.value).split(": ", 1)[1])
    assert answers == [failure_message(mechanism)] * 2


def connection_closed(client: WireClient) -> bool:
    try:
        client.call(MetadataRequest(topics=[]), 1)
    except WireError:
        return True
    return False


def test_unauthenticated_socket_gets_only_sasl_answers(broker: Broker) -> None:
    with wire(broker) as client:  # ApiVersions answered (WireClient asks it first)
        assert client.versions[17] == (1, 1)  # SaslHandshake v1 only: no unframed v0 tokens
        assert client.versions[36] == (0, 2)
        handshake = client.call(
            SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, expect=SaslHandshakeResponse
        )
        assert handshake.error_code == ErrorCode.NONE
        assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert connection_closed(client)  # Metadata instead of SaslAuthenticate
    with wire(broker) as client:
        assert connection_closed(client)  # Metadata before any handshake


def test_unknown_mechanism_lists_the_enabled_ones_and_closes(broker: Broker) -> None:
    with wire(broker) as client:
        answer = client.call(SaslHandshakeRequest(mechanism="GSSAPI"), 1, expect=SaslHandshakeResponse)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert connection_closed(client)


def authenticate_with(client: WireClient, mechanism: str, *tokens: bytes) -> list[SaslAuthenticateResponse]:
    assert (
        client.call(SaslHandshakeRequest(mechanism=mechanism), 1, expect=SaslHandshakeResponse).error_code
        == 0
    )
    return [
        client.call(SaslAuthenticateRequest(auth_bytes=t), 2, expect=SaslAuthenticateResponse) for t in tokens
    ]


@pytest.mark.parametrize(
    ("mechanism", "token"),
    [
        ("SCRAM-SHA-512", b"\x00\xff garbage"),
        ("SCRAM-SHA-512", b"n,,n=admin"),  # truncated client-first
        ("SCRAM-SHA-256", b"p=tls-server-end-point,,n=admin,r=abc"),  # channel binding asked for
        ("PLAIN", b"\0admin"),  # truncated PLAIN
    ],
)
def test_bad_tokens_fail_cleanly_and_others_carry_on(broker: Broker, mechanism: str, token: bytes) -> None:
    with wire(broker, ("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)) as bystander, wire(broker) as attacker:
        [answer] = authenticate_with(attacker, mechanism, token)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == failure_message(mechanism)
        assert connection_closed(attacker)
        assert bystander.call(MetadataRequest(topics=[]), 1, expect=MetadataResponse).brokers[0].node_id == 1


def test_oversize_token_closes_only_its_connection(broker: Broker) -> None:
    with wire(broker, ("PLAIN", ADMIN, ADMIN_PASSWORD)) as bystander, wire(broker) as attacker:
        authenticate_with(attacker, "PLAIN")
        with pytest.raises(WireError):  # larger than sasl.server.max.receive.size: dropped unanswered
            attacker.call(SaslAuthenticateRequest(auth_bytes=b"\0admin\0" + b"x" * 70_000), 2)
        assert bystander.call(MetadataRequest(topics=[]), 1, expect=MetadataResponse).brokers[0].node_id == 1


def test_replayed_scram_client_final_fails(broker: Broker) -> None:
    mechanism = SCRAM_MECHANISMS["SCRAM-SHA-512"]
    scram = ScramClient(mechanism, ADMIN, ADMIN_PASSWORD)
    with wire(broker) as first:
        [server_first] = authenticate_with(first, "SCRAM-SHA-512", scram.first_message())
        client_final = scram.final_message(server_first.auth_bytes)
        done = first.call(
            SaslAuthenticateRequest(auth_bytes=client_final), 2, expect=SaslAuthenticateResponse
        )
        assert done.error_code == ErrorCode.NONE
        assert done.session_lifetime_ms == 0
        scram.verify_server_final(done.auth_bytes)
        # authenticated: another handshake is an illegal SASL state (no re-authentication configured)
        again = first.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1, expect=SaslHandshakeResponse)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    with wire(broker) as replay:  # the same client nonce and client-final in a new exchange
        replies = authenticate_with(replay, "SCRAM-SHA-512", scram.first_message(), client_final)
        assert [r.error_code for r in replies] == [ErrorCode.NONE, ErrorCode.SASL_AUTHENTICATION_FAILED]
        assert replies[1].error_message == failure_message("SCRAM-SHA-512")


def test_raw_socket_metadata_first_is_closed_without_answer(broker: Broker) -> None:
    header = RequestHeader(request_api_key=3, request_api_version=1, correlation_id=7, client_id="raw")
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(encode_request(header, MetadataRequest(topics=[])))
        assert sock.recv(4) == b""


def test_users_cli_add_list_delete(broker: Broker, tmp_path: Path) -> None:
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\n'
    )
    login = ("-b", broker.bootstrap_servers, "--command-config", str(command_config))
    out = ok(
        tidelog_cli(
            "users",
            "add",
            "carol",
            "--mechanism",
            "SCRAM-SHA-256",
            "--iterations",
            "4096",
            "--password-stdin",
            *login,
            stdin="carol-pw\n",
        )
    )
    assert out.strip() == "user carol: SCRAM-SHA-256 set (4096 iterations)"
    listing = ok(tidelog_cli("users", "list", *login))
    assert [line.split() for line in listing.splitlines() if "SCRAM" in line and "users" not in line] == [
        ["│", "admin", "│", "SCRAM-SHA-256", "│", "8192", "│"],
        ["│", "admin", "│", "SCRAM-SHA-512", "│", "8192", "│"],
        ["│", "carol", "│", "SCRAM-SHA-256", "│", "4096", "│"],
    ]
    with wire(broker, ("SCRAM-SHA-256", "carol", "carol-pw")) as carol:
        assert carol.call(MetadataRequest(topics=[]), 1, expect=MetadataResponse).brokers[0].node_id == 1
    assert ok(tidelog_cli("users", "delete", "carol", *login)).strip() == "user carol: deleted SCRAM-SHA-256"
    with pytest.raises(WireError):
        wire(broker, ("SCRAM-SHA-256", "carol", "carol-pw"))
    assert "cannot describe user carol" in failed(tidelog_cli("users", "list", "carol", *login))
    # without a login the CLI cannot even ask
    assert "Error:" in failed(tidelog_cli("users", "list", "-b", broker.bootstrap_servers, "--timeout", "2"))


def test_admin_client_alters_and_describes(broker: Broker) -> None:
    admin = AdminClient(client_config(broker, "SCRAM-SHA-512"))
    upsert = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 5000), b"dave-pw"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        assert future.result(timeout=30) is None
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 5000)
    ]
    with wire(broker, ("PLAIN", "dave", "dave-pw")):  # PLAIN checks against the SCRAM credential
        pass
    deletion = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        assert future.result(timeout=30) is None
    with pytest.raises(confluent_kafka.KafkaException, match=r"does not exist"):
        admin.describe_user_scram_credentials(["dave"])["dave"].result(timeout=30)


def test_alter_errors_are_kafkas(broker: Broker) -> None:
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    salted = bytes(64)
    request = AlterUserScramCredentialsRequest(
        deletions=[deletion(name="erin", mechanism=2), deletion(name="ghost", mechanism=1)],
        upsertions=[
            upsertion(name="erin", mechanism=2, iterations=4096, salt=b"salt", salted_password=salted),
            upsertion(name="frank", mechanism=2, iterations=100, salt=b"salt", salted_password=salted),
            upsertion(name="gina", mechanism=3, iterations=4096, salt=b"salt", salted_password=salted),
            upsertion(name="hank", mechanism=2, iterations=4096, salt=b"", salted_password=salted),
            upsertion(name="", mechanism=2, iterations=4096, salt=b"salt", salted_password=salted),
        ],
    )
    with wire(broker, ("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)) as client:
        results = client.call(request, 0, expect=AlterUserScramCredentialsResponse).results
    assert [(r.user, ErrorCode(r.error_code).name) for r in results] == [
        ("erin", "DUPLICATE_RESOURCE"),
        ("ghost", "RESOURCE_NOT_FOUND"),
        ("frank", "UNACCEPTABLE_CREDENTIAL"),
        ("gina", "UNSUPPORTED_SASL_MECHANISM"),
        ("hank", "UNACCEPTABLE_CREDENTIAL"),
        ("", "UNACCEPTABLE_CREDENTIAL"),
    ]


def test_librdkafka_reauthenticates_and_keeps_producing(tmp_path: Path) -> None:
    add_user_offline(tmp_path, ADMIN, ADMIN_PASSWORD)
    with Broker({**SASL_CONFIG, "connections.max.reauth.ms": "2000"}, data_dir=tmp_path) as short_sessions:
        with wire(short_sessions) as probe:
            [answer] = authenticate_with(probe, "PLAIN", f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode())
            assert answer.session_lifetime_ms == 2000
        producer = confluent_kafka.Producer(
            {**client_config(short_sessions, "SCRAM-SHA-512"), "linger.ms": 0}
        )
        delivered: list[int] = []
        errors: list[str] = []
        producer.produce("reauth", b"first", on_delivery=lambda e, m: delivered.append(m.offset()))
        assert producer.flush(30) == 0
        # keep producing for three session lifetimes: each flush must succeed on the same connections
        deadline = time.monotonic() + 6.5
        while time.monotonic() < deadline:
            producer.produce(
                "reauth",
                b"x",
                on_delivery=lambda e, m: errors.append(str(e)) if e else delivered.append(m.offset()),
            )
            assert producer.flush(10) == 0
            producer.poll(0.2)
        assert errors == []
        assert delivered == list(range(len(delivered)))
        log = short_sessions.log_tail(400)
        assert "has expired without re-authentication" not in log


def inter_broker_config(password: str) -> BrokerConfig:
    return BrokerConfig.from_mapping(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN}" password="{password}";'
            ),
        }
    )


def test_inter_broker_login_hook_logs_in(broker: Broker) -> None:
    """The hook BrokerClient runs on each new connection to another broker, driven over a raw connection."""
    assert inter_broker_authenticate(BrokerConfig.from_mapping({})) is None  # PLAINTEXT between brokers
    for password, logged_in in ((ADMIN_PASSWORD, True), ("wrong", False)):
        hook = inter_broker_authenticate(inter_broker_config(password))
        assert hook is not None
        with wire(broker) as client:

            async def exchange(request: Request, version: int, client: WireClient = client) -> Response:
                return await asyncio.to_thread(client.call, request, version)

            if logged_in:
                asyncio.run(hook(client, exchange))
                assert (
                    client.call(MetadataRequest(topics=[]), 1, expect=MetadataResponse).brokers[0].node_id
                    == 1
                )
            else:
                with pytest.raises(
                    ConnectionRefusedError, match=r"SASL SCRAM-SHA-512 login as admin to .* failed"
                ):
                    asyncio.run(hook(client, exchange))


def test_describe_errors_are_kafkas(broker: Broker) -> None:
    request = DescribeUserScramCredentialsRequest(
        users=[
            DescribeUserScramCredentialsRequest.UserName(name=n)
            for n in ("admin", "nobody", "twice", "twice")
        ]
    )
    with wire(broker, ("SCRAM-SHA-512", ADMIN, ADMIN_PASSWORD)) as client:
        response = client.call(request, 0, expect=DescribeUserScramCredentialsResponse)
    assert response.error_code == ErrorCode.NONE
    assert [(r.user, ErrorCode(r.error_code).name, r.error_message) for r in response.results] == [
        ("admin", "NONE", None),
        ("nobody", "RESOURCE_NOT_FOUND", "Attempt to describe a user credential that does not exist: nobody"),
        (
            "twice",
            "DUPLICATE_RESOURCE",
            "Cannot describe SCRAM credentials for the same user twice in a single request: twice",
        ),
    ]
    assert [(i.mechanism, i.iterations) for i in response.results[0].credential_infos] == [
        (1, 8192),
        (2, 8192),
    ]
