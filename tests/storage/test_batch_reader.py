"""The windowed batch scan shared by segments and the cleaner: what it yields, what it reads, where it
stops."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.storage.helpers import batch

from tidelog.protocol.records import (
    RECORD_BATCH_HEADER_SIZE,
    ControlRecordType,
    SimpleRecord,
    encode_batch,
    encode_control_batch,
    iter_batch_headers,
)
from tidelog.storage.batch_reader import BatchScan
from tidelog.storage.errors import LogCorruptionError


class File:
    """Bytes read as a file is, recording every read ``(nbytes asked, position, nbytes got)``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int, int]] = []

    def read(self, nbytes: int, position: int) -> bytes:
        chunk = self.data[position : position + nbytes]
        self.reads.append((nbytes, position, len(chunk)))
        return chunk


def log_bytes(sizes: list[int]) -> bytes:
    """Consecutive batches with offsets assigned, batch ``i`` holding ``sizes[i]`` records."""
    out = bytearray()
    offset = 0
    for i, count in enumerate(sizes):
        out += encode_batch(
            [SimpleRecord(key=b"k%d" % i, value=b"v" * (7 * i % 50))] * count,
            base_offset=offset,
            partition_leader_epoch=i,
        )
        offset += count
    return bytes(out)


def expected(data: bytes) -> list[tuple[int, int, bytes]]:
    return [(p, h.base_offset, data[p : p + h.size_in_bytes]) for p, h in iter_batch_headers(data)]


def scanned(scan: BatchScan) -> list[tuple[int, int, bytes | None]]:
    return [(p, h.base_offset, None if d is None else bytes(d)) for p, h, d in scan]


@pytest.mark.parametrize("window", [RECORD_BATCH_HEADER_SIZE, 100, 150, 4096])
def test_every_window_size_yields_the_same_batches_and_bytes(window: int) -> None:
    data = log_bytes([1, 3, 2, 8, 1, 5])
    file = File(data)
    scan = BatchScan(file.read, name="f", start=0, end=len(data), window_bytes=window, with_data=True)
    assert scanned(scan) == expected(data)
    assert (scan.position, scan.stop_reason) == (len(data), None)
    sizes = {h.size_in_bytes for _, h in iter_batch_headers(data)}
    # Every read is a window (never past the end) or exactly one batch larger than a window.
    for nbytes, position, _ in file.reads:
        assert nbytes == min(window, len(data) - position) or (nbytes > window and nbytes in sizes)


def test_headers_only_skips_payloads_and_reads_one_window_for_a_small_file() -> None:
    data = log_bytes([2, 2, 2])
    file = File(data)
    scan = BatchScan(file.read, name="f", start=0, end=len(data), window_bytes=1 << 16)
    assert [(p, o, d) for p, o, d in scanned(scan)] == [(p, o, None) for p, o, _ in expected(data)]
    assert file.reads == [(len(data), 0, len(data))]


def test_a_predicate_picks_the_batches_that_come_with_bytes() -> None:
    marker = encode_control_batch(
        ControlRecordType.COMMIT,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=3,
        base_offset=2,
        timestamp_ms=5,
    )
    data = batch(0, records=2) + marker + encode_batch([SimpleRecord(key=b"k", value=b"v")], base_offset=3)
    file = File(data)
    scan = BatchScan(
        file.read,
        name="f",
        start=0,
        end=len(data),
        window_bytes=RECORD_BATCH_HEADER_SIZE,
        with_data=lambda header: header.is_control,
    )
    got = scanned(scan)
    assert [d is not None for _, _, d in got] == [False, True, False]
    assert got[1][2] == marker


def test_a_batch_larger_than_the_window_is_read_once_exactly() -> None:
    data = log_bytes([1, 40, 1])
    (position, big) = list(iter_batch_headers(data))[1]
    assert big.size_in_bytes > 200
    file = File(data)
    scan = BatchScan(file.read, name="f", start=0, end=len(data), window_bytes=200, with_data=True)
    assert scanned(scan) == expected(data)
    assert [r for r in file.reads if r[0] > 200] == [(big.size_in_bytes, position, big.size_in_bytes)]


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, 62])
def test_a_torn_tail_ends_the_scan_quietly_or_raises(cut: int) -> None:
    whole = log_bytes([2, 2])
    last = [p for p, _ in iter_batch_headers(whole)][-1]
    data = whole[: last + cut]
    scan = BatchScan(File(data).read, name="seg.log", start=0, end=len(data), window_bytes=4096)
    assert [p for p, _, _ in scanned(scan)] == [0]
    assert scan.position == last
    assert scan.stop_reason is not None
    strict = BatchScan(
        File(data).read, name="seg.log", start=0, end=len(data), window_bytes=4096, raise_on_torn_tail=True
    )
    with pytest.raises(LogCorruptionError, match=f"^seg.log at {last}: "):
        list(strict)


