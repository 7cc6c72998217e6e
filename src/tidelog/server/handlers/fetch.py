"""Fetch (key 1): record data served from the segment files, with long polling.

Invariants:
- Consumers read only below the high watermark (or the last stable offset under read_committed). Every
  answer carries the partition's last stable offset; a read_committed one also the aborted transactions
  overlapping the returned batches (Kafka's rule: marker at or after the fetch offset, first offset before
  the end of the data), so the client drops their records; read_uncommitted gets null there.
- Record bytes are never pulled into Python: each partition's data is a list of file regions that the
  connection writes with ``os.sendfile``.
- ``partition_max_bytes`` bounds each partition and ``max_bytes`` (v3+) the whole response, except that the
  first batch of the first partition with data is always sent whole so a consumer can make progress
  (KIP-74).
- If fewer than ``min_bytes`` are available and ``max_wait_ms`` > 0, the fetch waits in the purgatory,
  watching its partitions, and completes as soon as an append brings enough data or the wait expires;
  either way the response is built from a fresh read at completion.
- Fetch sessions (KIP-227) are declined: the answer's ``session_id`` is 0, and clients keep sending full
  requests.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.replication.partition import FetchIsolation
from tidelog.server.dispatch import RequestContext
from tidelog.server.fetch_purgatory import FetchPurgatory
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.regions import RegionList
from tidelog.server.replica_manager import ReplicaManager

__all__ = ["FetchHandler"]

_READ_COMMITTED = 1
_EMPTY = b""
_ZERO_UUID = uuid.UUID(int=0)
_PartitionData = FetchResponse.PartitionData


@dataclass(slots=True)
class _Wanted:
    name: str | None
    topic_id: uuid.UUID
    partitions: list[FetchRequest.FetchPartition]


class FetchHandler:
    """Fetch: reads through the replica manager's partitions, long polls in the fetch purgatory."""

    def __init__(self, replicas: ReplicaManager, metadata: MetadataCache, purgatory: FetchPurgatory) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._purgatory = purgatory

    def handle(self, ctx: RequestContext, request: FetchRequest) -> Any:
        version = ctx.api_version
        wanted: list[_Wanted] = []
        for topic in request.topics:
            if version >= 13:
                wanted.append(
                    _Wanted(self._metadata.topic_name(topic.topic_id), topic.topic_id, topic.partitions)
                )
            else:
                meta = self._metadata.topic(topic.topic)
                wanted.append(_Wanted(topic.topic, meta.topic_id if meta else _ZERO_UUID, topic.partitions))
        committed = version >= 4 and request.isolation_level == _READ_COMMITTED
        isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
        max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF

        def build() -> tuple[FetchResponse, int, bool]:
            return self._read(wanted, version, isolation, max(max_bytes, 0))

        response, nbytes, has_error = build()
        if request.max_wait_ms <= 0 or nbytes >= request.min_bytes or has_error or not wanted:
            return response
        keys = [(w.name, p.partition) for w in wanted if w.name is not None for p in w.partitions]
        min_bytes = request.min_bytes

        def enough() -> bool:
            _, available, error = build()
            return available >= min_bytes or error

        return self._purgatory.delay(keys, request.max_wait_ms, enough, lambda: build()[0])

    def _read(
        self, wanted: list[_Wanted], version: int, isolation: FetchIsolation, max_bytes: int
    ) -> tuple[FetchResponse, int, bool]:
        committed = isolation is FetchIsolation.TXN_COMMITTED
        response = FetchResponse(error_code=ErrorCode.NONE, session_id=0)
        total = 0
        has_error = False
        for topic in wanted:
            results = []
            for p in topic.partitions:
                result = _PartitionData(
                    partition_index=p.partition,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    records=_EMPTY,
                )
                results.append(result)
                if topic.name is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                    has_error = True
                    continue
                partition = self._replicas.leader_partition(topic.name, p.partition)
                if isinstance(partition, ErrorCode):
                    result.error_code = partition
                    has_error = True
                    continue
                fenced = partition.check_leader_epoch(p.current_leader_epoch if version >= 9 else -1)
                if fenced is not ErrorCode.NONE:
                    result.error_code = fenced
                    has_error = True
                    continue
                result.high_watermark = partition.high_watermark
                result.last_stable_offset = partition.last_stable_offset
                result.log_start_offset = partition.log_start_offset
                if committed:
                    result.aborted_transactions = []
                limit = min(p.partition_max_bytes, max_bytes - total)
                if limit <= 0 and total > 0:
                    continue
                try:
                    data = partition.read(
                        p.fetch_offset, max(limit, 0), isolation=isolation, min_one_batch=total == 0
                    )
                except KafkaProtocolError as exc:
                    result.error_code = exc.error_code
                    has_error = True
                    continue
                regions = data.regions
                if regions:
                    records = regions[0] if len(regions) == 1 else RegionList(list(regions))
                    result.records = records
                    total += records.nbytes
                    if committed:
                        result.aborted_transactions = [
                            FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                            for pid, first in partition.aborted_transactions(p.fetch_offset, data.next_offset)
                        ]
            response.responses.append(
                FetchResponse.FetchableTopicResponse(
                    topic=topic.name or "", topic_id=topic.topic_id, partitions=results
                )
            )
        return response, total, has_error
