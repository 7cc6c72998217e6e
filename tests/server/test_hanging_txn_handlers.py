"""DescribeProducers (61) and WriteTxnMarkers (27), the broker side of the hanging-transaction tools
(KIP-664), in-process: every request and response goes through the codec and the dispatcher's route.

- The wire layout of both APIs is pinned with golden bytes built field by field.
- ApiVersions advertises DescribeProducers 0 and WriteTxnMarkers 0-1.
- DescribeProducers answers each requested partition in request order: its producers by producer id,
  exactly as the log's producer state holds them (an idempotent producer, and a transactional one whose
  transaction no coordinator knows: a hanging transaction), or UNKNOWN_TOPIC_OR_PARTITION.
- An ABORT marker for the hanging producer ends its transaction: the last stable offset moves from the
  transaction's first offset to the high watermark, the ``.txnindex`` has it, the producer shows no open
  transaction and the marker's coordinator epoch.
- Kafka's validation, per partition: an older producer epoch is INVALID_PRODUCER_EPOCH, an older
  coordinator epoch TRANSACTION_COORDINATOR_FENCED (nothing written either way), an unknown partition
  UNKNOWN_TOPIC_OR_PARTITION; a marker for a producer with no open transaction is written and ends nothing.
- On ``__consumer_offsets`` the marker takes the coordinator's own path: an ABORT drops the producer's
  pending transactional offsets.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

from tests.server.inprocess import make_broker, running

from tidelog.protocol.codec import decode_request, decode_response, encode_request, encode_response
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    ApiKey,
    DescribeProducersRequest,
    DescribeProducersResponse,
    InitProducerIdRequest,
    OffsetFetchRequest,
    RequestHeader,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.protocol.schema import Request
from tidelog.server.broker import Broker
from tidelog.server.dispatch import RequestContext

IDEMPOTENT_PID = 7
HANGING_PID = 9
HANGING_EPOCH = 2

_Producer = DescribeProducersResponse.ProducerState
_Marker = WriteTxnMarkersRequest.WritableTxnMarker
_MarkerTopic = WriteTxnMarkersRequest.WritableTxnMarkerTopic


def call(broker: Broker, body: Request, version: int) -> Any:
    """``body`` encoded at ``version``, decoded, routed as the dispatcher routes it, and the answer encoded
    and decoded back."""
    header = RequestHeader(
        request_api_key=body.API_KEY, request_api_version=version, correlation_id=3, client_id="test"
    )
    decoded_header, decoded = decode_request(encode_request(header, body)[4:])
    route = broker.dispatcher.route_for(body.API_KEY, version)
    assert route is not None
    ctx = RequestContext(
        api_key=body.API_KEY,
        api_version=version,
        correlation_id=3,
        client_id="test",
        client_host="127.0.0.1",
        connection_id=1,
    )
    answer = route.handler(ctx, decoded)
    frame = b"".join(bytes(chunk) for chunk in encode_response(decoded_header, answer))
    return decode_response(frame[4:], body.API_KEY, version)[1]


def append(
    broker: Broker, pid: int, epoch: int, sequence: int, values: list[bytes], *, txn: bool, ts: int
) -> int:
    """A producer's batch appended as the produce path appends it (minus KIP-890 verification: this is
    how a transaction no coordinator knows gets into a log); returns its first offset."""
    batch = encode_batch(
        [SimpleRecord(value=v, timestamp=ts) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=txn,
    )
    error, info, message = broker.replicas.append("t", 0, batch, now_ms=ts)
    assert error == ErrorCode.NONE, message
    return int(info.first_offset)


def with_hanging_transaction(broker: Broker) -> None:
    """Offsets 0-1 idempotent, 2-4 the hanging transaction, 5 idempotent: high watermark 6, LSO 2."""
    assert append(broker, IDEMPOTENT_PID, 0, 0, [b"a", b"b"], txn=False, ts=1000) == 0
    assert append(broker, HANGING_PID, HANGING_EPOCH, 0, [b"x", b"y", b"z"], txn=True, ts=2000) == 2
    assert append(broker, IDEMPOTENT_PID, 0, 2, [b"c"], txn=False, ts=3000) == 5
    partition = broker.replicas.get("t", 0)
    assert partition is not None
    assert (partition.last_stable_offset, partition.high_watermark) == (2, 6)


def marker(
    pid: int, epoch: int, coordinator_epoch: int, partitions: dict[str, list[int]], *, commit: bool = False
) -> Any:
    return _Marker(
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=commit,
        topics=[_MarkerTopic(name=name, partition_indexes=indexes) for name, indexes in partitions.items()],
        coordinator_epoch=coordinator_epoch,
    )


def write_markers(broker: Broker, *markers: Any, version: int = 1) -> list[list[tuple[str, int, int]]]:
    """Per marker: (topic, partition, error code) in answer order; each result names its producer id."""
    response = call(broker, WriteTxnMarkersRequest(markers=list(markers)), version)
    assert [r.producer_id for r in response.markers] == [m.producer_id for m in markers]
    return [
        [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions]
        for r in response.markers
    ]


def producers(broker: Broker) -> list[Any]:
    request = DescribeProducersRequest(
        topics=[DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[0])]
    )
    (topic,) = call(broker, request, 0).topics
    (partition,) = topic.partitions
    assert partition.error_code == ErrorCode.NONE
    return list(partition.active_producers)


def test_wire_layout_of_both_apis() -> None:
    request = WriteTxnMarkersRequest(markers=[marker(HANGING_PID, HANGING_EPOCH, 4, {"t": [0]})])
    header = RequestHeader(
        request_api_key=ApiKey.WRITE_TXN_MARKERS, request_api_version=0, correlation_id=3, client_id="c"
    )
    body = (
        struct.pack(">i", 1)  # markers: one
        + struct.pack(">q", HANGING_PID)  # producer id
        + struct.pack(">h", HANGING_EPOCH)  # producer epoch
        + b"\x00"  # transaction result: false = ABORT
        + struct.pack(">i", 1)  # topics: one
        + struct.pack(">h", 1)
        + b"t"  # name
        + struct.pack(">ii", 1, 0)  # partition indexes: [0]
        + struct.pack(">i", 4)  # coordinator epoch
    )
    head = struct.pack(">hhih", ApiKey.WRITE_TXN_MARKERS, 0, 3, 1) + b"c"
    frame = encode_request(header, request)
    assert frame == struct.pack(">i", len(head) + len(body)) + head + body
    assert decode_request(frame[4:])[1] == request

    answer = DescribeProducersResponse(
        topics=[
            DescribeProducersResponse.TopicResponse(
                name="t",
                partitions=[
                    DescribeProducersResponse.PartitionResponse(
                        partition_index=0,
                        active_producers=[
                            _Producer(
                                producer_id=9,
                                producer_epoch=2,
                                last_sequence=1,
                                last_timestamp=5,
                                coordinator_epoch=-1,
                                current_txn_start_offset=2,
                            )
                        ],
                    )
                ],
            )
        ]
    )
    expected = (
        struct.pack(">i", 3)  # correlation id
        + b"\x00"  # response header v1: no tagged fields
        + struct.pack(">i", 0)  # throttle time
        + b"\x02"  # topics: compact array of one
        + b"\x02t"  # name: compact string
        + b"\x02"  # partitions: one
        + struct.pack(">ih", 0, 0)  # partition index, error code
        + b"\x00"  # error message: null
        + b"\x02"  # active producers: one
        + struct.pack(">qiiqiq", 9, 2, 1, 5, -1, 2)  # id, epoch, last sequence, timestamp, coord epoch, start
        + b"\x00\x00\x00\x00"  # tagged fields of the producer, partition, topic and body
    )
    request_header = RequestHeader(
        request_api_key=ApiKey.DESCRIBE_PRODUCERS, request_api_version=0, correlation_id=3, client_id="c"
    )
    frame = b"".join(bytes(chunk) for chunk in encode_response(request_header, answer))
    assert frame == struct.pack(">i", len(expected)) + expected
    assert decode_response(frame[4:], ApiKey.DESCRIBE_PRODUCERS, 0)[1] == answer


def test_api_versions_advertise_both(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        assert broker.dispatcher.supported(ApiKey.DESCRIBE_PRODUCERS) == (0, 0)
        assert broker.dispatcher.supported(ApiKey.WRITE_TXN_MARKERS) == (0, 1)
        advertised = {
            k.api_key: (k.min_version, k.max_version) for k in broker.dispatcher.api_versions().api_keys
        }
        assert advertised[ApiKey.DESCRIBE_PRODUCERS] == (0, 0)
        assert advertised[ApiKey.WRITE_TXN_MARKERS] == (0, 1)
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


def test_describe_producers(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        with_hanging_transaction(broker)
        request = DescribeProducersRequest(
            topics=[
                DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[3, 0]),
                DescribeProducersRequest.TopicRequest(name="nope", partition_indexes=[0]),
            ]
        )
        unknown = {
            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            "error_message": "This server does not host this topic-partition.",
        }
        assert call(broker, request, 0) == DescribeProducersResponse(
            topics=[
                DescribeProducersResponse.TopicResponse(
                    name="t",
                    partitions=[
                        DescribeProducersResponse.PartitionResponse(partition_index=3, **unknown),
                        DescribeProducersResponse.PartitionResponse(
                            partition_index=0,
                            active_producers=[
                                _Producer(
                                    producer_id=IDEMPOTENT_PID,
                                    producer_epoch=0,
                                    last_sequence=2,
                                    last_timestamp=3000,
                                    coordinator_epoch=-1,
                                    current_txn_start_offset=-1,
                                ),
                                _Producer(
                                    producer_id=HANGING_PID,
                                    producer_epoch=HANGING_EPOCH,
                                    last_sequence=2,
                                    last_timestamp=2000,
                                    coordinator_epoch=-1,
                                    current_txn_start_offset=2,
                                ),
                            ],
                        ),
                    ],
                ),
                DescribeProducersResponse.TopicResponse(
                    name="nope",
                    partitions=[DescribeProducersResponse.PartitionResponse(partition_index=0, **unknown)],
                ),
            ]
        )
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


def test_abort_marker_ends_the_hanging_transaction(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        with_hanging_transaction(broker)
        assert write_markers(broker, marker(HANGING_PID, HANGING_EPOCH, 0, {"t": [0]}), version=0) == [
            [("t", 0, ErrorCode.NONE)]
        ]
        partition = broker.replicas.get("t", 0)
        assert partition is not None
        assert (partition.last_stable_offset, partition.high_watermark, partition.log_end_offset) == (7, 7, 7)
        assert partition.aborted_transactions(0, 7) == [(HANGING_PID, 2)]
        hanging = producers(broker)[1]
        assert (hanging.producer_id, hanging.producer_epoch, hanging.coordinator_epoch) == (
            HANGING_PID,
            HANGING_EPOCH,
            0,
        )
        assert (hanging.last_sequence, hanging.current_txn_start_offset) == (2, -1)
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


def test_markers_are_validated_per_partition(tmp_path: Path) -> None:
    broker = make_broker(tmp_path)
    try:
        with_hanging_transaction(broker)
        partition = broker.replicas.get("t", 0)
        assert partition is not None
        # an older producer epoch (a fenced zombie's marker) and an unknown partition: nothing written
        assert write_markers(
            broker,
            marker(HANGING_PID, HANGING_EPOCH - 1, 0, {"t": [0], "nope": [0]}),
            marker(IDEMPOTENT_PID, 0, 0, {"t": [4]}, commit=True),
        ) == [
            [("t", 0, ErrorCode.INVALID_PRODUCER_EPOCH), ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
            [("t", 4, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)],
        ]
        assert (partition.log_end_offset, partition.last_stable_offset) == (6, 2)
        # the current epoch from coordinator epoch 5 ends it; then coordinator epoch 4 is fenced
        assert write_markers(broker, marker(HANGING_PID, HANGING_EPOCH, 5, {"t": [0]})) == [
            [("t", 0, ErrorCode.NONE)]
        ]
        assert write_markers(broker, marker(HANGING_PID, HANGING_EPOCH, 4, {"t": [0]}, commit=True)) == [
            [("t", 0, ErrorCode.TRANSACTION_COORDINATOR_FENCED)]
        ]
        assert (partition.log_end_offset, partition.last_stable_offset) == (7, 7)
        # a COMMIT for a producer with no open transaction is written and ends nothing
        assert write_markers(broker, marker(IDEMPOTENT_PID, 0, 0, {"t": [0]}, commit=True)) == [
            [("t", 0, ErrorCode.NONE)]
        ]
        assert (partition.log_end_offset, partition.last_stable_offset) == (8, 8)
        assert partition.aborted_transactions(0, 8) == [(HANGING_PID, 2)]
        assert [
            (p.producer_id, p.coordinator_epoch, p.current_txn_start_offset) for p in producers(broker)
        ] == [
            (IDEMPOTENT_PID, 0, -1),
            (HANGING_PID, 5, -1),
        ]
    finally:
        broker.logs.shutdown(broker.clock.now_ms())


# ---- __consumer_offsets: the coordinator's marker path ----------------------------------------------

TXN = "hanging-txn"
GROUP = "hanging-group"


def fetch_stable(broker: Broker) -> tuple[int, int]:
    request = OffsetFetchRequest(
        group_id=GROUP,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
        require_stable=True,
    )
    partition = call(broker, request, 7).topics[0].partitions[0]
    return partition.error_code, partition.committed_offset


def test_an_abort_on_consumer_offsets_drops_the_pending_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            broker.transactions.ensure_state_topic()
            init = call(broker, InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60_000), 4)
            assert init.error_code == ErrorCode.NONE
            pid, epoch = init.producer_id, init.producer_epoch
            added = call(
                broker,
                AddOffsetsToTxnRequest(
                    transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id=GROUP
                ),
                3,
            )
            assert added.error_code == ErrorCode.NONE
            commit = TxnOffsetCommitRequest(
                transactional_id=TXN,
                group_id=GROUP,
                producer_id=pid,
                producer_epoch=epoch,
                topics=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                        name="t",
                        partitions=[
                            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=11
                            )
                        ],
                    )
                ],
            )
            assert call(broker, commit, 3).topics[0].partitions[0].error_code == ErrorCode.NONE
            assert fetch_stable(broker) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
            offsets_partition = broker.groups.partition_for(GROUP)
            assert write_markers(
                broker, marker(pid, epoch, 0, {"__consumer_offsets": [offsets_partition]})
            ) == [[("__consumer_offsets", offsets_partition, ErrorCode.NONE)]]
            assert fetch_stable(broker) == (ErrorCode.NONE, -1)  # the aborted 11 is dropped

    asyncio.run(scenario())
