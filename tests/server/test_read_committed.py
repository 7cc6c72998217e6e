"""read_committed at the wire and with real clients: last stable offset, aborted transactions, waiting.

Until the transaction coordinator exists no client can produce transactionally, so the logs are built
here: (1) through the storage API while the broker is stopped, then served by a broker process — decided
transactions (aborted and committed, interleaved with each other and with plain records, across segments)
and a topic ending in an open transaction; (2) in a broker running inside the test process, where the
test registers a transaction verifier, produces transactional batches over the wire and writes markers
through ``ReplicaManager.write_txn_marker`` as the coordinator will.

confluent-kafka, kafka-python and aiokafka consumers with read_committed must see exactly the committed and
non-transactional records (and stop at the LSO), with read_uncommitted every data record, never a control
record; a read_committed consumer waits behind an open transaction and gets its records when the commit
marker lands.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tidelog.protocol.codec import decode_response, encode_request
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from tidelog.protocol.records import (
    Compression,
    ControlRecordType,
    SimpleRecord,
    decode_batch,
    encode_batch,
    iter_batch_headers,
)
from tidelog.server.broker import Broker as InProcess
from tidelog.server.config import load_broker_config
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager
from tidelog.storage.meta_properties import read_meta_properties
from tidelog.storage.partition_log import PartitionLog
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT
P1, P2, P3 = 7001, 7002, 7003
MIXED = "txn-mixed"
OPEN = "txn-open"
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
T = TypeVar("T")


# ---- building logs ----------------------------------------------------------------------------------


@dataclass
class History:
    """What a log holds: every data record's value in offset order, which of them read_committed sees,
    and the aborted transactions (producer id, first offset)."""

    log: PartitionLog
    all_values: list[bytes] = field(default_factory=list)
    committed: list[bytes] = field(default_factory=list)
    aborted: list[tuple[int, int]] = field(default_factory=list)
    pending: dict[int, list[bytes]] = field(default_factory=dict)
    firsts: dict[int, int] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)
    counter: int = 0

    def _values(self, label: str, count: int) -> list[bytes]:
        values = []
        for _ in range(count):
            values.append(b"%s-%04d" % (label.encode(), self.counter))
            self.counter += 1
        return values

    def _append(self, data: bytes) -> int:
        info = self.log.append(data, leader_epoch=0, now_ms=now_ms())
        self.log.update_high_watermark(self.log.log_end_offset)
        return info.first_offset

    def plain(self, count: int = 2) -> None:
        values = self._values("plain", count)
        self._append(encode_batch([SimpleRecord(key=None, value=v, timestamp=now_ms()) for v in values]))
        self.all_values += values
        self.committed += values

    def txn(self, pid: int, count: int = 2, compression: Compression = Compression.NONE) -> None:
        values = self._values(f"txn{pid}", count)
        sequence = self.sequences.get(pid, 0)
        first = self._append(
            encode_batch(
                [SimpleRecord(key=b"k", value=v, timestamp=now_ms()) for v in values],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=sequence,
                is_transactional=True,
                compression=compression,
            )
        )
        self.sequences[pid] = sequence + count
        self.firsts.setdefault(pid, first)
        self.pending.setdefault(pid, []).extend(values)
        self.all_values += values

    def end(self, pid: int, kind: ControlRecordType) -> None:
        self.log.append_control_marker(
            kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, leader_epoch=0, now_ms=now_ms()
        )
        self.log.update_high_watermark(self.log.log_end_offset)
        values = self.pending.pop(pid)
        first = self.firsts.pop(pid)
        if kind == COMMIT:
            self.committed += values  # visible from the marker on, at their offsets
        else:
            self.aborted.append((pid, first))

    def committed_in_offset_order(self) -> list[bytes]:
        """read_committed order: committed records stay at their offsets, so order by position in the log."""
        position = {v: i for i, v in enumerate(self.all_values)}
        return sorted(self.committed, key=position.__getitem__)


def build_mixed(log: PartitionLog) -> History:
    """Two aborted and two committed transactions of three producers, interleaved, over three segments."""
    h = History(log)
    h.plain(3)
    h.txn(P1)  # aborted below
    h.txn(P2)  # committed below
    h.plain()
    log.roll(now_ms())
    h.txn(P1)
    h.txn(P3, 1, Compression.GZIP)  # aborted below
    h.txn(P2)
    h.end(P1, ABORT)  # P1's transaction spans segments 0 and 1
    h.plain(1)
    log.roll(now_ms())
    h.end(P2, COMMIT)
    h.end(P3, ABORT)
    h.txn(P1, 3)  # a new transaction of P1, committed
    h.plain()
    h.end(P1, COMMIT)
    h.plain(2)
    return h


def build_open(log: PartitionLog) -> tuple[History, int]:
    """A committed and an aborted transaction, then P3's transaction left open with plain records after."""
    h = History(log)
    h.plain()
    h.txn(P1)
    h.txn(P2)
    h.end(P2, ABORT)
    h.end(P1, COMMIT)
    h.plain(2)
    lso = log.log_end_offset
    h.txn(P3)
    h.plain(2)  # behind the open transaction: invisible to read_committed
    return h, lso


