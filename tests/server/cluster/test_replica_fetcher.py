"""ReplicaFetcherManager (server/cluster/replica_fetcher.py) between real tidelog brokers in one event loop
(asyncio's, and uvloop's where marked), the test playing the controller (inprocess_cluster.py): every
scenario ends with replicas compared batch by batch, byte for byte.

- A follower catches up from empty over many fetch rounds (Fetch v16: topic ids, ReplicaState), its
  leader epochs as the leader's, and joins the ISR (its broker epoch reached the leader); without topic
  ids it fetches by name (v12); with ``num.replica.fetchers`` 3 its partitions spread over three fetchers.
- acks=all through confluent-kafka: answered only after the follower fetched the record (the high
  watermark waits for it); once the ISR is the leader alone, answered without the follower.
- Long poll: a fetch parked at the leader (``replica.fetch.wait.max.ms`` of a minute) is answered by the
  next append, not by its timeout.
- Leader change: the old leader, with records the new leader never had, becomes a follower at the next
  epoch and truncates them (DivergingEpoch), ending identical to the new leader; a follower with an epoch
  the leader never had truncates in two rounds (KIP-279).
- DeleteRecords on the leader moves the follower's log start offset.
- A follower below the leader's log start (empty, or whose last epoch the leader deleted) starts over
  there (OFFSET_OUT_OF_RANGE, ListOffsets as a replica).
- A fenced partition (the leader at a newer epoch) waits for its next state; a corrupt batch from the
  leader delays its partition only (the others carry on) until it reads whole; a deleted follower replica
  leaves its fetcher and its log is never written.
- The leader stopped while followers' fetches are parked: they back off and retry without failing, and
  replicate from the new leader once elected.
- Transactions: commit and abort markers replicate; a read_committed read of the follower's log sees
  exactly the committed records.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import uvloop
from tests.server.cluster.async_cluster import InProcessCluster, batches, in_sync, inprocess_cluster
from tests.server.inprocess import until

from tidelog.protocol import TopicPartition
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from tidelog.protocol.records import (
    RECORD_BATCH_HEADER_SIZE,
    ControlRecordType,
    SimpleRecord,
    decode_batch,
    decode_control_record,
    encode_batch,
    iter_batch_headers,
)
from tidelog.replication.leader_and_isr import LeaderAndIsr
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.cluster.broker_client import BrokerClient
from tidelog.server.cluster.replica_fetcher import FetchStatus, ReplicaFetcherConfig, fetcher_id

pytestmark = [pytest.mark.timeout(120)]

LOOPS: dict[str, Callable[[Coroutine[Any, Any, None]], None]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,  # the broker's loop
}

T = "t"
TP = TopicPartition(T, 0)
NOW_MS = 1_700_000_000_000


def batch(*values: bytes) -> bytes:
    return encode_batch([SimpleRecord(value=v, timestamp=NOW_MS) for v in values])


def append(cluster: InProcessCluster, node_id: int, *values: bytes, topic: str = T) -> int:
    """One batch of ``values`` appended on the leader ``node_id`` as a produce with acks=1 is; returns its
    base offset."""
    replicas = cluster[node_id].broker.replicas
    error, info, message = replicas.append(topic, 0, batch(*values), now_ms=NOW_MS)
    assert error == ErrorCode.NONE, message
    assert info is not None
    return info.first_offset


def values(partition: Partition) -> list[bytes | None]:
    out: list[bytes | None] = []
    for raw in batches(partition):
        header, records = decode_batch(raw)
        if not header.is_control:
            out += [record.value for record in records]
    return out


def epochs(cluster: InProcessCluster, node_id: int) -> list[tuple[int, int]]:
    log = cluster[node_id].broker.logs.get(T, 0)
    assert log is not None
    return [(entry.epoch, entry.start_offset) for entry in log.leader_epoch_entries]


def fetcher_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tidelog.replica_fetcher"]


@contextlib.asynccontextmanager
async def wire_client(cluster: InProcessCluster) -> AsyncIterator[BrokerClient]:
    """A client of the cluster's brokers by node id (as a Kafka client, node id 0 for itself)."""

    def endpoint_for(node_id: int) -> tuple[str, int] | None:
        node = cluster.nodes.get(node_id)
        return ("127.0.0.1", node.port) if node is not None and node.running else None

    client = BrokerClient(0, endpoint_for, client_id="test-client")
    try:
        yield client
    finally:
        await client.close_all()


