"""The message browser: a bounded read of one topic from an offset, a timestamp or the latest N records.

Invariants: one request reads at most ``scan_limit`` records and returns at most ``limit`` matches, so a page
never costs more than a bounded fetch however large the topic is; the consumer assigns partitions (no group
membership) and never commits; message contents stay bytes here and are decoded for display by
:func:`render` (text with U+FFFD for bad UTF-8, or hex), escaping is the template's job.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tidelog.console.kafka import BadRequestError, ConsoleError, KafkaGateway, NotFoundError, error_text

__all__ = ["BrowseQuery", "BrowseResult", "Record", "browse", "parse_timestamp_ms", "record_json", "render"]

MAX_LIMIT = 500
SCAN_LIMIT = 20_000
Mode = Literal["latest", "offset", "timestamp"]


@dataclass(frozen=True)
class BrowseQuery:
    topic: str
    partition: int | None = None  # None: every partition
    mode: Mode = "latest"
    offset: int = 0  # mode "offset": the first offset read in each partition
    timestamp_ms: int = 0  # mode "timestamp"
    limit: int = 50  # the most records returned
    key_filter: str = ""
    value_filter: str = ""
    header_filter: str = ""
    scan_limit: int = SCAN_LIMIT

    @property
    def filtered(self) -> bool:
        return bool(self.key_filter or self.value_filter or self.header_filter)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass
class BrowseResult:
    records: list[Record] = field(default_factory=list)
    scanned: int = 0
    # where each partition's read stopped: the offset to continue from
    next_offsets: dict[int, int] = field(default_factory=dict)
    truncated: bool = False  # the scan budget ran out before every partition reached its end
    elapsed_ms: float = 0.0


def _headers(
    raw: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
) -> tuple[tuple[str, bytes | None], ...]:
    pairs = list(raw.items()) if isinstance(raw, dict) else list(raw or [])
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in pairs)


def _contains(data: bytes | None, needle: str) -> bool:
    return data is not None and needle.encode() in data


def _matches(query: BrowseQuery, record: Record) -> bool:
    if query.key_filter and not _contains(record.key, query.key_filter):
        return False
    if query.value_filter and not _contains(record.value, query.value_filter):
        return False
    if query.header_filter:
        needle = query.header_filter.encode()
        return any(needle in k.encode() or (v is not None and needle in v) for k, v in record.headers)
    return True


def _start_offsets(
    gateway: KafkaGateway, query: BrowseQuery, partitions: list[int]
) -> dict[int, tuple[int, int]]:
    """(start, high watermark) per partition for the query, only partitions with something to read."""
    marks = gateway.watermarks((query.topic, p) for p in partitions)
    if query.mode == "timestamp":
        by_time = gateway.offsets_for_time(((query.topic, p) for p in partitions), query.timestamp_ms)
    starts: dict[int, tuple[int, int]] = {}
    for p in partitions:
        low, high = marks[(query.topic, p)]
        if high < 0:
            continue
        if query.mode == "latest":
            # unfiltered: exactly the last `limit` of each partition; filtered: scan back further
            back = (
                query.limit if not query.filtered else max(query.limit, query.scan_limit // len(partitions))
            )
            start = max(low, high - back)
        elif query.mode == "offset":
            start = min(max(low, query.offset), high)
        else:
            found = by_time[(query.topic, p)]
            start = high if found < 0 else max(low, found)
        if start < high:
            starts[p] = (start, high)
    return starts


def browse(gateway: KafkaGateway, query: BrowseQuery) -> BrowseResult:
    started = time.monotonic()
    limit = max(1, min(query.limit, MAX_LIMIT))
    topic = gateway.topic(query.topic)
    partitions = [p.partition for p in topic.partitions]
    if query.partition is not None:
        if query.partition not in partitions:
            raise NotFoundError(f"{query.topic} has no partition {query.partition}")
        partitions = [query.partition]
    starts = _start_offsets(gateway, query, partitions)
    result = BrowseResult(next_offsets={p: s for p, (s, _) in starts.items()})
    if not starts:
        result.elapsed_ms = (time.monotonic() - started) * 1000
        return result
    consumer = gateway.consumer()
    try:
        consumer.assign([TopicPartition(query.topic, p, s) for p, (s, _) in starts.items()])
        open_partitions = {p: high for p, (_, high) in starts.items()}
        deadline = time.monotonic() + gateway.timeout
        latest = query.mode == "latest"
        while open_partitions and result.scanned < query.scan_limit and time.monotonic() < deadline:
            if not latest and len(result.records) >= limit:
                break
            # consume() waits until it has num_messages or the timeout passed: ask for no more than is there
            remaining = sum(high - result.next_offsets[p] for p, high in open_partitions.items())
            wanted = max(1, min(1000, query.scan_limit - result.scanned, remaining))
            if not latest and not query.filtered:
                wanted = min(wanted, limit - len(result.records))
            batch = consumer.consume(num_messages=wanted, timeout=0.5)
            for message in batch:
                error = message.error()
                partition = message.partition()
                if partition is None:
                    continue
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        open_partitions.pop(partition, None)
                        continue
                    raise ConsoleError(error_text(error))
                offset = message.offset() or 0
                high = open_partitions.get(partition)
                if high is None:
                    continue
                result.next_offsets[partition] = offset + 1
                if offset + 1 >= high:
                    open_partitions.pop(partition, None)
                if offset >= high:
                    continue
                result.scanned += 1
                record = Record(
                    partition,
                    offset,
                    message.timestamp()[1],
                    message.key(),
                    message.value(),
                    _headers(message.headers()),
                )
                if _matches(query, record):
                    result.records.append(record)
                    if not latest and len(result.records) >= limit:
                        break
        result.truncated = bool(open_partitions)
    except KafkaException as exc:
        raise ConsoleError(error_text(exc)) from exc
    finally:
        consumer.close()
    # by time; records of one millisecond by offset, so that the latest N of several partitions interleave
    result.records.sort(key=lambda r: (r.timestamp_ms, r.offset, r.partition))
    if latest:
        result.records = result.records[-limit:]
    result.elapsed_ms = (time.monotonic() - started) * 1000
    return result


Format = Literal["text", "hex"]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def render(data: bytes | None, fmt: Format) -> tuple[str, bool]:
    """Display text for a key or value and whether it was JSON (pretty-printed). None shows as ``null``."""
    if data is None:
        return "null", False
    if fmt == "hex":
        return " ".join(data[i : i + 16].hex(" ") for i in range(0, len(data), 16)), False
    text = _text(data)
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False), True
        except ValueError:
            pass
    return text, False


def record_json(topic: str, record: Record) -> str:
    """One line of the JSON-lines download: text fields (U+FFFD for bad UTF-8) with the raw bytes in hex."""
    return json.dumps(
        {
            "topic": topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "key": None if record.key is None else _text(record.key),
            "value": None if record.value is None else _text(record.value),
            "headers": [[k, None if v is None else _text(v)] for k, v in record.headers],
            "key_hex": None if record.key is None else record.key.hex(),
            "value_hex": None if record.value is None else record.value.hex(),
        },
        ensure_ascii=True,  # only ASCII on the wire: no byte of a value can be read as markup by a sniffer
    )


def parse_timestamp_ms(raw: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date-time (UTC unless it says otherwise)."""
    raw = raw.strip()
    if not raw:
        return 0
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadRequestError(f"timestamp {raw!r} is neither milliseconds nor an ISO 8601 date-time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)
