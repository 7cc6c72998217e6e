"""Golden bytes from real clients: kafka-python 3.0 and aiokafka 0.14 encoders.

Each request is built with the client's own protocol classes and encoded by the client; our codec
must decode it (checking a few field values) and re-encode it byte for byte. In the other
direction, responses we encode are decoded by kafka-python's decoders.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from aiokafka.protocol import fetch as ak_fetch
from aiokafka.protocol import group as ak_group
from aiokafka.protocol import metadata as ak_metadata
from aiokafka.protocol import produce as ak_produce
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.consumer import FetchRequest as KpFetchRequest
from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.consumer import JoinGroupRequest as KpJoinGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse

from tidelog.protocol.codec import (
    decode_request,
    decode_versioned,
    encode_request,
    encode_response,
    encode_versioned,
)
from tidelog.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    RequestHeader,
)

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated since Python 3.11.
pytestmark = pytest.mark.filterwarnings(r"ignore:\w+ is deprecated. Use files\(\) instead:DeprecationWarning")

TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def _record_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
        batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=b"value", headers=[("h", b"1")])
    builder.append(1, timestamp=1_700_000_000_001, key=None, value=b"second", headers=[])
    return bytes(builder.build())


BATCH = _record_batch()


def _kp_frame(request: Any, version: int, correlation_id: int = 17, client_id: str = "golden-kp") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    frame: bytes = request.encode(version=version, header=True, framed=True)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    return frame


def _ak_frame(request: Any, correlation_id: int = 23, client_id: str = "golden-ak") -> bytes:
    message = bytes(request.build_request_header(correlation_id=correlation_id, client_id=client_id).encode())
    message += bytes(request.encode())
    return struct.pack(">i", len(message)) + message


def _decode_and_reencode(frame: bytes, expected: type[Request], version: int) -> tuple[RequestHeader, Any]:
    header, body = decode_request(frame[4:])
    assert isinstance(body, expected)
    assert header.request_api_key == expected.API_KEY
    assert header.request_api_version == version
    assert encode_request(header, body) == frame
    return header, body


# -- kafka-python --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9, 10, 11])
def test_kafka_python_produce(version: int) -> None:
    request = KpProduceRequest(
        transactional_id="txn-1" if version >= 3 else None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            KpProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    KpProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=BATCH),
                    KpProduceRequest.TopicProduceData.PartitionProduceData(index=5, records=None),
                ],
            )
        ],
    )
    header, body = _decode_and_reencode(_kp_frame(request, version), ProduceRequest, version)
    assert header.correlation_id == 17
    assert header.client_id == "golden-kp"
    assert body.transactional_id == "txn-1"
    assert body.acks == -1
    assert body.timeout_ms == 30000
    [topic] = body.topic_data
    assert topic.name == "orders"
    assert [p.index for p in topic.partition_data] == [0, 5]
    assert bytes(topic.partition_data[0].records) == BATCH
    assert topic.partition_data[1].records is None


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_kafka_python_fetch(version: int) -> None:
    request = KpFetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=12,
        session_epoch=3,
        topics=[
            KpFetchRequest.FetchTopic(
                topic="orders",
                partitions=[
                    KpFetchRequest.FetchTopic.FetchPartition(
                        partition=2, current_leader_epoch=4, fetch_offset=1234, last_fetched_epoch=3,
                        log_start_offset=7, partition_max_bytes=1048576,
                    )
                ],
            )
        ],
        forgotten_topics_data=[KpFetchRequest.ForgottenTopic(topic="old", partitions=[1, 2])],
        rack_id="rack-a",
    )  # fmt: skip
    _, body = _decode_and_reencode(_kp_frame(request, version), FetchRequest, version)
    assert body.max_wait_ms == 500
    assert body.max_bytes == 52428800
    assert body.isolation_level == 1
    [topic] = body.topics
    [partition] = topic.partitions
    assert (topic.topic, partition.partition, partition.fetch_offset, partition.partition_max_bytes) == (
        "orders",
        2,
        1234,
        1048576,
    )
    if version >= 7:
        assert (body.session_id, body.session_epoch) == (12, 3)
        assert body.forgotten_topics_data[0].partitions == [1, 2]
    if version >= 9:
        assert partition.current_leader_epoch == 4
    if version >= 11:
        assert body.rack_id == "rack-a"
    if version >= 12:
        assert partition.last_fetched_epoch == 3


@pytest.mark.parametrize("version", [0, 1, 4, 5, 8, 9, 10, 12])
def test_kafka_python_metadata(version: int) -> None:
    topics = [
        KpMetadataRequest.MetadataRequestTopic(name="orders"),
        KpMetadataRequest.MetadataRequestTopic(name="b"),
    ]
    if version >= 10:
        topics[1] = KpMetadataRequest.MetadataRequestTopic(name="b", topic_id=TOPIC_ID)
    request = KpMetadataRequest(
        topics=topics,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=8 <= version <= 10,
        include_topic_authorized_operations=version >= 8,
    )
    _, body = _decode_and_reencode(_kp_frame(request, version), MetadataRequest, version)
    assert body.topics is not None
    assert [t.name for t in body.topics] == ["orders", "b"]
    if version >= 10:
        assert body.topics[1].topic_id == TOPIC_ID
    if version >= 4:
        assert body.allow_auto_topic_creation is False
    if version >= 8:
        assert body.include_topic_authorized_operations is True


def test_kafka_python_metadata_all_topics_is_a_null_array() -> None:
    _, body = _decode_and_reencode(_kp_frame(KpMetadataRequest(topics=None), 9), MetadataRequest, 9)
    assert body.topics is None


@pytest.mark.parametrize("version", [0, 1, 5, 6, 7])
def test_kafka_python_join_group(version: int) -> None:
    request = KpJoinGroupRequest(
        group_id="group-1",
        session_timeout_ms=10000,
        rebalance_timeout_ms=300000,
        member_id="",
        group_instance_id="static-1" if version >= 5 else None,
        protocol_type="consumer",
        protocols=[
            KpJoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01sub"),
            KpJoinGroupRequest.JoinGroupRequestProtocol(name="roundrobin", metadata=b""),
        ],
    )
    _, body = _decode_and_reencode(_kp_frame(request, version), JoinGroupRequest, version)
    assert body.group_id == "group-1"
    assert body.session_timeout_ms == 10000
    assert body.protocol_type == "consumer"
    assert [(p.name, p.metadata) for p in body.protocols] == [("range", b"\x00\x01sub"), ("roundrobin", b"")]
    if version >= 1:
        assert body.rebalance_timeout_ms == 300000
    if version >= 5:
        assert body.group_instance_id == "static-1"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_kafka_python_api_versions(version: int) -> None:
    request = KpApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0.12")
    _, body = _decode_and_reencode(_kp_frame(request, version), ApiVersionsRequest, version)
    if version >= 3:
        assert (body.client_software_name, body.client_software_version) == ("kafka-python", "3.0.12")


# -- aiokafka ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2, 3, 7])
def test_aiokafka_produce(version: int) -> None:
    cls = getattr(ak_produce, f"ProduceRequest_v{version}")
    topics = [("orders", [(1, BATCH), (4, BATCH)])]
    args = (None, 1, 5000, topics) if version >= 3 else (1, 5000, topics)
    header, body = _decode_and_reencode(_ak_frame(cls(*args)), ProduceRequest, version)
    assert header.client_id == "golden-ak"
    assert header.correlation_id == 23
    assert body.transactional_id is None
    assert body.acks == 1
    assert [p.index for p in body.topic_data[0].partition_data] == [1, 4]
    assert all(bytes(p.records) == BATCH for p in body.topic_data[0].partition_data)


@pytest.mark.parametrize("version", [1, 4, 7, 11])
def test_aiokafka_fetch(version: int) -> None:
    cls = getattr(ak_fetch, f"FetchRequest_v{version}")
    if version < 4:
        request = cls(-1, 100, 1, [("orders", [(0, 42, 1000)])])
    elif version < 7:
        request = cls(-1, 100, 1, 2000, 0, [("orders", [(0, 42, 1000)])])
    elif version < 9:  # fetch sessions (KIP-227), log start offset
        request = cls(-1, 100, 1, 2000, 0, 0, -1, [("orders", [(0, 42, -1, 1000)])], [])
    else:  # current leader epoch (KIP-320), rack id (KIP-392)
        request = cls(-1, 100, 1, 2000, 0, 0, -1, [("orders", [(0, -1, 42, -1, 1000)])], [], "")
    _, body = _decode_and_reencode(_ak_frame(request), FetchRequest, version)
    [partition] = body.topics[0].partitions
    assert partition.fetch_offset == 42
    assert partition.partition_max_bytes == 1000
    assert body.max_wait_ms == 100


@pytest.mark.parametrize("version", [0, 1, 5])
def test_aiokafka_metadata(version: int) -> None:
    cls = getattr(ak_metadata, f"MetadataRequest_v{version}")
    request = cls(["orders", "x"]) if version < 4 else cls(["orders", "x"], True)
    _, body = _decode_and_reencode(_ak_frame(request), MetadataRequest, version)
    assert body.topics is not None
    assert [t.name for t in body.topics] == ["orders", "x"]


@pytest.mark.parametrize("version", [0, 1, 5])
def test_aiokafka_join_group(version: int) -> None:
    cls = getattr(ak_group, f"JoinGroupRequest_v{version}")
    protocols = [("roundrobin", b"\x00\x00meta")]
    if version == 0:
        request = cls("g", 10000, "", "consumer", protocols)
    elif version < 5:
        request = cls("g", 10000, 60000, "", "consumer", protocols)
    else:
        request = cls("g", 10000, 60000, "member-1", None, "consumer", protocols)
    _, body = _decode_and_reencode(_ak_frame(request), JoinGroupRequest, version)
    assert body.group_id == "g"
    assert body.protocols[0].metadata == b"\x00\x00meta"


# -- our responses, decoded by kafka-python ------------------------------------------------------


def _our_response(api_key: int, version: int, body: Any) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=99)
    [frame] = encode_response(header, body)
    assert isinstance(frame, bytes)
    return frame


@pytest.mark.parametrize("version", [0, 5, 9, 12])
def test_kafka_python_decodes_our_metadata_response(version: int) -> None:
    response = MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack="r1")],
        cluster_id="tidelog",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name="orders",
                topic_id=TOPIC_ID,
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=p, leader_id=1, leader_epoch=3, replica_nodes=[1], isr_nodes=[1]
                    )
                    for p in range(3)
                ],
            )
        ],
    )
    frame = _our_response(3, version, response)
    decoded = KpMetadataResponse.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 99
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(1, "127.0.0.1", 9092)]
    [topic] = decoded.topics
    assert topic.name == "orders"
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    assert topic.partitions[2].isr_nodes == [1]
    if version >= 2:
        assert decoded.cluster_id == "tidelog"
    if version >= 10:
        assert topic.topic_id == TOPIC_ID


@pytest.mark.parametrize("version", [3, 7, 9])
def test_kafka_python_decodes_our_produce_response(version: int) -> None:
    response = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="orders",
                partition_responses=[ProduceResponse.PartitionProduceResponse(index=0, base_offset=1000)],
            )
        ],
        throttle_time_ms=5,
    )
    decoded = KpProduceResponse.decode(
        _our_response(0, version, response), version=version, header=True, framed=True
    )
    [partition] = decoded.responses[0].partition_responses
    assert (partition.index, partition.error_code, partition.base_offset) == (0, 0, 1000)
    assert decoded.throttle_time_ms == 5


@pytest.mark.parametrize("version", [4, 11, 12])
def test_kafka_python_decodes_our_fetch_response(version: int) -> None:
    response = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="orders",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=2,
                        last_stable_offset=2,
                        log_start_offset=0,
                        records=BATCH,
                    )
                ],
            )
        ]
    )
    decoded = KpFetchResponse.decode(
        _our_response(1, version, response), version=version, header=True, framed=True
    )
    [partition] = decoded.responses[0].partitions
    assert partition.high_watermark == 2
    assert bytes(partition.records) == BATCH


@pytest.mark.parametrize("version", [0, 3])
def test_kafka_python_decodes_our_api_versions_response(version: int) -> None:
    response = ApiVersionsResponse(
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=0, min_version=0, max_version=9),
            ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4),
        ]
    )
    decoded = KpApiVersionsResponse.decode(
        _our_response(18, version, response), version=version, header=True, framed=True
    )
    assert decoded.error_code == 0
    assert [(k.api_key, k.max_version) for k in decoded.api_keys] == [(0, 9), (18, 4)]


def test_aiokafka_consumer_protocol_metadata_and_assignment() -> None:
    metadata = ConsumerProtocolMemberMetadata(0, ["orders", "payments"], b"ud").encode()
    version, subscription = decode_versioned(ConsumerProtocolSubscription, metadata)
    assert version == 0
    assert subscription.topics == ["orders", "payments"]
    assert subscription.user_data == b"ud"
    assert encode_versioned(subscription, 0) == metadata
    assignment_bytes = ConsumerProtocolMemberAssignment(0, [("orders", [0, 2])], b"").encode()
    version, assignment = decode_versioned(ConsumerProtocolAssignment, assignment_bytes)
    assert version == 0
    assert [(t.topic, t.partitions) for t in assignment.assigned_partitions] == [("orders", [0, 2])]
    assert encode_versioned(assignment, 0) == assignment_bytes