@dataclass
class Served:
    broker: Broker
    mixed: History
    open: History
    open_lso: int
    end: dict[str, int]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("read-committed")
    broker = Broker(data_dir=workdir / "data", run_dir=workdir / "run")
    broker.start()
    try:
        create_topics(broker, [MIXED, OPEN])
        assert broker.stop(timeout=30) == 0
        data_dir = Path(broker.data_dir)
        meta = read_meta_properties(data_dir)
        assert meta is not None
        logs = LogManager([data_dir], LogConfig(), now_ms=now_ms(), node_id=meta.node_id)
        mixed_log, open_log = logs.get(MIXED, 0), logs.get(OPEN, 0)
        assert mixed_log is not None
        assert open_log is not None
        mixed = build_mixed(mixed_log)
        open_history, open_lso = build_open(open_log)
        end = {MIXED: mixed_log.log_end_offset, OPEN: open_log.log_end_offset}
        logs.shutdown(now_ms())
        broker.start()
        yield Served(broker, mixed, open_history, open_lso, end)
    finally:
        code = broker.stop(timeout=30)
        text = broker.log_path.read_text(errors="replace")
        broker.close()
        assert code == 0
        assert "Traceback" not in text
        assert "level=ERROR" not in text


def create_topics(broker: Broker, names: list[str]) -> None:
    from confluent_kafka import admin as ck_admin

    admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    futures = admin.create_topics([ck_admin.NewTopic(n, 1, 1) for n in names], operation_timeout=10)  # type: ignore[attr-defined]
    for future in futures.values():
        future.result(timeout=15)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---- the wire ----------------------------------------------------------------------------------------


class Wire:
    """Requests encoded by our codec over a plain socket."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return bytes(data)

    def send(self, body: Any, version: int) -> None:
        self.correlation_id += 1
        header = RequestHeader(
            request_api_key=body.API_KEY,
            request_api_version=version,
            correlation_id=self.correlation_id,
            client_id="txn-wire-test",
        )
        self.sock.sendall(encode_request(header, body))

    def receive(self, body: Any, version: int) -> Any:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        header, response = decode_response(self._recv_exact(size), body.API_KEY, version)
        assert header.correlation_id == self.correlation_id
        return response

    def call(self, body: Any, version: int) -> Any:
        self.send(body, version)
        return self.receive(body, version)


def fetch_request(
    topic: str, offset: int, *, isolation: int, max_wait_ms: int = 0, min_bytes: int = 0
) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 24,
        isolation_level=isolation,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 24)
                ],
            )
        ],
    )


def fetch(
    wire: Wire, topic: str, offset: int, *, isolation: int, version: int
) -> FetchResponse.PartitionData:
    response: FetchResponse = wire.call(fetch_request(topic, offset, isolation=isolation), version)
    assert response.error_code == ErrorCode.NONE
    (partition,) = response.responses[0].partitions
    assert partition.error_code == ErrorCode.NONE
    return partition


def raw(records: object) -> bytes:
    """A decoded response's records field as bytes (empty for null)."""
    if records is None:
        return b""
    assert isinstance(records, bytes | bytearray | memoryview)
    return bytes(records)


def batches(records: object) -> list[tuple[int, int, bool, list[bytes | None]]]:
    """(base offset, producer id, is control, record values) of each batch in a records field."""
    data = raw(records)
    out = []
    for position, header in iter_batch_headers(data):
        _, decoded = decode_batch(data, position)
        out.append((header.base_offset, header.producer_id, header.is_control, [r.value for r in decoded]))
    return out


