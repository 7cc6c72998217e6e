"""The group and transaction coordinators on a replicated cluster: in-process brokers in cluster mode
(inprocess_cluster.py), the test playing the controller and, where it matters, the followers' fetches.

- A confluent-kafka transactional producer whose coordinator is broker 1 writes to partitions led by
  brokers 2 and 3: the COMMIT and ABORT markers reach both leaders as WriteTxnMarkers, each carrying the
  coordinator epoch (the ``__transaction_state`` partition's leader epoch, 3); a read_committed consumer
  sees exactly the committed records. Brokers 2 and 3, whose coordinator is elsewhere, accept the
  transactional batches without verification (Kafka 3.5).
- send_offsets_to_transaction with ``__consumer_offsets`` led by broker 2 and the transaction coordinator
  on broker 1: the offsets stay pending on broker 2 until the COMMIT marker reaches it, then they are
  committed; the marker follows the offsets in its log.
- A group coordinator follows the leadership of its ``__consumer_offsets`` partition: a commit whose record
  broker 2 (the follower) has not fetched is answered only after its fetch; moving the leadership to broker
  2 (a higher leader epoch) unloads broker 1 (NOT_COORDINATOR, also for a commit still waiting there,
  which broker 2 never had) and broker 2 loads the replicated offsets from its own log.
- A transaction coordinator whose PrepareCommit is not replicated holds the EndTxn answer and writes no
  marker until the follower fetched it; a new leader epoch of its partition in between answers the waiting
  EndTxn NOT_COORDINATOR, reloads the partition (still the leader) at the new coordinator epoch, and the
  reloaded PrepareCommit's markers are written only once committed, carrying the new epoch.
- A commit that is not replicated within ``offsets.commit.timeout.ms`` answers COORDINATOR_NOT_AVAILABLE and
  the partition is unloaded, then loaded again from its log (the record is there: an OffsetFetch waits for
  its replication and then answers it).
- ``transaction.state.log.min.isr`` 2 with an ISR of one: the coordinator's append fails before anything
  is written (NOT_ENOUGH_REPLICAS: COORDINATOR_NOT_AVAILABLE); once the ISR is back, it answers after the
  follower's fetch.
- WriteTxnMarkers in a cluster answers once its marker is committed (the follower fetched it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from tests.server.cluster.inprocess_cluster import InProcessCluster, inprocess_cluster
from tests.server.inprocess import ctx, handle

from tidelog.coordinator.common import GROUP_METADATA_TOPIC_NAME as OFFSETS
from tidelog.coordinator.common import TRANSACTION_STATE_TOPIC_NAME as TXN_STATE
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AddPartitionsToTxnRequest,
    ApiKey,
    EndTxnRequest,
    InitProducerIdRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from tidelog.protocol.records import SimpleRecord, decode_control_record, encode_batch
from tidelog.replication.partition import Partition
from tidelog.server.coordinator_support import read_records

pytestmark = [pytest.mark.timeout(180)]

TXN_ID = "cluster-txn"
GROUP = "cluster-group"


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def markers(partition: Partition) -> list[tuple[str, int]]:
    """(COMMIT/ABORT, coordinator epoch) of every transaction marker in the partition's log, in order."""
    out = []
    for chunk in read_records(partition, 1 << 20):
        for header, records in chunk:
            if header.is_control:
                for record in records:
                    kind, epoch = decode_control_record(record)
                    out.append((kind.name, epoch))
    return out


def loaded(cluster: InProcessCluster, node: int, runtime: str) -> bool:
    def check() -> bool:
        coordinator = getattr(cluster[node].broker, runtime).coordinator
        return 0 in coordinator.owned_partitions and not coordinator.is_loading(0)

    return cluster.call(check)


