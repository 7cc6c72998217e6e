"""Exactly-once through broker crashes: a transactional consume-transform-produce loop (confluent-kafka, in its
own process: tests/server/txn_crash_worker.py) while the broker is SIGKILLed at random moments and
restarted on the same data dir and port, several times; and a transaction left in PrepareCommit by a crash
is completed by the next start.

After the run (and after one more crash of the idle broker):

- read_committed sees every transaction whole or not at all: each output key names its transaction
  attempt and size, and every attempt seen has all its records, contiguous per partition;
- the output is exactly the transformed input, each input record once, in input order per partition
  (nothing lost, nothing duplicated), and the group's committed offsets are the input's end;
- no transaction is left in PrepareCommit/PrepareAbort and no partition has an open transaction (the last
  stable offset equals the high watermark);
- each crash cut a running loop: the worker had not finished, and it committed again afterwards.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
from tests.server.group_harness import Wire
from tests.server.txn_support import create_topics, end_offsets, read_values

from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.records import txn_record
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.storage import TopicPartition
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2
PER_PARTITION = 800
CRASHES = 5
SOURCE, SINK, GROUP, TXN_ID = "crash-in", "crash-out", "crash-group", "crash-txn"


class Worker:
    """The worker process and the events it prints."""

    def __init__(self, bootstrap: str, ends: list[int], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.server.txn_crash_worker",
                bootstrap,
                SOURCE,
                SINK,
                GROUP,
                TXN_ID,
                ",".join(map(str, ends)),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.events: list[list[str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(line.split())

    def commits(self) -> int:
        return sum(1 for e in self.events if e[0] == "commit")

    @property
    def finished(self) -> bool:
        return self.process.poll() is not None

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"worker did not finish; last events {self.events[-10:]}\n{self.stderr()}")
        self._reader.join(5)
        return code

    def close(self) -> None:
        if not self.finished:
            self.process.kill()
        self.process.wait()
        self._reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._stderr.close()

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-3000:]


def produce_input(bootstrap: str) -> dict[int, list[bytes]]:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0, "linger.ms": 5})
    inputs = {p: [b"%d-%05d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    for p, values in inputs.items():
        for value in values:
            producer.produce(SOURCE, value=value, partition=p)
    assert producer.flush(30) == 0
    return inputs


def committed_offsets(bootstrap: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "log_level": 0,
        }
    )
    try:
        tps = [confluent_kafka.TopicPartition(SOURCE, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def keyed_output(bootstrap: str, *, committed: bool) -> dict[int, list[tuple[bytes, bytes]]]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-reader",
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "log_level": 0,
        }
    )
    got: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([confluent_kafka.TopicPartition(SINK, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            got[message.partition()].append((message.key(), message.value()))
    finally:
        consumer.close()
    return got


def no_prepared_transactions(broker: Broker) -> None:
    """Eventually (the coordinator loads in the background) no transaction is in a Prepare state."""
    deadline = time.monotonic() + 20
    while True:
        wire = Wire(broker.bootstrap_servers)
        try:
            listed = wire.call(ListTransactionsRequest(), 1)
        finally:
            wire.close()
        states = [(t.transactional_id, t.transaction_state) for t in listed.transaction_states]
        if listed.error_code == ErrorCode.NONE and not [s for _, s in states if s.startswith("Prepare")]:
            return
        assert time.monotonic() < deadline, (listed.error_code, states)
        time.sleep(0.1)


def check_output(broker: Broker, inputs: dict[int, list[bytes]]) -> None:
    bootstrap = broker.bootstrap_servers
    no_prepared_transactions(broker)
    sink_partitions = [(SINK, p) for p in range(PARTITIONS)]
    assert end_offsets(bootstrap, sink_partitions, committed=True) == end_offsets(
        bootstrap, sink_partitions, committed=False
    ), "a transaction was left open"
    output = keyed_output(bootstrap, committed=True)
    sizes: dict[str, int] = {}
    seen: Counter[str] = Counter()
    for p in range(PARTITIONS):
        assert [value for _, value in output[p]] == [b"out:" + v for v in inputs[p]], f"partition {p}"
        tags_in_order: list[str] = []
        for key, _ in output[p]:
            tag, _index, size = key.decode().split(":")
            sizes[tag] = int(size)
            seen[tag] += 1
            if not tags_in_order or tags_in_order[-1] != tag:
                tags_in_order.append(tag)
        assert len(tags_in_order) == len(set(tags_in_order)), "a transaction's records are not contiguous"
    torn = {tag: (seen[tag], sizes[tag]) for tag in sizes if seen[tag] != sizes[tag]}
    assert not torn, f"transactions partly visible: {torn}"
    assert committed_offsets(bootstrap) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


def test_consume_transform_produce_survives_sigkills(fresh_broker: Broker, tmp_path: Path) -> None:
    broker = fresh_broker
    create_topics(broker.bootstrap_servers, {SOURCE: PARTITIONS, SINK: PARTITIONS})
    inputs = produce_input(broker.bootstrap_servers)
    worker = Worker(broker.bootstrap_servers, [PER_PARTITION] * PARTITIONS, tmp_path / "worker.err")
    rng = random.Random()
    try:
        deadline = time.monotonic() + 30
        while worker.commits() < 3:
            assert time.monotonic() < deadline, worker.events
            assert not worker.finished, worker.stderr()
            time.sleep(0.05)
        for crash in range(CRASHES):
            time.sleep(rng.uniform(0.2, 1.2))
            assert not worker.finished, f"the loop ended ({worker.process.returncode}) before crash {crash}"
            before = worker.commits()
            broker.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            broker.restart()
            deadline = time.monotonic() + 60
            while worker.commits() == before:  # the loop resumes after each crash
                assert time.monotonic() < deadline, f"no commit after crash {crash}: {worker.events[-5:]}"
                assert not worker.finished, worker.stderr()
                time.sleep(0.05)
        code = worker.wait(120)
        assert code == 0, worker.stderr()
    finally:
        worker.close()
    assert worker.events[-1] == ["done"]
    check_output(broker, inputs)
    broker.kill()  # and once more, idle
    broker.restart()
    check_output(broker, inputs)


def test_a_transaction_left_in_prepare_commit_is_completed_at_start(
    fresh_broker: Broker, tmp_path: Path
) -> None:
    """The crash between the PrepareCommit record and the markers, built exactly: a transaction whose data is
    in the log and whose coordinator record says PrepareCommit, markers missing; the next start writes
    them, read_committed then sees the data, and the transaction is CompleteCommit."""
    import tests.server.txn_support as support

    broker = fresh_broker
    topic = "prepared"
    create_topics(broker.bootstrap_servers, {topic: 2})
    producer = support.TxnProducer("confluent-kafka", broker.bootstrap_servers, "prepared-txn")
    try:
        producer.init()
        producer.begin()
        for p in range(2):
            producer.send(topic, p, b"data-%d" % p)
        producer.flush()
    finally:
        producer.close()
    wire = Wire(broker.bootstrap_servers)
    try:
        (state,) = wire.call(
            DescribeTransactionsRequest(transactional_ids=["prepared-txn"]), 0
        ).transaction_states
    finally:
        wire.close()
    assert state.transaction_state == "Ongoing"
    broker.kill()
    # what the coordinator would have appended for EndTxn(commit) just before the crash
    ongoing = TransactionMetadata(
        transactional_id="prepared-txn",
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        txn_timeout_ms=state.transaction_timeout_ms,
        state=TransactionState.ONGOING,
        topic_partitions=frozenset(TopicPartition(topic, p) for p in range(2)),
        txn_start_timestamp=state.transaction_start_time_ms,
        txn_last_update_timestamp=state.transaction_start_time_ms,
    )
    prepared = ongoing.prepare_abort_or_commit(TransactionState.PREPARE_COMMIT, int(time.time() * 1000))
    record = txn_record("prepared-txn", prepared.to_log_value())
    append_to_log(broker, "__transaction_state", partition_of("prepared-txn"), record.key, record.value)
    broker.start()
    assert read_values(broker.bootstrap_servers, [(topic, 0), (topic, 1)], committed=True) == {
        (topic, 0): [b"data-0"],
        (topic, 1): [b"data-1"],
    }
    deadline = time.monotonic() + 10
    while True:
        wire = Wire(broker.bootstrap_servers)
        try:
            (state,) = wire.call(
                DescribeTransactionsRequest(transactional_ids=["prepared-txn"]), 0
            ).transaction_states
        finally:
            wire.close()
        if state.transaction_state == "CompleteCommit":
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.05)


def partition_of(transactional_id: str) -> int:
    from tidelog.coordinator.common.partitioning import partition_for

    return partition_for(transactional_id, 50)


def append_to_log(broker: Broker, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
    """Append one record to a stopped broker's partition through the storage API."""
    from tidelog.storage.config import LogConfig
    from tidelog.storage.log_manager import LogManager
    from tidelog.storage.meta_properties import read_meta_properties

    data_dir = Path(broker.data_dir)
    meta = read_meta_properties(data_dir)
    assert meta is not None
    now = int(time.time() * 1000)
    logs = LogManager([data_dir], LogConfig(), now_ms=now, node_id=meta.node_id)
    plog = logs.get(topic, partition)
    assert plog is not None
    plog.append(encode_batch([SimpleRecord(key=key, value=value, timestamp=now)]), leader_epoch=0, now_ms=now)
    logs.shutdown(now)
