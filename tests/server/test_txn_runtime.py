"""The transaction coordinator runtime in-process (no sockets): loading, failed appends, markers, timers, and
transactional offset commits through the group runtime.

- A broker that starts with ``__transaction_state`` on disk answers COORDINATOR_LOAD_IN_PROGRESS until the
  loader has replayed the id's partition, then serves it from the replayed state (the next epoch).
- A failed append of the PrepareCommit record answers EndTxn with the mapped error and writes no marker (the
  data partition's transaction stays open); the partition is reloaded from its log (Ongoing again) and a
  retried EndTxn commits.
- A marker the log refuses for a passing reason is written again later; the transaction completes then.
- A stalled transaction is aborted by its timer on the timing wheel (never before its timeout).
- TxnOffsetCommit: refused (INVALID_TXN_STATE, nothing appended) unless AddOffsetsToTxn added the group's
  partition; otherwise pending (require_stable: UNSTABLE_OFFSET_COMMIT) until the COMMIT marker reaches
  ``__consumer_offsets``, and a restart replays the transactional batch and the marker to the same offsets.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tests.server.inprocess import ctx, handle, make_broker, running, until

from tidelog.coordinator.common import partition_for
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    ApiKey,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.broker import Broker
from tidelog.server.txn_runtime import TRANSACTION_STATE_TOPIC

TXN = "runtime-txn"
GROUP = "runtime-group"


def init(broker: Broker, timeout_ms: int = 60_000) -> Any:
    return broker.transactions.handle(
        ctx(ApiKey.INIT_PRODUCER_ID, 4),
        InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=timeout_ms),
    )


def add_partition(broker: Broker, pid: int, epoch: int) -> int:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    response = broker.transactions.handle(ctx(ApiKey.ADD_PARTITIONS_TO_TXN, 3), request)
    return int(response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def produce(broker: Broker, pid: int, epoch: int, sequence: int, value: bytes) -> int:
    batch = encode_batch(
        [SimpleRecord(value=value, timestamp=int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    request = ProduceRequest(
        transactional_id=TXN,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    response: Any = handle(broker, ctx(ApiKey.PRODUCE, 9), request)
    return int(response.responses[0].partition_responses[0].error_code)


def end(broker: Broker, pid: int, epoch: int, commit: bool = True) -> int:
    request = EndTxnRequest(transactional_id=TXN, producer_id=pid, producer_epoch=epoch, committed=commit)
    return int(broker.transactions.handle(ctx(ApiKey.END_TXN, 3), request).error_code)


def state(broker: Broker) -> str:
    txn = broker.transactions.coordinator.transaction(TXN)
    return "none" if txn is None else txn.state.kafka_name


def data_partition(broker: Broker) -> Any:
    partition = broker.replicas.get("t", 0)
    assert partition is not None
    return partition


def open_transaction(broker: Broker) -> tuple[int, int]:
    broker.transactions.ensure_state_topic()
    answer = init(broker)
    assert answer.error_code == ErrorCode.NONE
    pid, epoch = answer.producer_id, answer.producer_epoch
    assert add_partition(broker, pid, epoch) == ErrorCode.NONE
    assert produce(broker, pid, epoch, 0, b"v") == ErrorCode.NONE
    return pid, epoch


def test_loading_then_serving(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            pid, epoch = open_transaction(broker)
            assert end(broker, pid, epoch) == ErrorCode.NONE
            assert state(broker) == "CompleteCommit"
            part = data_partition(broker)
            assert part.last_stable_offset == part.high_watermark == 2  # the record and its marker

        again = make_broker(tmp_path)
        again.transactions.start()  # every partition loading, nothing replayed yet
        assert init(again).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        async with running(again):
            await until(
                lambda: (
                    not again.transactions.coordinator.is_loading(
                        partition_for(TXN, again.transactions.num_partitions)
                    )
                )
            )
            answer = init(again)
            assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
                ErrorCode.NONE,
                pid,
                epoch + 1,
            )

    asyncio.run(scenario())


def test_a_failed_prepare_append_writes_no_marker(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            pid, epoch = open_transaction(broker)
            part = data_partition(broker)
            end_before = part.log_end_offset
            real_append = broker.replicas.append

            def failing(topic: str, *args: Any, **kwargs: Any) -> Any:
                if topic == TRANSACTION_STATE_TOPIC:
                    return ErrorCode.KAFKA_STORAGE_ERROR, None, "disk gone"
                return real_append(topic, *args, **kwargs)

            broker.replicas.append = failing  # type: ignore[method-assign]
            assert end(broker, pid, epoch) == ErrorCode.NOT_COORDINATOR
            broker.replicas.append = real_append  # type: ignore[method-assign]
            assert part.log_end_offset == end_before  # no marker
            assert part.last_stable_offset == 0  # the transaction is still open in the data partition
            await until(lambda: state(broker) == "Ongoing")  # reloaded from the log
            assert end(broker, pid, epoch) == ErrorCode.NONE
            assert state(broker) == "CompleteCommit"
            assert part.last_stable_offset == part.high_watermark == end_before + 1

    asyncio.run(scenario())


def test_a_refused_marker_is_written_again_later(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            pid, epoch = open_transaction(broker)
            real_write = broker.replicas.write_txn_marker
            refusals = []

            def flaky(topic: str, *args: Any, **kwargs: Any) -> Any:
                if not refusals:
                    refusals.append(topic)
                    return ErrorCode.KAFKA_STORAGE_ERROR, None, "not now"
                return real_write(topic, *args, **kwargs)

            broker.replicas.write_txn_marker = flaky  # type: ignore[method-assign]
            assert end(broker, pid, epoch) == ErrorCode.NONE  # PrepareCommit is durable: the answer is NONE
            assert state(broker) == "PrepareCommit"
            assert data_partition(broker).last_stable_offset == 0
            await until(lambda: state(broker) == "CompleteCommit")
            assert refusals == ["t"]
            assert data_partition(broker).last_stable_offset == 2

    asyncio.run(scenario())


def test_a_stalled_transaction_times_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.transactions.ensure_state_topic()
            answer = init(broker, timeout_ms=300)
            pid, epoch = answer.producer_id, answer.producer_epoch
            assert add_partition(broker, pid, epoch) == ErrorCode.NONE
            started = time.monotonic()
            assert produce(broker, pid, epoch, 0, b"stalled") == ErrorCode.NONE
            await until(lambda: state(broker) == "CompleteAbort")
            assert time.monotonic() - started >= 0.25
            txn = broker.transactions.coordinator.transaction(TXN)
            assert txn is not None
            assert txn.producer_epoch == epoch + 1  # fenced by the abort
            assert produce(broker, pid, epoch, 1, b"late") == ErrorCode.INVALID_PRODUCER_EPOCH
            part = data_partition(broker)
            assert part.last_stable_offset == part.high_watermark == 2

    asyncio.run(scenario())


def txn_offset_commit(broker: Broker, pid: int, epoch: int, offset: int) -> int:
    request = TxnOffsetCommitRequest(
        transactional_id=TXN,
        group_id=GROUP,
        producer_id=pid,
        producer_epoch=epoch,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(committed_offset=offset)],
            )
        ],
    )
    response = handle(broker, ctx(ApiKey.TXN_OFFSET_COMMIT, 3), request)
    return int(response.topics[0].partitions[0].error_code)


def fetch_stable(broker: Broker) -> tuple[int, int]:
    request = OffsetFetchRequest(
        group_id=GROUP,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
        require_stable=True,
    )
    partition = broker.groups.handle(ctx(ApiKey.OFFSET_FETCH, 7), request).topics[0].partitions[0]
    return partition.error_code, partition.committed_offset


def test_transactional_offsets_wait_for_the_marker_and_survive_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = make_broker(tmp_path)
        async with running(broker):
            broker.groups.ensure_offsets_topic()
            pid, epoch = open_transaction(broker)
            offsets = broker.replicas.get("__consumer_offsets", broker.groups.partition_for(GROUP))
            assert offsets is not None
            before = offsets.log_end_offset
            # not added to the transaction: refused, nothing appended
            assert txn_offset_commit(broker, pid, epoch, 7) == ErrorCode.INVALID_TXN_STATE
            assert offsets.log_end_offset == before
            added = broker.transactions.handle(
                ctx(ApiKey.ADD_OFFSETS_TO_TXN, 3),
                AddOffsetsToTxnRequest(
                    transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id=GROUP
                ),
            )
            assert added.error_code == ErrorCode.NONE
            assert txn_offset_commit(broker, pid, epoch, 7) == ErrorCode.NONE
            assert txn_offset_commit(broker, pid, epoch + 5, 8) == ErrorCode.INVALID_PRODUCER_EPOCH
            assert fetch_stable(broker) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
            assert end(broker, pid, epoch) == ErrorCode.NONE
            assert fetch_stable(broker) == (ErrorCode.NONE, 7)
            # the next transaction's commit stays pending across the restart
            assert add_partition(broker, pid, epoch) == ErrorCode.NONE
            broker.transactions.handle(
                ctx(ApiKey.ADD_OFFSETS_TO_TXN, 3),
                AddOffsetsToTxnRequest(
                    transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id=GROUP
                ),
            )
            assert txn_offset_commit(broker, pid, epoch, 9) == ErrorCode.NONE

        again = make_broker(tmp_path)
        async with running(again):
            await until(lambda: not again.groups.coordinator.is_loading(again.groups.partition_for(GROUP)))
            assert fetch_stable(again) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
            await until(lambda: state(again) == "Ongoing")
            assert end(again, pid, epoch, commit=False) == ErrorCode.NONE
            assert fetch_stable(again) == (ErrorCode.NONE, 7)  # the aborted 9 is dropped

    asyncio.run(scenario())
