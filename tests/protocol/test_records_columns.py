"""decode_columns (records of fetched batches as columns) gives the rows decode_batch gives, filtered as a
Kafka consumer filters: control batches never, aborted transactions not under read_committed, only the
asked offset range, whole batches only; every codec, headers, log-append time, corrupt bytes refused."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("numpy")
pytest.importorskip("pyarrow")

from tidelog.protocol.records import (
    Compression,
    ControlRecordType,
    CorruptRecordError,
    Record,
    SimpleRecord,
    TimestampType,
    decode_batch,
    encode_batch,
    encode_control_batch,
)
from tidelog.protocol.records_columns import ColumnRecords, decode_columns

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3).map(tuple)
records = st.builds(
    SimpleRecord,
    key=optional_bytes,
    value=st.one_of(optional_bytes, st.just(b"v" * 100)),
    headers=st.one_of(st.just(()), header_lists),
    timestamp=st.integers(min_value=0, max_value=2**41),
)
# one step of the log: a batch from a producer (None: not transactional), or a producer's marker
steps = st.tuples(
    st.sampled_from([None, 1, 2]),
    st.sampled_from(["batch", "batch", "commit", "abort"]),
    st.lists(records, min_size=1, max_size=20),
    st.sampled_from(list(Compression)),
    st.sampled_from(list(TimestampType)),
)


@dataclass
class Log:
    data: bytes = b""
    next_offset: int = 0
    aborted: list[tuple[int, int]] = field(default_factory=list)  # what a Fetch answer lists
    rows: list[tuple[Record, bool]] = field(default_factory=list)  # (record, in an aborted transaction)
    ends: list[int] = field(default_factory=list)  # byte end of each batch


def _build(plan: list[tuple[int | None, str, list[SimpleRecord], Compression, TimestampType]]) -> Log:
    log = Log()
    open_txns: dict[int, tuple[int, list[int]]] = {}  # producer -> (first offset, row indexes)
    for producer, kind, batch_records, codec, ts_type in plan:
        if kind == "batch":
            batch = encode_batch(
                batch_records,
                base_offset=log.next_offset,
                compression=codec,
                timestamp_type=ts_type,
                max_timestamp=123_456 if ts_type == TimestampType.LOG_APPEND_TIME else None,
                producer_id=-1 if producer is None else producer,
                producer_epoch=-1 if producer is None else 0,
                is_transactional=producer is not None,
            )
            _, decoded = decode_batch(batch)
            if producer is not None:
                first, indexes = open_txns.setdefault(producer, (log.next_offset, []))
                indexes.extend(range(len(log.rows), len(log.rows) + len(decoded)))
            log.rows.extend((r, False) for r in decoded)
            log.next_offset += len(decoded)
        else:
            if producer is None or producer not in open_txns:
                continue
            first, indexes = open_txns.pop(producer)
            batch = encode_control_batch(
                ControlRecordType.ABORT if kind == "abort" else ControlRecordType.COMMIT,
                producer_id=producer,
                producer_epoch=0,
                coordinator_epoch=0,
                base_offset=log.next_offset,
                timestamp_ms=1,
            )
            log.next_offset += 1
            if kind == "abort":
                log.aborted.append((producer, first))
                for i in indexes:
                    log.rows[i] = (log.rows[i][0], True)
        log.data += batch
        log.ends.append(len(log.data))
    return log


def _rows(columns: ColumnRecords) -> list[tuple[object, ...]]:
    assert columns.headers is not None
    return list(
        zip(
            columns.offsets.tolist(),
            columns.timestamps.tolist(),
            columns.keys.to_pylist(),
            columns.values.to_pylist(),
            columns.headers,
            strict=True,
        )
    )


def _expected(rows: list[tuple[Record, bool]]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers) or None) for r, _ in rows]


@settings(deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(steps, min_size=1, max_size=8),
    read_committed=st.booleans(),
    bounds=st.one_of(st.just((0, 2**63 - 1)), st.tuples(st.integers(0, 30), st.integers(10, 200))),
    cut=st.one_of(st.just(0), st.integers(min_value=1, max_value=300)),
)
@example(  # a transaction aborted between a plain batch and another transaction's commit
    plan=[
        (1, "batch", [SimpleRecord(value=b"a", timestamp=1)] * 2, Compression.LZ4, TimestampType.CREATE_TIME),
        (2, "batch", [SimpleRecord(value=b"b", timestamp=2)], Compression.NONE, TimestampType.CREATE_TIME),
        (
            None,
            "batch",
            [SimpleRecord(value=b"c", timestamp=3)],
            Compression.GZIP,
            TimestampType.LOG_APPEND_TIME,
        ),
        (1, "abort", [], Compression.NONE, TimestampType.CREATE_TIME),
        (1, "batch", [SimpleRecord(value=b"d", timestamp=4)], Compression.ZSTD, TimestampType.CREATE_TIME),
        (2, "commit", [], Compression.NONE, TimestampType.CREATE_TIME),
    ],
    read_committed=True,
    bounds=(0, 2**63 - 1),
    cut=0,
)
def test_same_rows_as_decode_batch(
    plan: list[tuple[int | None, str, list[SimpleRecord], Compression, TimestampType]],
    read_committed: bool,
    bounds: tuple[int, int],
    cut: int,
) -> None:
    log = _build(plan)
    low, high = bounds
    data = log.data[: max(0, len(log.data) - cut)]  # a fetch answer cut short: whole batches only
    next_offset = _next_offset(log, sum(1 for end in log.ends if end <= len(data)))
    got = decode_columns(
        data,
        from_offset=low,
        until_offset=high,
        read_committed=read_committed,
        aborted=log.aborted,
        include_headers=True,
    )
    kept = [
        (record, aborted)
        for record, aborted in log.rows
        if low <= record.offset < high
        and not (read_committed and aborted)
        and next_offset is not None
        and record.offset < next_offset
    ]
    assert _rows(got) == _expected(kept)
    assert got.next_offset == next_offset
    assert got.timestamp_types.tolist() == [_log_append(log, r.offset) for r, _ in kept]


def _next_offset(log: Log, whole_batches: int) -> int | None:
    """One past the last offset of the first ``whole_batches`` batches."""
    if whole_batches == 0:
        return None
    pos = 0
    last = None
    for end in log.ends[:whole_batches]:
        header, _ = decode_batch(log.data[pos:end])
        last = header.base_offset + header.last_offset_delta
        pos = end
    assert last is not None
    return last + 1


def _log_append(log: Log, offset: int) -> int:
    pos = 0
    for end in log.ends:
        header, _ = decode_batch(log.data[pos:end])
        if header.base_offset <= offset <= header.base_offset + header.last_offset_delta:
            return int(header.timestamp_type == TimestampType.LOG_APPEND_TIME)
        pos = end
    raise AssertionError(offset)


def test_uniform_values_in_large_batches() -> None:
    """The batch walk's guesses: records whose sizes change inside a batch (offset and time deltas
    crossing varint sizes) are found as decode_batch finds them."""
    batch_records = [SimpleRecord(value=b"x" * 100, timestamp=1_000 + 3 * i) for i in range(20_000)]
    data = encode_batch(batch_records[:9_000], base_offset=0) + encode_batch(
        batch_records[9_000:], base_offset=9_000, compression=Compression.ZSTD
    )
    got = decode_columns(data, include_headers=True)
    assert got.offsets.tolist() == list(range(20_000))
    assert got.timestamps.tolist() == [1_000 + 3 * i for i in range(20_000)]
    assert got.values.to_pylist() == [b"x" * 100] * 20_000
    assert got.keys.null_count == 20_000
    assert got.next_offset == 20_000


def test_corrupt_bytes_are_refused() -> None:
    data = bytearray(encode_batch([SimpleRecord(value=b"abc", timestamp=5)] * 3))
    data[-2] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_columns(bytes(data))
