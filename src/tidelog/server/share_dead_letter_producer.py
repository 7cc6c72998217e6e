"""Appends share groups' dead-letter copies to a dead-letter partition wherever its leader is, and reads
that partition's tail back (the writer's crash recovery, :mod:`tidelog.server.share_dead_letter`).

In a cluster the leader of a share-partition (which writes the copies) is often not the leader of the
dead-letter partition they go to: the copies are then produced to that leader over the inter-broker
:class:`~tidelog.server.cluster.broker_client.BrokerClient`, as a client would.

Invariants:

- An append resolves True only once the copies are committed: acks=all in a cluster (the dead-letter
  partition's high watermark passed them, on this broker through the produce purgatory, elsewhere by the
  leader's answer), the local append on a single node. Only then may the writer archive the records.
- The copies are idempotent batches of one producer id per broker process (from the broker's producer-id
  source), with one sequence per dead-letter partition, and appends to one dead-letter partition are
  serialised. A batch whose outcome is unknown (no answer, a timeout, a leader change or an ISR shrink after
  the append) is retried with the same sequence, so a leader that has it answers with its first offsets
  (a duplicate) instead of writing it twice, on any broker that took over its leadership too (followers
  rebuild the producer state from the batches).
- An append that gives up with its outcome still unknown returns None: the producer id is dropped (the next
  batch starts a new one at sequence 0, so a late first copy can never put a later batch out of sequence)
  and the writer must read the tail again before it copies those records (they may be there).
- A definite refusal (the batch too large, the topic gone, authorization) returns its error code; nothing
  was written and the sequence is not used up.
- :meth:`DeadLetterProducer.tail` reads the committed records at the end of the partition, up to its high
  watermark: what acks=all appends made visible.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from tidelog.protocol.records import Record, SimpleRecord, encode_batch
from tidelog.protocol.records_codec import decode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD, RECORD_BATCH_HEADER_SIZE, read_batch_header
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.clock import Clock
from tidelog.server.cluster.broker_client import BrokerClient, BrokerClientError
from tidelog.server.metadata_cache import NO_LEADER, MetadataCache
from tidelog.server.produce_purgatory import PendingAppend
from tidelog.server.producer_id_manager import ProducerIds
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["DeadLetterProducer", "records_in"]

log = logging.getLogger(__name__)

_PRODUCE_VERSION = 9
_FETCH_VERSION = 12  # topic names, not ids
_LIST_OFFSETS_VERSION = 7
_READ_BYTES = 1 << 20
_EARLIEST, _LATEST = -2, -1

UNKNOWN_OUTCOME = frozenset(
    {
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
"""Answers after which the same batch is sent again (some of them mean it was not written at all, which a
retry with the same sequence handles too)."""

RESTART_SEQUENCE = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
"""The leader lost this producer's state (e.g. it expired): the batch is sent again under a new id."""


@dataclass(slots=True)
class _Sequences:
    producer_id: int = -1
    next: dict[tuple[str, int], int] = field(default_factory=dict)


