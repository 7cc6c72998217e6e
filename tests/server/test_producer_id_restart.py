"""No producer id is handed out twice when ``producer-id-block`` is restored from an old copy or deleted,
against a real broker with confluent-kafka producers.

A broker serves an idempotent producer, a transactional id that writes and commits, and one that only
initialises (its producer id is in ``__transaction_state`` alone); it is stopped (SIGTERM or SIGKILL), its
block file replaced by the copy from before those producers (or deleted), and started again. The idempotent
producer keeps running through the restart with its producer id. Then a new idempotent producer and a new
transactional id start. Reading the producer ids from the segment files of the topic and of
``__transaction_state``:

- the new producers' ids are strictly greater than every id used before, and differ from each other;
- the old idempotent producer's batches keep its id, and every message of every producer is read once,
  in order (read_committed);
- the broker log warns about the file, naming it.

Without the floor the new idempotent producer would get the old one's id back (the first id of the old
copy's next block, or 0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from tests.server.txn_support import create_topics, read_values

from tidelog.coordinator.txn.records import decode_key, decode_value
from tidelog.protocol.records import decode_batch, iter_batch_headers
from tidelog.server.producer_id_manager import PRODUCER_ID_BLOCK_FILE
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

TOPIC = "pid-events"
OLD_BLOCK = {"version": 1, "broker": 1, "block_start": "4000", "block_end": "4999"}
"""The block file as it was before the first life's producers (their ids come from the next block, 5000)."""


def batches(directory: Path) -> Iterator[tuple[int, list[bytes]]]:
    """(producer id, values) of every data batch in the segment files of ``directory``."""
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        for position, header in iter_batch_headers(data):
            if not header.is_control:
                _header, records = decode_batch(data, position)
                yield header.producer_id, [bytes(r.value or b"") for r in records]


def producer_ids_by_value_prefix(broker: Broker) -> dict[bytes, set[int]]:
    """The producer ids of the topic's batches, by the prefix of their values (``old``, ``new``, ...)."""
    out: dict[bytes, set[int]] = {}
    for producer_id, values in batches(Path(broker.data_dir) / f"{TOPIC}-0"):
        for value in values:
            out.setdefault(value.split(b"-")[0], set()).add(producer_id)
    return out


def transactional_producer_ids(broker: Broker) -> dict[str, int]:
    """Each transactional id's latest producer id in the ``__transaction_state`` segment files."""
    out: dict[str, int] = {}
    for directory in sorted(Path(broker.data_dir).glob("__transaction_state-*")):
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            for position, header in iter_batch_headers(data):
                if header.is_control:
                    continue
                for record in decode_batch(data, position)[1]:
                    assert record.key is not None
                    transactional_id, value = decode_key(record.key), decode_value(record.value)
                    if transactional_id is not None and value is not None:
                        out[transactional_id] = value.producer_id
    return out


def idempotent_producer(broker: Broker) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True, "linger.ms": 5}
    )


def transactional_producer(broker: Broker, transactional_id: str) -> confluent_kafka.Producer:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    return producer


def produce(producer: confluent_kafka.Producer, prefix: str, numbers: range) -> None:
    for i in numbers:
        producer.produce(TOPIC, value=b"%s-%d" % (prefix.encode(), i), partition=0)
    assert producer.flush(30) == 0


def commit(producer: confluent_kafka.Producer, prefix: str, numbers: range) -> None:
    producer.begin_transaction()
    for i in numbers:
        producer.produce(TOPIC, value=b"%s-%d" % (prefix.encode(), i), partition=0)
    producer.commit_transaction(30)


@pytest.mark.parametrize(
    ("stop", "damage"), [("sigterm", "old copy"), ("sigkill", "old copy"), ("sigkill", "deleted")]
)
def test_new_producer_ids_are_above_every_id_used_before(tmp_path: Path, stop: str, damage: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    block_file = data / PRODUCER_ID_BLOCK_FILE
    if damage == "old copy":
        block_file.write_text(json.dumps(OLD_BLOCK))
    broker = Broker({"num.partitions": 1}, data_dir=data, run_dir=tmp_path / "run")
    broker.start()
    try:
        create_topics(broker.bootstrap_servers, {TOPIC: 1})
        old = idempotent_producer(broker)
        produce(old, "old", range(100))
        old_txn = transactional_producer(broker, "old-txn")
        commit(old_txn, "oldtxn", range(10))
        idle_txn = transactional_producer(broker, "idle-txn")  # its id is in __transaction_state only
        old_txn.flush(10)
        idle_txn.flush(10)
        used = producer_ids_by_value_prefix(broker)
        used_txn = transactional_producer_ids(broker)
        assert set(used_txn) == {"old-txn", "idle-txn"}
        used_ids = {pid for pids in used.values() for pid in pids} | set(used_txn.values())
        assert len(used_ids) == 3
        assert len(used[b"old"]) == 1
        assert min(used_ids) == (5000 if damage == "old copy" else 0)

        if stop == "sigkill":
            broker.kill()
        else:
            assert broker.stop(timeout=30) == 0
        if damage == "old copy":
            block_file.write_text(json.dumps(OLD_BLOCK))
        else:
            block_file.unlink()
        broker.restart()  # same port: the old producer reconnects with its producer id

        produce(old, "old", range(100, 200))
        new = idempotent_producer(broker)
        produce(new, "new", range(50))
        new_txn = transactional_producer(broker, "new-txn")
        commit(new_txn, "newtxn", range(10))
        for producer in (old, new, old_txn, idle_txn, new_txn):
            assert producer.flush(10) == 0

        after = producer_ids_by_value_prefix(broker)
        assert after[b"old"] == used[b"old"]  # the old producer went on with its id
        assert after[b"oldtxn"] == used[b"oldtxn"]
        new_ids = after[b"new"] | after[b"newtxn"]
        assert len(after[b"new"]) == len(after[b"newtxn"]) == 1
        assert len(new_ids) == 2
        assert min(new_ids) > max(used_ids), (new_ids, used_ids)
        assert transactional_producer_ids(broker)["new-txn"] == min(after[b"newtxn"])

        values = read_values(broker.bootstrap_servers, [(TOPIC, 0)], committed=True)[(TOPIC, 0)]
        by_prefix: dict[bytes, list[bytes]] = {}
        for value in values:
            by_prefix.setdefault(value.split(b"-")[0], []).append(value)
        assert by_prefix == {
            b"old": [b"old-%d" % i for i in range(200)],
            b"oldtxn": [b"oldtxn-%d" % i for i in range(10)],
            b"new": [b"new-%d" % i for i in range(50)],
            b"newtxn": [b"newtxn-%d" % i for i in range(10)],
        }
        log = broker.log_path.read_text(errors="replace")
        warned = [line for line in log.splitlines() if f"producer id block in {block_file}" in line]
        assert len(warned) == 1, log[-4000:]
        assert ("ends at 4999" if damage == "old copy" else "is missing") in warned[0]
        assert [line for line in log.splitlines() if "Traceback" in line or "level=ERROR" in line] == []
        assert broker.stop(timeout=30) == 0
    finally:
        broker.close()