def test_a_file_shorter_than_the_end_is_a_torn_tail() -> None:
    data = log_bytes([2, 2])
    scan = BatchScan(File(data).read, name="f", start=0, end=len(data) + 500, window_bytes=4096)
    assert len(scanned(scan)) == 2
    assert scan.position == len(data)
    assert scan.stop_reason == f"the file ends 0 bytes on, before {len(data) + 500}"


def test_a_batch_length_below_a_header_is_damage() -> None:
    data = bytearray(log_bytes([2, 2]))
    second = [p for p, _ in iter_batch_headers(data)][1]
    data[second + 8 : second + 12] = (48).to_bytes(4, "big")
    with pytest.raises(LogCorruptionError, match=f"^f at {second}: batch_length 48$"):
        list(BatchScan(File(bytes(data)).read, name="f", start=0, end=len(data), window_bytes=4096))
    quiet = BatchScan(
        File(bytes(data)).read, name="f", start=0, end=len(data), window_bytes=4096, raise_on_damage=False
    )
    assert len(scanned(quiet)) == 1
    assert (quiet.position, quiet.stop_reason) == (second, "batch_length 48")


def test_a_bad_magic_is_damage() -> None:
    data = bytearray(log_bytes([2, 2]))
    second = [p for p, _ in iter_batch_headers(data)][1]
    data[second + 16] = 1
    with pytest.raises(LogCorruptionError, match=f"^f at {second}: .*magic 1"):
        list(BatchScan(File(bytes(data)).read, name="f", start=0, end=len(data), window_bytes=4096))


def test_validate_stops_at_a_batch_failing_its_crc() -> None:
    data = bytearray(log_bytes([2, 2, 2]))
    second = [p for p, _ in iter_batch_headers(data)][1]
    data[second + RECORD_BATCH_HEADER_SIZE + 2] ^= 0xFF
    unchecked = BatchScan(File(bytes(data)).read, name="f", start=0, end=len(data), window_bytes=100)
    assert len(scanned(unchecked)) == 3
    checked = BatchScan(
        File(bytes(data)).read,
        name="f",
        start=0,
        end=len(data),
        window_bytes=100,
        validate=True,
        raise_on_damage=False,
    )
    assert len(scanned(checked)) == 1
    assert checked.position == second
    assert checked.stop_reason is not None
    assert "CRC32C" in checked.stop_reason


def test_a_scan_starts_and_ends_where_asked() -> None:
    data = log_bytes([1, 2, 3, 4])
    positions = [p for p, _ in iter_batch_headers(data)]
    scan = BatchScan(File(data).read, name="f", start=positions[1], end=positions[3], window_bytes=64)
    assert [p for p, _, _ in scanned(scan)] == positions[1:3]
    assert (scan.position, scan.stop_reason) == (positions[3], None)


def test_a_window_smaller_than_a_header_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold a batch header"):
        BatchScan(File(b"").read, name="f", start=0, end=0, window_bytes=60)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=0, max_size=8),
    window=st.integers(RECORD_BATCH_HEADER_SIZE, 700),
    cut=st.integers(0, 400),
    with_data=st.booleans(),
)
def test_any_window_any_torn_tail_yields_the_whole_batches_before_it(
    sizes: list[int], window: int, cut: int, with_data: bool
) -> None:
    whole = log_bytes(sizes)
    data = whole[: max(len(whole) - cut, 0)]
    scan = BatchScan(
        File(data).read, name="f", start=0, end=len(data), window_bytes=window, with_data=with_data
    )
    got = scanned(scan)
    want = expected(data)
    assert [(p, o) for p, o, _ in got] == [(p, o) for p, o, _ in want]
    if with_data:
        assert [d for _, _, d in got] == [d for _, _, d in want]
    end = want[-1][0] + len(want[-1][2]) if want else 0
    assert scan.position == end
    assert (scan.stop_reason is None) == (end == len(data))