def consume_committed(
    bootstrap: str, topic: str, partitions: int, until_value: bytes
) -> dict[int, list[bytes]]:
    """Every value a read_committed consumer reads from ``topic`` (by partition) until it has read
    ``until_value``."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while not any(until_value in values for values in seen.values()):
            assert time.monotonic() < deadline, f"read only {seen}"
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            seen[message.partition()].append(message.value())
        # everything else that is readable now
        for message in consumer.consume(100, 1.0):
            if not message.error():
                seen[message.partition()].append(message.value())
        return seen
    finally:
        consumer.close()


def txn_producer(bootstrap: str) -> Any:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5, "log_level": 0}
    )
    producer.init_transactions(30)
    return producer


def layout(cluster: InProcessCluster, *, txn_leader_epoch: int = 0) -> None:
    """``__transaction_state`` on broker 1, ``__consumer_offsets`` on broker 2, topic ``t``: partition 0 on
    broker 2, partition 1 on broker 3; every partition one replica."""
    cluster.create_topic(TXN_STATE, [(1,)])
    cluster.create_topic(OFFSETS, [(2,)])
    cluster.create_topic("t", [(2,), (3,)])
    cluster.elect(TXN_STATE, 0, leader=1, leader_epoch=txn_leader_epoch, isr=(1,))
    cluster.elect(OFFSETS, 0, leader=2, leader_epoch=0, isr=(2,))
    cluster.elect("t", 0, leader=2, leader_epoch=0, isr=(2,))
    cluster.elect("t", 1, leader=3, leader_epoch=0, isr=(3,))
    wait_for(lambda: loaded(cluster, 1, "transactions"), "the transaction coordinator to load")
    wait_for(lambda: loaded(cluster, 2, "groups"), "the group coordinator to load")


def test_markers_reach_the_leaders_on_other_brokers(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path) as cluster:
        layout(cluster, txn_leader_epoch=3)
        assert cluster.call(lambda: cluster[2].broker.transactions.coordinator.owned_partitions) == []
        producer = txn_producer(cluster[3].bootstrap)

        producer.begin_transaction()
        producer.produce("t", b"a0", partition=0)
        producer.produce("t", b"a1", partition=1)
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce("t", b"b0", partition=0)
        producer.produce("t", b"b1", partition=1)
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce("t", b"c0", partition=0)
        producer.commit_transaction(30)

        b, c = cluster[2].partition("t", 0), cluster[3].partition("t", 1)
        wait_for(lambda: cluster.call(lambda: len(markers(b)) == 3 and len(markers(c)) == 2), "the markers")
        assert cluster.call(lambda: markers(b)) == [("COMMIT", 3), ("ABORT", 3), ("COMMIT", 3)]
        assert cluster.call(lambda: markers(c)) == [("COMMIT", 3), ("ABORT", 3)]
        assert cluster.call(lambda: (b.last_stable_offset, b.high_watermark)) == (6, 6)
        assert cluster.call(lambda: (c.last_stable_offset, c.high_watermark)) == (4, 4)
        seen = consume_committed(cluster[1].bootstrap, "t", 2, b"c0")
        assert seen == {0: [b"a0", b"c0"], 1: [b"a1"]}

        def state() -> str:
            txn = cluster[1].broker.transactions.coordinator.transaction(TXN_ID)
            return "none" if txn is None else txn.state.kafka_name

        wait_for(lambda: cluster.call(state) == "CompleteCommit", "the transaction to complete")
        producer.flush(5)


def test_offsets_sent_to_a_transaction_commit_with_the_marker_on_the_group_coordinator(
    tmp_path: Path,
) -> None:
    with inprocess_cluster(tmp_path) as cluster:
        layout(cluster)
        producer = txn_producer(cluster[1].bootstrap)
        group = confluent_kafka.Consumer(
            {"bootstrap.servers": cluster[1].bootstrap, "group.id": GROUP, "log_level": 0}
        )
        try:
            producer.begin_transaction()
            producer.produce("t", b"out", partition=1)
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition("t", 0, 5)], group.consumer_group_metadata(), 30
            )
            # TxnOffsetCommit reached broker 2 (its group coordinator): pending, not committed
            offsets = cluster[2].partition(OFFSETS)
            assert cluster.call(lambda: markers(offsets)) == []
            assert fetch_offset(cluster, 2, GROUP, require_stable=True) == (
                ErrorCode.UNSTABLE_OFFSET_COMMIT,
                -1,
            )
            producer.commit_transaction(30)
            wait_for(
                lambda: fetch_offset(cluster, 2, GROUP, require_stable=True) == (ErrorCode.NONE, 5),
                "the offsets to be committed",
            )
            assert cluster.call(lambda: markers(offsets)) == [("COMMIT", 0)]
            committed = group.committed([confluent_kafka.TopicPartition("t", 0)], 30)
            assert [(tp.topic, tp.partition, tp.offset) for tp in committed] == [("t", 0, 5)]
        finally:
            group.close()
            producer.flush(5)


# -- raw requests on the cluster's loop --------------------------------------------------------------------


def commit_request(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(committed_offset=offset)],
            )
        ],
    )


def fetch_offset(
    cluster: InProcessCluster, node: int, group: str, *, require_stable: bool = False
) -> tuple[int, int]:
    """(error, committed offset of t-0) from broker ``node``'s group coordinator, once it answers."""

    async def fetch() -> tuple[int, int]:
        response = await wait(
            cluster[node].broker.groups.handle(
                ctx(ApiKey.OFFSET_FETCH, 7),
                OffsetFetchRequest(
                    group_id=group,
                    topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
                    require_stable=require_stable,
                ),
            )
        )
        if response.error_code != ErrorCode.NONE or not response.topics:
            return response.error_code, -1
        partition = response.topics[0].partitions[0]
        return partition.error_code, partition.committed_offset

    return cluster.run(fetch())


