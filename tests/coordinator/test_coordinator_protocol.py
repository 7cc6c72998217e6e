"""Both coordinators through the one protocol a generic runtime drives (``PartitionedCoordinator``).

One loader, written once against the protocol, loads a group coordinator and a transaction coordinator
from the records each emitted live; both then answer as the coordinator that wrote the records did.
The append-error translations share Kafka's common part and keep their one difference each.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeVar

import pytest

from tidelog.coordinator.common import (
    COORDINATOR_APPEND_ERRORS,
    GROUP_METADATA_TOPIC_NAME,
    TRANSACTION_STATE_TOPIC_NAME,
    CoordinatorResult,
    PartitionedCoordinator,
    partition_for,
)
from tidelog.coordinator.group import GroupCoordinator, GroupCoordinatorConfig, TimerKey, TimerKind
from tidelog.coordinator.txn import (
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TxnTimerKey,
    TxnTimerKind,
)
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
)

K = TypeVar("K", bound=Hashable)
NOW = 1_700_000_000_000
PARTITIONS = 3


@dataclass
class Entry:
    """One entry of a partition's log, as a runtime reads it: a record of a batch, or a marker."""

    key: bytes | None = None
    value: bytes | None = None
    producer_id: int = -1
    committed: bool | None = None


def logged(result: CoordinatorResult[K], producer_id: int = -1) -> dict[int, list[Entry]]:
    return {
        partition: [Entry(r.key, r.value, producer_id) for r in records]
        for partition, records in result.records.items()
    }


def load(coordinator: PartitionedCoordinator[K], log: dict[int, list[Entry]]) -> list[CoordinatorResult[K]]:
    """What any runtime does with any coordinator when it becomes the leader of these partitions."""
    results = []
    for partition in sorted(log):
        coordinator.begin_loading(partition, 7)
        assert coordinator.is_loading(partition)
        for entry in log[partition]:
            if entry.committed is not None:
                coordinator.replay_end_transaction_marker(partition, entry.producer_id, entry.committed)
            else:
                assert entry.key is not None
                coordinator.replay(partition, entry.key, entry.value, entry.producer_id)
        results.append(coordinator.complete_loading(partition, NOW))
        assert not coordinator.is_loading(partition)
    assert coordinator.owned_partitions == sorted(log)
    return results


def unload_all(coordinator: PartitionedCoordinator[K]) -> None:
    for partition in coordinator.owned_partitions:
        coordinator.unload(partition)
    assert coordinator.owned_partitions == []


def group_coordinator() -> GroupCoordinator:
    return GroupCoordinator(GroupCoordinatorConfig(offsets_topic_num_partitions=PARTITIONS))


def txn_coordinator() -> TransactionCoordinator:
    ids = iter(range(1000, 2000))
    return TransactionCoordinator(
        TransactionCoordinatorConfig(transaction_state_log_num_partitions=PARTITIONS),
        allocate_producer_id=lambda: next(ids),
    )


def test_each_coordinator_names_its_topic_and_partitions_keys_like_kafka() -> None:
    group, txn = group_coordinator(), txn_coordinator()
    assert (group.topic_name, group.num_partitions) == (GROUP_METADATA_TOPIC_NAME, PARTITIONS)
    assert (txn.topic_name, txn.num_partitions) == (TRANSACTION_STATE_TOPIC_NAME, PARTITIONS)
    for key in ("g", "orders-app", "tx-1"):
        assert group.partition_for(key) == txn.partition_for(key) == partition_for(key, PARTITIONS)


