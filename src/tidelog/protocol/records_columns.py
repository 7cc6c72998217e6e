"""Records of fetched magic-v2 batches decoded into columns (numpy and Arrow), not one object per record.

What a Kafka consumer hands its application, as columns: the records of the batches in a Fetch
response's ``records`` bytes, in offset order, with absolute offsets and timestamps, keys and values as
Arrow ``binary`` arrays. Used by the Spark source's Arrow path (:mod:`tidelog.spark.fetch_arrow`); needs
numpy and pyarrow (the ``spark`` extra), so :mod:`tidelog.protocol.records` does not re-export it.

Invariants:

* Same rows as :func:`~tidelog.protocol.records.decode_batch` followed by a Kafka consumer's filtering:
  control batches never yield rows; with ``read_committed`` a transactional batch of a producer whose
  aborted transaction (from the Fetch response's ``aborted_transactions``) began at or before the batch's
  last offset, and before that producer's ABORT marker in these bytes, yields no rows (Kafka's Java
  ``Fetcher`` algorithm); only offsets in ``[from_offset, until_offset)`` are kept. A log-append-time
  batch gives every record its ``max_timestamp``. ``timestamp_types`` is 0 CreateTime, 1 LogAppendTime.
* A batch cut short at the end of the bytes (a fetch stops at ``max_bytes``) is left for the next fetch:
  ``next_offset`` is one past the last offset of the last whole batch (control and aborted ones
  included), or ``None`` when no whole batch was there.
* Every whole batch's CRC32C is checked; a mismatch, a bad length, or record bytes that do not parse
  raise :class:`~tidelog.protocol.records_errors.CorruptRecordError`. Compressed batches inflate to at most
  ``max_uncompressed_bytes`` each.
* Python work is per batch plus one small loop step per record to find where each record starts (the
  records' length prefixes are a chain); every field is then parsed for all records at once with numpy,
  and keys/values are gathered into Arrow buffers without a ``bytes`` object per record. Headers, when
  asked for, are parsed per record that has any.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import crc32c
import numpy as np
import pyarrow as pa

from tidelog.protocol.compression import Compression, decompress_bounded
from tidelog.protocol.records_codec import (
    MAX_UNCOMPRESSED_BATCH_BYTES,
    ControlRecordType,
    decode_batch,
    decode_control_record,
)
from tidelog.protocol.records_errors import CorruptRecordError
from tidelog.protocol.records_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_BATCH_HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
)

__all__ = ["ColumnRecords", "Header", "decode_columns"]

Header = tuple[str, bytes | None]
NDArray = Any  # numpy arrays (numpy's stubs are not part of the typed surface here)

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_PAD: Final = b"\x00" * 16  # a varint read past a record's end stays inside the buffer (then refused)


@dataclass(frozen=True)
class ColumnRecords:
    """The kept records, in offset order: one entry per record in every column."""

    offsets: NDArray  # int64
    timestamps: NDArray  # int64 milliseconds
    timestamp_types: NDArray  # int32: 0 CreateTime, 1 LogAppendTime
    keys: pa.Array  # binary
    values: pa.Array  # binary
    headers: list[list[Header] | None] | None  # per record (None: no headers); None when not asked for
    next_offset: int | None  # one past the last whole batch's last offset

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class _Batch:
    start: int  # payload position in the joined buffer
    end: int
    count: int
    base_offset: int
    base_timestamp: int
    log_append_time: int | None


def _slow_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint longer than 10 bytes at {pos}")


def _walk_python(data: bytes, pos: int, end: int, count: int, starts: list[int], ends: list[int]) -> None:
    """Append where each record's body starts (after its length) and ends, one record at a time."""
    add_start, add_end = starts.append, ends.append
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                z = b
                pos += 1
            else:
                b1 = data[pos + 1]
                if b1 < 0x80:
                    z = (b & 0x7F) | (b1 << 7)
                    pos += 2
                else:
                    z, pos = _slow_varint(data, pos)
            length = (z >> 1) ^ -(z & 1)
            if length < 6 or pos + length > end:
                raise CorruptRecordError(
                    f"record length {length} at {pos} does not fit its batch (ends {end})"
                )
            add_start(pos)
            pos += length
            add_end(pos)
    except IndexError:
        raise CorruptRecordError(f"records section truncated: {count} records") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last of {count} records")


