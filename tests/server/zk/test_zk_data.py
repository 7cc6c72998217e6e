"""The znode JSON codecs (tidelog.server.zk.zk_data) against the bytes Kafka 3.3 writes, round trips, and
refusals of anything else; the znode paths and connect-string parsing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.protocol import TopicPartition
from tidelog.server.zk import paths, zk_data
from tidelog.server.zk.session import parse_connect_string
from tidelog.server.zk.zk_data import (
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    ZkDataError,
)


def _json(data: bytes) -> Any:
    return json.loads(data)


# ---- /brokers/ids/N ---------------------------------------------------------------------------------

KAFKA_BROKER_V5 = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
    b'"endpoints":["PLAINTEXT://kafka1:9092","SSL://kafka1:9093"],"rack":"dc1","jmx_port":9999,'
    b'"port":9092,"host":"kafka1","version":5,"timestamp":"1700000000000"}'
)


def test_broker_registration_reads_what_kafka_writes() -> None:
    registration = zk_data.decode_broker_registration(1, KAFKA_BROKER_V5)
    assert registration == BrokerRegistration(
        broker_id=1,
        endpoints=(
            Endpoint("PLAINTEXT", "kafka1", 9092, "PLAINTEXT"),
            Endpoint("SSL", "kafka1", 9093, "SSL"),
        ),
        timestamp_ms=1700000000000,
        rack="dc1",
        jmx_port=9999,
        features={},
        version=5,
    )
    assert _json(zk_data.encode_broker_registration(registration)) == _json(KAFKA_BROKER_V5)


def test_broker_registration_is_compact_json_with_kafkas_keys() -> None:
    registration = BrokerRegistration(
        broker_id=2,
        endpoints=(
            Endpoint("CLIENT", "10.0.0.2", 9092, "PLAINTEXT"),
            Endpoint("REPLICATION", None, 9093, "SSL"),
        ),
        timestamp_ms=5,
        features={"metadata.version": (1, 7)},
    )
    assert zk_data.encode_broker_registration(registration) == (
        b'{"features":{"metadata.version":{"min_version":1,"max_version":7}},'
        b'"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"SSL"},'
        b'"endpoints":["CLIENT://10.0.0.2:9092","REPLICATION://:9093"],"jmx_port":-1,"port":9092,'
        b'"host":"10.0.0.2","version":5,"timestamp":"5"}'
    )
    assert (
        zk_data.decode_broker_registration(2, zk_data.encode_broker_registration(registration))
        == registration
    )


def test_broker_registration_without_plaintext_has_no_top_level_address() -> None:
    registration = BrokerRegistration(3, (Endpoint("SSL", "::1", 9093, "SSL"),), timestamp_ms=1)
    body = _json(zk_data.encode_broker_registration(registration))
    assert (body["host"], body["port"], body["endpoints"]) == (None, -1, ["SSL://[::1]:9093"])
    assert (
        zk_data.decode_broker_registration(3, zk_data.encode_broker_registration(registration))
        == registration
    )


def test_older_broker_registrations_are_read() -> None:
    v1 = b'{"version":1,"host":"h","port":9092,"jmx_port":-1,"timestamp":"7"}'
    assert zk_data.decode_broker_registration(4, v1).endpoints == (
        Endpoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),
    )
    v2 = b'{"version":2,"host":"h","port":9092,"jmx_port":-1,"timestamp":"7","endpoints":["SSL://h:9093"]}'
    assert zk_data.decode_broker_registration(4, v2).endpoints == (Endpoint("SSL", "h", 9093, "SSL"),)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"endpoints":[]}', "'version' is not an integer"),
        (
            b'{"version":5,"endpoints":["nonsense"],"listener_security_protocol_map":{}}',
            "unparsable endpoint",
        ),
        (
            b'{"version":5,"endpoints":["X://h:1"],"listener_security_protocol_map":{}}',
            "no security protocol",
        ),
        (b'{"version":5,"endpoints":"PLAINTEXT://h:1"}', "'endpoints' is not a list"),
    ],
)
def test_broker_registration_refuses_what_kafka_does_not_write(data: bytes, message: str) -> None:
    with pytest.raises(ZkDataError, match=message):
        zk_data.decode_broker_registration(1, data)


# ---- /controller, /controller_epoch -----------------------------------------------------------------


def test_controller_and_epoch_bytes() -> None:
    assert zk_data.encode_controller(ControllerRegistration(1, 1700000000000)) == (
        b'{"version":1,"brokerid":1,"timestamp":"1700000000000"}'
    )
    # Kafka 3.4+ writes version 2 with the KRaft migration's epoch: still read.
    assert zk_data.decode_controller(
        b'{"version":2,"brokerid":3,"timestamp":"9","kraftControllerEpoch":-1}'
    ) == ControllerRegistration(3, 9)
    assert zk_data.encode_controller_epoch(12) == b"12"
    assert zk_data.decode_controller_epoch(b"12") == 12
    with pytest.raises(ZkDataError, match="not an integer"):
        zk_data.decode_controller_epoch(b"twelve")


# ---- /brokers/topics/T ------------------------------------------------------------------------------


def test_topic_assignment_reads_what_kafka_writes() -> None:
    topic_id = uuid.UUID("0b2c6a66-5d09-4f43-a3f6-7d9c2b0c1e55")
    data = (
        b'{"removing_replicas":{},"partitions":{"1":[2,3,1],"0":[1,2,3]},"topic_id":"'
        + zk_data.kafka_uuid_string(topic_id).encode()
        + b'","adding_replicas":{"1":[3]},"version":3}'
    )
    assignment = zk_data.decode_topic_assignment("orders", data)
    assert assignment == TopicAssignment(
        "orders",
        topic_id,
        {0: ReplicaAssignment((1, 2, 3)), 1: ReplicaAssignment((2, 3, 1), adding_replicas=(3,))},
    )
    assert list(assignment.partitions) == [0, 1]
    assert zk_data.encode_topic_assignment(assignment) == (
        b'{"version":3,"partitions":{"0":[1,2,3],"1":[2,3,1]},"adding_replicas":{"1":[3]},'
        b'"removing_replicas":{},"topic_id":"' + zk_data.kafka_uuid_string(topic_id).encode() + b'"}'
    )


def test_topic_id_is_kafkas_base64_uuid() -> None:
    topic_id = uuid.UUID(bytes=bytes(range(16)))
    assert zk_data.kafka_uuid_string(topic_id) == "AAECAwQFBgcICQoLDA0ODw"
    assert zk_data.kafka_uuid_from_string("AAECAwQFBgcICQoLDA0ODw") == topic_id
    with pytest.raises(ZkDataError, match="16 bytes"):
        zk_data.kafka_uuid_from_string("AAEC")


def test_topic_assignment_without_topic_id() -> None:
    data = zk_data.encode_topic_assignment(TopicAssignment("t", None, {0: ReplicaAssignment((1,))}))
    assert "topic_id" not in _json(data)
    assert zk_data.decode_topic_assignment("t", data).topic_id is None
    with pytest.raises(ZkDataError, match="partition 'x' is not a number"):
        zk_data.decode_topic_assignment("t", b'{"version":3,"partitions":{"x":[1]}}')


# ---- /brokers/topics/T/partitions/P/state -----------------------------------------------------------


def test_partition_state_bytes_and_its_epoch_from_the_znode_version() -> None:
    state = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2, partition_epoch=9)
    data = zk_data.encode_leader_and_isr(state)
    assert data == b'{"version":1,"leader":1,"leader_epoch":4,"controller_epoch":2,"isr":[1,2,3]}'
    assert zk_data.decode_leader_and_isr(data, 9) == state
    recovering = LeaderAndIsr(2, 5, (2,), 3, 0, leader_recovery_state=zk_data.RECOVERING)
    assert _json(zk_data.encode_leader_and_isr(recovering))["leader_recovery_state"] == 1
    assert zk_data.decode_leader_and_isr(zk_data.encode_leader_and_isr(recovering), 0) == recovering


def test_leader_changes_raise_the_leader_epoch_isr_changes_do_not() -> None:
    state = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2, partition_epoch=9)
    assert state.new_leader_and_isr(2, [2, 3]) == LeaderAndIsr(2, 5, (2, 3), 2, 9)
    assert state.with_isr([1, 2]) == LeaderAndIsr(1, 4, (1, 2), 2, 9)
    assert not LeaderAndIsr(zk_data.NO_LEADER, 5, (3,), 2).has_leader


# ---- /latest_producer_id_block ----------------------------------------------------------------------


def test_producer_id_block_bytes() -> None:
    block = ProducerIdBlock(broker_id=1, first_producer_id=1000)
    assert (block.last_producer_id, block.next_block_first_id) == (1999, 2000)
    data = zk_data.encode_producer_id_block(block)
    assert data == b'{"version":1,"broker":1,"block_start":"1000","block_end":"1999"}'
    assert zk_data.decode_producer_id_block(data) == block
    with pytest.raises(ZkDataError, match="below block_start"):
        zk_data.decode_producer_id_block(b'{"version":1,"broker":1,"block_start":"10","block_end":"9"}')


# ---- configs, notifications, cluster id -------------------------------------------------------------


def test_entity_config_and_change_notifications() -> None:
    data = zk_data.encode_entity_config({"retention.ms": "1000", "cleanup.policy": "compact"})
    assert data == b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}'
    assert zk_data.decode_entity_config(data) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert zk_data.decode_entity_config(b"") == {}
    assert zk_data.encode_config_change_notification("topics/orders") == (
        b'{"version":2,"entity_path":"topics/orders"}'
    )
    assert zk_data.decode_config_change_notification(b'{"version":2,"entity_path":"brokers/<default>"}') == (
        "brokers/<default>"
    )
    assert zk_data.decode_config_change_notification(
        b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    ) == ("topics/t")


def test_isr_change_notification_and_cluster_id() -> None:
    partitions = [TopicPartition("b", 1), TopicPartition("a", 0), TopicPartition("a", 0)]
    data = zk_data.encode_isr_change_notification(partitions)
    assert data == b'{"version":1,"partitions":[{"topic":"a","partition":0},{"topic":"b","partition":1}]}'
    assert zk_data.decode_isr_change_notification(data) == {TopicPartition("a", 0), TopicPartition("b", 1)}
    assert zk_data.encode_cluster_id("Q1w2e3") == b'{"version":"1","id":"Q1w2e3"}'
    assert zk_data.decode_cluster_id(b'{"version":"1","id":"Q1w2e3"}') == "Q1w2e3"


@pytest.mark.parametrize(
    "decode",
    [
        lambda d: zk_data.decode_broker_registration(1, d),
        zk_data.decode_controller,
        lambda d: zk_data.decode_topic_assignment("t", d),
        lambda d: zk_data.decode_leader_and_isr(d, 0),
        zk_data.decode_producer_id_block,
        zk_data.decode_entity_config,
        zk_data.decode_config_change_notification,
        zk_data.decode_isr_change_notification,
        zk_data.decode_cluster_id,
    ],
)
@pytest.mark.parametrize(
    "data", [b"\xff\xfe", b"{", b"null", b'{"version":"x","leader":true,"partitions":7,"config":7}']
)
def test_every_decoder_refuses_garbage_with_zk_data_error(
    decode: Callable[[bytes], object], data: bytes
) -> None:
    with pytest.raises(ZkDataError):
        decode(data)


# ---- round trips --------------------------------------------------------------------------------------

_ids = st.integers(min_value=0, max_value=2**31 - 1)


@given(
    leader=st.integers(min_value=-1, max_value=2**31 - 1),
    leader_epoch=_ids,
    isr=st.lists(_ids, max_size=5),
    controller_epoch=_ids,
    partition_epoch=_ids,
    recovery=st.sampled_from([zk_data.RECOVERED, zk_data.RECOVERING]),
)
def test_partition_state_round_trips(
    leader: int, leader_epoch: int, isr: list[int], controller_epoch: int, partition_epoch: int, recovery: int
) -> None:
    state = LeaderAndIsr(leader, leader_epoch, tuple(isr), controller_epoch, partition_epoch, recovery)
    assert zk_data.decode_leader_and_isr(zk_data.encode_leader_and_isr(state), partition_epoch) == state


@given(
    topic_id=st.none() | st.uuids(),
    partitions=st.dictionaries(
        st.integers(min_value=0, max_value=1000),
        st.tuples(
            st.lists(_ids, min_size=1, max_size=4), st.lists(_ids, max_size=2), st.lists(_ids, max_size=2)
        ),
        max_size=8,
    ),
)
def test_topic_assignment_round_trips(
    topic_id: uuid.UUID | None, partitions: dict[int, tuple[list[int], list[int], list[int]]]
) -> None:
    assignment = TopicAssignment(
        "t",
        topic_id,
        {p: ReplicaAssignment(tuple(r), tuple(a), tuple(x)) for p, (r, a, x) in sorted(partitions.items())},
    )
    assert zk_data.decode_topic_assignment("t", zk_data.encode_topic_assignment(assignment)) == assignment


@given(
    broker_id=_ids,
    hosts=st.lists(st.sampled_from(["h", "10.1.2.3", "::1", "fe80::1%eth0", None]), min_size=1, max_size=3),
    rack=st.none() | st.text(min_size=1, max_size=10),
    timestamp=st.integers(min_value=0, max_value=2**62),
)
def test_broker_registration_round_trips(
    broker_id: int, hosts: list[str | None], rack: str | None, timestamp: int
) -> None:
    endpoints = tuple(Endpoint(f"L{i}", host, 9092 + i, "SASL_SSL") for i, host in enumerate(hosts))
    registration = BrokerRegistration(broker_id, endpoints, timestamp, rack=rack)
    assert zk_data.decode_broker_registration(
        broker_id, zk_data.encode_broker_registration(registration)
    ) == (registration)


# ---- paths and connect strings ------------------------------------------------------------------------


def test_paths_are_kafkas() -> None:
    tp = TopicPartition("orders", 3)
    assert paths.partition_state_path(tp) == "/brokers/topics/orders/partitions/3/state"
    assert paths.broker_path(7) == "/brokers/ids/7"
    assert paths.config_entity_path("brokers", "<default>") == "/config/brokers/<default>"
    assert paths.delete_topic_path("orders") == "/admin/delete_topics/orders"
    assert paths.sequence_number("/config/changes/config_change_0000000012", paths.CONFIG_CHANGE_PREFIX) == (
        "0000000012"
    )
    assert "/config/topics" in paths.PERSISTENT_PATHS
    with pytest.raises(ValueError, match="not a isr_change_N"):
        paths.sequence_number("config_change_1", paths.ISR_CHANGE_PREFIX)


@pytest.mark.parametrize(
    ("connect", "expected"),
    [
        ("127.0.0.1:2181", ("127.0.0.1:2181", None)),
        ("a:1,b:2/kafka", ("a:1,b:2", "/kafka")),
        ("a:1/kafka/prod/", ("a:1", "/kafka/prod")),
        ("a:1/", ("a:1", None)),
    ],
)
def test_connect_strings(connect: str, expected: tuple[str, str | None]) -> None:
    assert parse_connect_string(connect) == expected


def test_bad_connect_strings() -> None:
    with pytest.raises(ValueError, match="no ZooKeeper host"):
        parse_connect_string("/kafka")
    with pytest.raises(ValueError, match="bad chroot"):
        parse_connect_string("a:1/x//y")
