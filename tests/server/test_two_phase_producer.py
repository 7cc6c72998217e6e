"""tidelog.client.txn_producer against a real broker, read back with a read_committed confluent-kafka
consumer.

One broker (``transaction.two.phase.commit.enable=true``) serves every test; the kill -9 test runs last.

- A producer writes to 3 partitions in two flushes and prepares: read_committed's last stable offset stays
  at 0 and it reads nothing; ``complete_prepared(commit)`` from a new object (the prepared transaction
  travelled as JSON and as a pickle) makes exactly the records visible, in order, at the offsets the
  producer reported; a replay answers ALREADY_COMMITTED and changes nothing.
- ``complete_prepared(abort)`` while the producer session is still alive: nothing visible, the last stable
  offset passes the aborted records, and the old session's next write is fenced.
- ``abort()`` on the producer itself: nothing visible.
- A prepared transaction named with the wrong epoch or producer id is refused (TransactionMismatchError;
  another producer id or a higher epoch before any change) and the real one still commits afterwards.
- A prepared transaction survives a SIGKILL of the broker and is committed after the restart; a producer
  still writing across the kill goes on over new connections.
- Opening the id again aborts what it left prepared; a late commit of that answers ALREADY_COMPLETED.
- Completing an id the broker never saw answers ALREADY_COMPLETED and does not create it.
- With the setting off (a second, short-lived broker) the producer raises TwoPhaseCommitUnavailableError.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator

import pytest
from tests.server.txn_support import create_topics, read_values

from tidelog.client.txn_producer import (
    Completion,
    PreparedTransaction,
    TransactionError,
    TransactionMismatchError,
    TwoPhaseCommitUnavailableError,
    TwoPhaseProducer,
    complete_prepared,
)
from tidelog.client.wire import WireClient
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeTransactionsRequest, ListOffsetsRequest, ListOffsetsResponse
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

TOPICS = {
    "tpp-commit": 3,
    "tpp-abort": 1,
    "tpp-own-abort": 1,
    "tpp-mismatch": 1,
    "tpp-leftover": 1,
    "tpp-restart": 2,
}
READ_COMMITTED = 1
LATEST = -1


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker({"num.partitions": 1, "transaction.two.phase.commit.enable": True}) as b:
        create_topics(b.bootstrap_servers, TOPICS)
        yield b


def last_stable_offset(broker: Broker, topic: str, partition: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=READ_COMMITTED,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=LATEST)
                ],
            )
        ],
    )
    with WireClient("127.0.0.1", broker.port, timeout=15) as c:
        response = c.call(request, expect=ListOffsetsResponse)
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0, answer
    return int(answer.offset)


def wait_for_state(broker: Broker, tid: str, state: str) -> None:
    """The coordinator writes the markers after answering EndTxn: wait until it says it is done."""
    deadline = time.monotonic() + 15
    with WireClient("127.0.0.1", broker.port, timeout=15) as c:
        while True:
            response = c.call(DescribeTransactionsRequest(transactional_ids=[tid]))
            described = response.transaction_states[0]  # type: ignore[attr-defined]
            if described.transaction_state == state or time.monotonic() > deadline:
                assert described.transaction_state == state, described
                return
            time.sleep(0.05)


def current_epoch(broker: Broker, tid: str) -> int:
    with WireClient("127.0.0.1", broker.port, timeout=15) as c:
        response = c.call(DescribeTransactionsRequest(transactional_ids=[tid]))
    return int(response.transaction_states[0].producer_epoch)  # type: ignore[attr-defined]


def values(prefix: str, n: int) -> list[bytes]:
    return [b"%s-%d" % (prefix.encode(), i) for i in range(n)]


def test_prepare_hides_the_records_until_another_process_commits_them(broker: Broker) -> None:
    topic, tid = "tpp-commit", "tpp-commit-task-0"
    sent = {p: values(f"p{p}", 3 + p) for p in range(3)}
    with TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15) as producer:
        for p in range(3):
            producer.send(topic, p, sent[p][:2])
        producer.flush()
        for p in range(3):
            producer.send(topic, p, sent[p][2:])
        prepared = producer.prepare()
        offsets = dict(producer.offsets)
    assert prepared == PreparedTransaction(tid, producer.producer_id, producer.producer_epoch)
    assert offsets == {(topic, p): list(range(len(sent[p]))) for p in range(3)}
    assert [last_stable_offset(broker, topic, p) for p in range(3)] == [0, 0, 0]
    tps = [(topic, p) for p in range(3)]
    assert read_values(broker.bootstrap_servers, tps, committed=True) == {tp: [] for tp in tps}

    travelled = PreparedTransaction.from_json(pickle.loads(pickle.dumps(prepared)).to_json())
    assert complete_prepared(broker.bootstrap_servers, travelled, True, timeout=15) is Completion.COMMITTED
    wait_for_state(broker, tid, "CompleteCommit")
    assert read_values(broker.bootstrap_servers, tps, committed=True) == {
        (topic, p): sent[p] for p in range(3)
    }
    assert [last_stable_offset(broker, topic, p) for p in range(3)] == [len(sent[p]) + 1 for p in range(3)]

    replay = complete_prepared(broker.bootstrap_servers, prepared, True, timeout=15)
    assert replay is Completion.ALREADY_COMMITTED
    assert read_values(broker.bootstrap_servers, tps, committed=True) == {
        (topic, p): sent[p] for p in range(3)
    }


def test_complete_prepared_abort_hides_the_records_and_fences_the_old_session(broker: Broker) -> None:
    topic, tid = "tpp-abort", "tpp-abort-task-0"
    producer = TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15)
    try:
        producer.send(topic, 0, values("abort", 4))
        producer.flush()
        prepared = PreparedTransaction(tid, producer.producer_id, producer.producer_epoch)
        assert complete_prepared(broker.bootstrap_servers, prepared, False, timeout=15) is Completion.ABORTED
        producer.send(topic, 0, [b"late"])
        with pytest.raises(TransactionError) as fenced:
            producer.flush()
        assert fenced.value.error_code in {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}
        assert fenced.value.error_code.name in str(fenced.value)
    finally:
        producer.close()
    wait_for_state(broker, tid, "CompleteAbort")
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {(topic, 0): []}
    assert last_stable_offset(broker, topic, 0) == 5  # 4 aborted records and the abort marker
    replay = complete_prepared(broker.bootstrap_servers, prepared, False, timeout=15)
    assert replay is Completion.ALREADY_ABORTED


def test_the_producer_can_abort_its_own_transaction(broker: Broker) -> None:
    topic, tid = "tpp-own-abort", "tpp-own-abort-task-0"
    with TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15) as producer:
        producer.send(topic, 0, values("own", 3))
        producer.flush()
        producer.abort()
    wait_for_state(broker, tid, "CompleteAbort")
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {(topic, 0): []}


def test_a_different_transaction_is_refused_and_left_open(broker: Broker) -> None:
    topic, tid = "tpp-mismatch", "tpp-mismatch-task-0"
    with TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15) as producer:
        producer.send(topic, 0, values("mismatch", 2))
        prepared = producer.prepare()
    other_id = PreparedTransaction(tid, prepared.producer_id + 1000, prepared.producer_epoch)
    with pytest.raises(TransactionMismatchError, match="nothing was ended"):
        complete_prepared(broker.bootstrap_servers, other_id, True, timeout=15)
    newer = PreparedTransaction(tid, prepared.producer_id, prepared.producer_epoch + 1)
    with pytest.raises(TransactionMismatchError, match="nothing was ended"):
        complete_prepared(broker.bootstrap_servers, newer, True, timeout=15)
    assert current_epoch(broker, tid) == prepared.producer_epoch  # refused before any change
    older = PreparedTransaction(tid, prepared.producer_id, prepared.producer_epoch - 1)
    with pytest.raises(TransactionMismatchError, match="nothing was ended"):
        complete_prepared(broker.bootstrap_servers, older, True, timeout=15)
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {(topic, 0): []}
    assert complete_prepared(broker.bootstrap_servers, prepared, True, timeout=15) is Completion.COMMITTED
    wait_for_state(broker, tid, "CompleteCommit")
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {
        (topic, 0): values("mismatch", 2)
    }


def test_a_new_session_aborts_what_the_id_left_prepared(broker: Broker) -> None:
    """How the sink fences a dead run's task: opening the id again aborts its transaction; a late commit
    of it then learns the transaction is over, and cannot claim it was committed."""
    topic, tid = "tpp-leftover", "tpp-leftover-task-0"
    with TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15) as producer:
        producer.send(topic, 0, values("leftover", 2))
        prepared = producer.prepare()
    TwoPhaseProducer(broker.bootstrap_servers, tid, timeout=15).close()
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {(topic, 0): []}
    assert last_stable_offset(broker, topic, 0) == 3  # 2 aborted records and the abort marker
    late = complete_prepared(broker.bootstrap_servers, prepared, True, timeout=15)
    assert late is Completion.ALREADY_COMPLETED
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True) == {(topic, 0): []}


def test_completing_an_id_the_broker_never_saw_changes_nothing(broker: Broker) -> None:
    unknown = PreparedTransaction("tpp-never-used", 4242, 0)
    assert (
        complete_prepared(broker.bootstrap_servers, unknown, True, timeout=15) is Completion.ALREADY_COMPLETED
    )
    with WireClient("127.0.0.1", broker.port, timeout=15) as c:
        response = c.call(DescribeTransactionsRequest(transactional_ids=[unknown.transactional_id]))
    assert response.transaction_states[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND  # type: ignore[attr-defined]


def test_the_setting_off_refuses_two_phase_commit() -> None:
    refused = pytest.raises(TwoPhaseCommitUnavailableError, match=r"transaction\.two\.phase\.commit\.enable")
    with Broker({"num.partitions": 1}) as off, refused as e:
        TwoPhaseProducer(off.bootstrap_servers, "tpp-off", timeout=15)
    assert e.value.error_code is ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_prepared_transaction_survives_a_broker_kill(broker: Broker) -> None:
    """Task 0 prepared before the kill; task 1 was still writing and goes on over new connections."""
    topic = "tpp-restart"
    sent = {p: values(f"restart-p{p}", 3) for p in range(2)}
    with TwoPhaseProducer(broker.bootstrap_servers, "tpp-restart-task-0", timeout=15) as producer:
        producer.send(topic, 0, sent[0])
        prepared = [producer.prepare()]
    writing = TwoPhaseProducer(broker.bootstrap_servers, "tpp-restart-task-1", timeout=30)
    try:
        writing.send(topic, 1, sent[1][:1])
        writing.flush()
        broker.kill()
        broker.restart()
        writing.send(topic, 1, sent[1][1:])
        prepared.append(writing.prepare())  # the same sequences resent until the partition is back
        assert writing.offsets == {(topic, 1): [0, 1, 2]}
    finally:
        writing.close()
    for transaction in prepared:
        completion = complete_prepared(broker.bootstrap_servers, transaction, True, timeout=30)
        assert completion is Completion.COMMITTED
        wait_for_state(broker, transaction.transactional_id, "CompleteCommit")
    tps = [(topic, p) for p in range(2)]
    assert read_values(broker.bootstrap_servers, tps, committed=True) == {
        (topic, p): sent[p] for p in range(2)
    }
