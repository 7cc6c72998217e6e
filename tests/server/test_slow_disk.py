"""A producer sending at full speed to a broker whose log dir is on a slow disk: the broker's memory stays
bounded (it stops reading the producer's socket while its writes wait for the disk, rather than buffer
requests), other clients are answered meanwhile, and every acknowledged record is on disk afterwards.

The slow disk is real (:mod:`tests.support.slow_disk`, root only, skipped otherwise): ext4 on a loop
device whose writes the kernel throttles to 4 MiB/s, with at most 4 MiB of its data dirty in the page
cache, so the broker's ``write(2)`` calls wait for the device as they do on a disk that cannot keep up.
The broker has a second log dir on the machine's own disk; one partition of the topic lives in each.

Each case sends several times what the disk takes in the time: confluent-kafka (1 MiB batches, acks=1
and acks=all, a client queue deep enough to keep the broker's socket full), and raw connections that
write their produce requests back to back without reading a response (no client in-flight limit). While
it runs a second thread asks the broker for metadata and fetches the partition in the other log dir, over
and over: every call is answered (the slowest answer is printed). The broker's peak RSS (``VmHWM``, reset
at the start) over the case, minus its RSS before, stays well under the volume sent. Afterwards a
consumer reads the slow partition from the start and gets exactly the acknowledged records, in order, at
their offsets.

Found here: the broker appends on its event loop, so while a ``write(2)`` waits for the disk no other
connection is served either (metadata answers take up to seconds; Kafka's network threads and idle
request handlers would answer them). Memory stays bounded because of that, and because a connection's
next frame is read only after the previous one was appended.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import confluent_kafka
import pytest
from tests.support.abuse import peak_rss_bytes, record_rss, reset_peak_rss, rss_bytes
from tests.support.kafka_workload import GROUP_ID_UNUSED, confluent_create_topic
from tests.support.slow_disk import slow_loop_ext4

from tidelog.client.wire import WireClient
from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(300)]

MIB = 1 << 20
TOPIC = "slow-disk"
DISK_BYTES_PER_SECOND = 4 * MIB
VALUE_BYTES = 8 * 1024
CONFIG = {
    "offsets.topic.num.partitions": 1,
    "transaction.state.log.num.partitions": 1,
    "message.max.bytes": 2 * MIB,
}


class SlowDiskBroker:
    def __init__(self, broker: Broker, slow_partition: int, fast_partition: int, fast_values: list[bytes]):
        self.broker = broker
        self.slow_partition = slow_partition
        self.fast_partition = fast_partition
        self.fast_values = fast_values

    @property
    def pid(self) -> int:
        assert self.broker.pid is not None
        return self.broker.pid


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlowDiskBroker]:
    tmp = tmp_path_factory.mktemp("slow-disk")
    with slow_loop_ext4(
        tmp / "disk", tmp / "disk.img", size_mb=512, write_bytes_per_second=DISK_BYTES_PER_SECOND
    ) as mount:
        broker = Broker(
            CONFIG,
            data_dir=tmp / "fast",
            extra_log_dirs=[mount / "data"],
            run_dir=tmp / "run",
            startup_timeout=90,
        )
        try:
            broker.start()
            confluent_create_topic(broker.bootstrap_servers, TOPIC, 2)
            on_slow = [int(d.name.rsplit("-", 1)[1]) for d in (mount / "data").glob(f"{TOPIC}-*")]
            assert len(on_slow) == 1, on_slow
            (slow_partition,) = on_slow
            fast_partition = 1 - slow_partition
            fast_values = [b"fast-%d" % i for i in range(3)]
            assert _produce(broker.bootstrap_servers, fast_partition, fast_values, acks="all") == [
                (i, v) for i, v in enumerate(fast_values)
            ]
            yield SlowDiskBroker(broker, slow_partition, fast_partition, fast_values)
            log = broker.log_path.read_text()
            assert "Traceback" not in log, broker.log_tail()
            assert broker.stop() == 0, broker.log_tail()
        finally:
            broker.close()


def _produce(
    bootstrap: str, partition: int, values: list[bytes], *, acks: str, batch_bytes: int = MIB
) -> list[tuple[int, bytes]]:
    """Send ``values`` to ``partition`` as fast as the client goes; the acknowledged (offset, value)s in
    the order acknowledged. Fails on any delivery error."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "message.max.bytes": 2 * MIB,
            "queue.buffering.max.kbytes": 256 * 1024,
            "queue.buffering.max.messages": 1_000_000,
            "max.in.flight.requests.per.connection": 5,
            "compression.type": "none",
            "message.timeout.ms": 240_000,
            "request.timeout.ms": 120_000,
            "log_level": 3,
        }
    )
    acked: list[tuple[int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        if err is not None:
            errors.append(err.name())
            return
        offset, value = msg.offset(), msg.value()
        assert offset is not None
        assert value is not None
        acked.append((offset, value))

    for value in values:
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(240) == 0
    assert errors == [], errors[:5]
    return acked


def _read_back(bootstrap: str, partition: int, count: int) -> list[tuple[int, bytes]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP_ID_UNUSED,
            "enable.auto.commit": False,
            "fetch.max.bytes": 16 * MIB,
            "log_level": 3,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, partition, 0)])
        deadline = time.monotonic() + 120
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                offset, value = msg.offset(), msg.value()
                assert offset is not None
                assert value is not None
                got.append((offset, value))
    finally:
        consumer.close()
    return got