def _lengths(buf: NDArray, pos: NDArray) -> tuple[NDArray, NDArray]:
    """Record lengths (zigzag varints of at most 3 bytes) at ``pos``: (length, body start); a longer
    varint gives length -1 (never a valid record length, so the guess is refused)."""
    b0 = buf[pos].astype(np.int64)
    b1 = buf[pos + 1].astype(np.int64)
    b2 = buf[pos + 2].astype(np.int64)
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    z = np.where(
        one, b0, np.where(two, (b0 & 0x7F) | (b1 << 7), (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14))
    )
    size = np.where(one, 1, np.where(two, 2, 3))
    length = (z >> 1) ^ -(z & 1)
    return np.where(~one & ~two & (b2 >= 0x80), -1, length), pos + size


_MAX_GUESSES: Final = 8


def _walk(buf: NDArray, data: bytes, batch: _Batch, starts: list[NDArray], ends: list[NDArray]) -> None:
    """Where each record's body starts (after its length) and ends, for a whole batch at once.

    The length prefixes form a chain (each record's start depends on the previous length), so the starts
    are guessed, assuming every following record has the size of the current one, and checked all at once
    (a guess is right when each guessed record ends where the next guessed one starts); the checked prefix
    is kept and the rest guessed again from the first wrong one. Records of a few sizes (the usual batch)
    take a few rounds; after :data:`_MAX_GUESSES` the rest is walked one record at a time."""
    pos, end, left = batch.start, batch.end, batch.count
    limit = len(buf) - 16
    for _ in range(_MAX_GUESSES):
        if not left:
            break
        first_length, first_body = _lengths(buf, np.array([pos], np.int64))
        stride = int(first_body[0] - pos + first_length[0])
        if first_length[0] < 6 or stride <= 0:
            break  # the one-record walk reports it
        guess = pos + np.arange(left, dtype=np.int64) * stride
        length, body = _lengths(buf, np.minimum(guess, limit))
        record_end = body + length
        good = (guess < end) & (length >= 6) & (record_end <= end)
        chained = np.append(record_end[:-1] == guess[1:], True) & good
        bad = np.flatnonzero(~chained)
        take = left if bad.size == 0 else int(bad[0]) + (1 if good[bad[0]] else 0)
        if take == 0:
            break
        starts.append(body[:take])
        ends.append(record_end[:take])
        pos = int(record_end[take - 1])
        left -= take
    if left:
        rest_starts: list[int] = []
        rest_ends: list[int] = []
        _walk_python(data, pos, end, left, rest_starts, rest_ends)
        starts.append(np.array(rest_starts, np.int64))
        ends.append(np.array(rest_ends, np.int64))
    elif pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last of {batch.count} records")


def _varints(buf: NDArray, pos: NDArray) -> tuple[NDArray, NDArray | int]:
    """Zigzag varints starting at every position of ``pos``: (values int64, sizes int64 or one int)."""
    b0 = buf[pos]
    long0 = b0 >= 0x80
    if not long0.any():  # every varint one byte (small deltas, null keys, no headers)
        z = b0.astype(np.int64)
        return (z >> 1) ^ -(z & 1), 1
    b1 = buf[pos + 1]
    if not (long0 & (b1 >= 0x80)).any():  # at most two bytes (lengths and deltas below 8192)
        z = np.where(long0, (b0.astype(np.int64) & 0x7F) | (b1.astype(np.int64) << 7), b0)
        return (z >> 1) ^ -(z & 1), long0.astype(np.int64) + 1
    value = (b0 & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    more = np.flatnonzero(long0)
    shift = 7
    while more.size:
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
        b = buf[pos[more] + size[more]]
        value[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    signed = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return signed, size


def _binary(buf: NDArray, start: NDArray, length: NDArray) -> pa.Array:
    """An Arrow binary array of the byte runs ``buf[start:start+length]`` (length < 0: null).

    Built as Arrow's binary view (16 bytes per run pointing into ``buf``) and cast to binary by Arrow's
    C++ kernels: no per-run Python work, one copy of the bytes."""
    n = len(start)
    valid = length >= 0
    if not valid.any():
        return pa.nulls(n, pa.binary())
    runs = np.where(valid, length, 0).astype(np.int32)
    views = np.zeros((n, 4), np.int32)
    views[:, 0] = runs
    inline = runs <= 12  # Arrow keeps runs of up to 12 bytes inside the view itself
    if inline.all():
        short = np.flatnonzero(inline)
        raw = buf[start[short, None] + np.arange(12)]
        raw[np.arange(12) >= runs[short, None]] = 0
        views[short, 1:] = raw.view(np.int32)
    else:
        short = np.flatnonzero(inline)
        if short.size:
            raw = buf[start[short, None] + np.arange(12)]
            raw[np.arange(12) >= runs[short, None]] = 0
            views[short, 1:] = raw.view(np.int32)
        long = np.flatnonzero(~inline)
        views[long, 1] = buf[start[long, None] + np.arange(4)].copy().view(np.int32)[:, 0]
        views[long, 3] = start[long]  # buffer index 0 (views[:, 2] stays 0)
    nulls = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(buf)], null_count=nulls
    )
    return array.cast(pa.binary())