def aborted_of(partition: FetchResponse.PartitionData) -> list[tuple[int, int]] | None:
    if partition.aborted_transactions is None:
        return None
    return [(a.producer_id, a.first_offset) for a in partition.aborted_transactions]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_answers_lso_and_the_aborted_transactions_of_the_range(served: Served, version: int) -> None:
    wire = Wire(served.broker.bootstrap_servers)
    try:
        end = served.end[MIXED]
        committed = fetch(wire, MIXED, 0, isolation=1, version=version)
        assert (committed.high_watermark, committed.last_stable_offset) == (end, end)
        assert aborted_of(committed) == served.mixed.aborted
        read = batches(committed.records)
        assert read[0][0] == 0
        assert [v for _, _, control, values in read if not control for v in values] == served.mixed.all_values
        # the batches are sent as they are: the client drops the aborted ones with the list above
        uncommitted = fetch(wire, MIXED, 0, isolation=0, version=version)
        assert aborted_of(uncommitted) is None
        assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (end, end)
        assert raw(uncommitted.records) == raw(committed.records)
        # from inside P1's aborted transaction, past its first offset: still reported (its marker is ahead)
        p1_first = served.mixed.aborted[0][1]
        middle = fetch(wire, MIXED, p1_first + 2, isolation=1, version=version)
        assert aborted_of(middle) == served.mixed.aborted
        # from after every abort marker: none
        last = fetch(wire, MIXED, end - 2, isolation=1, version=version)
        assert aborted_of(last) == []
        # the open transaction: read_committed stops at the LSO, read_uncommitted at the high watermark
        open_end = served.end[OPEN]
        held = fetch(wire, OPEN, 0, isolation=1, version=version)
        assert (held.high_watermark, held.last_stable_offset) == (open_end, served.open_lso)
        assert max(base for base, *_ in batches(held.records)) < served.open_lso
        assert aborted_of(held) == served.open.aborted
        free = fetch(wire, OPEN, 0, isolation=0, version=version)
        assert (free.high_watermark, free.last_stable_offset) == (open_end, served.open_lso)
        assert batches(free.records)[-1][3] == served.open.all_values[-2:]
        at_lso = fetch(wire, OPEN, served.open_lso, isolation=1, version=version)
        assert (raw(at_lso.records), aborted_of(at_lso)) == (b"", [])
    finally:
        wire.close()


@pytest.mark.parametrize("version", [2, 7])
def test_list_offsets_latest_is_the_lso_under_read_committed(served: Served, version: int) -> None:
    wire = Wire(served.broker.bootstrap_servers)
    try:
        for isolation, expected in ((0, served.end[OPEN]), (1, served.open_lso)):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=OPEN,
                        partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                    )
                ],
            )
            response: ListOffsetsResponse = wire.call(request, version)
            (partition,) = response.topics[0].partitions
            assert (partition.error_code, partition.offset) == (ErrorCode.NONE, expected)
    finally:
        wire.close()


def transactional_produce(
    topic: str, pid: int, sequence: int, values: list[bytes], transactional_id: str | None
) -> ProduceRequest:
    data = encode_batch(
        [SimpleRecord(key=None, value=v, timestamp=now_ms()) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=True,
    )
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=data)]
            )
        ],
    )


def produce_result(wire: Wire, request: ProduceRequest, version: int) -> tuple[int, str | None, int]:
    response: ProduceResponse = wire.call(request, version)
    (partition,) = response.responses[0].partition_responses
    return partition.error_code, partition.error_message, partition.base_offset


