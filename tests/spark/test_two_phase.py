"""The two-phase exactly-once sink's task and driver steps (:mod:`tidelog.spark.two_phase`), called directly
(no Spark) against one broker with ``transaction.two.phase.commit.enable=true``; each crash point is the
driver's state when it died, then a restart (:func:`recover`) and Spark's replay of the batch.

- ``twoPhaseCommit`` is auto, true or false. Keys go where the Java producer puts them (murmur2, Kafka's published hash values).
- Three tasks prepare a batch over a 3-partition topic (a fourth, with no rows, opens no transaction): every partition's last stable offset stays 0 and a
  read_committed reader reads nothing; the driver's commit makes exactly the batch visible.
- Driver dead after the tasks prepared, before the commit intent: the restart aborts the prepared
  transactions before the replay writes; the replay's commit gives the batch once.
- Driver dead mid-commit (intent recorded, one of three committed) with a zombie attempt's transaction open:
  the restart commits the other two and aborts the zombie; the replay writes nothing, and its commit keeps
  the batch once.
- A Spark query (a micro-batch of three write tasks) writes each row once, where murmur2 puts it, and
  leaves no transaction open; the batch replayed after the sink committed it (Spark's commit log entry
  removed) writes nothing again.
- Soak: the transform example SIGKILLed 6 times (as soon as a task's transaction is open, or anywhere) and
  restarted: the output holds each record once and no transaction stays open.
- ``abort`` of a batch whose intent was recorded commits it; of one without, aborts everything.
- Against a broker with the setting off: ``auto`` falls back with one warning naming the setting,
  ``twoPhaseCommit=true`` refuses, ``false`` does not ask. A query whose (local) checkpoint committed one
  transaction per task keeps doing so.
- Building the writer while the broker is down for longer than one probe attempt (15 s): both probes
  (transactions, two-phase commit) ask again until it is back, and the writer is the two-phase one; the
  broker's refusal of two-phase commit is final at its first answer (no retry).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.murmur2 import PUBLISHED, java_partition

from tidelog.client.txn_producer import PreparedTransaction, complete_prepared
from tidelog.spark import retry as retry_module
from tidelog.spark.exactly_once import ExactlyOnceUnavailableError
from tidelog.spark.fencing import open_transactions
from tidelog.spark.murmur2 import murmur2, partition_for
from tidelog.spark.options import OptionError, WriterOptions, parse_writer_options
from tidelog.spark.replay_shape import BatchShape
from tidelog.spark.transactional import ensure_progress_topic, record_batch_shape
from tidelog.spark.two_phase import (
    TWO_PHASE_PREFIX,
    TwoPhaseCommitMessage,
    TwoPhaseStreamWriter,
    abort_batch,
    choose_two_phase,
    commit_batch,
    recover,
    write_task,
)
from tidelog.spark.two_phase_intent import BatchIntent, read_intent, record_intent
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

TASKS = 3
PARTITIONS = 3
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker({"num.partitions": 1, "transaction.two.phase.commit.enable": True}) as b:
        yield b


def _options(bootstrap: str, topic: str, **extra: str) -> WriterOptions:
    return parse_writer_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "deliveryGuarantee": "exactly-once", **extra}
    )


@pytest.fixture
def sink(broker: Broker, topic_name: Any) -> WriterOptions:
    topic = topic_name("out")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    options = _options(broker.bootstrap_servers, topic)
    ensure_progress_topic(options)
    return options


def _rows(task: int, batch: int, n: int = 20) -> list[pa.RecordBatch]:
    keys = [b"b%d-t%d-k%d" % (batch, task, i) for i in range(n)]
    values = [b"b%d-t%d-v%d" % (batch, task, i) for i in range(n)]
    return [
        pa.RecordBatch.from_pydict({"key": keys[:7], "value": values[:7]}),
        pa.RecordBatch.from_pydict({"key": keys[7:], "value": values[7:]}),
    ]


def _expected(batch: int, n: int = 20) -> list[bytes]:
    return sorted(b"b%d-t%d-v%d" % (batch, t, i) for t in range(TASKS) for i in range(n))


def _write_batch(
    options: WriterOptions, query: str, batch: int, attempt: int = 0
) -> list[PreparedTransaction]:
    messages = [write_task(options, query, batch, t, attempt, _rows(t, batch)) for t in range(TASKS)]
    assert all(isinstance(m, TwoPhaseCommitMessage) and m.rows == 20 for m in messages)
    return [PreparedTransaction.from_json(m.prepared or "") for m in messages]


def _stable_ends(options: WriterOptions, isolation: str = "read_committed") -> list[int]:
    """Each output partition's last stable offset (its high watermark with ``read_uncommitted``)."""
    consumer: Any = Consumer(
        {"bootstrap.servers": options.bootstrap_servers, "group.id": "2pc-lso", "isolation.level": isolation}
    )
    try:
        assert options.topic is not None
        return [
            int(consumer.get_watermark_offsets(TopicPartition(options.topic, p), timeout=10, cached=False)[1])
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _records(options: WriterOptions) -> list[tuple[bytes, bytes, int]]:
    """(key, value, partition) of every record a read_committed reader reads (up to each last stable
    offset), all partitions at once."""
    assert options.topic is not None
    consumer: Any = Consumer(
        {
            "bootstrap.servers": options.bootstrap_servers,
            "group.id": "2pc-records",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    records = []
    try:
        consumer.assign([TopicPartition(options.topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        while len(at_end) < PARTITIONS:
            m = consumer.poll(15)
            assert m is not None, "timed out reading the sink topic"
            if m.error():
                at_end.add(m.partition())  # partition EOF (at the last stable offset)
                continue
            records.append((m.key(), m.value(), m.partition()))
    finally:
        consumer.close()
    return records


def _output(options: WriterOptions) -> list[bytes]:
    return sorted(value for _, value, _ in _records(options))


def _open_ids(options: WriterOptions, query: str) -> list[str]:
    return sorted(name for name, _ in open_transactions(options) if query in name)


def test_keys_go_to_the_java_producer_s_partition() -> None:
    assert {key: murmur2(key) for key in PUBLISHED} == PUBLISHED
    for i in range(200):
        key = b"key-%d" % i
        assert partition_for(key, 7) == java_partition(key, 7)
    assert 0 <= partition_for(None, 7) < 7


def test_two_phase_commit_option() -> None:
    assert _options("h:1", "t").two_phase_commit == "auto"
    assert _options("h:1", "t", twophasecommit="TRUE").two_phase_commit == "true"
    assert _options("h:1", "t", twoPhaseCommit="false").two_phase_commit == "false"
    with pytest.raises(OptionError, match="option twoPhaseCommit must be auto, true or false, got 'yes'"):
        _options("h:1", "t", twoPhaseCommit="yes")


def test_nothing_of_a_prepared_batch_is_visible_until_the_driver_commits_then_all_of_it(
    sink: WriterOptions,
) -> None:
    query = str(uuid.uuid4())
    prepared = _write_batch(sink, query, 0)
    assert len({p.transactional_id for p in prepared}) == TASKS
    assert write_task(sink, query, 0, TASKS, 0, []) == TwoPhaseCommitMessage(query, 0, None)  # no rows
    assert _stable_ends(sink) == [0] * PARTITIONS
    assert _output(sink) == []
    assert len(_open_ids(sink, query)) == TASKS

    commit_batch(sink, query, 0, prepared)

    got = _output(sink)
    assert got == _expected(0)
    assert _stable_ends(sink) == _stable_ends(sink, "read_uncommitted")  # no leftover holds one back
    assert _open_ids(sink, query) == []
    assert read_intent(sink, query) == BatchIntent(0, tuple(prepared))
    placed = _records(sink)
    assert sorted(value for _, value, _ in placed) == got
    assert all(
        java_partition(key, PARTITIONS) == p for key, _, p in placed
    )  # where format("kafka") puts them


def test_driver_dead_after_prepare_before_commit_then_restart_and_replay_give_the_batch_once(
    sink: WriterOptions,
) -> None:
    query = str(uuid.uuid4())
    commit_batch(sink, query, 0, _write_batch(sink, query, 0))
    zombie = write_task(
        sink, query, 0, 2, 1, _rows(2, 0)
    )  # an attempt of batch 0 still running at its commit
    first = _output(sink)
    dead = _write_batch(sink, query, 1)  # the driver dies here: batch 1 prepared, no intent
    assert _output(sink) == first
    assert len(_open_ids(sink, query)) == 1 + TASKS

    # The restart (Spark's offset log ends at batch 1): batch 0 is decided; open transactions of earlier
    # batches are aborted; batch 1's wait for its replay's commit (Spark also builds the writer to commit
    # batch 1, when its prepared transactions must stay).
    assert recover(sink, query, running=1) == 0
    assert _open_ids(sink, query) == sorted(p.transactional_id for p in dead)
    assert zombie.prepared is not None
    assert _output(sink) == first
    replay = _write_batch(sink, query, 1)  # Spark replays batch 1 (attempt 0 again: new ids)
    commit_batch(sink, query, 1, replay)
    assert _output(sink) == sorted(first + _expected(1))
    assert _open_ids(sink, query) == []
    assert _stable_ends(sink) == _stable_ends(sink, "read_uncommitted")


def test_driver_dead_mid_commit_then_restart_finishes_the_batch_and_the_replay_writes_nothing(
    sink: WriterOptions,
) -> None:
    query = str(uuid.uuid4())
    prepared = _write_batch(sink, query, 0)
    zombie = write_task(sink, query, 0, 1, 1, _rows(1, 0))  # a second attempt of task 1, not chosen
    record_intent(sink, query, BatchIntent(0, tuple(prepared)))
    complete_prepared(sink.bootstrap_servers, prepared[0], commit=True)  # the driver dies here
    assert len(_open_ids(sink, query)) == TASKS  # two of the batch and the zombie

    assert recover(sink, query, running=0) == 0
    assert _output(sink) == _expected(0)
    assert zombie.prepared is not None
    assert _open_ids(sink, query) == [PreparedTransaction.from_json(zombie.prepared).transactional_id]

    # Spark replays batch 0: tasks built after recover() skip it; a replay that wrote anyway is aborted
    replay = _write_batch(sink, query, 0)
    commit_batch(sink, query, 0, replay)
    assert _output(sink) == _expected(0)
    assert _open_ids(sink, query) == []
    assert _stable_ends(sink) == _stable_ends(sink, "read_uncommitted")


def test_abort_commits_a_batch_whose_intent_was_recorded_and_aborts_one_without(sink: WriterOptions) -> None:
    query = str(uuid.uuid4())
    prepared = _write_batch(sink, query, 0)
    record_intent(sink, query, BatchIntent(0, tuple(prepared)))  # commit() failed after its intent
    abort_batch(sink, query, 0, prepared)
    assert _output(sink) == _expected(0)

    prepared = _write_batch(sink, query, 1)
    abort_batch(sink, query, 1, prepared)
    assert _output(sink) == _expected(0)
    assert _open_ids(sink, query) == []
    assert _stable_ends(sink) == _stable_ends(sink, "read_uncommitted")  # past the aborted rows


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "tidelog.spark" and r.levelno == logging.WARNING
    ]


def test_without_the_broker_setting_auto_falls_back_with_one_warning(
    bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    options = _options(bootstrap, "unused")
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert choose_two_phase(options) is False
        assert choose_two_phase(options) is False
    [warning] = _warnings(caplog)
    assert warning.startswith(
        f"deliveryGuarantee=exactly-once: the broker at {bootstrap} does not allow two-phase commit ("
    )
    assert "transaction.two.phase.commit.enable" in warning
    assert "falling back to one transaction per task" in warning

    with pytest.raises(ExactlyOnceUnavailableError, match="twoPhaseCommit=true"):
        choose_two_phase(_options(bootstrap, "unused", twoPhaseCommit="true"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert choose_two_phase(_options(bootstrap, "unused", twoPhaseCommit="false")) is False
    assert _warnings(caplog) == []


def test_with_the_broker_setting_auto_chooses_two_phase(sink: WriterOptions) -> None:
    assert choose_two_phase(sink) is True


def _query(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: Path) -> Any:
    frame = (
        spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "300")
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
        .repartition(3)  # three write tasks per micro-batch
    )
    query = (
        frame.writeStream.format("tidelog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return query


def test_a_spark_query_commits_each_micro_batch_in_two_phases_and_a_replay_writes_nothing(
    spark: Any, broker: Broker, sink: WriterOptions, topic_name: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    source = topic_name("in")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(source, num_partitions=2, replication_factor=1)])[source].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(300):
        producer.produce(source, b"v%d" % i, b"k%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    checkpoint = tmp_path / "cp"
    assert sink.topic is not None

    query = _query(spark, bootstrap, source, sink.topic, checkpoint)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [300]
    placed = _records(sink)
    print(
        "DEBUG",
        open_transactions(sink),
        read_intent(sink, query.id),
        _stable_ends(sink),
        _stable_ends(sink, "read_uncommitted"),
    )
    assert sorted(value for _, value, _ in placed) == sorted(b"V%d" % i for i in range(300))
    assert all(java_partition(key, PARTITIONS) == p for key, _, p in placed)
    intent = read_intent(sink, query.id)
    assert intent is not None
    assert intent.batch == 0
    assert len(intent.transactions) == 3
    assert all(t.transactional_id.startswith(f"tidelog-spark-2pc-{query.id}-0-") for t in intent.transactions)
    assert _open_ids(sink, query.id) == []

    # The driver "dies" after the sink committed batch 0 but before Spark recorded it: Spark replays batch 0.
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    _query(spark, bootstrap, source, sink.topic, checkpoint)
    assert _output(sink) == sorted(b"V%d" % i for i in range(300))
    assert read_intent(sink, query.id) == intent
    assert _open_ids(sink, query.id) == []


def _pipeline(bootstrap: str, checkpoint: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tidelog.spark.pipeline",
        str(EXAMPLES / "transform.py"),
        "--bootstrap-server",
        bootstrap,
        "--checkpoint",
        str(checkpoint),
        "--source",
        "kill-in",
        "--sink",
        "kill-out",
        "--exactly-once",
        "--max-offsets-per-trigger",
        "150",
        *extra,
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
    ]


# A query process takes 15-25 s to start here, so this loop (a start per kill) is a soak; CI covers each
# crash point above with the driver's steps called directly.
@pytest.mark.slow
@pytest.mark.soak
def test_sigkilled_two_phase_query_restarted_writes_each_record_once(tmp_path: Path) -> None:
    kills, n = 6, 2400
    with Broker(
        {"transaction.two.phase.commit.enable": True}, data_dir=tmp_path / "data", run_dir=tmp_path / "run"
    ) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for topic, partitions in (("kill-in", 2), ("kill-out", PARTITIONS)):
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
                topic
            ].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(n):
            producer.produce("kill-in", b"record %d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        options = _options(bootstrap, "kill-out")
        checkpoint = tmp_path / "cp"
        rng = random.Random(11)
        for kill in range(kills):
            process = subprocess.Popen(
                _pipeline(bootstrap, checkpoint, "--trigger-interval", "200 milliseconds"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                deadline = time.monotonic() + 180  # a bound, not a wait: a loaded machine starts Spark slowly
                if (
                    kill % 2 == 0
                ):  # as soon as a task's transaction is open: mid-write, prepared or mid-commit
                    while not any(
                        name.startswith(TWO_PHASE_PREFIX) for name, _ in open_transactions(options)
                    ):
                        assert time.monotonic() < deadline
                        assert process.poll() is None
                        time.sleep(0.02)
                    time.sleep(rng.uniform(0, 0.3))
                else:  # anywhere once batches flow
                    while not any(_stable_ends(options)) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    time.sleep(rng.uniform(0, 2.0))
                assert process.poll() is None
            finally:
                os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
                process.wait(30)
        final = subprocess.run(
            _pipeline(bootstrap, checkpoint, "--available-now"),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert final.returncode == 0, final.stderr[-3000:]
        options = _options(bootstrap, "kill-out")
        assert sorted(value for _, value, _ in _records(options)) == sorted(
            b"RECORD %d" % i for i in range(n)
        )
        assert not any(name.startswith(TWO_PHASE_PREFIX) for name, _ in open_transactions(options))
        assert _stable_ends(options) == _stable_ends(options, "read_uncommitted")


def test_a_query_that_committed_per_task_keeps_doing_so(
    sink: WriterOptions, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    query = str(uuid.uuid4())
    (tmp_path / "metadata").write_text(f'{{"id":"{query}"}}')
    assert sink.topic is not None
    options = _options(sink.bootstrap_servers, sink.topic, checkpointLocation=str(tmp_path))
    assert choose_two_phase(options) is True  # a new checkpoint
    record_batch_shape(options, query, BatchShape(0, 2))  # what the per-task mode records per batch
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert choose_two_phase(options) is False
    expected = (
        f"deliveryGuarantee=exactly-once: query {query} started with one transaction per task and keeps it "
        "(a new checkpoint commits in two phases)"
    )
    assert _warnings(caplog) == [expected]
    with pytest.raises(ExactlyOnceUnavailableError, match="one transaction per task"):
        choose_two_phase(
            _options(
                sink.bootstrap_servers, sink.topic, checkpointLocation=str(tmp_path), twoPhaseCommit="true"
            )
        )


def test_a_refusal_of_two_phase_commit_is_not_retried(
    bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker without the setting refuses (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): no retry, ``auto``
    falls back and ``true`` fails, both at the first answer."""
    sleeps: list[float] = []
    monkeypatch.setattr(retry_module, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleeps.append))
    assert choose_two_phase(_options(bootstrap, "unused")) is False
    with pytest.raises(ExactlyOnceUnavailableError, match="refused two-phase commit"):
        choose_two_phase(_options(bootstrap, "unused", twoPhaseCommit="true"))
    assert sleeps == []


class _Retries(logging.Handler):
    """When each thread logged that it asks again (:func:`tidelog.spark.retry.ride_through`)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.times: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "the broker is away for now" in record.getMessage():
            self.times.append((record.threadName or "", time.monotonic()))


def test_building_the_writer_rides_through_a_broker_away_longer_than_one_attempt(
    broker: Broker, sink: WriterOptions
) -> None:
    """The broker is down when Spark builds the writer, for longer than one probe attempt (15 s), then
    comes back: both the transactions probe and the two-phase probe ride through it (the last test of the
    module: it kills the module's broker)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from tidelog.spark.source import TidelogDataSource

    assert sink.topic is not None
    source = TidelogDataSource(
        {
            "kafka.bootstrap.servers": sink.bootstrap_servers,
            "topic": sink.topic,
            "deliveryGuarantee": "exactly-once",
        }
    )
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    results: dict[str, Any] = {}

    def run(name: str, call: Any) -> threading.Thread:
        def target() -> None:
            try:
                results[name] = call()
            except BaseException as exc:  # reported by the asserts below
                results[name] = exc

        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    retries = _Retries()
    logger = logging.getLogger("tidelog.spark")
    level = logger.level
    logger.addHandler(retries)
    logger.setLevel(logging.INFO)
    try:
        broker.kill()
        down = time.monotonic()
        threads = [
            run("build", lambda: source.streamWriter(schema, False)),
            run("probe", lambda: choose_two_phase(sink)),
        ]
        # until each has asked again after a whole attempt's 15 s (where it used to give up), still running
        while {name for name, at in retries.times if at - down > 15} != {"build", "probe"}:
            assert all(t.is_alive() for t in threads), results
            assert time.monotonic() - down < 55, retries.times
            time.sleep(0.1)
        assert all(t.is_alive() for t in threads), results
        broker.restart()
        for thread in threads:
            thread.join(120)
    finally:
        logger.removeHandler(retries)
        logger.setLevel(level)
        if not broker.is_running:
            broker.restart()
    assert results["probe"] is True
    assert isinstance(results["build"], TwoPhaseStreamWriter), results["build"]