def test_a_group_coordinator_loads_through_the_protocol() -> None:
    live = group_coordinator()
    load(live, {p: [] for p in range(PARTITIONS)})
    commit = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=-1,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=42)
                ],
            )
        ],
    )
    log = logged(live.handle(commit, 8, now_ms=NOW))
    pending = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id="g",
        producer_id=5000,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name="t",
                partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=1, committed_offset=7
                    )
                ],
            )
        ],
    )
    partition = live.partition_for("g")
    log[partition] += logged(live.handle(pending, 3, now_ms=NOW), producer_id=5000)[partition]
    log[partition].append(Entry(producer_id=5000, committed=True))

    fresh = group_coordinator()
    load(fresh, log)
    fetch = OffsetFetchRequest(
        group_id="g", topics=[OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 1])]
    )
    response = fresh.handle(fetch, 7, now_ms=NOW).response
    assert isinstance(response, OffsetFetchResponse)
    assert [(p.partition_index, p.committed_offset) for p in response.topics[0].partitions] == [
        (0, 42),
        (1, 7),
    ]
    stale = TimerKey(TimerKind.HEARTBEAT, partition, "g", "nobody")
    assert fresh.on_timeout(stale, NOW + 10**9).is_empty
    unload_all(fresh)


def test_a_transaction_coordinator_loads_through_the_protocol() -> None:
    live = txn_coordinator()
    load(live, {p: [] for p in range(PARTITIONS)})
    init = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000)
    result = live.handle(init, 4, now_ms=NOW)
    assert isinstance(result.response, InitProducerIdResponse)
    assert result.response.error_code == ErrorCode.NONE
    log: dict[int, list[Entry]] = {p: [] for p in range(PARTITIONS)}
    for partition, entries in logged(result).items():
        log[partition] += entries
    log[live.partition_for("tx")].append(Entry(producer_id=123, committed=True))  # settles nothing here

    fresh = txn_coordinator()
    load(fresh, log)
    described = fresh.handle(DescribeTransactionsRequest(transactional_ids=["tx"]), 0, now_ms=NOW).response
    assert isinstance(described, DescribeTransactionsResponse)
    (state,) = described.transaction_states
    assert (state.error_code, state.transaction_state, state.producer_id) == (
        ErrorCode.NONE,
        "Empty",
        result.response.producer_id,
    )
    stale = TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, live.partition_for("tx"), "tx")
    assert fresh.on_timeout(stale, NOW + 10**9).is_empty
    unload_all(fresh)


def test_a_request_while_loading_is_answered_by_the_coordinators_error_response() -> None:
    group, txn = group_coordinator(), txn_coordinator()
    group.begin_loading(group.partition_for("g"), 0)
    txn.begin_loading(txn.partition_for("tx"), 0)
    fetch = OffsetFetchRequest(group_id="g", topics=[])
    init = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60_000)
    loading = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert group.handle(fetch, 7, now_ms=NOW).response == group.error_response(fetch, 7, loading)
    assert txn.handle(init, 4, now_ms=NOW).response == txn.error_response(init, 4, loading)


@pytest.mark.parametrize(("failed", "told"), sorted(COORDINATOR_APPEND_ERRORS.items()))
def test_both_coordinators_translate_the_common_append_errors_alike(
    failed: ErrorCode, told: ErrorCode
) -> None:
    assert group_coordinator().append_error_to_response_error(failed) is told
    assert txn_coordinator().append_error_to_response_error(failed) is told


def test_where_kafkas_two_append_error_translations_differ() -> None:
    group, txn = group_coordinator(), txn_coordinator()
    assert (
        group.append_error_to_response_error(ErrorCode.INVALID_FETCH_SIZE) is ErrorCode.UNKNOWN_SERVER_ERROR
    )
    assert txn.append_error_to_response_error(ErrorCode.INVALID_FETCH_SIZE) is ErrorCode.INVALID_FETCH_SIZE
    after_append = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert group.append_error_to_response_error(after_append) is after_append
    assert txn.append_error_to_response_error(after_append) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    for coordinator in (group, txn):
        assert (
            coordinator.append_error_to_response_error(ErrorCode.CORRUPT_MESSAGE) is ErrorCode.CORRUPT_MESSAGE
        )
