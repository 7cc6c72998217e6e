"""Property: whatever clients, timers, marker writes and restarts do, the transaction coordinator's
records are its state, and transactions are atomic.

Random sequences of InitProducerId (plain and KIP-360), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
(with current and stale epochs), partial and whole marker writes, clock advances (timeouts, expiry)
and full reloads run against :class:`TxnHarness`. After every step:

- replaying the log into a fresh coordinator rebuilds every transactional id's durable metadata;
- the runtime's timer table mirrors the coordinator's; exactly the Ongoing transactions have a timeout;
- markers are still owed exactly for the Prepare* transactions, and only for their partitions;
- a producer id's epoch never goes down, and never past 32767.

At the end, with every marker written, each PrepareCommit/PrepareAbort record was followed by markers
of its outcome on every one of its partitions before its Complete record, and no marker was written
for a transaction that was not prepared with that outcome (the harness asserts the ordering live).
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.coordinator.test_txn_harness import TIMEOUT_MS, TxnHarness, WrittenMarker

from tidelog.coordinator.txn.config import TransactionCoordinatorConfig
from tidelog.coordinator.txn.coordinator import TransactionCoordinator
from tidelog.coordinator.txn.metadata import TransactionMetadata
from tidelog.coordinator.txn.records import TransactionLogValue, partitions_of
from tidelog.coordinator.txn.state import TransactionState
from tidelog.coordinator.txn.timers import TxnTimerKey, TxnTimerKind
from tidelog.protocol import TopicPartition
from tidelog.protocol.records import ControlRecordType

S = TransactionState
IDS = ["alpha", "beta", "gamma"]
TOPIC_PARTITIONS = [("a", 0), ("a", 1), ("b", 0), ("c", 3)]
CONFIG = TransactionCoordinatorConfig(
    transaction_state_log_num_partitions=2,
    offsets_topic_num_partitions=3,
    transactional_id_expiration_ms=5 * TIMEOUT_MS,
    transaction_remove_expired_transaction_cleanup_interval_ms=TIMEOUT_MS,
)

Op = Callable[[TxnHarness, dict[str, tuple[int, int]]], None]


def _init(index: int, kip360: bool, version: int) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        txn_id = IDS[index]
        pid, epoch = producers.get(txn_id, (-1, -1)) if kip360 else (-1, -1)
        response = h.init(txn_id, version=version, producer_id=pid, producer_epoch=epoch)
        if response.error_code == 0:
            producers[txn_id] = (response.producer_id, response.producer_epoch)

    return run


def _add(index: int, chosen: list[int], stale: bool) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        txn_id = IDS[index]
        pid, epoch = producers.get(txn_id, (1000, 0))
        h.add(txn_id, pid, epoch - 1 if stale else epoch, [TOPIC_PARTITIONS[i] for i in chosen])

    return run


def _begin(index: int, chosen: list[int]) -> Op:
    """What a producer does to start a transaction: InitProducerId if it has no producer id yet, then
    AddPartitionsToTxn."""

    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        if IDS[index] not in producers:
            _init(index, False, 4)(h, producers)
        _add(index, chosen, False)(h, producers)

    return run


def _transaction(index: int, chosen: list[int], commit: bool) -> Op:
    """A whole transaction from one producer: begin, then EndTxn."""

    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        _begin(index, chosen)(h, producers)
        _end(index, commit, False)(h, producers)

    return run


def _add_offsets(index: int, group: str) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        pid, epoch = producers.get(IDS[index], (1000, 0))
        h.add_offsets(IDS[index], pid, epoch, group)

    return run


def _end(index: int, commit: bool, stale: bool) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        txn_id = IDS[index]
        pid, epoch = producers.get(txn_id, (1000, 0))
        h.end(txn_id, pid, epoch - 1 if stale else epoch, commit=commit)

    return run


def _markers(count: int) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        h.write_markers(count)

    return run


def _some_markers(n: int) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        if h.in_flight:
            h.write_some_markers(n)

    return run


def _advance(ms: int) -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        h.advance(ms)

    return run


def _reload() -> Op:
    def run(h: TxnHarness, producers: dict[str, tuple[int, int]]) -> None:
        h.reload()

    return run


_index = st.integers(0, len(IDS) - 1)
_stale = st.sampled_from([False, False, False, True])  # mostly the producer's current epoch
_partitions = st.lists(st.integers(0, len(TOPIC_PARTITIONS) - 1), min_size=1, max_size=3)
ops = st.one_of(
    st.builds(_init, _index, st.booleans(), st.sampled_from([0, 3, 4])),
    st.builds(_add, _index, _partitions, _stale),
    st.builds(_begin, _index, _partitions),
    st.builds(_add_offsets, _index, st.sampled_from(["g1", "g2"])),
    st.builds(_end, _index, st.booleans(), _stale),
    st.builds(_transaction, _index, _partitions, st.booleans()),
    st.builds(_markers, st.integers(1, 3)),
    st.builds(_some_markers, st.integers(1, 2)),
    st.builds(_advance, st.sampled_from([1, 1000, TIMEOUT_MS, 3 * TIMEOUT_MS, 7 * TIMEOUT_MS])),
    st.builds(_reload),
)


def _replayed(h: TxnHarness) -> dict[str, TransactionMetadata]:
    fresh = TransactionCoordinator(CONFIG, allocate_producer_id=lambda: 0)
    for partition in range(CONFIG.transaction_state_log_num_partitions):
        fresh.begin_loading(partition, 0)
        for record in h.log.get(partition, []):
            fresh.replay(partition, record.key, record.value)
    state: dict[str, TransactionMetadata] = {}
    for partition in fresh.owned_partitions:
        owned = fresh.txn_partition(partition)
        assert owned is not None
        state.update(owned.transactions)
    return state


def _check_invariants(h: TxnHarness) -> None:
    live: dict[str, TransactionMetadata] = {}
    coordinator_timers: dict[TxnTimerKey, int] = {}
    for partition in h.coordinator.owned_partitions:
        owned = h.coordinator.txn_partition(partition)
        assert owned is not None
        assert not owned.loading
        live.update(owned.transactions)
        coordinator_timers.update(owned.timers)
        assert set(owned.pending_markers) == {t for t, m in owned.transactions.items() if m.state.is_prepare}
        for txn_id, pending in owned.pending_markers.items():
            assert pending <= owned.transactions[txn_id].topic_partitions
        for pid, txn_id in owned.by_producer_id.items():
            assert owned.transactions[txn_id].producer_id == pid
    assert {k: v.durable() for k, v in live.items()} == _replayed(h)
    assert h.timers == coordinator_timers
    timed = {k.transactional_id for k in h.timers if k.kind is TxnTimerKind.TRANSACTION_TIMEOUT}
    assert timed == {t for t, m in live.items() if m.state is S.ONGOING}
    for txn in live.values():
        assert 0 <= txn.producer_epoch <= 32767
        if txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert not txn.topic_partitions


def _check_history(h: TxnHarness) -> None:
    """Epochs per producer id never go down; each prepared transaction got all its markers, of its
    outcome, before its Complete record; no marker without a matching Prepare."""
    epochs: dict[int, int] = {}
    prepared: dict[str, tuple[TransactionLogValue, set[TopicPartition]]] = {}
    for kind, txn_id, item in h.events:
        assert txn_id is not None
        if kind == "record":
            if item is None:
                prepared.pop(txn_id, None)
                continue
            assert isinstance(item, TransactionLogValue)
            assert item.producer_epoch >= epochs.get(item.producer_id, 0)
            epochs[item.producer_id] = item.producer_epoch
            status = S(item.transaction_status)
            if status.is_prepare:
                assert txn_id not in prepared
                prepared[txn_id] = (item, set())
            elif status in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                value, marked = prepared.pop(txn_id)
                assert status is (
                    S.COMPLETE_COMMIT if value.transaction_status == S.PREPARE_COMMIT else S.COMPLETE_ABORT
                )
                assert marked == set(partitions_of(value))
                assert (item.producer_id, item.producer_epoch) == (value.producer_id, value.producer_epoch)
            else:
                assert txn_id not in prepared
        else:
            assert isinstance(item, WrittenMarker)
            value, marked = prepared[txn_id]
            commit = value.transaction_status == S.PREPARE_COMMIT
            assert item.result is (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
            assert (item.producer_id, item.producer_epoch) == (value.producer_id, value.producer_epoch)
            marked.add(item.partition)


@settings(deadline=None)
@given(st.lists(ops, min_size=1, max_size=40), st.booleans())
def test_records_are_the_state_and_transactions_are_atomic(steps: list[Op], eager_markers: bool) -> None:
    h = TxnHarness(config=CONFIG, auto_markers=eager_markers)
    producers: dict[str, tuple[int, int]] = {}
    for step in steps:
        step(h, producers)
        _check_invariants(h)
    # Drain: write every marker still owed; every Prepare* transaction completes.
    while h.in_flight:
        h.write_markers()
    _check_invariants(h)
    assert not any(t.state.is_prepare for t in map(h.coordinator.transaction, IDS) if t is not None)
    _check_history(h)
