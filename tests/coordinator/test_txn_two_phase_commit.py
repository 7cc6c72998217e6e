"""KIP-939 (two-phase commit) in the transaction coordinator, driven through :class:`TxnHarness`:

- Enable2Pc is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED while
  ``transaction.two.phase.commit.enable`` is off; KeepPreparedTxn without Enable2Pc is INVALID_REQUEST.
- Enable2Pc persists Kafka's mark, a transaction timeout of ``Integer.MAX_VALUE`` (any requested timeout,
  even above ``transaction.max.timeout.ms``); such an Ongoing transaction has no timeout timer and is
  still Ongoing long after the requested timeout, while a plain one started with it is aborted.
- InitProducerId(Enable2Pc, KeepPreparedTxn) on an Ongoing 2PC transaction keeps it: epoch + 1 (the old
  producer is fenced), the response names the kept transaction's producer id and epoch, and EndTxn at
  the new epoch commits (or aborts) it with markers at the new epoch; with nothing Ongoing it is an
  ordinary bump answering -1/-1; on a plain Ongoing transaction it is INVALID_TXN_STATE.
- A reload (broker restart) keeps the Ongoing 2PC transaction, still without a timer, and it can still be
  kept and committed; a kept transaction's record (value v1, tidelog's kept-epoch tag) lets a recovery
  after a reload still name the original epoch.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.coordinator.test_txn_harness import TxnHarness, WrittenMarker

from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.kept_epoch import KEPT_EPOCH_TAG
from tidelog.coordinator.txn.records import decode_value
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKind
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import InitProducerIdRequest
from tidelog.protocol.records import ControlRecordType

S = TransactionState
E = ErrorCode
MAX_INT = 2_147_483_647
TP = TopicPartition("t", 0)


def harness(*, enabled: bool = True) -> TxnHarness:
    return TxnHarness(
        config=TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=3,
            offsets_topic_num_partitions=5,
            transaction_two_phase_commit_enable=enabled,
        )
    )


def init_2pc(h: TxnHarness, transactional_id: str, *, keep: bool = False, timeout_ms: int = 1000) -> Any:
    return h.send(
        InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=timeout_ms,
            enable2_pc=True,
            keep_prepared_txn=keep,
        ),
        6,
    )


def answer(response: Any) -> tuple[int, int, int, int, int]:
    return (
        response.error_code,
        response.producer_id,
        response.producer_epoch,
        response.ongoing_txn_producer_id,
        response.ongoing_txn_producer_epoch,
    )


def has_timeout_timer(h: TxnHarness, transactional_id: str) -> bool:
    return any(
        k.kind is TxnTimerKind.TRANSACTION_TIMEOUT and k.transactional_id == transactional_id
        for k in h.timers
    )


def test_enable_2pc_is_refused_while_the_broker_config_is_off() -> None:
    h = harness(enabled=False)
    assert answer(init_2pc(h, "tx")) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1, -1, -1)
    assert h.log == {}


def test_keep_prepared_without_enable_2pc_is_an_invalid_request() -> None:
    h = harness()
    response = h.send(
        InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000, keep_prepared_txn=True), 6
    )
    assert answer(response) == (E.INVALID_REQUEST, -1, -1, -1, -1)


def test_a_2pc_transaction_outlives_its_timeout_and_a_plain_one_does_not() -> None:
    h = harness()
    assert answer(init_2pc(h, "tx", timeout_ms=1000)) == (0, 1000, 0, -1, -1)
    assert h.txn("tx").txn_timeout_ms == MAX_INT
    assert h.add("tx", 1000, 0, [("t", 0)]) == {TP: 0}
    plain_pid, _ = h.begin_txn("plain", ("t", 1))
    assert has_timeout_timer(h, "plain")
    assert not has_timeout_timer(h, "tx")
    h.advance(3_600_000)
    assert h.txn("plain").state is S.COMPLETE_ABORT
    assert h.txn("tx").state is S.ONGOING
    assert h.txn("tx").producer_epoch == 0
    assert plain_pid != 1000


def test_enable_2pc_ignores_the_max_timeout() -> None:
    h = harness()
    assert answer(init_2pc(h, "tx", timeout_ms=MAX_INT)) == (0, 1000, 0, -1, -1)


@pytest.mark.parametrize("commit", [True, False])
def test_keep_prepared_fences_the_old_producer_and_finishes_the_transaction(commit: bool) -> None:
    h = harness()
    init_2pc(h, "tx")
    assert h.add("tx", 1000, 0, [("t", 0)]) == {TP: 0}
    assert answer(init_2pc(h, "tx", keep=True)) == (0, 1000, 1, 1000, 0)
    txn = h.txn("tx")
    assert (txn.state, txn.producer_epoch, txn.topic_partitions) == (S.ONGOING, 1, frozenset({TP}))
    assert h.add("tx", 1000, 0, [("t", 0)]) == {TP: E.PRODUCER_FENCED}  # the old session
    assert h.end("tx", 1000, 0, commit=commit) == E.PRODUCER_FENCED
    assert h.end("tx", 1000, 1, commit=commit) == 0
    result = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert h.written == [WrittenMarker(TP, result, 1000, 1, 0)]
    assert h.txn("tx").state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)


def test_keep_prepared_twice_still_names_the_original_epoch() -> None:
    h = harness()
    init_2pc(h, "tx")
    h.add("tx", 1000, 0, [("t", 0)])
    init_2pc(h, "tx", keep=True)
    assert answer(init_2pc(h, "tx", keep=True)) == (0, 1000, 2, 1000, 0)


def test_keep_prepared_with_nothing_ongoing_is_an_ordinary_bump() -> None:
    h = harness()
    init_2pc(h, "tx")
    assert answer(init_2pc(h, "tx", keep=True)) == (0, 1000, 1, -1, -1)
    assert h.txn("tx").state is S.EMPTY


def test_keep_prepared_on_a_plain_transaction_is_invalid_txn_state() -> None:
    h = harness()
    h.begin_txn("tx", ("t", 0))
    assert answer(init_2pc(h, "tx", keep=True)) == (E.INVALID_TXN_STATE, -1, -1, -1, -1)
    assert h.txn("tx").state is S.ONGOING


def test_init_without_keep_aborts_a_2pc_transaction() -> None:
    h = harness()
    init_2pc(h, "tx")
    h.add("tx", 1000, 0, [("t", 0)])
    assert answer(init_2pc(h, "tx")) == (E.CONCURRENT_TRANSACTIONS, -1, -1, -1, -1)
    assert h.written == [WrittenMarker(TP, ControlRecordType.ABORT, 1000, 1, 0)]
    assert h.txn("tx").state is S.COMPLETE_ABORT


def test_a_reload_keeps_the_prepared_transaction() -> None:
    h = harness()
    init_2pc(h, "tx")
    h.add("tx", 1000, 0, [("t", 0)])
    h.reload()
    txn = h.txn("tx")
    assert (txn.state, txn.producer_epoch, txn.txn_timeout_ms) == (S.ONGOING, 0, MAX_INT)
    assert not has_timeout_timer(h, "tx")
    h.advance(3_600_000)
    assert answer(init_2pc(h, "tx", keep=True)) == (0, 1000, 1, 1000, 0)
    assert h.end("tx", 1000, 1, commit=True) == 0
    assert h.written == [WrittenMarker(TP, ControlRecordType.COMMIT, 1000, 1, 1)]


def test_v5_answers_have_no_ongoing_fields() -> None:
    h = harness()
    response = h.init("tx", version=5)
    assert (response.error_code, response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch) == (
        0,
        -1,
        -1,
    )


def test_a_kept_transaction_still_names_its_original_epoch_after_a_reload() -> None:
    h = harness()
    init_2pc(h, "tx")
    h.add("tx", 1000, 0, [("t", 0)])
    init_2pc(h, "tx", keep=True)
    kept = h.records_of("tx")[-1].value
    assert kept is not None
    assert kept[:2] == b"\x00\x01"
    assert decode_value(kept).unknown_tagged_fields == {KEPT_EPOCH_TAG: b"\x00\x00"}  # type: ignore[union-attr]
    assert all(r.value is not None and r.value[:2] == b"\x00\x00" for r in h.records_of("tx")[:-1])
    h.reload()
    assert h.txn("tx") == h.txn("tx").durable()
    assert (h.txn("tx").producer_epoch, h.txn("tx").ongoing_txn_producer_epoch) == (1, 0)
    assert answer(init_2pc(h, "tx", keep=True)) == (0, 1000, 2, 1000, 0)
    assert h.end("tx", 1000, 2, commit=True) == 0
    last = decode_value(h.records_of("tx")[-1].value)
    assert last is not None
    assert last.unknown_tagged_fields is None
    assert h.written == [WrittenMarker(TP, ControlRecordType.COMMIT, 1000, 2, 1)]