def commit_error(response: Any) -> int:
    return int(response.topics[0].partitions[0].error_code)


async def ticks(n: int = 20) -> None:
    """Let the loop run everything that is ready (nothing here waits for time to pass)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_group_coordinator_follows_its_partitions_leader(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2)) as cluster:
        cluster.create_topic(OFFSETS, [(1, 2)])
        cluster.create_topic("t", [(1,)])
        cluster.elect("t", 0, leader=1, leader_epoch=0, isr=(1,))
        cluster.elect(OFFSETS, 0, leader=1, leader_epoch=0, isr=(1, 2))
        wait_for(lambda: loaded(cluster, 1, "groups"), "broker 1's group coordinator to load")
        a = cluster[1].broker

        async def commit(offset: int) -> Any:
            answer = a.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request(GROUP, offset))
            assert isinstance(answer, asyncio.Future)  # broker 2 is in the ISR and has not fetched
            await ticks()
            assert not answer.done()
            return answer

        answer = cluster.run(commit(5))
        cluster.replicate(OFFSETS, 0, follower=2)  # the record, then the high watermark
        assert cluster.run(wait(answer)).topics[0].partitions[0].error_code == ErrorCode.NONE
        assert fetch_offset(cluster, 1, GROUP) == (ErrorCode.NONE, 5)

        waiting = cluster.run(commit(7))  # never replicated
        cluster.elect(OFFSETS, 0, leader=2, leader_epoch=1, isr=(1, 2))
        assert commit_error(cluster.run(wait(waiting))) == ErrorCode.NOT_COORDINATOR
        assert cluster.call(lambda: a.groups.coordinator.owned_partitions) == []
        assert fetch_offset(cluster, 1, GROUP) == (ErrorCode.NOT_COORDINATOR, -1)
        wait_for(lambda: loaded(cluster, 2, "groups"), "broker 2's group coordinator to load")
        assert fetch_offset(cluster, 2, GROUP) == (ErrorCode.NONE, 5)
        b_offsets = cluster[2].partition(OFFSETS)
        assert cluster.call(lambda: (b_offsets.leader_epoch, b_offsets.is_leader)) == (1, True)


def test_an_isr_removal_at_the_next_leader_epoch_keeps_the_coordinator_loaded(tmp_path: Path) -> None:
    """The controller takes a dead follower out of the ISR with the same leader at the next leader epoch
    (as Kafka's ZooKeeper controller does): no leadership moved, so the group coordinator stays loaded and a
    commit waiting for the follower is answered NONE once the smaller ISR commits it (not NOT_COORDINATOR
    and a reload, during which the partition's groups got COORDINATOR_LOAD_IN_PROGRESS)."""
    with inprocess_cluster(tmp_path, (1, 2)) as cluster:
        cluster.create_topic(OFFSETS, [(1, 2)])
        cluster.create_topic("t", [(1,)])
        cluster.elect("t", 0, leader=1, leader_epoch=0, isr=(1,))
        cluster.elect(OFFSETS, 0, leader=1, leader_epoch=0, isr=(1, 2))
        wait_for(lambda: loaded(cluster, 1, "groups"), "broker 1's group coordinator to load")
        a = cluster[1].broker

        async def commit() -> Any:
            answer = a.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request(GROUP, 5))
            assert isinstance(answer, asyncio.Future)  # broker 2 is in the ISR and never fetches
            await ticks()
            assert not answer.done()
            return answer

        waiting = cluster.run(commit())
        cluster.elect(OFFSETS, 0, leader=1, leader_epoch=1, isr=(1,), partition_epoch=1, on=(1,))
        assert commit_error(cluster.run(wait(waiting))) == ErrorCode.NONE
        assert loaded(cluster, 1, "groups")
        assert fetch_offset(cluster, 1, GROUP) == (ErrorCode.NONE, 5)


async def wait(answer: Any) -> Any:
    return await answer if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future) else answer


