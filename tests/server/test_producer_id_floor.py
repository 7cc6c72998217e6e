"""The producer id floor: ids seen in use (partition logs' producer states, transactional ids) are never handed
out again, whatever became of the ``producer-id-block`` file.

- The floor functions return the highest id in use and where, after a log's recovery too.
- In-process broker: a block file restored from an old copy (or deleted) below an idempotent producer's id in
  a partition log jumps a block above it before the broker serves anything; one below a transactional id's
  producer id (in ``__transaction_state`` only) holds every new id (COORDINATOR_LOAD_IN_PROGRESS) until the
  transaction state is loaded, then jumps a block above it; a partition that fails to load releases its
  hold (with the ids it replayed) instead of holding every new id forever.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.server.inprocess import ctx, handle, make_broker, running, until

from tidelog.coordinator.common import partition_for
from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.state import TransactionState
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, InitProducerIdRequest
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.broker import Broker
from tidelog.server.producer_id_floor import (
    NONE_IN_USE,
    ProducerIdInUse,
    highest_in_logs,
    highest_in_transactions,
)
from tidelog.server.producer_id_manager import PRODUCER_ID_BLOCK_FILE
from tidelog.server.txn_runtime import TransactionRuntime
from tidelog.storage import PartitionLog, TopicPartition
from tidelog.storage.config import LogConfig

TS = 1_000_000
TXN = "floor-txn"


def idempotent_batch(producer_id: int, sequence: int, timestamp: int = TS) -> bytes:
    return encode_batch(
        [SimpleRecord(value=b"v%d" % sequence, timestamp=timestamp)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )


# -- the floor functions ---------------------------------------------------------------------------------


def test_highest_in_logs_is_the_highest_producer_id_of_any_log_even_after_recovery(tmp_path: Path) -> None:
    config = LogConfig()
    a = PartitionLog.open(tmp_path / "a-0", config, now_ms=TS, clean_shutdown=False)
    b = PartitionLog.open(tmp_path / "b-3", config, now_ms=TS, clean_shutdown=False)
    a.append(idempotent_batch(7, 0), leader_epoch=0, now_ms=TS)
    b.append(idempotent_batch(42, 0), leader_epoch=0, now_ms=TS)
    b.append(idempotent_batch(9, 0), leader_epoch=0, now_ms=TS)
    b.append(encode_batch([SimpleRecord(value=b"plain", timestamp=TS)]), leader_epoch=0, now_ms=TS)
    logs = [(TopicPartition("a", 0), a), (TopicPartition("b", 3), b)]
    assert highest_in_logs(logs) == ProducerIdInUse(42, "producer state of partition b-3")
    assert highest_in_logs(logs[:1]) == ProducerIdInUse(7, "producer state of partition a-0")
    b.close()  # no clean shutdown, no snapshot: the state comes back from the log
    again = PartitionLog.open(tmp_path / "b-3", config, now_ms=TS, clean_shutdown=False)
    assert highest_in_logs([(TopicPartition("b", 3), again)]) == ProducerIdInUse(
        42, "producer state of partition b-3"
    )
    again.close()
    a.close()


def test_highest_in_logs_of_logs_without_producers_is_none(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "a-0", LogConfig(), now_ms=TS, clean_shutdown=False)
    log.append(encode_batch([SimpleRecord(value=b"plain", timestamp=TS)]), leader_epoch=0, now_ms=TS)
    assert highest_in_logs([(TopicPartition("a", 0), log)]) == NONE_IN_USE == (-1, "nowhere")
    assert highest_in_logs([]) == NONE_IN_USE
    log.close()


def txn(transactional_id: str, producer_id: int, last_producer_id: int = -1) -> TransactionMetadata:
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=0,
        txn_timeout_ms=60_000,
        state=TransactionState.EMPTY,
        topic_partitions=frozenset(),
        txn_start_timestamp=-1,
        txn_last_update_timestamp=TS,
        last_producer_id=last_producer_id,
    )


def test_highest_in_transactions_counts_current_and_previous_producer_ids() -> None:
    assert highest_in_transactions([txn("a", 12), txn("b", 30), txn("c", 5)]) == ProducerIdInUse(
        30, "transactional id 'b'"
    )
    assert highest_in_transactions([txn("a", 12), txn("rotated", 8, last_producer_id=31)]) == (
        ProducerIdInUse(31, "transactional id 'rotated'")
    )
    assert highest_in_transactions([]) == NONE_IN_USE


# -- in a broker -----------------------------------------------------------------------------------------


def init(broker: Broker, transactional_id: str | None = None) -> tuple[ErrorCode, int, int]:
    request = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000)
    answer: Any = handle(broker, ctx(ApiKey.INIT_PRODUCER_ID, 4), request)
    return ErrorCode(answer.error_code), answer.producer_id, answer.producer_epoch


def write_block(data: Path, start: int, end: int) -> None:
    record = {"version": 1, "broker": 1, "block_start": str(start), "block_end": str(end)}
    (data / PRODUCER_ID_BLOCK_FILE).write_text(json.dumps(record))


def block(data: Path) -> tuple[int, int]:
    record = json.loads((data / PRODUCER_ID_BLOCK_FILE).read_text())
    return int(record["block_start"]), int(record["block_end"])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "tidelog.producer_id" and r.levelname == "WARNING"
    ]


@pytest.mark.parametrize("damage", ["old copy", "deleted"])
def test_a_lost_block_file_jumps_above_the_partition_logs_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_block(data, 4000, 4999)  # the next block starts at 5000

    async def first_life() -> None:
        broker = make_broker(data)
        async with running(broker):
            assert init(broker) == (ErrorCode.NONE, 5000, 0)
            now = int(time.time() * 1000)
            error, _info, _message = broker.replicas.append(
                "t", 0, idempotent_batch(5000, 0, now), now_ms=now
            )
            assert error == ErrorCode.NONE
            assert init(broker) == (ErrorCode.NONE, 5001, 0)  # never writes: no log shows it

    asyncio.run(first_life())
    if damage == "old copy":
        write_block(data, 0, 999)
    else:
        (data / PRODUCER_ID_BLOCK_FILE).unlink()
    caplog.clear()

    async def second_life() -> None:
        broker = make_broker(data)
        # before anything is served: the block is a margin of 1000 above producer 5000's id
        assert block(data) == (6001, 7000)
        state = "ends at 999" if damage == "old copy" else "is missing"
        expected = (
            f"producer id 5000 is in use (producer state of partition t-0) but the producer id block in"
            f" {data / PRODUCER_ID_BLOCK_FILE} {state}"
        )
        assert [m.split(": the file")[0] for m in warnings_of(caplog)] == [expected]
        async with running(broker):
            assert init(broker) == (ErrorCode.NONE, 6001, 0)

    asyncio.run(second_life())


def test_transactional_ids_hold_new_producer_ids_until_loaded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_block(data, 4000, 4999)  # the next block starts at 5000

    async def first_life() -> None:
        broker = make_broker(data)
        async with running(broker):
            broker.transactions.ensure_state_topic()
            assert init(broker, TXN) == (ErrorCode.NONE, 5000, 0)  # only __transaction_state knows it

    asyncio.run(first_life())
    write_block(data, 0, 999)
    caplog.clear()

    async def second_life() -> None:
        broker = make_broker(data)
        assert block(data) == (0, 999)  # no partition log has a producer
        broker.transactions.start()  # every __transaction_state partition loading, nothing replayed yet
        assert len(broker.producer_ids.holds) == broker.transactions.num_partitions
        assert init(broker) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
        assert init(broker, "another-txn") == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
        assert block(data) == (0, 999)
        assert warnings_of(caplog) == []
        async with running(broker):
            await until(lambda: not broker.producer_ids.holds)
            assert block(data) == (6001, 7000)
            assert [m.split(" but ")[0] for m in warnings_of(caplog)] == [
                f"producer id 5000 is in use (transactional id {TXN!r})"
            ]
            assert init(broker) == (ErrorCode.NONE, 6001, 0)
            assert init(broker, "another-txn") == (ErrorCode.NONE, 6002, 0)
            assert init(broker, TXN) == (ErrorCode.NONE, 5000, 1)  # its own id, next epoch

    asyncio.run(second_life())


def test_a_transaction_state_partition_that_fails_to_load_does_not_hold_ids_forever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_block(data, 4000, 4999)

    async def first_life() -> None:
        broker = make_broker(data)
        async with running(broker):
            broker.transactions.ensure_state_topic()
            assert init(broker, TXN) == (ErrorCode.NONE, 5000, 0)

    asyncio.run(first_life())

    def replay(self: TransactionRuntime, partition: int, chunk: list[Any]) -> int:
        raise RuntimeError(f"cannot replay {partition}")

    monkeypatch.setattr(TransactionRuntime, "_replay", replay)

    async def second_life() -> None:
        broker = make_broker(data)
        broken = partition_for(TXN, broker.transactions.num_partitions)
        async with running(broker):
            await until(lambda: not broker.producer_ids.holds)
            assert broker.transactions.coordinator.is_loading(broken)  # its ids stay unavailable
            assert init(broker) == (ErrorCode.NONE, 6000, 0)  # the block file still guards the rest
            assert init(broker, TXN) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
        assert f"__transaction_state-{broken} did not load" in [
            r.getMessage().split(":")[0] for r in caplog.records if r.levelname == "WARNING"
        ]

    asyncio.run(second_life())