# -- catching up ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_follower_catches_up_from_empty_byte_identical_to_the_leader(tmp_path: Path, loop: str) -> None:
    config = ReplicaFetcherConfig(fetch_max_bytes=2048, backoff_ms=50)  # many rounds, several segments

    async def scenario() -> None:
        async with inprocess_cluster(
            tmp_path, (1, 2), fetcher_config=config, start_fetchers=False, **{"log.segment.bytes": "16384"}
        ) as cluster:
            topic_id = cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1,))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            proposals: list[LeaderAndIsr] = []

            async def write_isr(topic: str, index: int, proposal: LeaderAndIsr) -> LeaderAndIsr:
                proposals.append(proposal)  # ZooKeeper accepts it: the next partition epoch
                return dataclasses.replace(proposal, partition_epoch=proposal.partition_epoch + 1)

            cluster[1].broker.replicas.set_isr_writer(write_isr)
            for i in range(120):
                append(cluster, 1, *(b"v%d-%d-" % (i, j) + bytes(100) for j in range(3)))
            assert (leader.log_end_offset, follower.log_end_offset) == (360, 0)
            assert len(cluster[1].broker.logs.get(T, 0).segments) > 1  # type: ignore[union-attr]

            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            assert view.requests == 0  # added at the election, waiting for start()
            cluster[2].fetchers.start()
            # the ISR grows by an asynchronous write after the fetch that caught up: wait for both
            await until(lambda: in_sync(leader, follower) and leader.isr == {1, 2})

            assert batches(follower) == batches(leader)
            assert epochs(cluster, 2) == epochs(cluster, 1) == [(0, 0)]
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            assert view.fetch_version == 16
            assert view.requests > 360 * 130 // 2048  # it took many rounds at 2 KiB each
            (state,) = view.partitions.values()
            assert view.partitions.keys() == {TP}
            assert (state.topic_id, state.status, state.fetch_offset, state.current_leader_epoch) == (
                topic_id,
                FetchStatus.FETCHING,
                360,
                0,
            )
            assert (state.last_fetched_epoch, state.high_watermark, state.error) == (0, 360, None)
            assert cluster[1].fetchers.fetcher_for(2) is None  # the leader fetches nothing
            assert cluster[2].fetchers.leaders == [1]
            # ReplicaState carried broker 2's epoch: caught up in its current life, it joined the ISR (KIP-903)
            assert leader.follower_states()[2].broker_epoch == cluster[2].info.epoch
            assert [p.isr for p in proposals] == [(1, 2)]
            assert leader.isr == {1, 2}

    LOOPS[loop](scenario())


# -- acks=all and long polls ------------------------------------------------------------------------------


def _produce_sync(producer: confluent_kafka.Producer, value: bytes) -> tuple[str | None, int]:
    outcome: list[tuple[str | None, int]] = []

    def delivered(error: confluent_kafka.KafkaError | None, message: confluent_kafka.Message) -> None:
        outcome.append((None if error is None else str(error), message.offset() or 0))

    producer.produce(T, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0
    (result,) = outcome
    return result


def test_acks_all_is_answered_once_the_follower_fetched_and_once_the_isr_shrank_without_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), start_fetchers=False) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": f"127.0.0.1:{cluster[1].port}",
                    "acks": "all",
                    "linger.ms": 0,
                    "request.timeout.ms": 60_000,
                    "message.timeout.ms": 60_000,
                    "log_level": 0,
                }
            )
            first = asyncio.create_task(asyncio.to_thread(_produce_sync, producer, b"first"))
            await until(lambda: leader.log_end_offset == 1)  # written on the leader ...
            assert leader.high_watermark == 0  # ... and not committed: the follower has not fetched
            assert not first.done()
            async with wire_client(
                cluster
            ) as client:  # a replica's LATEST is the log end, a consumer's the HW
                assert await _list_offset(client, replica_id=2, timestamp=-1) == 1
                assert await _list_offset(client, replica_id=-1, timestamp=-1) == 0
            assert not first.done()
            cluster[2].fetchers.start()
            assert await first == (None, 0)
            assert follower.log_end_offset == 1  # the follower had it before the answer
            assert leader.high_watermark == 1

            # the follower leaves the partition's leadership (stops fetching; the ISR is the leader alone)
            cluster[2].fetchers.remove_partitions([TP])
            assert cluster[2].fetchers.fetcher_for(1) is None
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1,), partition_epoch=1, on=(1,))
            assert await asyncio.to_thread(_produce_sync, producer, b"second") == (None, 1)
            assert leader.high_watermark == 2
            assert follower.log_end_offset == 1
            assert values(leader) == [b"first", b"second"]
            await asyncio.to_thread(producer.close)  # before the brokers stop: no reconnect while they do

    asyncio.run(scenario())