def _headers(data: bytes, pos: int, end: int, count: int) -> list[Header]:
    headers: list[Header] = []
    for _ in range(count):
        z, pos = _slow_varint(data, pos)
        key_length = (z >> 1) ^ -(z & 1)
        if key_length < 0:
            raise CorruptRecordError(f"null header key at {pos}")
        key = data[pos : pos + key_length].decode("utf-8", "replace")
        pos += key_length
        z, pos = _slow_varint(data, pos)
        value_length = (z >> 1) ^ -(z & 1)
        if value_length < 0:
            headers.append((key, None))
        else:
            headers.append((key, data[pos : pos + value_length]))
            pos += value_length
    if pos != end:
        raise CorruptRecordError(f"record ends at {pos}, its length says {end}")
    return headers


def _batches(
    records: bytes | bytearray | memoryview,
    read_committed: bool,
    aborted: Sequence[tuple[int, int]],
    max_uncompressed_bytes: int,
) -> tuple[list[_Batch], bytes, int | None]:
    """The whole batches whose records are delivered, their payloads joined (then _PAD), the next offset."""
    view = memoryview(records)
    pending = sorted(aborted, key=lambda a: a[1])  # (producer_id, first_offset)
    aborted_producers: set[int] = set()
    kept: list[_Batch] = []
    parts: list[bytes | bytearray | memoryview] = []
    joined_size = 0
    next_offset: int | None = None
    pos, end = 0, len(records)
    while end - pos >= RECORD_BATCH_HEADER_SIZE:
        (
            base_offset,
            batch_length,
            _epoch,
            magic,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            _producer_epoch,
            _base_sequence,
            count,
        ) = _HEADER.unpack_from(records, pos)
        size = batch_length + LOG_OVERHEAD
        if batch_length < RECORD_BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"record batch at {pos} has batch_length {batch_length}")
        if end - pos < size:
            break  # cut short by the fetch's size limit: the next fetch starts at it
        if magic != MAGIC:
            raise CorruptRecordError(f"record batch at offset {base_offset} has magic {magic}, not {MAGIC}")
        if crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
            raise CorruptRecordError(f"record batch at offset {base_offset} fails its CRC")
        last_offset = base_offset + last_offset_delta
        next_offset = last_offset + 1
        transactional = bool(attributes & TRANSACTIONAL_BIT)
        if read_committed and transactional:
            while pending and pending[0][1] <= last_offset:
                aborted_producers.add(pending.pop(0)[0])
        if attributes & CONTROL_BIT:
            if read_committed and transactional and producer_id in aborted_producers:
                _, control = decode_batch(view[pos : pos + size])
                if control and decode_control_record(control[0])[0] == ControlRecordType.ABORT:
                    aborted_producers.discard(producer_id)
            pos += size
            continue
        if read_committed and transactional and producer_id in aborted_producers:
            pos += size
            continue
        payload: bytes | bytearray | memoryview = view[pos + RECORD_BATCH_HEADER_SIZE : pos + size]
        codec = attributes & COMPRESSION_MASK
        if codec != Compression.NONE:
            payload = decompress_bounded(Compression.of(codec), payload, max_uncompressed_bytes)
        log_append_time = max_timestamp if attributes & TIMESTAMP_TYPE_BIT else None
        kept.append(
            _Batch(
                joined_size, joined_size + len(payload), count, base_offset, base_timestamp, log_append_time
            )
        )
        parts.append(payload)
        joined_size += len(payload)
        pos += size
    parts.append(_PAD)
    return kept, b"".join(parts), next_offset


