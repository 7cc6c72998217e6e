"""Interoperability of our record batches with the three Python Kafka clients, both ways.

* Batches written by confluent-kafka (librdkafka), kafka-python and aiokafka, with each compression
  codec, validate and decode to exactly the records sent: committed golden files, and (marker
  ``clients``) live producers against a capture broker.
* Batches we encode are read by kafka-python's and aiokafka's own record readers to exactly our records,
  and (marker ``clients``) by all three clients' real consumers fetching them from the capture broker.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from tests.support.capture_broker import CaptureBroker
from tests.support.client_consumers import CONSUMERS, CREATE_TIME, LOG_APPEND_TIME, ConsumedRecord
from tests.support.client_producers import (
    CLIENTS,
    CODECS,
    PRODUCERS,
    interop_records,
    large_records,
)
from tests.support.golden_batches import golden_path, load_batches

from tidelog.protocol.compression import XERIAL_MAGIC
from tidelog.protocol.records import (
    RECORD_BATCH_HEADER_SIZE,
    Compression,
    ControlRecordType,
    Record,
    SimpleRecord,
    TimestampType,
    assign_offsets,
    decode_batch,
    encode_batch,
    encode_control_batch,
    set_log_append_time,
    validate_batch,
)

# kafka-python 3.0 loads its schemas with importlib.resources.read_text/open_text, deprecated since Python 3.11.
pytestmark = pytest.mark.filterwarnings(r"ignore:\w+ is deprecated. Use files\(\) instead:DeprecationWarning")

Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]

CLIENT_CODECS = [
    pytest.param(client, codec, id=f"{client}-{codec.name.lower()}") for client in CLIENTS for codec in CODECS
]


def _rows(records: Sequence[SimpleRecord | Record]) -> list[Row]:
    return [(r.key, r.value, tuple(r.headers), r.timestamp) for r in records]


def _decode_client_batches(batches: list[bytes], codec: Compression) -> list[Record]:
    """Validate each batch as a produce payload and decode it; check the per-batch invariants."""
    decoded: list[Record] = []
    for batch in batches:
        header = validate_batch(batch, from_client=True)
        assert header.compression is codec
        assert header.timestamp_type is TimestampType.CREATE_TIME
        assert header.is_control is False
        assert header.is_transactional is False
        assert header.size_in_bytes == len(batch)
        same_header, records = decode_batch(batch)
        assert same_header == header
        assert [r.offset for r in records] == list(range(header.base_offset, header.next_offset))
        assert header.max_timestamp == max(r.timestamp for r in records)
        assert header.base_timestamp == records[0].timestamp
        decoded.extend(records)
    return decoded


@pytest.mark.parametrize(("client", "codec"), CLIENT_CODECS)
def test_golden_client_batch_decodes_to_exact_records(client: str, codec: Compression) -> None:
    batches = load_batches(golden_path(client, codec))
    assert batches
    assert _rows(_decode_client_batches(batches, codec)) == _rows(interop_records(client))


@pytest.mark.parametrize("client", CLIENTS)
def test_golden_snappy_framing_per_client(client: str) -> None:
    """librdkafka writes raw snappy; the two Python clients write Java's xerial framing: we read both."""
    (batch,) = load_batches(golden_path(client, Compression.SNAPPY))
    payload = batch[RECORD_BATCH_HEADER_SIZE:]
    assert payload.startswith(XERIAL_MAGIC) is (client != "confluent-kafka")


@pytest.fixture(scope="module")
def capture_broker() -> Iterator[CaptureBroker]:
    with CaptureBroker() as broker:
        yield broker


@pytest.mark.clients
@pytest.mark.parametrize(("client", "codec"), CLIENT_CODECS)
def test_live_producer_batches_decode_to_exact_records(
    capture_broker: CaptureBroker, client: str, codec: Compression
) -> None:
    topic = f"live-{client}-{codec.name.lower()}"
    records = interop_records(client) + large_records()
    PRODUCERS[client](capture_broker.bootstrap, topic, records, codec)
    batches = capture_broker.wait_for_records(topic, len(records))
    assert _rows(_decode_client_batches(batches, codec)) == _rows(records)


@pytest.mark.clients
def test_live_idempotent_confluent_kafka_batches_carry_producer_state(capture_broker: CaptureBroker) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": capture_broker.bootstrap,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 50,
            "log_level": 3,
        }
    )
    for i in range(5):
        producer.produce("idempotent", key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp=1_000 + i)
    assert producer.flush(30) == 0
    (batch,) = capture_broker.wait_for_records("idempotent", 5)
    header = validate_batch(batch, from_client=True)
    assert header.producer_id >= 1000
    assert (header.producer_epoch, header.base_sequence, header.last_sequence) == (0, 0, 4)
    _, records = decode_batch(batch)
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (b"k%d" % i, b"v%d" % i, 1_000 + i) for i in range(5)
    ]


# ---- our batches, read by the clients' own record readers ------------------------------------------


def _kafka_python_reader(batch: bytes) -> Any:
    from kafka.record.default_records import DefaultRecordBatch

    return DefaultRecordBatch(batch)


