"""TwoPhaseProducer's produce loop without a broker: the coordinator and the leaders are faked.

- NOT_LEADER_OR_FOLLOWER refreshes the leaders and resends the very same batch (same base sequence) to
  the new leader; the offsets it answers are recorded per record; the next flush continues the sequence.
- A non-retriable error poisons the producer: every later call raises it (never a prepare over a hole).
- A partition that stays retriable past ``timeout`` raises REQUEST_TIMED_OUT naming the last error.
"""

from __future__ import annotations

import struct

import pytest

from tidelog.client import txn_producer
from tidelog.client.txn_producer import TransactionError, TwoPhaseProducer
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import InitProducerIdResponse

TP = ("t", 0)
Batches = dict[tuple[str, int], tuple[bytes, int]]
Answers = dict[tuple[str, int], tuple[int, int, str | None]]
BASE_SEQUENCE_AT = 53
"""In a v2 batch: base offset, length, leader epoch, magic, crc, attributes, last delta, 2 timestamps,
producer id and epoch come first (8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 bytes)."""


class FakeCluster:
    def __init__(self, answers: list[tuple[int, int]]) -> None:
        self.answers = answers
        self.leader = "a:1"
        self.sent: list[tuple[str, bytes]] = []
        self.refreshes = 0

    def produce_to(self, producer: TwoPhaseProducer, leader: str, batches: Batches) -> Answers:
        (tp, (batch, _)), *_ = batches.items()
        self.sent.append((leader, batch))
        code, offset = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]  # the last repeats
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            self.leader = "b:2"
        return {tp: (code, offset, "fake message" if code else None)}

    def refresh(self, producer: TwoPhaseProducer, partitions: object) -> None:
        self.refreshes += 1
        producer._leaders[TP] = self.leader


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster([])
    monkeypatch.setattr(
        txn_producer._Session,
        "init_producer_id",
        lambda self, keep_prepared: InitProducerIdResponse(producer_id=7, producer_epoch=3),
    )
    monkeypatch.setattr(txn_producer._Session, "coordinator_call", lambda self, call, what: None)

    def produce_to(self: TwoPhaseProducer, leader: str, batches: Batches) -> Answers:
        return fake.produce_to(self, leader, batches)

    def refresh(self: TwoPhaseProducer, partitions: object) -> None:
        fake.refresh(self, partitions)

    monkeypatch.setattr(TwoPhaseProducer, "_produce_to", produce_to)
    monkeypatch.setattr(TwoPhaseProducer, "_refresh_leaders", refresh)
    monkeypatch.setattr("time.sleep", lambda seconds: None)  # the retry pauses
    return fake


def base_sequence(batch: bytes) -> int:
    return int(struct.unpack_from(">i", batch, BASE_SEQUENCE_AT)[0])


def test_not_leader_refreshes_and_resends_the_same_batch(cluster: FakeCluster) -> None:
    cluster.answers = [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1), (ErrorCode.NONE, 10), (ErrorCode.NONE, 13)]
    producer = TwoPhaseProducer("a:1", "tid", timeout=5)
    producer.send(*TP, [b"x", b"y", b"z"])
    producer.flush()
    producer.send(*TP, [b"w"])
    prepared = producer.prepare()
    assert [leader for leader, _ in cluster.sent] == ["a:1", "b:2", "b:2"]
    assert cluster.sent[0][1] == cluster.sent[1][1]
    assert [base_sequence(batch) for _, batch in cluster.sent] == [0, 0, 3]
    assert cluster.refreshes == 2
    assert producer.offsets == {TP: [10, 11, 12, 13]}
    assert (prepared.producer_id, prepared.producer_epoch) == (7, 3)


def test_a_fatal_error_poisons_the_producer(cluster: FakeCluster) -> None:
    cluster.answers = [(ErrorCode.INVALID_PRODUCER_EPOCH, -1)]
    producer = TwoPhaseProducer("a:1", "tid", timeout=5)
    producer.send(*TP, [b"x"])
    with pytest.raises(TransactionError, match=r"INVALID_PRODUCER_EPOCH \(|fake message") as first:
        producer.flush()
    assert first.value.error_code is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(TransactionError) as later:
        producer.prepare()
    assert later.value is first.value


def test_a_partition_retriable_past_the_timeout_fails(cluster: FakeCluster) -> None:
    cluster.answers = [(ErrorCode.NOT_ENOUGH_REPLICAS, -1)]
    producer = TwoPhaseProducer("a:1", "tid", timeout=0.05)
    producer.send(*TP, [b"x"])
    with pytest.raises(TransactionError, match=r"timed out on .*NOT_ENOUGH_REPLICAS") as failure:
        producer.flush()
    assert failure.value.error_code is ErrorCode.REQUEST_TIMED_OUT