class Prober(threading.Thread):
    """Asks for metadata and fetches the fast partition, one after the other, until stopped; counts the
    answers and keeps the slowest one's time. Any failure is kept and re-raised by :meth:`result`."""

    def __init__(self, slow: SlowDiskBroker) -> None:
        super().__init__(daemon=True)
        self.slow = slow
        self.stopping = threading.Event()
        self.answers = 0
        self.slowest = 0.0
        self.failure: BaseException | None = None

    def run(self) -> None:
        fetch = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=MIB,
            topics=[
                FetchRequest.FetchTopic(
                    topic=TOPIC,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=self.slow.fast_partition, fetch_offset=0, partition_max_bytes=MIB
                        )
                    ],
                )
            ],
        )
        try:
            with WireClient("127.0.0.1", self.slow.broker.port, timeout=60) as client:
                while not self.stopping.is_set():
                    started = time.monotonic()
                    metadata = client.call(MetadataRequest(topics=None), 9, expect=MetadataResponse)
                    assert TOPIC in [t.name for t in metadata.topics]
                    fetched = client.call(fetch, 11, expect=FetchResponse)
                    partition = fetched.responses[0].partitions[0]
                    assert (partition.error_code, partition.high_watermark) == (0, len(self.slow.fast_values))
                    self.slowest = max(self.slowest, time.monotonic() - started)
                    self.answers += 1
                    self.stopping.wait(0.05)
        except BaseException as exc:
            self.failure = exc

    def result(self) -> tuple[int, float]:
        self.stopping.set()
        self.join(90)
        assert not self.is_alive(), "a metadata or fetch call was not answered"
        if self.failure is not None:
            raise self.failure
        return self.answers, self.slowest


def _full_speed(slow: SlowDiskBroker, *, acks: str, megabytes: int, label: str) -> None:
    bootstrap = slow.broker.bootstrap_servers
    start = _end_offset(bootstrap, slow.slow_partition)
    count = megabytes * MIB // VALUE_BYTES
    values = [(b"%s-%08d-" % (label.encode(), i)).ljust(VALUE_BYTES, b"x") for i in range(count)]
    before = rss_bytes(slow.pid)
    reset_peak_rss(slow.pid)
    prober = Prober(slow)
    prober.start()
    started = time.monotonic()
    acked = _produce(bootstrap, slow.slow_partition, values, acks=acks)
    took = time.monotonic() - started
    answers, slowest = prober.result()
    peak = peak_rss_bytes(slow.pid)
    grew = peak - before
    print(
        f"\nslow disk acks={acks}: {megabytes} MiB in {took:.1f} s ({megabytes / took:.1f} MiB/s), broker RSS "
        f"{before / MIB:.0f} MiB before, peak {peak / MIB:.0f} MiB (rose {grew / MIB:.1f} MiB), "
        f"{answers} probes answered, slowest {slowest * 1000:.0f} ms"
    )
    record_rss(
        f"slow disk: confluent producer acks={acks}, {megabytes} MiB",
        before,
        peak,
        mib_per_s=megabytes / took,
        probes=answers,
        slowest_probe_ms=slowest * 1000,
    )
    assert took * DISK_BYTES_PER_SECOND < 2 * megabytes * MIB, "the disk did not slow the producer"
    assert answers > 0
    assert grew < max(48 * MIB, megabytes * MIB // 4), f"broker RSS rose {grew / MIB:.0f} MiB"
    # Every acknowledged record is there, in order, at the offset it was acknowledged at.
    assert [v for _, v in acked] == values  # one partition, in-flight order kept: acked in send order
    assert [o for o, _ in acked] == list(range(start, start + count))
    got = _read_back(bootstrap, slow.slow_partition, start + count)
    assert got[start:] == acked


def _end_offset(bootstrap: str, partition: int) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP_ID_UNUSED})
    try:
        _, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(TOPIC, partition), timeout=30)
        return int(high)
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["1", "all"])
def test_full_speed_producer_to_a_slow_disk(slow: SlowDiskBroker, acks: str) -> None:
    _full_speed(slow, acks=acks, megabytes=24, label=f"acks{acks}")