def test_markers_wait_for_the_prepare_record_to_be_committed(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2)) as cluster:
        cluster.create_topic(TXN_STATE, [(1, 2)])
        cluster.create_topic("t", [(2,)])
        cluster.elect("t", 0, leader=2, leader_epoch=0, isr=(2,))
        cluster.elect(TXN_STATE, 0, leader=1, leader_epoch=0, isr=(1, 2))
        wait_for(lambda: loaded(cluster, 1, "transactions"), "the transaction coordinator to load")
        a, b = cluster[1].broker, cluster[2].broker
        data = cluster[2].partition("t")

        def replicated(request: Callable[[], Any]) -> Any:
            """Send ``request`` to broker 1's coordinator; its answer waits for broker 2's fetch."""

            async def send() -> Any:
                answer = request()
                assert isinstance(answer, asyncio.Future)
                await ticks()
                assert not answer.done()
                return answer

            answer = cluster.run(send())
            cluster.replicate(TXN_STATE, 0, follower=2)
            return cluster.run(wait(answer))

        init = replicated(
            lambda: a.transactions.handle(
                ctx(ApiKey.INIT_PRODUCER_ID, 4),
                InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000),
            )
        )
        assert init.error_code == ErrorCode.NONE
        pid, epoch = init.producer_id, init.producer_epoch

        def transaction(value: bytes, sequence: int) -> None:
            added = replicated(
                lambda: a.transactions.handle(
                    ctx(ApiKey.ADD_PARTITIONS_TO_TXN, 3),
                    AddPartitionsToTxnRequest(
                        v3_and_below_transactional_id=TXN_ID,
                        v3_and_below_producer_id=pid,
                        v3_and_below_producer_epoch=epoch,
                        v3_and_below_topics=[
                            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0])
                        ],
                    ),
                )
            )
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            batch = encode_batch(
                [SimpleRecord(value=value, timestamp=int(time.time() * 1000))],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=sequence,
                is_transactional=True,
            )
            request = ProduceRequest(
                transactional_id=TXN_ID,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
                    )
                ],
            )

            async def produce() -> Any:
                return await wait(handle(b, ctx(ApiKey.PRODUCE, 9), request))

            produced = cluster.run(produce())
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE

        end = EndTxnRequest(transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True)

        # 1. EndTxn waits for the PrepareCommit's replication; no marker before it
        transaction(b"first", 0)

        async def end_txn(markers_before: list[tuple[str, int]]) -> Any:
            answer = a.transactions.handle(ctx(ApiKey.END_TXN, 3), end)
            assert isinstance(answer, asyncio.Future)
            await ticks()
            assert not answer.done()
            assert markers(data) == markers_before
            return answer

        answer = cluster.run(end_txn([]))
        cluster.replicate(TXN_STATE, 0, follower=2)
        assert cluster.run(wait(answer)).error_code == ErrorCode.NONE
        wait_for(lambda: cluster.call(lambda: markers(data)) == [("COMMIT", 0)], "the first marker")
        assert cluster.call(lambda: data.last_stable_offset) == 2

        # 2. a new leader epoch while EndTxn waits, two on (another broker may have led in between; the
        # very next epoch with the same leader is the controller's ISR removal, which reloads nothing):
        # NOT_COORDINATOR, reloaded, markers once committed
        transaction(b"second", 1)
        answer = cluster.run(end_txn([("COMMIT", 0)]))
        cluster.elect(TXN_STATE, 0, leader=1, leader_epoch=2, isr=(1, 2))
        assert cluster.run(wait(answer)).error_code == ErrorCode.NOT_COORDINATOR
        wait_for(lambda: loaded(cluster, 1, "transactions"), "the coordinator to load again")

        def coordinator_epoch() -> int:
            owned = a.transactions.coordinator.txn_partition(0)
            assert owned is not None
            return int(owned.coordinator_epoch)

        assert cluster.call(coordinator_epoch) == 2

        def status() -> tuple[str, list[tuple[str, int]]]:
            txn = a.transactions.coordinator.transaction(TXN_ID)
            assert txn is not None
            return txn.state.kafka_name, markers(data)

        cluster.run(ticks())
        assert cluster.call(status) == ("PrepareCommit", [("COMMIT", 0)])  # reloaded, not committed yet
        cluster.replicate(TXN_STATE, 0, follower=2)
        wait_for(
            lambda: cluster.call(lambda: markers(data)) == [("COMMIT", 0), ("COMMIT", 2)],
            "the reloaded transaction's marker",
        )
        # its CompleteCommit (appended once the marker is in) waits for the follower too
        state_log = cluster[1].partition(TXN_STATE)
        wait_for(lambda: cluster.call(status)[0] == "CompleteCommit", "CompleteCommit")
        assert cluster.call(lambda: state_log.high_watermark < state_log.log_end_offset)
        cluster.replicate(TXN_STATE, 0, follower=2)
        assert cluster.call(lambda: state_log.high_watermark == state_log.log_end_offset)
        assert cluster.call(lambda: data.last_stable_offset) == 4


