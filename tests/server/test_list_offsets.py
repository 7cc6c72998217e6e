"""The ListOffsets handler in-process: a lookup the log cannot answer is that partition's error code only."""

from __future__ import annotations

from pathlib import Path

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, ListOffsetsRequest
from tidelog.protocol.records import RECORD_BATCH_HEADER_SIZE, SimpleRecord, encode_batch, iter_batch_headers
from tidelog.server.broker import Broker
from tidelog.server.config import load_broker_config
from tidelog.server.dispatch import RequestContext
from tidelog.server.handlers.list_offsets import MAX_TIMESTAMP


def _broker(data: Path) -> Broker:
    config, _warnings = load_broker_config(None, {"log.dirs": str(data)})
    broker = Broker(config)
    for topic in ("damaged", "intact"):
        broker.admin.create_topic_now(topic, 1, 1, {"segment.bytes": "400"})
        partition = broker.replicas.get(topic, 0)
        assert partition is not None
        for seq in range(8):
            records = [SimpleRecord(key=b"k", value=b"v%d" % seq, timestamp=1000 + 10 * seq)]
            partition.append_records_as_leader(encode_batch(records), now_ms=2000)
    return broker


def _query(broker: Broker, timestamps: dict[str, int]) -> dict[str, tuple[int, int, int]]:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)],
            )
            for topic, ts in timestamps.items()
        ],
    )
    context = RequestContext(ApiKey.LIST_OFFSETS, 7, 1, "test", "127.0.0.1", 1)
    route = broker.dispatcher.route_for(ApiKey.LIST_OFFSETS, 7)
    assert route is not None
    response = route.handler(context, request)
    return {t.name: (p.error_code, p.offset, p.timestamp) for t in response.topics for p in t.partitions}


def test_a_damaged_batch_fails_its_partition_only(tmp_path: Path) -> None:
    broker = _broker(tmp_path / "data")
    try:
        log = broker.logs.get("damaged", 0)
        assert log is not None
        first = log.segments[0]
        assert len(log.segments) > 1
        data = bytearray(first.log_path.read_bytes())
        position, header = list(iter_batch_headers(data))[1]
        data[position + RECORD_BATCH_HEADER_SIZE + 1] ^= 0x01  # bit rot only the CRC can tell
        first.log_path.write_bytes(bytes(data))
        assert header.base_offset == 1

        assert _query(broker, {"damaged": 1010, "intact": 1010}) == {
            "damaged": (ErrorCode.KAFKA_STORAGE_ERROR, -1, -1),
            "intact": (ErrorCode.NONE, 1, 1010),
        }
        assert _query(broker, {"damaged": 1020, "intact": MAX_TIMESTAMP}) == {
            "damaged": (ErrorCode.NONE, 2, 1020),
            "intact": (ErrorCode.NONE, 7, 1070),
        }
    finally:
        broker.logs.shutdown()