def test_a_fetch_parked_at_the_leader_is_answered_by_the_next_append(tmp_path: Path) -> None:
    """With a wait of a minute, only the append can have answered the parked fetch within the test."""
    config = ReplicaFetcherConfig(wait_max_ms=60_000, backoff_ms=50)

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), fetcher_config=config) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            follower = cluster[2].partition(T)
            purgatory = cluster[1].broker.replicas.fetch_purgatory

            def parked() -> bool:
                view = cluster[2].fetchers.fetcher_for(1)
                return view is not None and view.fetch_in_flight and purgatory.delayed == 1

            await until(parked)
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            parked_request = view.requests

            async with wire_client(cluster) as client:
                request = ProduceRequest(
                    acks=1,
                    timeout_ms=10_000,
                    topic_data=[
                        ProduceRequest.TopicProduceData(
                            name=T,
                            partition_data=[
                                ProduceRequest.PartitionProduceData(index=0, records=batch(b"x"))
                            ],
                        )
                    ],
                )
                produced = await client.send(1, request, 9, expect=ProduceResponse)
                assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            await until(lambda: follower.log_end_offset == 1, limit_s=30)
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            assert view.requests <= parked_request + 1  # the parked request brought it (then one more parks)
            assert values(follower) == [b"x"]

    asyncio.run(scenario())


def test_followers_fetch_by_topic_name_when_they_know_no_topic_id_and_spread_over_fetchers(
    tmp_path: Path,
) -> None:
    """Fetch v12 (Kafka's fallback for a topic without an id) and ``num.replica.fetchers`` 3: every
    partition in one of broker 1's three fetchers, shown together."""
    config = ReplicaFetcherConfig(num_fetchers=3, backoff_ms=50)
    topics = [f"topic-{i}" for i in range(6)]
    assert len({fetcher_id(TopicPartition(topic, 0), 3) for topic in topics}) == 3

    async def scenario() -> None:
        async with inprocess_cluster(
            tmp_path, (1, 2), fetcher_config=config, start_fetchers=False
        ) as cluster:
            for topic in topics:
                cluster.create_topic(topic, (1, 2))
                cluster.elect(topic, leader=1, leader_epoch=0, isr=(1,))
                append(cluster, 1, topic.encode(), topic=topic)
                append(cluster, 1, b"again", topic=topic)
                cluster[2].broker.metadata.remove_topic(topic)  # broker 2 has not seen the topic's id yet
            cluster[2].fetchers.start()
            pairs = [(cluster[1].partition(topic), cluster[2].partition(topic)) for topic in topics]
            await until(lambda: all(in_sync(leader, follower) for leader, follower in pairs))
            for leader, follower in pairs:
                assert batches(follower) == batches(leader)
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            assert view.fetch_version == 12
            assert sorted(view.partitions) == [TopicPartition(topic, 0) for topic in topics]
            assert {state.topic_id for state in view.partitions.values()} == {None}

    asyncio.run(scenario())


# -- leader changes and truncation ------------------------------------------------------------------------


