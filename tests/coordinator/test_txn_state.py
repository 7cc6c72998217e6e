"""Transaction states: Kafka's ids and names, the valid-previous-states table, and the metadata
transitions that obey it."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from tidelog.coordinator.txn.metadata import IllegalTransitionError, TransactionMetadata, is_epoch_exhausted
from tidelog.coordinator.txn.state import VALID_PREVIOUS_STATES, TransactionState
from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode

S = TransactionState

KAFKA = [
    (0, "Empty", {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    (1, "Ongoing", {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    (2, "PrepareCommit", {S.ONGOING}),
    (3, "PrepareAbort", {S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    (4, "CompleteCommit", {S.PREPARE_COMMIT}),
    (5, "CompleteAbort", {S.PREPARE_ABORT}),
    (6, "Dead", {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    (7, "PrepareEpochFence", {S.ONGOING}),
]


@pytest.mark.parametrize(("state_id", "name", "previous"), KAFKA, ids=[k[1] for k in KAFKA])
def test_ids_names_and_previous_states(state_id: int, name: str, previous: set[TransactionState]) -> None:
    state = S(state_id)
    assert state.kafka_name == name
    assert S.from_name(name) is state
    assert state.valid_previous_states == previous
    assert VALID_PREVIOUS_STATES[state] == previous


def test_from_name_is_case_sensitive_and_strict() -> None:
    assert S.from_name("ongoing") is None
    assert S.from_name("ONGOING") is None
    assert S.from_name("") is None


def test_expiration_and_pending() -> None:
    assert {s for s in S if s.is_expiration_allowed} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s for s in S if s.has_pending_transaction} == {S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT}
    assert {s for s in S if s.is_prepare} == {S.PREPARE_COMMIT, S.PREPARE_ABORT}


def test_epoch_exhaustion() -> None:
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766)
    assert is_epoch_exhausted(32767)


# -- transitions of the metadata, for every starting state ------------------------------------------

TP = TopicPartition("t", 0)


def metadata(state: TransactionState, epoch: int = 5) -> TransactionMetadata:
    has_partitions = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE)
    return TransactionMetadata(
        transactional_id="tx",
        producer_id=42,
        producer_epoch=epoch,
        txn_timeout_ms=1000,
        state=state,
        topic_partitions=frozenset({TP}) if has_partitions else frozenset(),
        txn_start_timestamp=100 if state is not S.EMPTY else -1,
        txn_last_update_timestamp=200,
    )


TRANSITIONS: dict[str, tuple[Callable[[TransactionMetadata], object], TransactionState | None]] = {
    "increment_epoch": (lambda m: m.prepare_increment_producer_epoch(2000, None, 300), S.EMPTY),
    "rotate": (lambda m: m.prepare_producer_id_rotation(43, 2000, 300, record_last_epoch=False), S.EMPTY),
    "add_partitions": (lambda m: m.prepare_add_partitions([TopicPartition("u", 1)], 300), S.ONGOING),
    "prepare_commit": (lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, 300), S.PREPARE_COMMIT),
    "prepare_abort": (lambda m: m.prepare_abort_or_commit(S.PREPARE_ABORT, 300), S.PREPARE_ABORT),
    "fence_and_abort": (lambda m: m.prepare_fence_and_abort(300), S.PREPARE_ABORT),
    "complete": (lambda m: m.prepare_complete(300), None),
    "dead": (lambda m: m.prepare_dead(), S.DEAD),
}

LEGAL_FROM = {
    "increment_epoch": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "rotate": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "add_partitions": {S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    "prepare_commit": {S.ONGOING},
    "prepare_abort": {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    "fence_and_abort": {S.ONGOING},
    "complete": {S.PREPARE_COMMIT, S.PREPARE_ABORT},
    "dead": {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
}


@pytest.mark.parametrize(
    ("name", "state"), list(itertools.product(TRANSITIONS, S)), ids=lambda v: getattr(v, "kafka_name", v)
)
def test_transition_table(name: str, state: TransactionState) -> None:
    prepare, target = TRANSITIONS[name]
    start = metadata(state)
    if state in LEGAL_FROM[name]:
        new = prepare(start)
        assert isinstance(new, TransactionMetadata)
        if target is None:
            target = S.COMPLETE_COMMIT if state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        assert new.state is target
        assert new.transactional_id == "tx"
    else:
        with pytest.raises(IllegalTransitionError):
            prepare(start)


def test_increment_epoch_fields() -> None:
    new = metadata(S.COMPLETE_COMMIT).prepare_increment_producer_epoch(2000, None, 300)
    assert new == TransactionMetadata(
        transactional_id="tx",
        producer_id=42,
        producer_epoch=6,
        txn_timeout_ms=2000,
        state=S.EMPTY,
        topic_partitions=frozenset(),
        txn_start_timestamp=-1,
        txn_last_update_timestamp=300,
        last_producer_id=42,
        last_producer_epoch=-1,
    )


@pytest.mark.parametrize(
    ("current", "last", "expected", "outcome"),
    [
        (5, -1, 5, (6, 5)),  # KIP-360: the producer's own epoch: bump, remember the old one
        (-1, -1, 3, (0, -1)),  # a brand-new id: epoch 0 whatever the producer says
        (6, 5, 5, (6, 5)),  # a retry of a bump whose answer was lost: the same answer
        (6, 5, 4, ErrorCode.PRODUCER_FENCED),  # someone else bumped since
        (6, -1, 5, ErrorCode.PRODUCER_FENCED),  # last epoch unknown (after a reload): fenced
    ],
)
def test_increment_epoch_with_expected_epoch(
    current: int, last: int, expected: int, outcome: tuple[int, int] | ErrorCode
) -> None:
    start = TransactionMetadata(
        transactional_id="tx",
        producer_id=42,
        producer_epoch=current,
        txn_timeout_ms=1000,
        state=S.EMPTY,
        topic_partitions=frozenset(),
        txn_start_timestamp=-1,
        txn_last_update_timestamp=0,
        last_producer_epoch=last,
    )
    new = start.prepare_increment_producer_epoch(1000, expected, 10)
    if isinstance(outcome, ErrorCode):
        assert new is outcome
    else:
        assert isinstance(new, TransactionMetadata)
        assert (new.producer_epoch, new.last_producer_epoch) == outcome


def test_increment_refuses_to_bump_an_exhausted_epoch() -> None:
    exhausted = metadata(S.EMPTY, epoch=32766)
    with pytest.raises(IllegalTransitionError, match="no epochs left"):
        exhausted.prepare_increment_producer_epoch(1000, None, 1)
    with pytest.raises(IllegalTransitionError, match="no epochs left"):
        exhausted.prepare_increment_producer_epoch(1000, 32766, 1)
    last_bump = metadata(S.EMPTY, epoch=32765).prepare_increment_producer_epoch(1000, 32765, 1)
    assert isinstance(last_bump, TransactionMetadata)
    assert (last_bump.producer_epoch, last_bump.is_producer_epoch_exhausted) == (32766, True)
    # Requests that do not bump are still answered at the limit: a lost-response retry, a fenced one.
    retried = last_bump.prepare_increment_producer_epoch(1000, 32765, 2)
    assert isinstance(retried, TransactionMetadata)
    assert (retried.producer_epoch, retried.last_producer_epoch) == (32766, 32765)
    assert last_bump.prepare_increment_producer_epoch(1000, 7, 2) is ErrorCode.PRODUCER_FENCED


def test_rotation_fields() -> None:
    new = metadata(S.COMPLETE_ABORT, epoch=32766).prepare_producer_id_rotation(
        77, 3000, 400, record_last_epoch=True
    )
    assert (new.producer_id, new.producer_epoch, new.last_producer_id, new.last_producer_epoch) == (
        77,
        0,
        42,
        32766,
    )
    assert (new.state, new.txn_timeout_ms, new.txn_start_timestamp, new.topic_partitions) == (
        S.EMPTY,
        3000,
        -1,
        frozenset(),
    )


def test_add_partitions_starts_a_transaction_only_from_a_resting_state() -> None:
    started = metadata(S.COMPLETE_COMMIT).prepare_add_partitions([TP], 300)
    assert (started.txn_start_timestamp, started.topic_partitions) == (300, frozenset({TP}))
    more = started.prepare_add_partitions([TopicPartition("u", 1)], 350)
    assert more.txn_start_timestamp == 300
    assert more.txn_last_update_timestamp == 350
    assert more.topic_partitions == {TP, TopicPartition("u", 1)}


def test_fence_bumps_the_epoch_and_forgets_the_last_one() -> None:
    ongoing = metadata(S.ONGOING)
    fenced = ongoing.prepare_fence_and_abort(300)
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch) == (S.PREPARE_ABORT, 6, -1)
    assert fenced.topic_partitions == ongoing.topic_partitions
    assert fenced.txn_start_timestamp == ongoing.txn_start_timestamp
    assert fenced.txn_last_update_timestamp == 300
    with pytest.raises(IllegalTransitionError, match="cannot fence"):
        metadata(S.ONGOING, epoch=32767).prepare_fence_and_abort(1)


def test_complete_clears_partitions_keeps_start() -> None:
    done = metadata(S.PREPARE_ABORT).prepare_complete(300)
    assert (done.state, done.topic_partitions, done.txn_start_timestamp) == (
        S.COMPLETE_ABORT,
        frozenset(),
        100,
    )


def test_empty_with_partitions_cannot_be_written() -> None:
    bad = TransactionMetadata(
        transactional_id="tx",
        producer_id=1,
        producer_epoch=0,
        txn_timeout_ms=1,
        state=S.EMPTY,
        topic_partitions=frozenset({TP}),
        txn_start_timestamp=-1,
        txn_last_update_timestamp=0,
    )
    with pytest.raises(IllegalTransitionError):
        bad.to_log_value()


def test_durable_drops_only_the_in_memory_fields() -> None:
    m = metadata(S.EMPTY).prepare_increment_producer_epoch(1000, 5, 300)
    assert isinstance(m, TransactionMetadata)
    assert (m.last_producer_id, m.last_producer_epoch) == (42, 5)
    assert TransactionMetadata.from_log_value("tx", m.to_log_value()) == m.durable()
    assert (m.durable().last_producer_id, m.durable().last_producer_epoch) == (-1, -1)
