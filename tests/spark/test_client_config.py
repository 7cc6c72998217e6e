"""kafka.* options as Spark users write them (Java client keys) -> librdkafka settings (pure: no client)."""

from __future__ import annotations

import pytest

from tidelog.spark.client_config import TranslationError, parse_jaas, translate
from tidelog.spark.options import OptionError, parse_reader_options, parse_writer_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
PLAIN = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3\\"cret";'
)
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required username=bob password=pw;"


def test_jaas_plain_becomes_sasl_username_password_and_mechanism() -> None:
    out = translate({"sasl.jaas.config": PLAIN, "security.protocol": "SASL_SSL"}, producer=False)
    assert out.config == {
        "security.protocol": "SASL_SSL",
        "sasl.username": "alice",
        "sasl.password": 's3"cret',
        "sasl.mechanism": "PLAIN",
    }
    assert out.warnings == []


def test_jaas_scram_needs_the_mechanism_as_in_java() -> None:
    out = translate({"sasl.jaas.config": SCRAM, "sasl.mechanism": "SCRAM-SHA-512"}, producer=True)
    assert out.config == {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": "pw"}
    with pytest.raises(TranslationError, match=r"kafka\.sasl\.mechanism to SCRAM-SHA-256 or SCRAM-SHA-512"):
        translate({"sasl.jaas.config": SCRAM}, producer=True)


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;", "Krb5LoginModule is not"),
        ("org.apache.kafka.common.security.plain.PlainLoginModule required username=x;", "needs password"),
        ("not jaas at all", "is not a JAAS entry"),
    ],
)
def test_unsupported_jaas_names_the_option(jaas: str, message: str) -> None:
    with pytest.raises(TranslationError, match=message) as info:
        translate({"sasl.jaas.config": jaas}, producer=False)
    assert "kafka.sasl.jaas.config" in str(info.value)


def test_parse_jaas_reads_quoted_and_bare_values() -> None:
    assert parse_jaas('M required a="x y" b=z c="q\\\\";') == ("M", {"a": "x y", "b": "z", "c": "q\\"})


def test_pem_stores_become_librdkafka_locations() -> None:
    out = translate(
        {
            "ssl.truststore.location": "/ca.pem",
            "ssl.truststore.type": "PEM",
            "ssl.keystore.location": "/client.pem",
            "ssl.keystore.type": "PEM",
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "",
        },
        producer=False,
    )
    assert out.config == {
        "ssl.endpoint.identification.algorithm": "none",
        "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/client.pem",
        "ssl.key.location": "/client.pem",
        "ssl.key.password": "kp",
    }


def test_store_type_is_sniffed_when_not_given() -> None:
    files = {"/ca.crt": b"-----BEGIN CERTIFICATE-----\n", "/ks.p12": b"\x30\x82\x0a", "/ks.jks": b"\xfe\xed"}
    out = translate(
        {
            "ssl.truststore.location": "/ca.crt",
            "ssl.keystore.location": "/ks.p12",
            "ssl.keystore.password": "p",
        },
        producer=False,
        sniff=files.get,
    )
    assert out.config == {
        "ssl.ca.location": "/ca.crt",
        "ssl.keystore.location": "/ks.p12",
        "ssl.keystore.password": "p",
    }
    with pytest.raises(TranslationError, match=r"kafka\.ssl\.keystore\.location is a JKS keystore"):
        translate({"ssl.keystore.location": "/ks.jks"}, producer=False, sniff=files.get)


@pytest.mark.parametrize("kind", ["JKS", "PKCS12"])
def test_binary_truststores_are_a_clear_error(kind: str) -> None:
    with pytest.raises(TranslationError, match=rf"kafka\.ssl\.truststore\.location is a {kind} truststore"):
        translate({"ssl.truststore.location": "/t", "ssl.truststore.type": kind}, producer=False)