def test_an_old_leader_truncates_what_the_new_leader_never_had_and_ends_identical(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tidelog.replica_fetcher")

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            old, new = cluster[1].partition(T), cluster[2].partition(T)
            for value in (b"a0", b"a1", b"a2"):
                append(cluster, 1, value)
            await until(lambda: in_sync(old, new))

            cluster[2].fetchers.remove_partitions([TP])  # broker 2 stops fetching (cut off) ...
            append(cluster, 1, b"lost0")  # ... so the old leader alone has these
            append(cluster, 1, b"lost1")
            assert (old.log_end_offset, old.high_watermark, new.log_end_offset) == (5, 3, 3)

            # the controller moves the leadership to broker 2 at epoch 1; broker 1 learns it afterwards
            cluster.elect(T, leader=2, leader_epoch=1, isr=(2,), partition_epoch=1, on=(2,))
            append(cluster, 2, b"c0", b"c1")  # offsets 3-4 at epoch 1
            cluster.elect(T, leader=2, leader_epoch=1, isr=(2,), partition_epoch=1, on=(1,))
            assert cluster[1].fetchers.fetcher_for(2) is not None

            await until(
                lambda: old.log_end_offset == new.log_end_offset == 5 and batches(old) == batches(new)
            )
            assert values(old) == [b"a0", b"a1", b"a2", b"c0", b"c1"]
            assert epochs(cluster, 1) == epochs(cluster, 2) == [(0, 0), (1, 3)]
            assert old.end_offset_for_leader_epoch(0) == (0, 3)
            truncations = [m for m in fetcher_messages(caplog) if "diverged" in m]
            assert len(truncations) == 1
            assert "(its epoch 0 ends at 3); truncating from 5 to 3" in truncations[0]

    asyncio.run(scenario())


def test_a_follower_with_an_epoch_the_leader_never_had_truncates_in_two_rounds_kip_279(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Leader 1 has epochs 0, 1 and 3; broker 2 led epoch 2 alone and missed epoch 1. The leader's end of
    epoch 2 is its end of epoch 1, which broker 2 does not know: it truncates to its own end of epoch 0 and
    asks again (from epoch 0), then fetches the rest."""
    caplog.set_level(logging.INFO, logger="tidelog.replica_fetcher")

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            append(cluster, 1, b"a0")
            await until(lambda: in_sync(leader, follower))
            cluster[2].fetchers.remove_partitions([TP])

            cluster.elect(T, leader=1, leader_epoch=1, isr=(1,), partition_epoch=1, on=(1,))
            append(cluster, 1, b"b0")  # offset 1, epoch 1: broker 2 never sees it
            cluster.elect(T, leader=2, leader_epoch=2, isr=(2,), partition_epoch=2, on=(2,))
            append(cluster, 2, b"c0", b"c1")  # offsets 1-2, epoch 2: only broker 2 has it
            cluster.elect(T, leader=1, leader_epoch=3, isr=(1,), partition_epoch=3, on=(1,))
            append(cluster, 1, b"d0")  # offset 2, epoch 3
            assert epochs(cluster, 1) == [(0, 0), (1, 1), (3, 2)]
            assert epochs(cluster, 2) == [(0, 0), (2, 1)]

            cluster.elect(T, leader=1, leader_epoch=3, isr=(1,), partition_epoch=3, on=(2,))
            await until(lambda: in_sync(leader, follower) and batches(follower) == batches(leader))
            assert values(follower) == [b"a0", b"b0", b"d0"]
            assert epochs(cluster, 2) == [(0, 0), (1, 1), (3, 2)]
            truncations = [m for m in fetcher_messages(caplog) if "diverged" in m]
            assert len(truncations) == 1
            assert "(its epoch 1 ends at 2); truncating from 3 to 1 and asking again" in truncations[0]

    asyncio.run(scenario())


def test_delete_records_on_the_leader_moves_the_followers_log_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            for i in range(10):
                append(cluster, 1, b"%d" % i)
            await until(lambda: in_sync(leader, follower))
            assert cluster[1].broker.replicas.delete_records(T, 0, 4) == (ErrorCode.NONE, 4)
            await until(lambda: follower.log_start_offset == 4)
            assert batches(follower) == batches(leader)
            assert values(follower) == [b"%d" % i for i in range(4, 10)]

    asyncio.run(scenario())


def test_an_empty_follower_below_the_leaders_log_start_starts_over_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tidelog.replica_fetcher")

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), start_fetchers=False) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1,))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            for i in range(10):
                append(cluster, 1, b"%d" % i)
            assert cluster[1].broker.replicas.delete_records(T, 0, 6) == (ErrorCode.NONE, 6)

            async with wire_client(cluster) as client:  # what the fetcher asks: ListOffsets as a replica
                assert await _list_offset(client, replica_id=2, timestamp=-1) == 10
                assert await _list_offset(client, replica_id=2, timestamp=-2) == 6

            cluster[2].fetchers.start()
            await until(lambda: in_sync(leader, follower))
            assert follower.log_start_offset == 6
            assert batches(follower) == batches(leader)
            assert values(follower) == [b"6", b"7", b"8", b"9"]
            assert any(
                "offset 0 is out of range and broker 1's log starts at 6: starting over there" in m
                for m in fetcher_messages(caplog)
            )

    asyncio.run(scenario())


async def _list_offset(client: BrokerClient, *, replica_id: int, timestamp: int) -> int:
    request = ListOffsetsRequest(
        replica_id=replica_id,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=T,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )
    response = await client.send(1, request, 7, expect=ListOffsetsResponse)
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.NONE
    return partition.offset


def test_a_follower_whose_last_epoch_the_leader_deleted_starts_over_at_the_leaders_log_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader's end of the follower's last epoch is its log start (the epoch went with the deleted
    records), past the follower's log end: no divergence, but OFFSET_OUT_OF_RANGE at the follower's offset,
    and the follower starts over at the leader's log start without truncating by epochs."""
    caplog.set_level(logging.INFO, logger="tidelog.replica_fetcher")

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            for i in range(4):
                append(cluster, 1, b"%d" % i)
            await until(lambda: in_sync(leader, follower))

            cluster[2].fetchers.remove_partitions([TP])  # broker 2 goes away
            cluster.elect(T, leader=1, leader_epoch=1, isr=(1,), partition_epoch=1, on=(1,))
            for i in range(4, 10):
                append(cluster, 1, b"%d" % i)  # offsets 4-9 at epoch 1
            assert cluster[1].broker.replicas.delete_records(T, 0, 6) == (ErrorCode.NONE, 6)
            assert epochs(cluster, 1) == [(1, 6)]  # epoch 0 is gone with its records
            assert follower.latest_epoch == 0

            cluster.elect(
                T, leader=1, leader_epoch=1, isr=(1,), partition_epoch=1, on=(2,)
            )  # broker 2 returns
            await until(lambda: in_sync(leader, follower))
            assert follower.log_start_offset == 6
            assert batches(follower) == batches(leader)
            assert epochs(cluster, 2) == [(1, 6)]
            messages = fetcher_messages(caplog)
            assert any("offset 4 is out of range and broker 1's log starts at 6" in m for m in messages)
            assert not any("diverged" in m for m in messages)

    asyncio.run(scenario())


def test_a_follower_fetch_whose_last_epoch_the_leader_cannot_place_is_offset_out_of_range(
    tmp_path: Path,
) -> None:
    """Kafka's rule (Partition.readRecords): a leader that knows no end for the follower's LastFetchedEpoch
    answers OFFSET_OUT_OF_RANGE, not a DivergingEpoch of -1 (which a follower reads as no divergence)."""

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), start_fetchers=False) as cluster:
            topic_id = cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=1, isr=(1, 2))
            append(cluster, 1, b"a")
            request = FetchRequest(
                replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=cluster[2].info.epoch),
                max_wait_ms=0,
                min_bytes=1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic_id=topic_id,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=0,
                                current_leader_epoch=1,
                                fetch_offset=0,
                                last_fetched_epoch=5,  # above every epoch the leader has
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
            )
            async with wire_client(cluster) as client:
                response = await client.send(1, request, 16, expect=FetchResponse)
            (answer,) = response.responses[0].partitions
            assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (-1, -1)
            assert not answer.records

    asyncio.run(scenario())