def test_a_commit_that_times_out_answers_coordinator_not_available_and_reloads(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2), **{"offsets.commit.timeout.ms": "300"}) as cluster:
        cluster.create_topic(OFFSETS, [(1, 2)])
        cluster.create_topic("t", [(1,)])
        cluster.elect("t", 0, leader=1, leader_epoch=0, isr=(1,))
        cluster.elect(OFFSETS, 0, leader=1, leader_epoch=0, isr=(1, 2))
        wait_for(lambda: loaded(cluster, 1, "groups"), "the group coordinator to load")
        a = cluster[1].broker

        async def commit() -> tuple[int, bool]:
            response = await wait(a.groups.handle(ctx(ApiKey.OFFSET_COMMIT, 8), commit_request(GROUP, 3)))
            return commit_error(response), a.groups.coordinator.is_loading(0)

        # broker 2 never fetches: the commit's wait runs out (REQUEST_TIMED_OUT); the partition is unloaded
        # when the answer leaves, loading again (its log replayed after a pause)
        assert cluster.run(commit()) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, True)
        wait_for(lambda: loaded(cluster, 1, "groups"), "the group coordinator to load again")
        # the record is in the leader's log: reloaded, and answered once broker 2 has it
        offsets = cluster[1].partition(OFFSETS)
        assert cluster.call(lambda: offsets.high_watermark < offsets.log_end_offset)

        async def fetch_waits() -> Any:
            answer = a.groups.handle(
                ctx(ApiKey.OFFSET_FETCH, 7),
                OffsetFetchRequest(
                    group_id=GROUP,
                    topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
                ),
            )
            assert isinstance(answer, asyncio.Future)
            await ticks()
            assert not answer.done()
            return answer

        waiting = cluster.run(fetch_waits())
        cluster.replicate(OFFSETS, 0, follower=2)
        assert cluster.run(wait(waiting)).topics[0].partitions[0].committed_offset == 3


def test_an_isr_below_min_insync_replicas_fails_the_append_before_writing(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2), **{"transaction.state.log.min.isr": "2"}) as cluster:
        cluster.create_topic(TXN_STATE, [(1, 2)])
        cluster.elect(TXN_STATE, 0, leader=1, leader_epoch=0, isr=(1,))
        wait_for(lambda: loaded(cluster, 1, "transactions"), "the transaction coordinator to load")
        a = cluster[1].broker
        state = cluster[1].partition(TXN_STATE)
        end_before = cluster.call(lambda: state.log_end_offset)

        def init() -> Any:
            return a.transactions.handle(
                ctx(ApiKey.INIT_PRODUCER_ID, 4),
                InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000),
            )

        assert cluster.call(init).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert cluster.call(lambda: state.log_end_offset) == end_before
        # the ISR grows back: the reloaded coordinator answers once the record is replicated
        cluster.elect(TXN_STATE, 0, leader=1, leader_epoch=0, isr=(1, 2), partition_epoch=1)
        wait_for(lambda: loaded(cluster, 1, "transactions"), "the transaction coordinator to load again")
        answer = cluster.call(init)
        assert isinstance(answer, asyncio.Future)
        cluster.replicate(TXN_STATE, 0, follower=2)
        assert cluster.run(wait(answer)).error_code == ErrorCode.NONE