def decode_columns(
    records: bytes | bytearray | memoryview,
    *,
    from_offset: int = 0,
    until_offset: int = 2**63 - 1,
    read_committed: bool = False,
    aborted: Sequence[tuple[int, int]] = (),
    include_headers: bool = False,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BATCH_BYTES,
) -> ColumnRecords:
    """The records of the whole batches in ``records`` with ``from_offset <= offset < until_offset``,
    filtered as a consumer filters (see the module invariants); ``aborted`` is the Fetch response's
    ``(producer_id, first_offset)`` pairs."""
    batches, data, next_offset = _batches(records, read_committed, aborted, max_uncompressed_bytes)
    buf = np.frombuffer(data, np.uint8)  # ends in _PAD
    starts: list[NDArray] = [np.zeros(0, np.int64)]
    ends: list[NDArray] = [np.zeros(0, np.int64)]
    for batch in batches:
        _walk(buf, data, batch, starts, ends)
    begin = np.concatenate(starts)
    stop = np.concatenate(ends)
    n = len(begin)
    counts = [b.count for b in batches]
    base_offsets = np.repeat(np.array([b.base_offset for b in batches], np.int64), counts)
    base_times = np.repeat(
        np.array([b.base_timestamp if b.log_append_time is None else 0 for b in batches], np.int64), counts
    )
    append_times = np.repeat(
        np.array([-1 if b.log_append_time is None else b.log_append_time for b in batches], np.int64), counts
    )
    log_append = np.repeat(np.array([b.log_append_time is not None for b in batches], np.bool_), counts)

    pos = begin + 1  # the record's attributes byte, unused
    timestamp_delta, size = _varints(buf, pos)
    pos += size
    offset_delta, size = _varints(buf, pos)
    pos += size
    key_length, size = _varints(buf, pos)
    pos += size
    key_start = pos
    pos = pos + np.maximum(key_length, 0)
    if n and (pos > stop).any():
        raise CorruptRecordError("a record's key runs past the record's end")
    value_length, size = _varints(buf, pos)
    pos += size
    value_start = pos
    pos = pos + np.maximum(value_length, 0)
    if n and (pos > stop).any():
        raise CorruptRecordError("a record's value runs past the record's end")
    header_count, size = _varints(buf, pos)
    pos += size
    if n and (header_count < 0).any():
        raise CorruptRecordError("a record has a negative header count")
    plain = header_count == 0
    if n and (pos[plain] != stop[plain]).any():
        raise CorruptRecordError("a record's fields do not end where its length says")

    offsets = base_offsets + offset_delta
    keep = (offsets >= from_offset) & (offsets < until_offset)
    if not keep.all():
        picked = np.flatnonzero(keep)
    else:
        picked = None

    def kept(column: NDArray) -> NDArray:
        return column if picked is None else column[picked]

    with_headers = np.flatnonzero(~plain)
    parsed: dict[int, list[Header]] = {
        int(i): _headers(data, int(pos[i]), int(stop[i]), int(header_count[i])) for i in with_headers
    }
    headers: list[list[Header] | None] | None = None
    if include_headers:
        indices = range(n) if picked is None else picked.tolist()
        headers = [parsed.get(i) for i in indices] if parsed else [None] * len(indices)
    timestamps = np.where(log_append, append_times, base_times + timestamp_delta)
    return ColumnRecords(
        offsets=kept(offsets),
        timestamps=kept(timestamps),
        timestamp_types=kept(log_append.astype(np.int32)),
        keys=_binary(buf, kept(key_start), kept(key_length)),
        values=_binary(buf, kept(value_start), kept(value_length)),
        headers=headers,
        next_offset=next_offset,
    )