def test_a_fenced_partition_waits_for_its_next_state(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            append(cluster, 1, b"a0")
            await until(lambda: in_sync(leader, follower))

            cluster.elect(
                T, leader=1, leader_epoch=1, isr=(1, 2), partition_epoch=1, on=(1,)
            )  # the leader first

            def fenced() -> bool:
                view = cluster[2].fetchers.fetcher_for(1)
                assert view is not None
                return view.partitions[TP].status is FetchStatus.FAILED

            await until(fenced)
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            state = view.partitions[TP]
            assert (state.error, state.current_leader_epoch, state.fetch_offset) == (
                "FENCED_LEADER_EPOCH",
                0,
                1,
            )
            append(cluster, 1, b"a1")  # epoch 1

            cluster.elect(
                T, leader=1, leader_epoch=1, isr=(1, 2), partition_epoch=1, on=(2,)
            )  # then the follower
            await until(lambda: in_sync(leader, follower))
            view = cluster[2].fetchers.fetcher_for(1)
            assert view is not None
            state = view.partitions[TP]
            assert (state.status, state.current_leader_epoch, state.error) == (FetchStatus.FETCHING, 1, None)
            assert batches(follower) == batches(leader)
            assert epochs(cluster, 2) == [(0, 0), (1, 1)]

    asyncio.run(scenario())


def test_a_corrupt_batch_from_the_leader_delays_its_partition_only_until_it_reads_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), start_fetchers=False) as cluster:
            for topic in (T, "u"):
                cluster.create_topic(topic, (1, 2))
                cluster.elect(topic, leader=1, leader_epoch=0, isr=(1,))
            for value in (b"u0", b"u1", b"u2"):
                append(cluster, 1, value, topic="u")
            append(cluster, 1, b"t0")
            segment = cluster[1].broker.logs.get("u", 0).segments[0].log_path  # type: ignore[union-attr]
            position, header = list(iter_batch_headers(segment.read_bytes()))[1]
            assert header.base_offset == 1
            flip = position + RECORD_BATCH_HEADER_SIZE + 1  # bit rot in u's second batch: only its CRC tells
            _flip_bit(segment, flip)

            cluster[2].fetchers.start()
            t_leader, t_follower = cluster[1].partition(T), cluster[2].partition(T)
            u_leader, u_follower = cluster[1].partition("u"), cluster[2].partition("u")

            def u_rejected() -> bool:
                view = cluster[2].fetchers.partition_view(TopicPartition("u", 0))
                return view is not None and (view.error or "").startswith("CorruptRecordError")

            await until(lambda: in_sync(t_leader, t_follower) and u_rejected())
            assert u_follower.log_end_offset == 0  # nothing of a response partition's batches if one is bad
            append(cluster, 1, b"t1")
            await until(lambda: t_follower.log_end_offset == 2)  # t carries on meanwhile
            assert u_rejected()

            _flip_bit(segment, flip)  # the leader's file reads whole again
            await until(lambda: in_sync(u_leader, u_follower))
            assert batches(u_follower) == batches(u_leader)
            assert values(t_follower) == [b"t0", b"t1"]
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert errors
            assert all("u-0: the leader's batches at offset 0 cannot be appended" in m for m in errors)

    asyncio.run(scenario())


