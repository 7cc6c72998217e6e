"""Transaction coordinator scenarios: InitProducerId and fencing, AddPartitions/AddOffsets, EndTxn with
its records and marker instructions, timeouts, loading, Describe/ListTransactions, verification.

Each test drives :class:`TxnHarness` (a manual clock, a log per ``__transaction_state`` partition, a
marker log, a timer table) and asserts exact responses, records and markers.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.coordinator.test_txn_harness import START_MS, TIMEOUT_MS, TxnHarness, WrittenMarker

from tidelog.coordinator.common.partitioning import partition_for
from tidelog.coordinator.common.result import WriteTxnMarkers
from tidelog.coordinator.txn.coordinator import TransactionCoordinator
from tidelog.coordinator.txn.records import (
    TransactionLogValue,
    TxnRecordError,
    decode_value,
    encode_key,
    encode_value,
    partitions_schema,
    txn_record,
)
from tidelog.coordinator.txn.responses import txn_append_error_to_response_error, txn_error_response
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey, TxnTimerKind
from tidelog.protocol import TopicPartition, codec
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
)
from tidelog.protocol.records import ControlRecordType
from tidelog.protocol.schema import Request, in_range

S = TransactionState
E = ErrorCode
COMMIT = ControlRecordType.COMMIT
ABORT = ControlRecordType.ABORT


def value(
    state: TransactionState,
    producer_id: int,
    epoch: int,
    *,
    partitions: list[tuple[str, int]] | None = None,
    last_update: int,
    start: int = -1,
    timeout: int = TIMEOUT_MS,
) -> TransactionLogValue:
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=epoch,
        transaction_timeout_ms=timeout,
        transaction_status=state,
        transaction_partitions=None
        if partitions is None
        else partitions_schema(TopicPartition(t, p) for t, p in partitions),
        transaction_last_update_timestamp_ms=last_update,
        transaction_start_timestamp_ms=start,
    )


def values_of(h: TxnHarness, transactional_id: str) -> list[TransactionLogValue | None]:
    records = h.records_of(transactional_id)
    assert all(r.key == encode_key(transactional_id) for r in records)
    return [decode_value(r.value) for r in records]


# -- InitProducerId ------------------------------------------------------------------------------------


def test_init_new_transactional_id() -> None:
    h = TxnHarness()
    response = h.init("tx", timeout_ms=30_000)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 1000, 0)
    records = h.records_of("tx")
    assert len(records) == 1
    assert records[0].value == encode_value(value(S.EMPTY, 1000, 0, last_update=START_MS, timeout=30_000))
    assert h.txn("tx").state is S.EMPTY


def test_init_again_bumps_the_epoch_and_updates_the_timeout() -> None:
    h = TxnHarness()
    h.init("tx")
    h.now += 5
    response = h.init("tx", timeout_ms=10_000)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 1000, 1)
    assert values_of(h, "tx")[-1] == value(S.EMPTY, 1000, 1, last_update=START_MS + 5, timeout=10_000)


def test_init_without_transactional_id_is_a_fresh_idempotent_producer() -> None:
    h = TxnHarness()
    first, second = h.init(None), h.init(None, producer_id=1000, producer_epoch=0)
    assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 1000, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (0, 1001, 0)
    assert h.log == {}


@pytest.mark.parametrize(
    ("transactional_id", "timeout_ms", "producer_id", "producer_epoch", "error"),
    [
        ("", TIMEOUT_MS, -1, -1, E.INVALID_REQUEST),
        ("tx", 0, -1, -1, E.INVALID_TRANSACTION_TIMEOUT),
        ("tx", -5, -1, -1, E.INVALID_TRANSACTION_TIMEOUT),
        ("tx", 900_001, -1, -1, E.INVALID_TRANSACTION_TIMEOUT),
        ("tx", TIMEOUT_MS, 5, -1, E.INVALID_REQUEST),
        ("tx", TIMEOUT_MS, -1, 0, E.INVALID_REQUEST),
    ],
)
def test_init_refusals(
    transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int, error: ErrorCode
) -> None:
    h = TxnHarness()
    response = h.init(
        transactional_id, timeout_ms=timeout_ms, producer_id=producer_id, producer_epoch=producer_epoch
    )
    assert (response.error_code, response.producer_id, response.producer_epoch) == (error, -1, -1)
    assert h.log == {}


def test_init_accepts_the_maximum_timeout() -> None:
    h = TxnHarness()
    assert h.init("tx", timeout_ms=900_000).error_code == 0


def test_init_when_producer_ids_cannot_be_reserved() -> None:
    h = TxnHarness()

    def broken() -> int:
        raise OSError("disk full")

    h.allocate = broken
    assert h.init("tx").error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.init(None).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.log == {}


def test_init_on_an_ongoing_transaction_fences_and_aborts_it_first() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("out", 1), ("out", 0))
    h.now += 100
    response = h.init("tx")
    assert (response.error_code, response.producer_id, response.producer_epoch) == (
        E.CONCURRENT_TRANSACTIONS,
        -1,
        -1,
    )
    assert values_of(h, "tx")[-1] == value(
        S.PREPARE_ABORT,
        pid,
        epoch + 1,
        partitions=[("out", 0), ("out", 1)],
        last_update=START_MS + 100,
        start=START_MS,
    )
    partition = h.coordinator.partition_for("tx")
    assert h.in_flight == [
        WriteTxnMarkers(
            transactional_id="tx",
            txn_partition=partition,
            producer_id=pid,
            producer_epoch=epoch + 1,
            coordinator_epoch=0,
            result=ABORT,
            partitions=(TopicPartition("out", 0), TopicPartition("out", 1)),
        )
    ]
    assert TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, partition, "tx") not in h.timers
    # While the markers are being written, the retry is told to wait.
    assert h.init("tx").error_code == E.CONCURRENT_TRANSACTIONS
    h.now += 10
    h.write_markers()
    assert values_of(h, "tx")[-1] == value(
        S.COMPLETE_ABORT, pid, epoch + 1, partitions=[], last_update=START_MS + 110, start=START_MS
    )
    retry = h.init("tx")
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (0, pid, epoch + 2)
    assert h.written == [
        WrittenMarker(TopicPartition("out", 0), ABORT, pid, epoch + 1, 0),
        WrittenMarker(TopicPartition("out", 1), ABORT, pid, epoch + 1, 0),
    ]


@pytest.mark.parametrize(("version", "error"), [(1, E.INVALID_PRODUCER_EPOCH), (2, E.PRODUCER_FENCED)])
def test_the_fenced_producer_is_told_so(version: int, error: ErrorCode) -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("out", 0))
    assert h.init("tx").error_code == E.CONCURRENT_TRANSACTIONS  # a new producer fences the zombie
    assert h.add("tx", pid, epoch, [("out", 1)], version=version) == {("out", 1): error}
    assert h.add_offsets("tx", pid, epoch, "g", version=version) == error
    assert h.end("tx", pid, epoch, commit=True, version=version) == error
    assert h.txn("tx").state is S.COMPLETE_ABORT


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    h = TxnHarness()
    partition = h.coordinator.partition_for("tx")
    h.log[partition] = [
        txn_record("tx", value(S.COMPLETE_COMMIT, 77, 32765, partitions=[], last_update=1, start=1))
    ]
    h.reload()
    response = h.init("tx")
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 77, 32766)
    rotated = h.init("tx")
    assert (rotated.error_code, rotated.producer_id, rotated.producer_epoch) == (0, 1000, 0)
    assert (h.txn("tx").last_producer_id, h.txn("tx").last_producer_epoch) == (77, -1)


def test_kip360_retry_across_a_rotation_gets_the_same_answer() -> None:
    h = TxnHarness()
    partition = h.coordinator.partition_for("tx")
    h.log[partition] = [txn_record("tx", value(S.EMPTY, 77, 32766, last_update=1))]
    h.reload()
    rotated = h.init("tx", producer_id=77, producer_epoch=32766)
    assert (rotated.error_code, rotated.producer_id, rotated.producer_epoch) == (0, 1000, 0)
    # The response was lost; the producer retries with its old id and epoch.
    retry = h.init("tx", producer_id=77, producer_epoch=32766)
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (0, 1000, 0)


@pytest.mark.parametrize(("version", "fenced"), [(3, E.INVALID_PRODUCER_EPOCH), (4, E.PRODUCER_FENCED)])
def test_kip360_expected_producer(version: int, fenced: ErrorCode) -> None:
    h = TxnHarness()
    h.init("tx")
    bumped = h.init("tx", version=version, producer_id=1000, producer_epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, 1000, 1)
    lost_retry = h.init("tx", version=version, producer_id=1000, producer_epoch=0)
    assert (lost_retry.error_code, lost_retry.producer_epoch) == (0, 1)
    assert h.init("tx", version=version, producer_id=999, producer_epoch=1).error_code == fenced
    h.init("tx")  # another producer takes over: epoch 2, last epoch forgotten
    assert h.init("tx", version=version, producer_id=1000, producer_epoch=0).error_code == fenced


def test_kip360_unknown_id_with_expected_producer_gets_a_new_producer() -> None:
    h = TxnHarness()
    response = h.init("tx", producer_id=5, producer_epoch=3)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 1000, 0)


# -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------------------


def test_add_partitions_starts_the_transaction() -> None:
    h = TxnHarness()
    init = h.init("tx")
    h.now += 7
    errors = h.add("tx", init.producer_id, init.producer_epoch, [("b", 0), ("a", 3)])
    assert errors == {("b", 0): 0, ("a", 3): 0}
    assert values_of(h, "tx")[-1] == value(
        S.ONGOING, 1000, 0, partitions=[("a", 3), ("b", 0)], last_update=START_MS + 7, start=START_MS + 7
    )
    key = TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, h.coordinator.partition_for("tx"), "tx")
    assert h.timers[key] == START_MS + 7 + TIMEOUT_MS + 1


def test_add_partitions_already_in_the_transaction_writes_nothing() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0), ("a", 1))
    written = len(h.records_of("tx"))
    assert h.add("tx", pid, epoch, [("a", 1)]) == {("a", 1): 0}
    assert len(h.records_of("tx")) == written
    h.now += 3
    assert h.add("tx", pid, epoch, [("a", 1), ("c", 9)]) == {("a", 1): 0, ("c", 9): 0}
    assert values_of(h, "tx")[-1] == value(
        S.ONGOING,
        pid,
        epoch,
        partitions=[("a", 0), ("a", 1), ("c", 9)],
        last_update=START_MS + 3,
        start=START_MS,
    )


@pytest.mark.parametrize(
    ("who", "error"),
    [
        ("unknown", E.INVALID_PRODUCER_ID_MAPPING),
        ("other-pid", E.INVALID_PRODUCER_ID_MAPPING),
        ("old-epoch", E.PRODUCER_FENCED),
        ("new-epoch", E.PRODUCER_FENCED),
    ],
)
def test_add_partitions_identity_checks(who: str, error: ErrorCode) -> None:
    h = TxnHarness()
    h.init("tx")
    h.init("tx")  # epoch 1
    txn_id, pid, epoch = {
        "unknown": ("nope", 1000, 1),
        "other-pid": ("tx", 1001, 1),
        "old-epoch": ("tx", 1000, 0),
        "new-epoch": ("tx", 1000, 2),
    }[who]
    before = dict(h.log)
    assert h.add(txn_id, pid, epoch, [("a", 0), ("a", 1)]) == {("a", 0): error, ("a", 1): error}
    assert h.log == before


def test_add_unknown_or_internal_partitions_fails_the_whole_request() -> None:
    h = TxnHarness()
    init = h.init("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    assert h.add("tx", pid, epoch, [("a", 0), ("missing", 0)]) == {
        ("a", 0): E.OPERATION_NOT_ATTEMPTED,
        ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert h.add("tx", pid, epoch, [("__consumer_offsets", 3), ("a", 0)]) == {
        ("__consumer_offsets", 3): E.TOPIC_AUTHORIZATION_FAILED,
        ("a", 0): E.OPERATION_NOT_ATTEMPTED,
    }
    assert h.txn("tx").state is S.EMPTY


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = TxnHarness()
    init = h.init("tx")
    assert h.add_offsets("tx", init.producer_id, init.producer_epoch, "my-group") == 0
    offsets_partition = partition_for("my-group", 5)
    assert h.txn("tx").topic_partitions == {TopicPartition("__consumer_offsets", offsets_partition)}
    assert h.txn("tx").state is S.ONGOING
    assert h.add_offsets("nope", init.producer_id, init.producer_epoch, "g") == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add_offsets("", init.producer_id, init.producer_epoch, "g") == E.INVALID_REQUEST


def test_add_during_prepare_is_concurrent() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0))
    assert h.end("tx", pid, epoch, commit=True) == 0
    assert h.add("tx", pid, epoch, [("a", 1)]) == {("a", 1): E.CONCURRENT_TRANSACTIONS}
    assert h.add_offsets("tx", pid, epoch, "g") == E.CONCURRENT_TRANSACTIONS
    h.write_markers()
    assert h.add("tx", pid, epoch, [("a", 1)]) == {("a", 1): 0}
    assert h.txn("tx").txn_start_timestamp == h.now  # a new transaction


# -- EndTxn ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_transaction_two_phases(commit: bool) -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("out", 2), ("in", 0), ("out", 1))
    h.now += 50
    assert h.end("tx", pid, epoch, commit=commit) == 0
    prepare, complete = (
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    )
    parts = [("in", 0), ("out", 1), ("out", 2)]
    assert values_of(h, "tx")[-1] == value(
        prepare, pid, epoch, partitions=parts, last_update=START_MS + 50, start=START_MS
    )
    kind = COMMIT if commit else ABORT
    partition = h.coordinator.partition_for("tx")
    assert h.in_flight == [
        WriteTxnMarkers("tx", partition, pid, epoch, 0, kind, tuple(TopicPartition(t, p) for t, p in parts))
    ]
    assert TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, partition, "tx") not in h.timers
    state = h.describe("tx").transaction_states[0]
    assert state.transaction_state == prepare.kafka_name
    h.now += 20
    h.write_markers()
    assert values_of(h, "tx")[-1] == value(
        complete, pid, epoch, partitions=[], last_update=START_MS + 70, start=START_MS
    )
    assert [w.partition for w in h.written] == [TopicPartition(t, p) for t, p in parts]
    assert {(w.result, w.producer_id, w.producer_epoch, w.coordinator_epoch) for w in h.written} == {
        (kind, pid, epoch, 0)
    }


def test_markers_reported_partition_by_partition() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0), ("a", 1))
    h.end("tx", pid, epoch, commit=True)
    (markers,) = h.in_flight
    h.in_flight.clear()
    written_before = len(h.records_of("tx"))
    h.apply(h.coordinator.on_markers_written(markers, h.now, [TopicPartition("a", 1)]))
    assert len(h.records_of("tx")) == written_before
    described = h.describe("tx").transaction_states[0]
    assert [(t.topic, t.partitions) for t in described.topics] == [("a", [0])]  # only those without a marker
    h.apply(h.coordinator.on_markers_written(markers, h.now, [TopicPartition("a", 1)]))  # a repeat: nothing
    assert len(h.records_of("tx")) == written_before
    h.apply(h.coordinator.on_markers_written(markers, h.now, [TopicPartition("a", 0)]))
    assert h.txn("tx").state is S.COMPLETE_COMMIT
    assert len(h.records_of("tx")) == written_before + 1
    h.apply(h.coordinator.on_markers_written(markers, h.now))  # late duplicate: ignored
    assert len(h.records_of("tx")) == written_before + 1


def test_stale_marker_reports_are_ignored() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0))
    h.end("tx", pid, epoch, commit=True)
    (markers,) = h.in_flight
    h.in_flight.clear()
    for stale in (
        WriteTxnMarkers("tx", markers.txn_partition, pid, epoch, 7, COMMIT, markers.partitions),
        WriteTxnMarkers("tx", markers.txn_partition, pid, epoch + 1, 0, COMMIT, markers.partitions),
        WriteTxnMarkers("tx", markers.txn_partition, pid + 1, epoch, 0, COMMIT, markers.partitions),
        WriteTxnMarkers("tx", markers.txn_partition, pid, epoch, 0, ABORT, markers.partitions),
        WriteTxnMarkers("other", markers.txn_partition, pid, epoch, 0, COMMIT, markers.partitions),
    ):
        assert h.coordinator.on_markers_written(stale, h.now).is_empty
    assert h.txn("tx").state is S.PREPARE_COMMIT


@pytest.mark.parametrize(
    ("state", "commit", "error"),
    [
        (S.COMPLETE_COMMIT, True, E.NONE),
        (S.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE),
        (S.COMPLETE_ABORT, False, E.NONE),
        (S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE),
        (S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS),
        (S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE),
        (S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS),
        (S.PREPARE_ABORT, True, E.INVALID_TXN_STATE),
        (S.EMPTY, True, E.INVALID_TXN_STATE),
        (S.EMPTY, False, E.INVALID_TXN_STATE),
    ],
)
def test_end_transaction_in_every_other_state(
    state: TransactionState, commit: bool, error: ErrorCode
) -> None:
    h = TxnHarness(auto_markers=False)
    init = h.init("tx")
    pid, epoch = init.producer_id, init.producer_epoch
    if state is not S.EMPTY:
        h.add("tx", pid, epoch, [("a", 0)])
        h.end("tx", pid, epoch, commit=state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT))
        if state.kafka_name.startswith("Complete"):
            h.write_markers()
    assert h.txn("tx").state is state
    records = len(h.records_of("tx"))
    assert h.end("tx", pid, epoch, commit=commit) == error
    assert len(h.records_of("tx")) == records


def test_end_transaction_identity_checks() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    assert h.end("nope", pid, epoch, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("tx", pid + 1, epoch, commit=True) == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end("tx", pid, epoch + 1, commit=True) == E.PRODUCER_FENCED
    assert h.end("tx", pid, epoch + 1, commit=True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert h.end("", pid, epoch, commit=True) == E.INVALID_REQUEST
    assert h.txn("tx").state is S.ONGOING


def test_transaction_without_partitions_completes_at_once() -> None:
    h = TxnHarness(auto_markers=False)
    init = h.init("tx")
    assert h.add("tx", init.producer_id, init.producer_epoch, []) == {}
    assert h.txn("tx").state is S.ONGOING
    assert h.end("tx", init.producer_id, init.producer_epoch, commit=True) == 0
    assert h.in_flight == []
    assert [v.transaction_status for v in values_of(h, "tx") if v is not None][-2:] == [
        S.PREPARE_COMMIT,
        S.COMPLETE_COMMIT,
    ]


# -- timeouts -------------------------------------------------------------------------------------------


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0))
    h.advance(TIMEOUT_MS)
    assert h.txn("tx").state is S.ONGOING  # Kafka aborts once start + timeout < now
    h.advance(1)
    assert values_of(h, "tx")[-1] == value(
        S.PREPARE_ABORT,
        pid,
        epoch + 1,
        partitions=[("a", 0)],
        last_update=START_MS + TIMEOUT_MS + 1,
        start=START_MS,
    )
    assert [(m.result, m.producer_epoch, m.partitions) for m in h.in_flight] == [
        (ABORT, epoch + 1, (TopicPartition("a", 0),))
    ]
    h.write_markers()
    assert h.txn("tx").state is S.COMPLETE_ABORT
    assert h.end("tx", pid, epoch, commit=True) == E.PRODUCER_FENCED


def test_ending_in_time_cancels_the_timeout() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    h.advance(TIMEOUT_MS - 1)
    assert h.end("tx", pid, epoch, commit=True) == 0
    records = len(h.records_of("tx"))
    h.advance(10 * TIMEOUT_MS)
    assert len(h.records_of("tx")) == records
    assert h.txn("tx").state is S.COMPLETE_COMMIT


def test_a_stale_timer_firing_changes_nothing() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    key = TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, h.coordinator.partition_for("tx"), "tx")
    assert h.coordinator.on_timeout(key, h.now).is_empty  # early
    h.end("tx", pid, epoch, commit=True)
    assert h.coordinator.on_timeout(key, h.now + 10 * TIMEOUT_MS).is_empty  # cancelled
    assert h.txn("tx").state is S.COMPLETE_COMMIT


def test_the_timeout_follows_the_next_transaction() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    h.end("tx", pid, epoch, commit=True)
    h.advance(1000)
    h.add("tx", pid, epoch, [("a", 0)])
    key = TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, h.coordinator.partition_for("tx"), "tx")
    assert h.timers[key] == START_MS + 1000 + TIMEOUT_MS + 1


# -- loading --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_prepared_transaction_is_completed_after_a_restart(commit: bool) -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0), ("b", 1))
    h.end("tx", pid, epoch, commit=commit)
    h.reload()  # the markers were never written
    kind = COMMIT if commit else ABORT
    assert [
        (m.result, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.partitions) for m in h.in_flight
    ] == [(kind, pid, epoch, 1, (TopicPartition("a", 0), TopicPartition("b", 1)))]
    h.now += 5
    h.write_markers()
    assert h.txn("tx").state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert values_of(h, "tx")[-1] == value(
        S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT,
        pid,
        epoch,
        partitions=[],
        last_update=h.now,
        start=START_MS,
    )


def test_ongoing_transaction_timer_is_rearmed_after_a_restart() -> None:
    h = TxnHarness(auto_markers=False)
    _, epoch = h.begin_txn("tx", ("a", 0))
    h.now += 10 * TIMEOUT_MS
    h.reload()
    key = TxnTimerKey(TxnTimerKind.TRANSACTION_TIMEOUT, h.coordinator.partition_for("tx"), "tx")
    assert h.timers[key] == START_MS + TIMEOUT_MS + 1  # overdue: fires at once
    h.advance(0)
    assert h.txn("tx").state is S.PREPARE_ABORT
    assert h.txn("tx").producer_epoch == epoch + 1


def test_requests_while_loading_and_not_owned() -> None:
    coordinator = TransactionCoordinator(allocate_producer_id=lambda: 1)
    p = coordinator.partition_for("tx")
    init = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000)

    def answer(request: Request, version: int) -> Any:
        response = coordinator.handle(request, version, now_ms=0).response
        assert response is not None
        return response

    assert answer(init, 4).error_code == E.NOT_COORDINATOR
    coordinator.begin_loading(p, 3)
    assert answer(init, 4).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert answer(ListTransactionsRequest(), 0).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    described = answer(DescribeTransactionsRequest(transactional_ids=["tx"]), 0)
    assert described.transaction_states[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert coordinator.verify_partitions("tx", 1, 0, [TopicPartition("a", 0)]) == {
        TopicPartition("a", 0): E.COORDINATOR_LOAD_IN_PROGRESS
    }
    coordinator.complete_loading(p, 0)
    assert answer(init, 4).error_code == E.NONE


def test_unload_drops_timers_and_ignores_late_markers() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0))
    h.end("tx", pid, epoch, commit=True)
    (markers,) = h.in_flight
    partition = h.coordinator.partition_for("tx")
    h.apply(h.coordinator.unload(partition))
    assert not any(k.partition == partition for k in h.timers)
    assert h.coordinator.on_markers_written(markers, h.now).is_empty
    assert h.init("tx").error_code == E.NOT_COORDINATOR


def test_loading_skips_foreign_keys_and_applies_tombstones() -> None:
    coordinator = TransactionCoordinator(allocate_producer_id=lambda: 1)
    p = coordinator.partition_for("tx")
    coordinator.begin_loading(p, 0)
    coordinator.replay(p, b"\x00\x05junk", b"whatever")
    record = txn_record("tx", value(S.EMPTY, 9, 0, last_update=1))
    coordinator.replay(p, record.key, record.value)
    assert coordinator.txn_partition(p).transactions["tx"].producer_id == 9  # type: ignore[union-attr]
    coordinator.replay(p, encode_key("tx"), None)
    coordinator.complete_loading(p, 0)
    assert coordinator.transaction("tx") is None


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_loading_refuses_transient_states(state: TransactionState) -> None:
    coordinator = TransactionCoordinator(allocate_producer_id=lambda: 1)
    p = coordinator.partition_for("tx")
    coordinator.begin_loading(p, 0)
    with pytest.raises(TxnRecordError):
        coordinator.replay(
            p, encode_key("tx"), encode_value(value(state, 9, 0, partitions=[], last_update=1))
        )


def test_loading_twice_or_out_of_range_is_a_bug() -> None:
    coordinator = TransactionCoordinator(allocate_producer_id=lambda: 1)
    coordinator.begin_loading(0, 0)
    with pytest.raises(RuntimeError, match="already owned"):
        coordinator.begin_loading(0, 1)
    with pytest.raises(ValueError, match="no __transaction_state partition 50"):
        coordinator.begin_loading(50, 0)
    coordinator.complete_loading(0, 0)
    with pytest.raises(RuntimeError, match="is loaded"):
        coordinator.replay(0, encode_key("x"), None)


# -- expiry of transactional ids ------------------------------------------------------------------------


def test_idle_transactional_ids_expire() -> None:
    h = TxnHarness()
    h.init("idle")
    h.begin_txn("busy", ("a", 0))
    h.now += 604_800_000
    h.apply(h.coordinator.expire_transactional_ids(h.now))
    assert h.coordinator.transaction("idle") is None
    assert h.records_of("idle")[-1].value is None  # a tombstone
    assert h.coordinator.transaction("busy") is not None  # an open transaction never expires
    described = h.describe("idle").transaction_states[0]
    assert described.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    again = h.init("idle")  # a brand-new id: a new producer
    assert (again.producer_id, again.producer_epoch) == (1002, 0)


def test_expiry_runs_on_its_timer() -> None:
    h = TxnHarness()
    h.init("idle")
    h.advance(604_800_000 + 3_600_000)
    assert h.coordinator.transaction("idle") is None


# -- DescribeTransactions / ListTransactions ------------------------------------------------------------


def test_describe_transactions() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("b", 1), ("a", 0), ("b", 0))
    response = h.describe("tx", "nope", "")
    ongoing, missing, empty = response.transaction_states
    assert (ongoing.error_code, ongoing.transactional_id, ongoing.transaction_state) == (0, "tx", "Ongoing")
    assert (ongoing.producer_id, ongoing.producer_epoch, ongoing.transaction_timeout_ms) == (
        pid,
        epoch,
        TIMEOUT_MS,
    )
    assert ongoing.transaction_start_time_ms == START_MS
    assert [(t.topic, t.partitions) for t in ongoing.topics] == [("a", [0]), ("b", [0, 1])]
    assert (missing.error_code, missing.transactional_id) == (E.TRANSACTIONAL_ID_NOT_FOUND, "nope")
    assert (empty.error_code, empty.transactional_id) == (E.INVALID_REQUEST, "")


def test_list_transactions_filters() -> None:
    h = TxnHarness()
    h.init("empty")
    h.begin_txn("ongoing", ("a", 0))
    pid, epoch = h.begin_txn("done", ("a", 1))
    h.end("done", pid, epoch, commit=True)

    def listed(**kwargs: object) -> list[tuple[str, str]]:
        response = h.list(**kwargs)  # type: ignore[arg-type]
        assert response.error_code == 0
        return sorted((s.transactional_id, s.transaction_state) for s in response.transaction_states)

    assert listed() == [("done", "CompleteCommit"), ("empty", "Empty"), ("ongoing", "Ongoing")]
    assert listed(states=["Ongoing", "CompleteCommit"]) == [
        ("done", "CompleteCommit"),
        ("ongoing", "Ongoing"),
    ]
    assert listed(producer_ids=[pid]) == [("done", "CompleteCommit")]
    assert listed(states=["Ongoing"], producer_ids=[pid]) == []
    response = h.list(states=["Bogus", "Ongoing"])
    assert response.unknown_state_filters == ["Bogus"]
    assert [s.transactional_id for s in response.transaction_states] == ["ongoing"]
    assert h.list(states=["Bogus"]).transaction_states == []
    h.now += 5000
    # Running longer than 4999 ms: the Ongoing and the completed one (started at the start); Empty has
    # start -1, which Kafka's arithmetic counts as very old.
    assert listed(duration=4999) == [("done", "CompleteCommit"), ("empty", "Empty"), ("ongoing", "Ongoing")]
    assert [t for t, _ in listed(duration=5000)] == ["empty"]


# -- verification (KIP-890) and the broker-to-broker form ------------------------------------------------


def test_verify_partitions_and_is_partition_in_transaction() -> None:
    h = TxnHarness(auto_markers=False)
    pid, epoch = h.begin_txn("tx", ("a", 0))
    a0, a1 = TopicPartition("a", 0), TopicPartition("a", 1)
    c = h.coordinator
    assert c.verify_partitions("tx", pid, epoch, [a0, a1]) == {a0: E.NONE, a1: E.INVALID_TXN_STATE}
    assert c.verify_partitions("tx", pid, epoch + 1, [a0]) == {a0: E.PRODUCER_FENCED}
    assert c.verify_partitions("tx", pid + 1, epoch, [a0]) == {a0: E.INVALID_PRODUCER_ID_MAPPING}
    assert c.verify_partitions("nope", pid, epoch, [a0]) == {a0: E.INVALID_PRODUCER_ID_MAPPING}
    assert c.verify_partitions("", pid, epoch, [a0]) == {a0: E.INVALID_REQUEST}
    assert c.is_partition_in_transaction(pid, epoch, "a", 0)
    assert not c.is_partition_in_transaction(pid, epoch, "a", 1)
    assert not c.is_partition_in_transaction(pid, epoch + 1, "a", 0)
    assert not c.is_partition_in_transaction(pid + 1, epoch, "a", 0)
    assert c.verify_partition("tx", pid, epoch, "a", 0) is E.NONE
    assert c.verify_partition("tx", pid, epoch, "a", 1) is E.INVALID_TXN_STATE
    assert c.verify_partition(None, pid, epoch, "a", 0) is E.INVALID_REQUEST
    h.end("tx", pid, epoch, commit=True)
    assert c.verify_partitions("tx", pid, epoch, [a0]) == {a0: E.CONCURRENT_TRANSACTIONS}
    assert not c.is_partition_in_transaction(pid, epoch, "a", 0)
    h.write_markers()
    # A late retry of a produce from the committed transaction cannot slip into the next one.
    assert c.verify_partitions("tx", pid, epoch, [a0]) == {a0: E.INVALID_TXN_STATE}
    assert not c.is_partition_in_transaction(pid, epoch, "a", 0)


def test_add_partitions_v4_batched_and_verify_only() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    init = h.init("other")
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    request = AddPartitionsToTxnRequest(
        transactions=[
            T(
                transactional_id="tx",
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[topic(name="a", partitions=[0, 1])],
            ),
            T(
                transactional_id="other",
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                topics=[topic(name="b", partitions=[4])],
            ),
            T(
                transactional_id="tx",
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=True,
                topics=[topic(name="missing", partitions=[0])],
            ),
        ]
    )
    response = h.send(request, 4)
    assert isinstance(response, AddPartitionsToTxnResponse)
    got = [
        (
            r.transactional_id,
            [
                (t.name, p.partition_index, p.partition_error_code)
                for t in r.topic_results
                for p in t.results_by_partition
            ],
        )
        for r in response.results_by_transaction
    ]
    assert got == [
        ("tx", [("a", 0, 0), ("a", 1, E.INVALID_TXN_STATE)]),
        ("other", [("b", 4, 0)]),
        ("tx", [("missing", 0, E.UNKNOWN_TOPIC_OR_PARTITION)]),
    ]
    assert h.txn("other").topic_partitions == {TopicPartition("b", 4)}
    assert h.txn("tx").topic_partitions == {TopicPartition("a", 0)}  # verification adds nothing


# -- every version, and whole-request errors ------------------------------------------------------------


@pytest.mark.parametrize("version", range(6))
def test_every_init_producer_id_version(version: int) -> None:
    h = TxnHarness()
    response = h.init("tx", version=version)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 1000, 0)


@pytest.mark.parametrize("version", range(4))
def test_every_client_add_partitions_and_end_txn_version(version: int) -> None:
    h = TxnHarness()
    init = h.init("tx")
    assert h.add("tx", init.producer_id, init.producer_epoch, [("a", 0)], version=version) == {("a", 0): 0}
    assert h.add_offsets("tx", init.producer_id, init.producer_epoch, "g", version=version) == 0
    assert h.end("tx", init.producer_id, init.producer_epoch, commit=True, version=version) == 0


def test_end_txn_v5_echoes_the_producer() -> None:
    h = TxnHarness()
    pid, epoch = h.begin_txn("tx", ("a", 0))
    response = h.send(
        EndTxnRequest(transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True), 5
    )
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, pid, epoch)


REQUESTS = [
    (InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1), range(6)),
    (
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx",
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="a", partitions=[0, 1])
            ],
            transactions=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                    transactional_id="tx",
                    topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="a", partitions=[0])],
                )
            ],
        ),
        range(6),
    ),
    (AddOffsetsToTxnRequest(transactional_id="tx", group_id="g"), range(5)),
    (EndTxnRequest(transactional_id="tx"), range(6)),
    (DescribeTransactionsRequest(transactional_ids=["tx", "ty"]), range(1)),
    (ListTransactionsRequest(), range(2)),
]


@pytest.mark.parametrize(
    ("request_body", "version"),
    [(r, v) for r, versions in REQUESTS for v in versions],
    ids=[f"{type(r).__name__}-v{v}" for r, versions in REQUESTS for v in versions],
)
def test_error_response_for_every_request_and_version(request_body: object, version: int) -> None:
    error = txn_append_error_to_response_error(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert error is E.NOT_COORDINATOR
    response = txn_error_response(request_body, version, error)  # type: ignore[arg-type]
    codec.encode(response, version)
    codes = _error_codes(response, version)
    assert codes
    assert set(codes) == {E.NOT_COORDINATOR}


def _error_codes(message: object, version: int) -> list[int]:
    """Every error code anywhere in a response, as encoded at ``version``."""
    codes: list[int] = []
    for spec in getattr(message, "FIELDS", ()):
        if not in_range(spec.versions, version):
            continue
        item = getattr(message, spec.name)
        if spec.name in ("error_code", "partition_error_code"):
            codes.append(item)
        elif isinstance(item, list):
            for element in item:
                codes.extend(_error_codes(element, version))
    return codes


def test_append_errors_map_like_kafka() -> None:
    assert txn_append_error_to_response_error(E.REQUEST_TIMED_OUT) is E.COORDINATOR_NOT_AVAILABLE
    assert (
        txn_append_error_to_response_error(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND) is E.COORDINATOR_NOT_AVAILABLE
    )
    assert txn_append_error_to_response_error(E.KAFKA_STORAGE_ERROR) is E.NOT_COORDINATOR
    assert txn_append_error_to_response_error(E.RECORD_LIST_TOO_LARGE) is E.UNKNOWN_SERVER_ERROR
    assert txn_append_error_to_response_error(E.CORRUPT_MESSAGE) is E.CORRUPT_MESSAGE


def test_unknown_request_type_is_a_bug() -> None:
    from tidelog.protocol.messages import HeartbeatRequest

    coordinator = TransactionCoordinator(allocate_producer_id=lambda: 1)
    with pytest.raises(TypeError):
        coordinator.handle(HeartbeatRequest(), 0, now_ms=0)
    with pytest.raises(TypeError):
        txn_error_response(HeartbeatRequest(), 0, E.NOT_COORDINATOR)


def test_public_surface_is_pinned() -> None:
    from tidelog.coordinator import txn
    from tidelog.coordinator.txn import coordinator as txn_coordinator
    from tidelog.coordinator.txn import records as txn_records
    from tidelog.coordinator.txn import responses as txn_responses
    from tidelog.coordinator.txn import state as txn_state
    from tidelog.coordinator.txn import timers as txn_timers

    assert txn.__all__ == sorted(txn.__all__, key=lambda n: (not n.isupper(), n))
    assert set(txn.__all__) == {
        "TRANSACTION_COORDINATOR_REQUESTS",
        "ProducerIdAllocator",
        "TransactionCoordinator",
        "TransactionCoordinatorConfig",
        "TransactionMetadata",
        "TransactionState",
        "TxnPartition",
        "TxnRecordError",
        "TxnTimerKey",
        "TxnTimerKind",
        "txn_append_error_to_response_error",
        "txn_error_response",
    }
    assert sorted(txn_coordinator.__all__) == ["TRANSACTION_COORDINATOR_REQUESTS", "TransactionCoordinator"]
    assert sorted(txn_timers.__all__) == ["TxnTimerKey", "TxnTimerKind"]
    assert sorted(txn_state.__all__) == ["TransactionState", "VALID_PREVIOUS_STATES"]
    assert "txn_error_response" in txn_responses.__all__
    assert "txn_append_error_to_response_error" in txn_responses.__all__
    assert {"encode_key", "decode_key", "encode_value", "decode_value", "txn_record"} <= set(
        txn_records.__all__
    )
    public = {name for name in dir(txn_coordinator.TransactionCoordinator) if not name.startswith("_")}
    assert public == {
        "append_error_to_response_error",
        "begin_loading",
        "complete_loading",
        "error_response",
        "expire_transactional_ids",
        "handle",
        "is_loading",
        "is_partition_in_transaction",
        "num_partitions",
        "on_markers_written",
        "on_timeout",
        "owned_partitions",
        "partition_for",
        "replay",
        "replay_end_transaction_marker",
        "topic_name",
        "transaction",
        "txn_partition",
        "unload",
        "verify_partition",
        "verify_partitions",
    }