class DeadLetterProducer:
    """This broker's writer and reader of dead-letter partitions, local or at another broker."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        clock: Clock,
        producer_ids: ProducerIds | None = None,
        client: BrokerClient | None = None,
        timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._clock = clock
        self.producer_ids = producer_ids
        """Where the copies' producer id comes from; None: plain batches (no deduplication of a retried
        batch, only the writer's tail check)."""
        self.client = client
        """The inter-broker client (set in a cluster); None: only partitions this broker leads are written."""
        self._timeout_ms = timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._sequences = _Sequences()
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}

    # -- appends -----------------------------------------------------------------------------------------

    async def append(self, topic: str, index: int, records: list[SimpleRecord]) -> ErrorCode | None:
        """Append ``records`` as one batch to ``topic-index``: NONE once committed, a definite error
        (nothing written), or None when the outcome is still unknown at the deadline (see the module)."""
        lock = self._locks.setdefault((topic, index), asyncio.Lock())
        async with lock:
            return await self._append_locked(topic, index, records)

    async def _append_locked(self, topic: str, index: int, records: list[SimpleRecord]) -> ErrorCode | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_ms / 1000
        key = (topic, index)
        producer_id = self._producer_id()
        if producer_id is None and self.producer_ids is not None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # no id to be had yet: nothing sent
        sequence = self._sequences.next.get(key, 0)
        batch = self._batch(records, producer_id, sequence)
        unknown = False  # a send of this batch may have been written
        last = ErrorCode.REQUEST_TIMED_OUT
        while loop.time() < deadline:
            error = await self._send(topic, index, batch, deadline)
            if error is None or error in UNKNOWN_OUTCOME:
                unknown = unknown or error is None or error not in _NOT_WRITTEN
                last = error if error is not None else ErrorCode.NETWORK_EXCEPTION
                await asyncio.sleep(min(self._retry_backoff_ms / 1000, max(0.0, deadline - loop.time())))
                continue
            if error in RESTART_SEQUENCE:
                self._new_producer_id()
                producer_id = self._producer_id()
                if producer_id is None:
                    return None if unknown else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                sequence = 0
                batch = self._batch(records, producer_id, sequence)
                continue
            if error is ErrorCode.NONE:
                self._sequences.next[key] = (sequence + len(records)) & 0x7FFFFFFF
                return ErrorCode.NONE
            return error  # definite: not written, the sequence unused
        log.warning(
            "dead-letter copies to %s-%d: no definite answer within %d ms (last: %s)",
            topic,
            index,
            self._timeout_ms,
            last.name,
        )
        if unknown:
            self._new_producer_id()
            return None
        return last

    async def _send(self, topic: str, index: int, batch: bytes, deadline: float) -> ErrorCode | None:
        """One attempt: the partition's answer, None when no answer came (disconnected, timed out)."""
        remaining_ms = max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
        partition = self._replicas.leader_partition(topic, index)
        if not isinstance(partition, ErrorCode):
            return await self._append_here(partition, topic, index, batch, remaining_ms)
        leader = self._leader(topic, index)
        if leader is None or leader == self._metadata.node_id or self.client is None:
            return ErrorCode.LEADER_NOT_AVAILABLE  # not appended anywhere: retried until the deadline
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=remaining_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[ProduceRequest.PartitionProduceData(index=index, records=batch)],
                )
            ],
        )
        try:
            response = await self.client.send(
                leader, request, _PRODUCE_VERSION, timeout_ms=remaining_ms, expect=ProduceResponse
            )
        except (BrokerClientError, OSError) as exc:
            log.debug("dead-letter produce to broker %d for %s-%d: %s", leader, topic, index, exc)
            return None
        for topic_response in response.responses:
            for result in topic_response.partition_responses:
                if topic_response.name == topic and result.index == index:
                    return _error(result.error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def _append_here(
        self, partition: Partition, topic: str, index: int, batch: bytes, timeout_ms: int
    ) -> ErrorCode:
        del partition  # the replica manager looks it up again under its own checks
        acks = -1 if self._replicas.cluster_mode else 1
        error, info, _message = self._replicas.append(
            topic,
            index,
            batch,
            now_ms=self._clock.now_ms(),
            origin=AppendOrigin.CLIENT,
            required_acks=acks,
        )
        if error is not ErrorCode.NONE or info is None or acks != -1:
            return error
        status = _Status()
        waiting = self._replicas.produce_purgatory.delay(
            timeout_ms, [PendingAppend(topic, index, info.last_offset + 1, status)], status
        )
        if isinstance(waiting, asyncio.Future):
            await waiting
        return _error(status.error_code)

    # -- the tail ----------------------------------------------------------------------------------------

    async def tail(self, topic: str, index: int, count: int) -> list[Record] | None:
        """The last ``count`` committed records of ``topic-index`` (fewer if it holds fewer); None when its
        leader cannot be read now."""
        partition = self._replicas.leader_partition(topic, index)
        if not isinstance(partition, ErrorCode):
            end = partition.high_watermark
            start = max(partition.log_start_offset, end - count)
            return list(read_local(partition, start, end))
        leader = self._leader(topic, index)
        if leader is None or self.client is None or leader == self._metadata.node_id:
            return None
        try:
            return await self._tail_at(leader, topic, index, count)
        except (BrokerClientError, OSError) as exc:
            log.debug("reading the tail of %s-%d at broker %d: %s", topic, index, leader, exc)
            return None

    async def _tail_at(self, leader: int, topic: str, index: int, count: int) -> list[Record] | None:
        assert self.client is not None
        earliest = await self._list_offset(leader, topic, index, _EARLIEST)
        end = await self._list_offset(leader, topic, index, _LATEST)
        if earliest is None or end is None:
            return None
        offset = max(earliest, end - count)
        out: list[Record] = []
        while offset < end:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=_READ_BYTES,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=index, fetch_offset=offset, partition_max_bytes=_READ_BYTES
                            )
                        ],
                    )
                ],
            )
            response = await self.client.send(
                leader, request, _FETCH_VERSION, timeout_ms=self._timeout_ms, expect=FetchResponse
            )
            data = _fetched(response, topic, index)
            if data is None or data.error_code != ErrorCode.NONE:
                return None
            records = data.records
            if records is not None and not isinstance(records, bytes | bytearray | memoryview):
                return None  # a decoded response holds bytes; a file region is only ever sent
            raw = bytes(records or b"")
            got = list(records_in(raw, offset, end))
            if not got:
                return None if not raw else out  # nothing decodable at the offset: a gap, stop here
            out.extend(got)
            offset = got[-1].offset + 1
        return out

    async def _list_offset(self, leader: int, topic: str, index: int, timestamp: int) -> int | None:
        assert self.client is not None
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(partition_index=index, timestamp=timestamp)
                    ],
                )
            ],
        )
        response = await self.client.send(
            leader, request, _LIST_OFFSETS_VERSION, timeout_ms=self._timeout_ms, expect=ListOffsetsResponse
        )
        for topic_response in response.topics:
            for p in topic_response.partitions:
                if topic_response.name == topic and p.partition_index == index:
                    return int(p.offset) if p.error_code == ErrorCode.NONE else None
        return None

    # -- helpers -----------------------------------------------------------------------------------------

    def _leader(self, topic: str, index: int) -> int | None:
        info = self._metadata.topic(topic)
        if info is None or index >= info.num_partitions:
            return None
        leader = info.partitions[index].leader
        return None if leader == NO_LEADER else leader

    @staticmethod
    def _batch(records: list[SimpleRecord], producer_id: int | None, sequence: int) -> bytes:
        if producer_id is None:
            return encode_batch(records)
        return encode_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)

    def _producer_id(self) -> int | None:
        if self._sequences.producer_id < 0:
            if self.producer_ids is None:
                return None
            try:
                self._sequences = _Sequences(self.producer_ids.generate_producer_id())
            except OSError as exc:  # not ready (loading), or the id block cannot be reserved
                log.debug("no producer id for dead-letter copies yet: %s", exc)
                return None
        return self._sequences.producer_id

    def _new_producer_id(self) -> None:
        self._sequences = _Sequences()


