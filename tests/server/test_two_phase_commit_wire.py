"""KIP-939 two-phase commit against a real broker, spoken with tidelog's own wire client
(:mod:`tidelog.client.wire`), read back with a read_committed confluent-kafka consumer.

One broker (``transaction.two.phase.commit.enable=true``) serves every test; the restart test runs last.

- ApiVersions advertises InitProducerId v6.
- A producer initialises with Enable2Pc, adds a partition, writes transactional idempotent batches and
  stops ("prepared"). A plain transaction begun after it with the same 1 s timeout is aborted by the
  coordinator; the 2PC one is still Ongoing after that (with Kafka's no-timeout mark,
  ``Integer.MAX_VALUE``), so the abort check has passed its deadline and spared it.
- A new session's InitProducerId(Enable2Pc, KeepPreparedTxn) answers the epoch + 1 and the kept
  transaction's producer id and epoch; the old session's next produce is fenced (PRODUCER_FENCED or
  INVALID_PRODUCER_EPOCH); EndTxn at the new epoch commits, and read_committed sees exactly the records;
  or aborts, and read_committed sees none.
- After a SIGKILL between prepare and commit, the restarted broker still holds the transaction (from
  ``__transaction_state``); a new session keeps it, and after a second SIGKILL the next session is still
  told the transaction's original epoch, and commits it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.server.txn_support import create_topics, read_values

from tidelog.client.wire import WireClient
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
)
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing import Broker

pytestmark = pytest.mark.clients

MAX_INT = 2_147_483_647
TIMEOUT_MS = 1000
TOPICS = {"tpc-commit": 1, "tpc-abort": 1, "tpc-restart": 1, "tpc-control": 1}
FENCED = {ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker({"num.partitions": 1, "transaction.two.phase.commit.enable": True}) as b:
        create_topics(b.bootstrap_servers, TOPICS)
        yield b


def connect(broker: Broker) -> WireClient:
    return WireClient("127.0.0.1", broker.port, timeout=15)


def init(c: WireClient, tid: str, *, two_pc: bool, keep: bool = False) -> Any:
    request = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS, enable2_pc=two_pc, keep_prepared_txn=keep
    )
    deadline = time.monotonic() + 15
    while True:  # the first request for an id creates and loads __transaction_state: retry as clients do
        c.call(FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), 4)
        response = c.call(request, 6, expect=InitProducerIdResponse)
        if response.error_code not in RETRIABLE or time.monotonic() > deadline:
            assert response.error_code == ErrorCode.NONE, response
            return response
        time.sleep(0.05)


def add_partition(c: WireClient, tid: str, pid: int, epoch: int, topic: str) -> None:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
    )
    response: Any = c.call(request, 3)
    assert [
        p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition
    ] == [0]


def produce(
    c: WireClient, tid: str, pid: int, epoch: int, sequence: int, topic: str, values: list[bytes]
) -> int:
    now = int(time.time() * 1000)
    batch = encode_batch(
        [SimpleRecord(value=v, timestamp=now) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    request = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    response: Any = c.call(request, 9)
    return int(response.responses[0].partition_responses[0].error_code)


def end_txn(c: WireClient, tid: str, pid: int, epoch: int, *, commit: bool) -> int:
    request = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    return int(c.call(request, 3).error_code)  # type: ignore[attr-defined]


def describe(c: WireClient, tid: str) -> Any:
    response: Any = c.call(DescribeTransactionsRequest(transactional_ids=[tid]), 0)
    return response.transaction_states[0]


def wait_for_state(c: WireClient, tid: str, state: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        described = describe(c, tid)
        if described.transaction_state == state or time.monotonic() > deadline:
            assert described.transaction_state == state, described
            return described
        time.sleep(0.05)


def prepare(c: WireClient, tid: str, topic: str, values: list[bytes]) -> tuple[int, int]:
    """A 2PC session that writes ``values`` in a transaction and stops: (producer id, epoch)."""
    first = init(c, tid, two_pc=True)
    assert (first.ongoing_txn_producer_id, first.ongoing_txn_producer_epoch) == (-1, -1)
    pid, epoch = first.producer_id, first.producer_epoch
    add_partition(c, tid, pid, epoch, topic)
    assert produce(c, tid, pid, epoch, 0, topic, values[:2]) == 0
    assert produce(c, tid, pid, epoch, 2, topic, values[2:]) == 0
    return pid, epoch


def recover(c: WireClient, tid: str, pid: int, epoch: int) -> int:
    """A new session keeps the prepared transaction: its epoch."""
    kept = init(c, tid, two_pc=True, keep=True)
    assert (kept.producer_id, kept.producer_epoch) == (pid, epoch + 1)
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, epoch)
    return int(kept.producer_epoch)


def test_api_versions_advertise_init_producer_id_v6(broker: Broker) -> None:
    with connect(broker) as c:
        assert c.version_for(InitProducerIdRequest) == 6


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_prepared_transaction_outlives_its_timeout_and_a_new_session_finishes_it(
    broker: Broker, commit: bool
) -> None:
    topic = "tpc-commit" if commit else "tpc-abort"
    tid = f"2pc-{topic}"
    values = [b"%s-%d" % (topic.encode(), i) for i in range(5)]
    with connect(broker) as old, connect(broker) as new:
        pid, epoch = prepare(old, tid, topic, values)
        control = init(old, f"control-{topic}", two_pc=False)
        add_partition(old, f"control-{topic}", control.producer_id, control.producer_epoch, "tpc-control")
        wait_for_state(old, f"control-{topic}", "CompleteAbort")  # its 1 s timeout passed: aborted
        prepared = describe(old, tid)
        assert (prepared.transaction_state, prepared.transaction_timeout_ms) == ("Ongoing", MAX_INT)
        assert (prepared.producer_id, prepared.producer_epoch) == (pid, epoch)

        new_epoch = recover(new, tid, pid, epoch)
        assert produce(old, tid, pid, epoch, 5, topic, [b"late"]) in FENCED
        assert end_txn(old, tid, pid, epoch, commit=commit) in FENCED
        assert end_txn(new, tid, pid, new_epoch, commit=commit) == 0
        wait_for_state(new, tid, "CompleteCommit" if commit else "CompleteAbort")
    committed = read_values(broker.bootstrap_servers, [(topic, 0)], committed=True)[(topic, 0)]
    assert committed == (values if commit else [])


def kill_and_restart(broker: Broker, tid: str) -> None:
    broker.kill()
    broker.restart()
    with connect(broker) as c:
        deadline = time.monotonic() + 15
        while describe(c, tid).error_code in RETRIABLE and time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_prepared_transaction_survives_broker_kills(broker: Broker) -> None:
    topic, tid = "tpc-restart", "2pc-restart"
    values = [b"restart-%d" % i for i in range(5)]
    with connect(broker) as c:
        pid, epoch = prepare(c, tid, topic, values)
    kill_and_restart(broker, tid)
    with connect(broker) as c:
        prepared = describe(c, tid)
        assert (prepared.transaction_state, prepared.producer_id, prepared.producer_epoch) == (
            "Ongoing",
            pid,
            epoch,
        )
        assert recover(c, tid, pid, epoch) == epoch + 1
    kill_and_restart(broker, tid)  # the recovering session dies too: the next one still sees the original
    with connect(broker) as c:
        kept = init(c, tid, two_pc=True, keep=True)
        assert (kept.producer_id, kept.producer_epoch) == (pid, epoch + 2)
        assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, epoch)
        assert end_txn(c, tid, pid, epoch + 2, commit=True) == 0
        wait_for_state(c, tid, "CompleteCommit")
    assert read_values(broker.bootstrap_servers, [(topic, 0)], committed=True)[(topic, 0)] == values