@pytest.mark.parametrize(
    ("version", "transactional_id", "expected"),
    [
        (3, "tx", (ErrorCode.INVALID_TXN_STATE, None)),  # v3-v7 carry no error message
        (9, "tx", (ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")),
        (10, "tx", (ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")),
        (11, "tx", (ErrorCode.TRANSACTION_ABORTABLE, None)),
        (9, None, (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)),
    ],
)
def test_transactional_produce_is_rejected_until_a_coordinator_verifies_it(
    served: Served, version: int, transactional_id: str | None, expected: tuple[int, str | None]
) -> None:
    wire = Wire(served.broker.bootstrap_servers)
    try:
        request = transactional_produce(MIXED, 9999, 0, [b"late retry"], transactional_id)
        assert produce_result(wire, request, version) == (*expected, -1)
        # nothing was written
        assert fetch(wire, MIXED, 0, isolation=0, version=12).high_watermark == served.end[MIXED]
    finally:
        wire.close()


# ---- real consumers ------------------------------------------------------------------------------------


@dataclass
class Reading:
    """One consumer run: read from offset 0 until the position reaches ``until`` (or 30 s, or ``stop``)."""

    topic: str
    isolation: str
    until: int
    got: list[bytes] = field(default_factory=list)
    """The values read so far (another thread may watch it grow)."""
    stop: threading.Event = field(default_factory=threading.Event)

    def going(self, deadline: float) -> bool:
        return time.monotonic() < deadline and not self.stop.is_set()

    def done(self, client: str, position: int) -> bool:
        if position < self.until:
            return False
        assert position == self.until, f"{client} read past {self.until} to {position}"
        return True

    def stuck(self, client: str, position: int) -> None:
        pytest.fail(f"{client} {self.isolation} stuck at {position}, expected {self.until}; got {self.got}")


def consume(
    client: str,
    bootstrap: str,
    topic: str,
    *,
    committed: bool,
    until: int,
    reading: Reading | None = None,
) -> list[bytes]:
    """Every record value a consumer of ``client`` reads from offset 0 until its position reaches ``until``."""
    run = reading or Reading(topic, "read_committed" if committed else "read_uncommitted", until)
    if client == "confluent-kafka":
        _consume_confluent(bootstrap, run)
    elif client == "kafka-python":
        _consume_kafka_python(bootstrap, run)
    else:
        asyncio.run(_consume_aiokafka(bootstrap, run))
    return run.got


def _consume_confluent(bootstrap: str, run: Reading) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": run.isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    position = -1
    try:
        consumer.assign([TopicPartition(run.topic, 0, 0)])
        deadline = time.monotonic() + 30
        while run.going(deadline):
            for message in consumer.consume(100, timeout=0.2):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                run.got.append(value)
            position = consumer.position([TopicPartition(run.topic, 0)])[0].offset
            if run.done("confluent-kafka", position):
                return
        run.stuck("confluent-kafka", position)
    finally:
        consumer.close()


def _consume_kafka_python(bootstrap: str, run: Reading) -> None:
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=run.isolation,
        fetch_max_wait_ms=100,
    )
    tp = kafka.TopicPartition(run.topic, 0)
    position = -1
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while run.going(deadline):
            for records in consumer.poll(timeout_ms=200).values():
                run.got.extend(r.value for r in records)
            position = consumer.position(tp)
            if run.done("kafka-python", position):
                return
        run.stuck("kafka-python", position)
    finally:
        consumer.close()


async def _consume_aiokafka(bootstrap: str, run: Reading) -> None:
    import aiokafka

    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=run.isolation,
        fetch_max_wait_ms=100,
    )
    tp = aiokafka.TopicPartition(run.topic, 0)
    position = -1
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while run.going(deadline):
            for records in (await consumer.getmany(timeout_ms=200)).values():
                run.got.extend(r.value for r in records if r.value is not None)
            position = await consumer.position(tp)
            if run.done("aiokafka", position):
                return
        run.stuck("aiokafka", position)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_consumers_see_exactly_the_committed_records(served: Served, client: str) -> None:
    bootstrap = served.broker.bootstrap_servers
    mixed = served.mixed
    assert (
        consume(client, bootstrap, MIXED, committed=True, until=served.end[MIXED])
        == mixed.committed_in_offset_order()
    )
    assert consume(client, bootstrap, MIXED, committed=False, until=served.end[MIXED]) == mixed.all_values
    opened = served.open
    below_lso = [v for v in opened.committed_in_offset_order() if v not in opened.pending.get(P3, [])]
    assert consume(client, bootstrap, OPEN, committed=True, until=served.open_lso) == below_lso[:-2]
    assert consume(client, bootstrap, OPEN, committed=False, until=served.end[OPEN]) == opened.all_values


def test_lso_and_aborted_transactions_are_rebuilt_after_a_crash(served: Served) -> None:
    """SIGKILL, then lose every producer snapshot, transaction index and the recovery point checkpoint:
    the restarted broker recovers each log from its start and answers exactly as before."""
    broker = served.broker
    broker.kill()
    data_dir = Path(broker.data_dir)
    (data_dir / "recovery-point-offset-checkpoint").unlink()
    for topic in (MIXED, OPEN):
        for path in [
            *(data_dir / f"{topic}-0").glob("*.snapshot"),
            *(data_dir / f"{topic}-0").glob("*.txnindex"),
        ]:
            path.unlink()
    broker.start()
    wire = Wire(broker.bootstrap_servers)
    try:
        mixed = fetch(wire, MIXED, 0, isolation=1, version=12)
        assert (mixed.last_stable_offset, aborted_of(mixed)) == (served.end[MIXED], served.mixed.aborted)
        held = fetch(wire, OPEN, 0, isolation=1, version=12)
        assert (held.high_watermark, held.last_stable_offset) == (served.end[OPEN], served.open_lso)
        assert aborted_of(held) == served.open.aborted
    finally:
        wire.close()
    assert list((data_dir / f"{MIXED}-0").glob("*.txnindex"))
    expected = served.mixed.committed_in_offset_order()
    assert consume(
        "confluent-kafka", broker.bootstrap_servers, MIXED, committed=True, until=served.end[MIXED]
    ) == (expected)


# ---- a broker in this process: markers land while consumers wait -------------------------------------------


class BrokerThread:
    """A broker on its own event loop in a thread; :meth:`call` runs a function on that loop."""

    def __init__(self, data_dir: Path) -> None:
        config, _ = load_broker_config(
            None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir), "num.partitions": "1"}
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="in-process-broker", daemon=True)
        self.thread.start()
        self.broker: InProcess = asyncio.run_coroutine_threadsafe(self._start(config), self.loop).result(30)
        self.bootstrap = f"127.0.0.1:{self.broker.port}"

    @staticmethod
    async def _start(config: Any) -> InProcess:
        broker = InProcess(config)
        await broker.start()
        return broker

    def call(self, fn: Callable[[], T]) -> T:
        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.broker.stop(grace_s=5), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[BrokerThread]:
    broker = BrokerThread(tmp_path / "data")
    try:
        yield broker
    finally:
        broker.stop()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def write_marker(live: BrokerThread, topic: str, pid: int, kind: ControlRecordType) -> int:
    error, info, message = live.call(
        lambda: live.broker.replicas.write_txn_marker(
            topic, 0, kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, now_ms=now_ms()
        )
    )
    assert error == ErrorCode.NONE, message
    assert info is not None
    return info.first_offset