_NOT_WRITTEN = frozenset(
    {
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
"""Retriable answers that say the batch was not appended (NOT_LEADER_OR_FOLLOWER is not one: it is also the
answer of a delayed acks=all produce whose leader moved after the append)."""


@dataclass(slots=True)
class _Status:
    error_code: int = 0


def _error(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _fetched(response: FetchResponse, topic: str, index: int) -> FetchResponse.PartitionData | None:
    for topic_response in response.responses:
        if topic_response.topic == topic:
            for data in topic_response.partitions:
                if data.partition_index == index:
                    return data
    return None


def records_in(raw: bytes, first: int, upto: int) -> Iterator[Record]:
    """The data records at ``first .. upto - 1`` in ``raw`` (whole batches; a torn last batch is left out)."""
    pos = 0
    while pos + RECORD_BATCH_HEADER_SIZE <= len(raw):
        header = read_batch_header(raw, pos)
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > len(raw):
            break
        if not header.is_control:
            _, records = decode_batch(raw, pos)
            for record in records:
                if first <= record.offset < upto:
                    yield record
        pos += size


def read_local(
    partition: Partition, first: int, upto: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
) -> Iterator[Record]:
    """The records of a partition this broker holds at ``first .. upto - 1`` (what its log still has)."""
    offset = first
    while offset < upto:
        try:
            data = partition.read(offset, _READ_BYTES, isolation=isolation, min_one_batch=True)
        except KafkaProtocolError:
            return
        if not data.regions or data.next_offset <= offset:
            return
        yield from records_in(data.read_bytes(), first, upto)
        offset = data.next_offset
