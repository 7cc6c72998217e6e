"""Real clients over TLS: one broker with a PLAINTEXT, an SSL and an mTLS (``ssl.client.auth=required``)
listener, confluent-kafka, kafka-python and aiokafka each producing and consuming exact messages, a large
fetch over TLS (record data copied, not sendfile'd), the principal of a client certificate, and bad
handshakes that end only their own connection."""

from __future__ import annotations

import os
import re
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiokafka
import aiokafka.helpers
import confluent_kafka
import kafka
import pytest
from tests.server.conftest import finish_broker
from tests.support.certs import Issued, TlsMaterial
from tests.support.round_trip import aiokafka_round_trip, confluent_consume, confluent_produce
from tests.support.tls_broker import TlsBroker

MTLS_RULES = "RULE:^CN=([^,]*),OU=eng,O=acme$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def tls_broker(pki: TlsMaterial, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    workdir = tmp_path_factory.mktemp("tls-broker")
    broker = TlsBroker(
        {
            "ssl.keystore.location": str(pki.broker.keystore),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.location": str(pki.ca.cert),
            "listener.name.mtls.ssl.principal.mapping.rules": MTLS_RULES,
            "offsets.topic.num.partitions": "1",
        },
        extra_listeners={"SSL": "SSL", "MTLS": "SSL"},
        data_dir=workdir / "data",
        run_dir=workdir / "run",
        env={**os.environ, "TIDELOG_LOG_LEVEL": "DEBUG"},  # the principal of each TLS connection
    )
    broker.start()
    try:
        yield broker
    finally:
        finish_broker(broker)


def confluent_tls(pki: TlsMaterial, bootstrap: str, client: Issued | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca.cert),
    }
    if client is not None:
        settings["ssl.certificate.location"] = str(client.cert)
        settings["ssl.key.location"] = str(client.key)
        if client.key_password:
            settings["ssl.key.password"] = client.key_password
    return settings


def values(prefix: str, count: int = 20) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def test_confluent_kafka_over_ssl_and_mtls(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"tls-confluent-{uuid.uuid4().hex[:6]}"
    confluent_produce(confluent_tls(pki, tls_broker.address("SSL")), topic, values("ssl"))
    confluent_produce(confluent_tls(pki, tls_broker.address("MTLS"), pki.alice), topic, values("mtls"))
    got = confluent_consume(confluent_tls(pki, tls_broker.address("MTLS"), pki.bob), topic, 40)
    assert got == values("ssl") + values("mtls")


def test_the_principal_is_the_mapped_subject_of_the_client_certificate(
    tls_broker: TlsBroker, pki: TlsMaterial
) -> None:
    topic = f"tls-principal-{uuid.uuid4().hex[:6]}"
    confluent_produce(confluent_tls(pki, tls_broker.address("MTLS"), pki.alice), topic, [b"a"])
    confluent_produce(confluent_tls(pki, tls_broker.address("MTLS"), pki.bob), topic, [b"b"])
    confluent_produce(confluent_tls(pki, tls_broker.address("SSL")), topic, [b"c"])
    principals = set(re.findall(r"TLS \S+ \S+, principal (\S+)", tls_broker.log_path.read_text()))
    # alice matches the rule (CN lower-cased); bob's OU does not, so DEFAULT: the DN as Java prints it
    assert {"User:alice", "User:CN=bob,OU=ops,O=acme", "User:ANONYMOUS"} <= principals


def test_kafka_python_over_mtls(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"tls-kafka-python-{uuid.uuid4().hex[:6]}"
    settings: dict[str, Any] = {
        "bootstrap_servers": tls_broker.address("MTLS"),
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca.cert),
        "ssl_certfile": str(pki.alice.cert),
        "ssl_keyfile": str(pki.alice.key),
    }
    producer = kafka.KafkaProducer(**settings)
    try:
        for value in values("kp"):
            producer.send(topic, value)
        producer.flush(30)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **settings
    )
    try:
        got = [message.value for _, message in zip(range(20), consumer, strict=False)]
    finally:
        consumer.close()
    assert got == values("kp")


