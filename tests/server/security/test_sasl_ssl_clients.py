"""SASL_SSL + SCRAM-SHA-512, the configuration issue 12 names: one broker with a SASL_SSL listener (TLS
transport, then the SASL login), its user written offline before it starts; confluent-kafka, kafka-python
and aiokafka configured as their docs say each produce and consume exact values, and a wrong password is
refused with Kafka's message."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.helpers
import confluent_kafka
import kafka
import pytest
from tests.support.certs import TlsMaterial
from tests.support.round_trip import aiokafka_round_trip, confluent_consume
from tests.support.tls_broker import TlsBroker

from tidelog.protocol.scram import SCRAM_MECHANISMS, ScramCredential, failure_message
from tidelog.server.entity_configs import FileEntityConfigs, entity_path

pytestmark = pytest.mark.clients

USER, PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="module")
def broker(pki: TlsMaterial, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    workdir = tmp_path_factory.mktemp("sasl-ssl")
    credential = ScramCredential.from_password(SCRAM_MECHANISMS["SCRAM-SHA-512"], PASSWORD, iterations=4096)
    (workdir / "data").mkdir()
    FileEntityConfigs(workdir / "data").alter_now(
        entity_path(user=USER), {"SCRAM-SHA-512": credential.to_config()}
    )
    with TlsBroker(
        {
            "ssl.keystore.location": str(pki.broker.keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "offsets.topic.num.partitions": "1",
        },
        extra_listeners={"SASL_SSL": "SASL_SSL"},
        data_dir=workdir / "data",
        run_dir=workdir / "run",
    ) as started:
        yield started


def confluent_settings(broker: TlsBroker, pki: TlsMaterial, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca.cert),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": password,
    }


def values(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(10)]


def test_confluent_kafka(broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"sasl-ssl-confluent-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer(confluent_settings(broker, pki))
    for value in values("ck"):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    got = confluent_consume(confluent_settings(broker, pki), topic, 10, group_id="sasl-ssl")
    assert got == values("ck")


def test_wrong_password_is_refused(broker: TlsBroker, pki: TlsMaterial) -> None:
    errors: list[str] = []
    producer = confluent_kafka.Producer(
        {**confluent_settings(broker, pki, "wrong"), "error_cb": lambda e: errors.append(e.str())}
    )
    producer.produce("never", b"x")
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors
    assert failure_message("SCRAM-SHA-512") in errors[0]


def test_kafka_python(broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"sasl-ssl-kafka-python-{uuid.uuid4().hex[:6]}"
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca.cert),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    producer = kafka.KafkaProducer(enable_idempotence=False, **settings)
    try:
        for value in values("kp"):
            producer.send(topic, value).get(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = kafka.KafkaConsumer(group_id=None, **settings)
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    finally:
        consumer.close()
    assert got == values("kp")


def test_aiokafka(broker: TlsBroker, pki: TlsMaterial) -> None:
    topic = f"sasl-ssl-aiokafka-{uuid.uuid4().hex[:6]}"

    common: dict[str, Any] = {
        "bootstrap_servers": broker.address("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": aiokafka.helpers.create_ssl_context(cafile=str(pki.ca.cert)),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }
    assert aiokafka_round_trip(common, topic, values("ak")) == values("ak")


def test_store_file_is_private(broker: TlsBroker) -> None:
    assert (Path(broker.data_dir) / "tidelog-entity-configs.json").stat().st_mode & 0o777 == 0o600


def test_the_cli_wire_commands_log_in_over_tls(broker: TlsBroker, pki: TlsMaterial, tmp_path: Path) -> None:
    """``configs --entity-type`` and ``transactions`` speak the protocol through tidelog's own wire client:
    with a ``--command-config`` for SASL_SSL it does the TLS handshake and the SCRAM login itself."""
    from tests.cli.cli_support import failed, ok, tidelog_cli

    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.ca.location={pki.ca.cert}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
    )
    common = ["-b", broker.address("SASL_SSL"), "--command-config", str(properties)]
    client_id = f"cli-{uuid.uuid4().hex[:6]}"
    ok(
        tidelog_cli(
            "configs", "--entity-type", "clients", "--entity-name", client_id,
            "--alter", "--add-config", "producer_byte_rate=1048576", *common,
        )
    )  # fmt: skip
    described = ok(
        tidelog_cli("configs", "--entity-type", "clients", "--entity-name", client_id, "--describe", *common)
    )
    assert f"'{client_id}' are producer_byte_rate=1048576" in " ".join(described.split())

    transactional_id = f"cli-txn-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer(
        {**confluent_settings(broker, pki), "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(f"cli-txn-{uuid.uuid4().hex[:6]}", b"open")
    assert producer.flush(30) == 0
    try:
        listed = ok(tidelog_cli("transactions", "list", *common))
        assert transactional_id in listed
        assert "Ongoing" in listed
    finally:
        producer.abort_transaction(30)

    refused = failed(tidelog_cli("transactions", "list", *common, "-X", "linger.ms=5"), code=2)
    assert "not linger.ms" in refused
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(properties.read_text().replace(PASSWORD, "not-the-password"))
    assert "cannot log in" in failed(
        tidelog_cli("transactions", "list", "-b", broker.address("SASL_SSL"), "--command-config", str(wrong))
    )