def _aiokafka_reader(batch: bytes) -> Any:
    from aiokafka.record.default_records import DefaultRecordBatch

    return DefaultRecordBatch(batch)


def _aiokafka_py_reader(batch: bytes) -> Any:
    from aiokafka.record.default_records import _DefaultRecordBatchPy

    return _DefaultRecordBatchPy(batch)


READERS = [
    pytest.param(_kafka_python_reader, id="kafka-python"),
    pytest.param(_aiokafka_reader, id="aiokafka"),
    pytest.param(_aiokafka_py_reader, id="aiokafka-py"),
]


def _client_rows(reader_batch: Any) -> list[tuple[int, Row]]:
    return [
        (r.offset, (r.key, r.value, tuple((k, v) for k, v in r.headers), r.timestamp)) for r in reader_batch
    ]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_our_batches_read_by_client_record_readers(reader: Any, codec: Compression) -> None:
    records = interop_records("confluent-kafka") + large_records()
    batch = encode_batch(
        records, base_offset=1_000, compression=codec, producer_id=5, producer_epoch=1, base_sequence=7
    )
    theirs = reader(batch)
    assert theirs.validate_crc()
    assert theirs.base_offset == 1_000
    assert theirs.compression_type == codec
    assert theirs.producer_id == 5
    assert (theirs.producer_epoch, theirs.base_sequence, theirs.last_offset_delta) == (1, 7, len(records) - 1)
    assert _client_rows(theirs) == list(enumerate(_rows(records), start=1_000))


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_clients_read_our_batches_after_broker_rewrites(reader: Any, codec: Compression) -> None:
    """assign_offsets + set_log_append_time: the clients see the new offsets and the append time."""
    records = interop_records("aiokafka")
    buf = bytearray(encode_batch(records, compression=codec))
    assign_offsets(buf, 0, 77, 3)
    set_log_append_time(buf, 0, 1_800_000_000_000)
    theirs = reader(bytes(buf))
    assert theirs.validate_crc()
    assert theirs.timestamp_type == 1
    expected = [(key, value, headers, 1_800_000_000_000) for key, value, headers, _ in _rows(records)]
    assert _client_rows(theirs) == list(enumerate(expected, start=77))


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", list(ControlRecordType))
def test_clients_read_our_control_batches(reader: Any, kind: ControlRecordType) -> None:
    batch = encode_control_batch(
        kind, producer_id=9, producer_epoch=2, coordinator_epoch=4, base_offset=50, timestamp_ms=123
    )
    theirs = reader(batch)
    assert theirs.validate_crc()
    assert (theirs.is_control_batch, theirs.is_transactional) == (True, True)
    (record,) = list(theirs)
    assert (record.offset, record.timestamp) == (50, 123)
    assert record.key == bytes((0, 0, 0, int(kind)))
    assert record.value == bytes((0, 0, 0, 0, 0, 4))


@pytest.mark.clients
@pytest.mark.parametrize("client", CLIENTS)
def test_live_consumers_read_our_batches(capture_broker: CaptureBroker, client: str) -> None:
    """One log holding a batch per codec, a transactional batch and its commit marker, a log-append-time
    batch and multi-block records: each consumer sees exactly our records, the marker skipped."""
    records = [r for r in interop_records("confluent-kafka") if r.key is not None or r.value is not None]
    append_time = 1_800_000_000_000
    # (records, encode_batch keyword arguments, log append time)
    plan: list[tuple[list[SimpleRecord], dict[str, Any], int | None]] = [
        (records, {"compression": codec}, None) for codec in CODECS
    ]
    plan.append(
        (
            records[:3],
            {"producer_id": 42, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True},
            None,
        )
    )
    plan.append(([], {}, None))  # the COMMIT marker
    plan.append((records[:2], {"compression": Compression.LZ4}, append_time))
    plan.append((large_records(), {"compression": Compression.SNAPPY}, None))

    log = bytearray()
    expected: list[ConsumedRecord] = []
    next_offset = 0
    for batch_records, kwargs, log_append_time in plan:
        if batch_records:
            buf = bytearray(encode_batch(batch_records, **kwargs))
        else:
            buf = bytearray(
                encode_control_batch(
                    ControlRecordType.COMMIT,
                    producer_id=42,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp_ms=5,
                )
            )
        assign_offsets(buf, 0, next_offset, 0)
        if log_append_time is not None:
            set_log_append_time(buf, 0, log_append_time)
        for i, r in enumerate(batch_records):
            timestamp, kind = (
                (r.timestamp, CREATE_TIME) if log_append_time is None else (log_append_time, LOG_APPEND_TIME)
            )
            expected.append(
                ConsumedRecord(next_offset + i, r.key, r.value, tuple(r.headers), timestamp, kind)
            )
        next_offset = validate_batch(buf).next_offset
        log.extend(buf)

    topic = f"consume-{client}"
    assert capture_broker.serve(topic, bytes(log)) == next_offset
    assert CONSUMERS[client](capture_broker.bootstrap, topic, len(expected)) == expected