def _flip_bit(path: Path, position: int) -> None:
    with path.open("r+b") as file:
        file.seek(position)
        byte = file.read(1)[0]
        file.seek(position)
        file.write(bytes([byte ^ 0x01]))


def test_a_deleted_follower_replica_leaves_its_fetcher_and_is_never_written(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            append(cluster, 1, b"a0")
            await until(lambda: in_sync(leader, follower))
            purgatory = cluster[1].broker.replicas.fetch_purgatory
            await until(lambda: purgatory.delayed == 1)

            cluster[2].broker.replicas.delete(T, 0)  # the topic is deleted on broker 2 (no leadership change)
            append(cluster, 1, b"a1")  # answers the parked fetch with data for the deleted replica
            await until(lambda: cluster[2].fetchers.fetcher_for(1) is None)
            assert cluster[2].broker.replicas.get(T, 0) is None
            assert follower.log_end_offset == 1
            assert cluster[2].fetchers.leaders == []

    asyncio.run(scenario())


def test_remove_all_then_resync_takes_back_followers_whose_state_did_not_change(tmp_path: Path) -> None:
    """As for a broker whose ZooKeeper session expired: its fetchers stop; the state applied again is the
    same (no leadership change is announced), so resync brings the followers back."""

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2)) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)
            append(cluster, 1, b"a0")
            await until(lambda: in_sync(leader, follower))
            fetchers = cluster[2].fetchers

            fetchers.remove_all()
            assert fetchers.leaders == []
            append(cluster, 1, b"a1")
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2), on=(2,))  # the same state again
            assert fetchers.leaders == []
            fetchers.resync()
            assert fetchers.leaders == [1]
            await until(lambda: in_sync(leader, follower))
            assert values(follower) == [b"a0", b"a1"]

            cluster.elect(T, leader=2, leader_epoch=1, isr=(2,), partition_epoch=1, on=(2,))
            fetchers.resync()  # a leader is fetched by nobody
            assert fetchers.leaders == []

    asyncio.run(scenario())