def test_renamed_partitioner_and_java_only_keys() -> None:
    out = translate(
        {
            "fetch.max.wait.ms": "100",
            "buffer.memory": "33554432",
            "max.poll.records": "500",
            "partitioner.class": "org.apache.kafka.clients.producer.internals.DefaultPartitioner",
            "max.block.ms": "1000",
            "acks": "all",
        },
        producer=True,
    )
    assert out.config == {
        "fetch.wait.max.ms": "100",
        "queue.buffering.max.kbytes": "32768",
        "partitioner": "murmur2_random",
        "acks": "all",
    }
    assert out.max_poll_records == 500
    assert out.warnings == ["option kafka.max.block.ms has no librdkafka equivalent and is ignored"]
    with pytest.raises(TranslationError, match=r"kafka\.partitioner\.class=com\.acme\.Mine"):
        translate({"partitioner.class": "com.acme.Mine"}, producer=True)


def test_reader_keeps_what_it_needs_and_warns_by_name() -> None:
    options = parse_reader_options(
        {**BASE, "subscribe": "t", "kafka.enable.partition.eof": "false", "kafka.max.poll.records": "7"},
        streaming=True,
    )
    assert options.warnings == ("option kafka.enable.partition.eof is ignored: the tidelog source sets it",)
    assert options.consumer_config()["enable.partition.eof"] is True
    assert options.max_poll_records == 7
    with pytest.raises(OptionError, match=r"kafka\.ssl\.truststore\.location is a JKS truststore"):
        parse_reader_options(
            {**BASE, "subscribe": "t", "kafka.ssl.truststore.location": "/nonexistent.jks"}, streaming=True
        )


def test_group_ids_follow_spark() -> None:
    a = parse_reader_options({**BASE, "subscribe": "t"}, streaming=True)
    b = parse_reader_options({**BASE, "subscribe": "t"}, streaming=True)
    assert a.group_id.startswith("spark-kafka-source-")
    assert a.group_id != b.group_id  # one per reader
    assert a.consumer_config("driver")["group.id"] == f"{a.group_id}-driver-0"
    assert a.consumer_config("executor")["group.id"] == f"{a.group_id}-executor"
    batch = parse_reader_options({**BASE, "subscribe": "t", "groupIdPrefix": "etl"}, streaming=False)
    assert batch.group_id.startswith("etl-")
    given = parse_reader_options(
        {**BASE, "subscribe": "t", "groupIdPrefix": "etl", "kafka.group.id": "authorized"}, streaming=True
    )
    assert given.consumer_config("driver")["group.id"] == "authorized"
    assert given.consumer_config("executor")["group.id"] == "authorized"


def test_fetch_offset_retries_follow_spark() -> None:
    default = parse_reader_options({**BASE, "subscribe": "t"}, streaming=True)
    assert (default.fetch_offset_retries, default.fetch_offset_retry_interval_ms) == (3, 10)
    set_ = parse_reader_options(
        {**BASE, "subscribe": "t", "fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "250"},
        streaming=True,
    )
    assert (set_.fetch_offset_retries, set_.fetch_offset_retry_interval_ms) == (5, 250)
    with pytest.raises(OptionError, match=r"fetchOffset\.numRetries"):
        parse_reader_options({**BASE, "subscribe": "t", "fetchOffset.numRetries": "-1"}, streaming=True)


def test_sink_is_murmur2_and_idempotent_like_the_java_client() -> None:
    config = parse_writer_options({**BASE, "topic": "t"}).producer_config()
    assert config["partitioner"] == "murmur2_random"
    assert config["enable.idempotence"] is True
    # a conflicting acks without an explicit idempotence turns it off, as in the Java client
    assert "enable.idempotence" not in parse_writer_options({**BASE, "kafka.acks": "1"}).producer_config()
    off = parse_writer_options({**BASE, "kafka.enable.idempotence": "false"}).producer_config()
    assert off["enable.idempotence"] == "false"


def test_sink_drops_a_users_group_id() -> None:
    """The exactly-once sink's progress groups are its own: kafka.group.id never replaces them."""
    options = parse_writer_options({**BASE, "kafka.group.id": "mine", "deliveryGuarantee": "exactly-once"})
    assert "group.id" not in options.client_config
    assert "group.id" not in options.producer_config()