def test_aiokafka_over_mtls(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"tls-aiokafka-{uuid.uuid4().hex[:6]}"
    context = aiokafka.helpers.create_ssl_context(
        cafile=str(pki.ca.cert), certfile=str(pki.alice.cert), keyfile=str(pki.alice.key)
    )
    common: dict[str, Any] = {
        "bootstrap_servers": tls_broker.address("MTLS"),
        "security_protocol": "SSL",
        "ssl_context": context,
    }
    assert aiokafka_round_trip(common, topic, values("aio")) == values("aio")


def test_a_large_fetch_over_tls_returns_the_exact_bytes(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"tls-large-{uuid.uuid4().hex[:6]}"
    blobs = [os.urandom(200_000) for _ in range(40)]  # 8 MB: many region pieces per fetch response
    confluent_produce(
        {"bootstrap.servers": tls_broker.bootstrap_servers, "message.max.bytes": 1_000_000}, topic, blobs
    )
    settings = {**confluent_tls(pki, tls_broker.address("SSL")), "fetch.max.bytes": 50_000_000}
    assert confluent_consume(settings, topic, len(blobs)) == blobs


def api_versions_frame() -> bytes:
    client_id = b"raw"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def read_until_closed(sock: socket.socket | ssl.SSLSocket, limit_s: float = 20.0) -> bytes:
    """Everything the broker sends until it closes the connection (an error counts as closed)."""
    sock.settimeout(limit_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ssl.SSLError, ConnectionError):
        pass
    return data


def test_bad_handshakes_close_only_their_own_connection(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    host, port = tls_broker.address("SSL").split(":")
    mtls_host, mtls_port = tls_broker.address("MTLS").split(":")
    before = tls_broker.log_path.read_text().count("TLS handshake failed")

    # a plaintext Kafka client on the TLS port: no Kafka answer, the connection closed
    with socket.create_connection((host, int(port))) as plain:
        plain.sendall(api_versions_frame())
        answer = read_until_closed(plain)
        assert not answer or answer[0] == 0x15  # nothing, or a TLS alert record
    # garbage
    with socket.create_connection((host, int(port))) as garbage:
        garbage.sendall(os.urandom(3000))
        answer = read_until_closed(garbage)
        assert not answer or answer[0] == 0x15
    # a certificate from another CA, and no certificate, on the mTLS listener
    for client in (pki.mallory, None):
        context = ssl.create_default_context(cafile=str(pki.ca.cert))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        with socket.create_connection((mtls_host, int(mtls_port))) as raw:
            try:
                with context.wrap_socket(raw, server_hostname="localhost") as wrapped:
                    wrapped.sendall(api_versions_frame())
                    assert read_until_closed(wrapped) == b""
            except (ssl.SSLError, ConnectionError):
                pass  # refused during the handshake (TLS 1.2) or at the first read (TLS 1.3)
    # a client that does not trust the broker's CA fails on its side; the broker just sees a failed handshake
    with socket.create_connection((host, int(port))) as raw:
        context = ssl.create_default_context(cafile=str(pki.other_ca.cert))
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(raw, server_hostname="localhost")

    # meanwhile every other client works
    topic = f"tls-after-bad-{uuid.uuid4().hex[:6]}"
    confluent_produce(confluent_tls(pki, tls_broker.address("SSL")), topic, values("ok", 5))
    assert confluent_consume(confluent_tls(pki, tls_broker.address("MTLS"), pki.alice), topic, 5) == values(
        "ok", 5
    )
    deadline = time.monotonic() + 15
    while tls_broker.log_path.read_text().count("TLS handshake failed") < before + 5:
        assert time.monotonic() < deadline, tls_broker.log_tail()
        time.sleep(0.05)


def test_the_consoles_own_connections_speak_tls_and_mtls(tls_broker: TlsBroker, pki: TlsMaterial) -> None:
    """The console's wire client (its transactions page) over SSL, and over mTLS with a password-protected
    key; a certificate the broker does not trust is refused with the TLS error, not sent in plaintext."""
    from tidelog.console.kafka import ConsoleError
    from tidelog.console.transactions import open_transactions

    ssl_address = tls_broker.address("SSL")
    producer = confluent_kafka.Producer(
        {**confluent_tls(pki, ssl_address), "transactional.id": "tx-over-tls", "log_level": 3}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("console-tls", b"v")
    producer.flush(30)
    try:
        for address, client in ((ssl_address, None), (tls_broker.address("MTLS"), pki.bob)):
            host, port = address.rsplit(":", 1)
            found = open_transactions([(1, host, int(port))], confluent_tls(pki, address, client), 10)
            assert [(t.transactional_id, t.state, t.partitions) for t in found] == [
                ("tx-over-tls", "Ongoing", ("console-tls/0",))
            ]
        host, port = tls_broker.address("MTLS").rsplit(":", 1)
        with pytest.raises(ConsoleError):
            open_transactions([(1, host, int(port))], confluent_tls(pki, address, pki.mallory), 10)
    finally:
        producer.abort_transaction(30)