# -- a dead leader ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_followers_of_a_stopped_leader_back_off_and_resume_from_the_new_leader(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, loop: str
) -> None:
    caplog.set_level(logging.INFO, logger="tidelog.replica_fetcher")

    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2, 3)) as cluster:
            cluster.create_topic(T, (1, 2, 3))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2, 3))
            first, second, third = (cluster[n].partition(T) for n in (1, 2, 3))
            for value in (b"a0", b"a1", b"a2"):
                append(cluster, 1, value)
            await until(lambda: in_sync(first, second) and in_sync(first, third))
            purgatory = cluster[1].broker.replicas.fetch_purgatory
            await until(lambda: purgatory.delayed == 2)  # both followers' fetches are parked at the leader

            await cluster.stop(1)
            for node_id in (2, 3):
                view = cluster[node_id].fetchers.fetcher_for(1)
                assert view is not None
                before = view.requests

                def retried(node_id: int = node_id, before: int = before) -> bool:
                    view = cluster[node_id].fetchers.fetcher_for(1)
                    assert view is not None  # the fetcher carries on
                    state = view.partitions[TP]
                    return view.requests >= before + 3 and (state.error or "").startswith(
                        "leader unreachable"
                    )

                await until(retried)

            cluster.elect(T, leader=2, leader_epoch=1, isr=(2, 3), partition_epoch=1)  # on 2 and 3
            assert cluster[3].fetchers.leaders == [2]
            assert cluster[2].fetchers.leaders == []
            append(cluster, 2, b"b0", b"b1")
            await until(lambda: in_sync(second, third))
            assert batches(third) == batches(second)
            assert values(third) == [b"a0", b"a1", b"a2", b"b0", b"b1"]
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]

    LOOPS[loop](scenario())


# -- transactions -----------------------------------------------------------------------------------------


def _transactions_sync(bootstrap: str) -> None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"txn-{uuid.uuid4()}",
            "linger.ms": 0,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    for outcome, sent in (("commit", [b"c0", b"c1", b"c2"]), ("abort", [b"x0", b"x1"]), ("commit", [b"c3"])):
        producer.begin_transaction()
        for value in sent:
            producer.produce(T, value=value, partition=0)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    producer.close()


def read_committed(partition: Partition) -> list[bytes | None]:
    """What a read_committed consumer of ``partition`` gets, through the Partition API: the records below
    the last stable offset, without control batches and without the aborted transactions' records."""
    lso = partition.last_stable_offset
    start = partition.log_start_offset
    data = partition.read(
        start, 1 << 30, isolation=FetchIsolation.TXN_COMMITTED, min_one_batch=True
    ).read_bytes()
    aborted = dict(partition.aborted_transactions(start, lso))
    out: list[bytes | None] = []
    position = 0
    while position < len(data):
        header, records = decode_batch(data, position)
        position += header.size_in_bytes
        if header.is_control:
            if (
                header.producer_id in aborted
                and decode_control_record(records[0])[0] is ControlRecordType.ABORT
            ):
                del aborted[header.producer_id]  # the aborted transaction ends here
            continue
        first = aborted.get(header.producer_id)
        if header.is_transactional and first is not None and first <= header.base_offset:
            continue
        out += [record.value for record in records]
    return out


def test_transaction_markers_replicate_and_a_read_committed_read_of_the_follower_sees_the_commits(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with inprocess_cluster(tmp_path, (1, 2), transaction_coordinator=1) as cluster:
            cluster.create_topic(T, (1, 2))
            cluster.elect(T, leader=1, leader_epoch=0, isr=(1, 2))
            # the client talks to broker 1 only: it is the only broker it learns of (and its coordinator)
            cluster[1].broker.metadata.set_brokers([cluster[1].info])
            leader, follower = cluster[1].partition(T), cluster[2].partition(T)

            await asyncio.to_thread(_transactions_sync, f"127.0.0.1:{cluster[1].port}")
            await until(lambda: in_sync(leader, follower))

            assert batches(follower) == batches(leader)
            markers = []
            for raw in batches(follower):
                header, records = decode_batch(raw)
                if header.is_control:
                    markers.append(decode_control_record(records[0])[0])
            assert markers == [ControlRecordType.COMMIT, ControlRecordType.ABORT, ControlRecordType.COMMIT]
            assert follower.last_stable_offset == follower.high_watermark == follower.log_end_offset
            assert read_committed(follower) == [b"c0", b"c1", b"c2", b"c3"]
            assert read_committed(leader) == read_committed(follower)
            assert values(follower) == [b"c0", b"c1", b"c2", b"x0", b"x1", b"c3"]

    asyncio.run(scenario())
