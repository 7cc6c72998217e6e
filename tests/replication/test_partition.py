"""The replication layer's Partition: the only door to a partition's log (appends, reads by isolation,
leader-epoch fencing, DeleteRecords, producer state)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, open_log

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import ControlRecordType, SimpleRecord, encode_batch, iter_batch_headers
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.storage.config import LogConfig
from tidelog.storage.errors import OffsetOutOfRangeError


def _partition(tmp_path: Path, config: LogConfig = SMALL, *, leader_epoch: int = 3) -> Partition:
    partition = Partition("t", 0, open_log(tmp_path / "t-0", config), local_broker_id=1)
    partition.make_leader(LeaderAndIsr(1, leader_epoch, (1,), controller_epoch=0), (1,), now_ms=0)
    return partition


def _offsets(partition: Partition, isolation: FetchIsolation, fetch_offset: int = 0) -> list[int]:
    data = partition.read(fetch_offset, 1 << 20, isolation=isolation, min_one_batch=True).read_bytes()
    return [header.base_offset for _, header in iter_batch_headers(data)]


def _transactional(pid: int, values: list[bytes], sequence: int = 0) -> bytes:
    return encode_batch(
        [SimpleRecord(key=b"k", value=v, timestamp=1000) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=True,
    )


def test_leader_appends_are_committed_at_once_and_stamped_with_the_leader_epoch(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    first = partition.append_records_as_leader(batch(0), now_ms=5)
    second = partition.append_records_as_leader(batch(1), now_ms=5)
    assert (first.first_offset, second.first_offset) == (0, 3)
    assert (partition.log_end_offset, partition.high_watermark, partition.last_stable_offset) == (6, 6, 6)
    data = partition.read(0, 1 << 20, isolation=FetchIsolation.HIGH_WATERMARK, min_one_batch=True)
    assert [h.partition_leader_epoch for _, h in iter_batch_headers(data.read_bytes())] == [3, 3]


def test_a_bad_batch_writes_nothing(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    damaged = bytearray(batch(0))
    damaged[-1] ^= 0xFF
    with pytest.raises(KafkaProtocolError) as raised:
        partition.append_records_as_leader(bytes(damaged), now_ms=5)
    assert raised.value.error_code == ErrorCode.CORRUPT_MESSAGE
    assert partition.log_end_offset == 0


def test_a_compacted_topic_refuses_records_without_keys(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1024, index_interval_bytes=256, cleanup_policy="compact")
    partition = _partition(tmp_path, config)
    keyless = encode_batch([SimpleRecord(key=None, value=b"v", timestamp=1)])
    with pytest.raises(KafkaProtocolError) as raised:
        partition.append_records_as_leader(keyless, now_ms=5)
    assert raised.value.error_code == ErrorCode.INVALID_RECORD
    assert partition.log_end_offset == 0


def test_reads_stop_at_what_the_isolation_allows(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    partition.append_records_as_leader(batch(0, records=1), now_ms=5)  # 0
    partition.append_records_as_leader(_transactional(7, [b"a", b"b"]), now_ms=5)  # 1-2, open
    partition.append_records_as_leader(batch(1, records=1), now_ms=5)  # 3
    assert partition.fetchable_offset(FetchIsolation.TXN_COMMITTED) == 1
    assert _offsets(partition, FetchIsolation.TXN_COMMITTED) == [0]
    assert _offsets(partition, FetchIsolation.HIGH_WATERMARK) == [0, 1, 3]
    partition.append_control_marker(
        ControlRecordType.ABORT, producer_id=7, producer_epoch=0, coordinator_epoch=0, now_ms=6
    )  # 4
    assert partition.fetchable_offset(FetchIsolation.TXN_COMMITTED) == 5
    assert _offsets(partition, FetchIsolation.TXN_COMMITTED) == [0, 1, 3, 4]
    assert partition.aborted_transactions(0, 5) == [(7, 1)]
    assert partition.aborted_transactions(3, 5) == [(7, 1)]  # the marker is at or after the fetch offset


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, ErrorCode.NONE),
        (3, ErrorCode.NONE),
        (2, ErrorCode.FENCED_LEADER_EPOCH),
        (4, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_leader_epoch_fencing(tmp_path: Path, requested: int, expected: ErrorCode) -> None:
    assert _partition(tmp_path, leader_epoch=3).check_leader_epoch(requested) == expected


def test_end_offset_for_leader_epoch(tmp_path: Path) -> None:
    partition = _partition(tmp_path, leader_epoch=3)
    partition.append_records_as_leader(batch(0), now_ms=5)
    assert partition.end_offset_for_leader_epoch(3) == (3, 3)
    assert partition.end_offset_for_leader_epoch(4) == (-1, -1)  # above every known epoch: undefined
    assert partition.end_offset_for_leader_epoch(2) == (2, 0)  # below the first: where the first starts


def test_delete_records_moves_the_log_start_up_to_the_high_watermark_only(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    for seq in range(4):
        partition.append_records_as_leader(batch(seq), now_ms=5)
    assert partition.delete_records_before(4, now_ms=5) == 4
    assert partition.delete_records_before(2, now_ms=5) == 4  # never backwards
    for offset in (13, -2):
        with pytest.raises(OffsetOutOfRangeError):
            partition.delete_records_before(offset, now_ms=5)
    assert partition.log_start_offset == 4
    assert partition.delete_records_before(-1, now_ms=5) == 12  # -1: the high watermark
    with pytest.raises(OffsetOutOfRangeError):
        partition.read(0, 100, isolation=FetchIsolation.HIGH_WATERMARK, min_one_batch=True)


def test_producer_states_by_producer_id(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    partition.append_records_as_leader(_transactional(9, [b"x"]), now_ms=5)
    partition.append_records_as_leader(_transactional(4, [b"y", b"z"]), now_ms=5)
    assert [
        (p.producer_id, p.last_sequence, p.current_txn_first_offset) for p in partition.producer_states()
    ] == [
        (4, 1, 1),
        (9, 0, 0),
    ]