def verifier_for(topic: str) -> Callable[[str | None, int, int, str, int], ErrorCode]:
    def verify(transactional_id: str | None, _pid: int, _epoch: int, name: str, _partition: int) -> ErrorCode:
        if transactional_id == "tx" and name == topic:
            return ErrorCode.NONE
        return ErrorCode.INVALID_TXN_STATE

    return verify


def test_verified_transactional_produce_and_retriable_verification_errors(live: BrokerThread) -> None:
    topic = "txn-verified"
    live.call(lambda: live.broker.admin.create_topic_now(topic, 1, 1, {}))
    wire = Wire(live.bootstrap)
    try:
        request = transactional_produce(topic, P1, 0, [b"a", b"b"], "tx")
        assert produce_result(wire, request, 9)[0] == ErrorCode.INVALID_TXN_STATE
        live.call(lambda: live.broker.replicas.set_transaction_verifier(verifier_for(topic)))
        assert produce_result(wire, request, 9) == (ErrorCode.NONE, None, 0)
        assert produce_result(wire, transactional_produce(topic, P1, 2, [b"c"], "other"), 11)[0] == (
            ErrorCode.TRANSACTION_ABORTABLE
        )
        live.call(
            lambda: live.broker.replicas.set_transaction_verifier(
                lambda *_: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            )
        )
        code, message, _ = produce_result(wire, transactional_produce(topic, P1, 2, [b"c"], "tx"), 9)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert message == (
            "Unable to verify the partition has been added to the transaction. "
            "Underlying error: COORDINATOR_LOAD_IN_PROGRESS"
        )
        live.call(lambda: live.broker.replicas.set_transaction_verifier(None))  # back to rejecting all
        assert produce_result(wire, transactional_produce(topic, P1, 2, [b"c"], "tx"), 9)[0] == (
            ErrorCode.INVALID_TXN_STATE
        )
        partition = fetch(wire, topic, 0, isolation=1, version=12)
        assert (partition.high_watermark, partition.last_stable_offset) == (2, 0)
        # a marker from an older producer epoch is refused, the newer one accepted
        error, _, _ = live.call(
            lambda: live.broker.replicas.write_txn_marker(
                topic, 0, COMMIT, producer_id=P1, producer_epoch=1, coordinator_epoch=0, now_ms=now_ms()
            )
        )
        assert error == ErrorCode.NONE
        stale = live.call(
            lambda: live.broker.replicas.write_txn_marker(
                topic, 0, ABORT, producer_id=P1, producer_epoch=0, coordinator_epoch=0, now_ms=now_ms()
            )
        )
        assert stale[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        unknown = live.call(
            lambda: live.broker.replicas.write_txn_marker(
                "nope", 0, ABORT, producer_id=P1, producer_epoch=1, coordinator_epoch=0, now_ms=now_ms()
            )
        )
        assert unknown[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partition = fetch(wire, topic, 0, isolation=1, version=12)
        assert (partition.high_watermark, partition.last_stable_offset) == (3, 3)
        assert [(base, control) for base, _, control, _ in batches(partition.records)] == [
            (0, False),
            (2, True),
        ]
    finally:
        wire.close()


def test_long_poll_read_committed_fetch_completes_when_the_marker_lands(live: BrokerThread) -> None:
    topic = "txn-long-poll"
    live.call(lambda: live.broker.admin.create_topic_now(topic, 1, 1, {}))
    live.call(lambda: live.broker.replicas.set_transaction_verifier(verifier_for(topic)))
    wire = Wire(live.bootstrap)
    waiting = Wire(live.bootstrap)
    try:
        assert produce_result(wire, transactional_produce(topic, P1, 0, [b"t1", b"t2"], "tx"), 9)[0] == 0
        request = fetch_request(topic, 0, isolation=1, max_wait_ms=20_000, min_bytes=1)
        waiting.send(request, 12)
        time.sleep(0.3)  # the fetch is parked in the purgatory: nothing below the LSO
        started = time.monotonic()
        marker = write_marker(live, topic, P1, COMMIT)
        response: FetchResponse = waiting.receive(request, 12)
        assert time.monotonic() - started < 5
        (partition,) = response.responses[0].partitions
        assert (partition.high_watermark, partition.last_stable_offset) == (marker + 1, marker + 1)
        assert aborted_of(partition) == []
        assert batches(partition.records) == [
            (0, P1, False, [b"t1", b"t2"]),
            (2, P1, True, [b"\x00\x00\x00\x00\x00\x00"]),
        ]
    finally:
        wire.close()
        waiting.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_consumer_waits_behind_an_open_transaction(live: BrokerThread, client: str) -> None:
    topic = f"txn-wait-{client}"
    live.call(lambda: live.broker.admin.create_topic_now(topic, 1, 1, {}))
    live.call(lambda: live.broker.replicas.set_transaction_verifier(verifier_for(topic)))
    before = encode_batch([SimpleRecord(key=None, value=b"before", timestamp=now_ms())])
    after = encode_batch([SimpleRecord(key=None, value=b"after", timestamp=now_ms())])
    run = Reading(topic, "read_committed", 6)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            consume(client, live.bootstrap, topic, committed=True, until=6, reading=run)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    reader = threading.Thread(target=read)
    wire = Wire(live.bootstrap)
    try:
        live.call(lambda: live.broker.replicas.append(topic, 0, before, now_ms=now_ms()))  # offset 0
        assert produce_result(wire, transactional_produce(topic, P1, 0, [b"in-txn"], "tx"), 9)[0] == 0  # 1
        live.call(lambda: live.broker.replicas.append(topic, 0, after, now_ms=now_ms()))  # 2
        assert produce_result(wire, transactional_produce(topic, P2, 0, [b"aborted"], "tx"), 9)[0] == 0  # 3
        reader.start()
        wait_for(lambda: run.got == [b"before"], "the record before the transaction")
        time.sleep(1.0)  # the consumer sits at the LSO (1) meanwhile
        assert run.got == [b"before"]
        assert write_marker(live, topic, P1, COMMIT) == 4
        # P2's transaction (from offset 3) now holds the LSO: the committed record and the plain one arrive
        wait_for(lambda: run.got == [b"before", b"in-txn", b"after"], "the records up to P2's transaction")
        assert reader.is_alive()
        assert write_marker(live, topic, P2, ABORT) == 5
        reader.join(30)
        assert not errors, errors
        assert not reader.is_alive()
        assert run.got == [b"before", b"in-txn", b"after"]
        assert consume(client, live.bootstrap, topic, committed=False, until=6) == [
            b"before",
            b"in-txn",
            b"after",
            b"aborted",
        ]
    finally:
        run.stop.set()
        if reader.is_alive():
            reader.join(30)
        wire.close()