def test_write_txn_markers_answers_once_the_markers_are_committed(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2)) as cluster:
        cluster.create_topic("t", [(1, 2)])
        cluster.elect("t", 0, leader=1, leader_epoch=0, isr=(1, 2))
        data = cluster[1].partition("t")
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=4242,
                    producer_epoch=0,
                    transaction_result=False,
                    topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="t", partition_indexes=[0])],
                    coordinator_epoch=7,
                )
            ]
        )

        async def send() -> Any:
            answer = handle(cluster[1].broker, ctx(ApiKey.WRITE_TXN_MARKERS, 1), request)
            assert asyncio.iscoroutine(answer)
            task = asyncio.ensure_future(answer)
            await ticks()
            assert not task.done()
            assert markers(data) == [("ABORT", 7)]  # written, not committed
            return task

        waiting = cluster.run(send())
        cluster.replicate("t", 0, follower=2)
        response = cluster.run(wait(waiting))
        assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.NONE
        assert cluster.call(lambda: (data.high_watermark, markers(cluster[2].partition("t")))) == (
            1,
            [("ABORT", 7)],
        )


def test_a_deleted_share_group_is_answered_once_its_tombstones_are_committed(tmp_path: Path) -> None:
    """DeleteGroups of a share group waits for its tombstones in ``__consumer_offsets`` to be committed, as
    the heartbeats that wrote the group did: answered earlier, a failover of the coordinator's partition
    before the follower had them brought the deleted group back from its earlier records."""
    from tidelog.coordinator.share.state_coordinator import SHARE_STATE_TOPIC
    from tidelog.protocol.messages import (
        DeleteGroupsRequest,
        ShareGroupHeartbeatRequest,
        ShareGroupHeartbeatResponse,
    )

    overrides = {"offsets.topic.num.partitions": "1", "share.coordinator.state.topic.num.partitions": "1"}
    with inprocess_cluster(tmp_path, (1, 2), **overrides) as cluster:
        cluster.create_topic(OFFSETS, [(1, 2)])
        cluster.create_topic(SHARE_STATE_TOPIC, [(1,)])
        cluster.create_topic("t", [(1,)])
        cluster.elect("t", 0, leader=1, leader_epoch=0, isr=(1,))
        cluster.elect(SHARE_STATE_TOPIC, 0, leader=1, leader_epoch=0, isr=(1,))
        cluster.elect(OFFSETS, 0, leader=1, leader_epoch=0, isr=(1, 2))
        wait_for(lambda: loaded(cluster, 1, "groups"), "the group coordinator to load")
        wait_for(lambda: loaded(cluster, 1, "share_states"), "the share coordinator to load")
        a = cluster[1].broker

        async def waits_for_the_follower(request: Any, api_key: int, version: int) -> Any:
            answer = handle(a, ctx(api_key, version), request)
            assert asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future)
            task = asyncio.ensure_future(answer)
            await ticks()
            assert not task.done()  # broker 2 is in the ISR and has not fetched the records
            return task

        def beat(epoch: int, member_id: str = "") -> Any:
            request = ShareGroupHeartbeatRequest(
                group_id=GROUP,
                member_id=member_id,
                member_epoch=epoch,
                subscribed_topic_names=["t"] if epoch == 0 else None,
            )
            task = cluster.run(waits_for_the_follower(request, ApiKey.SHARE_GROUP_HEARTBEAT, 1))
            cluster.replicate(OFFSETS, 0, follower=2)
            response = cluster.run(wait(task))
            assert isinstance(response, ShareGroupHeartbeatResponse)
            assert response.error_code == ErrorCode.NONE
            return response

        joined = beat(0, "member-1")
        beat(-1, joined.member_id)  # the group is Empty: it may be deleted
        task = cluster.run(
            waits_for_the_follower(DeleteGroupsRequest(groups_names=[GROUP]), ApiKey.DELETE_GROUPS, 2)
        )
        cluster.replicate(OFFSETS, 0, follower=2)
        deleted = cluster.run(wait(task))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(GROUP, ErrorCode.NONE)]
        offsets = cluster[1].partition(OFFSETS)
        assert cluster.call(lambda: offsets.high_watermark == offsets.log_end_offset)