@pytest.mark.soak
def test_full_speed_producer_to_a_slow_disk_soak(slow: SlowDiskBroker) -> None:
    _full_speed(slow, acks="all", megabytes=256, label="soak")


def _produce_frame(partition: int, values: list[bytes], correlation_id: int) -> bytes:
    batch = encode_batch([SimpleRecord(value=v, timestamp=int(time.time() * 1000)) for v in values])
    request = ProduceRequest(
        acks=-1,
        timeout_ms=120_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=request.API_KEY,
        request_api_version=8,
        correlation_id=correlation_id,
        client_id="pipe",
    )
    return encode_request(header, request)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"EOF after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def _pipelined(
    slow: SlowDiskBroker, connection: int, requests: int, out: dict[int, list[tuple[int, bytes]]]
) -> None:
    """One connection that writes ``requests`` 1 MiB produce requests (acks=all) back to back without
    waiting for a response, then reads the responses: ``out[connection]`` gets the acknowledged
    (offset, value)s, in request order."""
    per_batch = MIB // VALUE_BYTES
    batches = [
        [(b"pipe%d-%04d-%04d-" % (connection, r, i)).ljust(VALUE_BYTES, b"p") for i in range(per_batch)]
        for r in range(requests)
    ]
    with socket.create_connection(("127.0.0.1", slow.broker.port), timeout=120) as sock:
        sender = threading.Thread(
            target=sock.sendall,
            args=(b"".join(_produce_frame(slow.slow_partition, b, r) for r, b in enumerate(batches)),),
            daemon=True,
        )
        sender.start()
        acked: list[tuple[int, bytes]] = []
        for r, values in enumerate(batches):
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            header, response = decode_response(_recv_exact(sock, size), ProduceRequest.API_KEY, 8)
            assert header.correlation_id == r
            assert isinstance(response, ProduceResponse)
            (answer,) = response.responses[0].partition_responses
            assert answer.error_code == 0, answer
            acked.extend((answer.base_offset + i, v) for i, v in enumerate(values))
        sender.join(30)
    out[connection] = acked


def test_pipelining_producers_to_a_slow_disk(slow: SlowDiskBroker) -> None:
    """Four connections each write 4 produce requests of 1 MiB at once, without waiting for answers (no
    client in-flight limit): the broker reads only what it appends, so its RSS does not follow the
    16 MiB queued in the sockets; every acknowledged record is read back at its offset."""
    connections, requests = 4, 4
    before = rss_bytes(slow.pid)
    reset_peak_rss(slow.pid)
    prober = Prober(slow)
    prober.start()
    out: dict[int, list[tuple[int, bytes]]] = {}
    threads = [
        threading.Thread(target=_pipelined, args=(slow, c, requests, out), daemon=True)
        for c in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    answers, slowest = prober.result()
    peak = peak_rss_bytes(slow.pid)
    print(
        f"\nslow disk, {connections} pipelining connections x {requests} MiB: broker RSS {before / MIB:.0f} MiB "
        f"before, peak {peak / MIB:.0f} MiB, {answers} probes answered, slowest {slowest * 1000:.0f} ms"
    )
    record_rss(
        f"slow disk: {connections} connections pipelining {requests} x 1 MiB produces",
        before,
        peak,
        probes=answers,
        slowest_probe_ms=slowest * 1000,
    )
    assert sorted(out) == list(range(connections)), "a pipelining connection did not finish"
    assert answers > 0
    assert peak - before < 24 * MIB, f"broker RSS rose {(peak - before) / MIB:.0f} MiB"
    acked = sorted(r for records in out.values() for r in records)
    assert len(acked) == connections * requests * (MIB // VALUE_BYTES)
    end = acked[-1][0] + 1
    got = dict(_read_back(slow.broker.bootstrap_servers, slow.slow_partition, end))
    assert [(o, got.get(o)) for o, _ in acked] == acked
