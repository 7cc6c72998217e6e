"""coordinator_support.read_records: a coordinator partition's log read for loading, damaged batches skipped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, open_log

from tidelog.protocol.records import iter_batch_headers
from tidelog.replication.partition import Partition
from tidelog.server.coordinator_support import read_records
from tidelog.storage.partition_log import PartitionLog

RECORD_BATCH_HEADER_SIZE = 61


def _partition(tmp_path: Path, batches: int) -> tuple[Partition, PartitionLog]:
    log = open_log(tmp_path / "__consumer_offsets-0", SMALL)
    for seq in range(batches):
        log.append(batch(seq, records=2), leader_epoch=0, now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    partition = Partition("__consumer_offsets", 0, log, local_broker_id=1)
    partition.make_single_node_leader(now_ms=0)
    return partition, log


def _loaded(partition: Partition, buffer_bytes: int = 100_000) -> list[tuple[int, list[bytes | None]]]:
    return [
        (header.base_offset, [r.key for r in records])
        for chunk in read_records(partition, buffer_bytes)
        for header, records in chunk
    ]


def test_every_batch_up_to_the_high_watermark_in_log_order(tmp_path: Path) -> None:
    partition, log = _partition(tmp_path, 4)
    expected = [(2 * seq, [b"k%06d-0" % seq, b"k%06d-1" % seq]) for seq in range(4)]
    assert _loaded(partition) == expected
    assert _loaded(partition, buffer_bytes=1) == expected  # one batch per read
    log.close()


def test_a_damaged_batch_is_skipped_with_a_warning_and_the_others_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    partition, log = _partition(tmp_path, 3)
    segment = log.segments[0].log_path
    data = bytearray(segment.read_bytes())
    position, header = list(iter_batch_headers(data))[1]
    data[position + RECORD_BATCH_HEADER_SIZE + 4] ^= 0xFF  # a record's bytes: only the CRC can tell
    segment.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tidelog.coordinator_support"):
        loaded = _loaded(partition)
    assert loaded == [(0, [b"k000000-0", b"k000000-1"]), (4, [b"k000002-0", b"k000002-1"])]
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "__consumer_offsets-0: skipping the damaged batch at offsets 2..3 (record batch at "
    )
    assert "CRC32C" in record.getMessage()
    assert header.base_offset == 2
    log.close()
