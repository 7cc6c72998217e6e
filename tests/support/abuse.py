"""Helpers for the abuse tests: a process's resident memory, hand-built record batches (any payload under
any codec id, e.g. a decompression bomb) and a raw Produce over the broker's own wire client.

Invariants: ``rss_bytes`` reads ``VmRSS`` from ``/proc/<pid>/status`` (Linux); ``bomb`` builds each payload
in bounded memory (it repeats one small compressed unit, never holds the inflated bytes).
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid

import confluent_kafka
import cramjam
import crc32c

from tidelog.client.wire import WireClient
from tidelog.protocol.compression import Compression, _xxh32
from tidelog.protocol.messages import ProduceRequest, ProduceResponse

__all__ = [
    "bomb",
    "confluent_round_trip",
    "peak_rss_bytes",
    "produce_raw",
    "raw_batch",
    "record_rss",
    "reset_peak_rss",
    "rss_bytes",
]

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_MIB = 1 << 20


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} for pid {pid}")


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (``VmRSS``), in bytes."""
    return _status_kib(pid, "VmRSS:")


def peak_rss_bytes(pid: int) -> int:
    """The highest resident set size process ``pid`` ever had (``VmHWM``), in bytes."""
    return _status_kib(pid, "VmHWM:")


def reset_peak_rss(pid: int) -> None:
    """Start ``VmHWM`` of process ``pid`` over from its RSS now (``/proc/<pid>/clear_refs``: 5; the
    process's owner or root), so :func:`peak_rss_bytes` is the peak since this call."""
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


RSS_REPORT_ENV = "TIDELOG_RSS_REPORT"
"""When set, the file :func:`record_rss` appends each abuse case's figures to (bench/abuse_rss.py)."""


def record_rss(case: str, before: int, after: int, **figures: object) -> None:
    """Note an abuse case's broker RSS before and at its peak (or after), in bytes, with any other
    figures, as one JSON line in ``$TIDELOG_RSS_REPORT``; nothing when it is not set."""
    path = os.environ.get(RSS_REPORT_ENV)
    if not path:
        return
    line = {"case": case, "before_mib": before / _MIB, "after_mib": after / _MIB, **figures}
    with open(path, "a") as report:
        report.write(json.dumps(line) + "\n")


def confluent_round_trip(bootstrap: str, topic: str) -> None:
    """A confluent-kafka producer writes one fresh value to partition 0 of ``topic`` (which must exist)
    and a consumer reads exactly that value back at its offset."""
    value = f"round-trip-{uuid.uuid4().hex}".encode()
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "log_level": 3, "message.timeout.ms": 20000}
    )
    reports: list[tuple[object, int]] = []
    producer.produce(
        topic, value=value, key=b"k", partition=0, on_delivery=lambda e, m: reports.append((e, m.offset()))
    )
    assert producer.flush(30) == 0
    ((error, offset),) = reports
    assert error is None, error
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "round-trip-unused",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 20
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None, "the round trip's record was not read back"
        assert message.error() is None, message.error()
        assert (message.offset(), message.value()) == (offset, value)
    finally:
        consumer.close()


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def raw_batch(payload: bytes, *, codec: int, records_count: int = 1, timestamp_ms: int = 0) -> bytes:
    """A magic-v2 batch (valid CRC32C, no producer id) whose records section is ``payload`` as given."""
    batch_length = _BATCH_HEADER.size - 12 + len(payload)
    header = bytearray(
        _BATCH_HEADER.pack(
            0,
            batch_length,
            -1,
            2,
            0,
            codec,
            records_count - 1,
            timestamp_ms,
            timestamp_ms,
            -1,
            -1,
            -1,
            records_count,
        )
    )
    body = header + payload
    struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
    return bytes(body)


def _record_head(value_size: int) -> bytes:
    """The bytes before the value of one record with key ``k`` and a ``value_size``-byte value (the zero
    bytes after it are the value, and a zero header count)."""
    body = b"\x00" + _varint(0) + _varint(0) + _varint(1) + b"k" + _varint(value_size)
    return _varint(len(body) + value_size + 1) + body


def bomb(codec: Compression, inflated_bytes: int) -> bytes:
    """A compressed records section that inflates to at least ``inflated_bytes`` (zeros behind one record
    header: structurally a single huge record), built without ever holding the inflated bytes.

    gzip: concatenated members; zstd: concatenated frames; lz4: one frame of repeated independent 4 MiB
    blocks; snappy: a raw block whose length prefix declares ``inflated_bytes`` (snappy's format cannot
    compress better than ~21x, so its bomb is a lying length).
    """
    prefix = _record_head(inflated_bytes)
    if codec == Compression.SNAPPY:
        declared = inflated_bytes
        out = bytearray()
        while declared >= 0x80:
            out.append((declared & 0x7F) | 0x80)
            declared >>= 7
        out.append(declared)
        return bytes(out) + b"\x00" * 64
    unit = 4 * _MIB
    zeros = bytes(unit)
    units = -(-inflated_bytes // unit)
    if codec == Compression.GZIP:
        member = bytes(cramjam.gzip.compress(zeros, level=9))
        return bytes(cramjam.gzip.compress(prefix, level=1)) + member * units
    if codec == Compression.ZSTD:
        frame = bytes(cramjam.zstd.compress(zeros, level=3))
        return bytes(cramjam.zstd.compress(prefix)) + frame * units
    if codec == Compression.LZ4:
        # FLG 0x60 (v01, independent blocks), BD 0x70 (4 MiB blocks), HC = (xxh32(FLG BD) >> 8) & 0xFF.
        block = bytes(cramjam.lz4.compress_block(zeros, store_size=False))
        descriptor = b"\x60\x70"
        header = b"\x04\x22\x4d\x18" + descriptor + bytes(((_xxh32(descriptor) >> 8) & 0xFF,))
        head = struct.pack("<I", len(prefix) | 0x80000000) + prefix
        blocks = (struct.pack("<I", len(block)) + block) * units
        return header + head + blocks + b"\x00\x00\x00\x00"
    raise ValueError(f"no bomb for {codec!r}")


def produce_raw(
    client: WireClient, topic: str, batch: bytes, *, partition: int = 0
) -> tuple[int, str | None]:
    """Produce ``batch`` (acks=1) through the wire client; the partition's ``(error_code, error_message)``."""
    request = ProduceRequest(
        acks=1,
        timeout_ms=15000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)],
            )
        ],
    )
    response = client.call(request, expect=ProduceResponse)
    (partition_response,) = response.responses[0].partition_responses
    return partition_response.error_code, partition_response.error_message
