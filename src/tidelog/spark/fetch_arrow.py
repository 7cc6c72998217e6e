"""The Arrow read path (``arrowDecode=true``): one offset range fetched as raw record batches over
tidelog's own wire client and decoded straight into Arrow columns, never a Python object per record.

Invariants:

- Same rows, order and errors as :func:`tidelog.spark.fetch.read_range` (the librdkafka path): every
  record with ``from_offset <= offset < until_offset`` once, in offset order, as Arrow batches of
  :func:`tidelog.spark.schema.arrow_schema` (at most ``kafka.max.poll.records`` rows each when set);
  control records and, with ``read_committed``, aborted transactions' records are left out
  (:func:`tidelog.protocol.records_columns.decode_columns`); the read ends once the fetch position
  (one past the last whole batch read, control and aborted ones included) reaches ``until_offset``.
- An OFFSET_OUT_OF_RANGE answer is data loss decided by
  :func:`~tidelog.spark.offsets.resume_after_out_of_range` against the log's start and end offsets
  (asked with ListOffsets), as in the librdkafka path. Retriable errors (leader moved, broker restarting,
  a lost connection) look the leader up again and retry; no record for ``kafkaConsumer.pollTimeoutMs``
  while offsets are still owed raises :class:`~tidelog.spark.fetch.FetchTimeoutError`.
- One Fetch in flight per task, at most ``max.partition.fetch.bytes`` (8 MB unless set) per answer: the
  buffers held outside Spark's memory are one answer and its decoded batch. Connections are kept per
  Python worker (:data:`_CONNECTIONS`, keyed by broker address and security settings) across tasks; one
  that failed is closed and dropped.
- Connections speak the ``security.protocol`` / ``sasl.*`` / ``ssl.*`` settings tidelog's wire client
  supports (:class:`~tidelog.client.security.WireSecurity`); for one it does not (GSSAPI, OAUTHBEARER),
  :func:`read_range_arrow` hands the read to the librdkafka path, with one warning per worker. Of the
  other ``kafka.*`` client settings only ``fetch.max.bytes`` and ``max.partition.fetch.bytes`` (and
  ``max.poll.records``, via the options) apply; librdkafka's own tuning keys do not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa

from tidelog.client.security import WireSecurity
from tidelog.client.wire import WireClient, WireError
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
)
from tidelog.protocol.records_columns import ColumnRecords, decode_columns
from tidelog.spark.fetch import DataLossError, FetchTimeoutError, read_range
from tidelog.spark.offsets import OffsetRange, resume_after_out_of_range
from tidelog.spark.options import ReaderOptions
from tidelog.spark.schema import HEADERS_TYPE, TIMESTAMP_TYPE, arrow_schema

__all__ = ["columns_to_batch", "read_range_arrow"]

log = logging.getLogger("tidelog.spark")

_FETCH_VERSION = 12  # the newest Fetch that names topics (13+ name them by id)
_MAX_WAIT_MS = 500
_PARTITION_FETCH_BYTES = 8 * 1024 * 1024
_FETCH_MAX_BYTES = 16 * 1024 * 1024
_RETRY_BACKOFF_S = 0.1
_EARLIEST, _LATEST = -2, -1

_CONNECTIONS: dict[tuple[str, str], WireClient] = {}
_warned_fallback = False


def _security_key(config: dict[str, str | bool | int]) -> str:
    return repr(
        sorted((k, str(v)) for k, v in config.items() if k.startswith(("security.", "sasl.", "ssl.")))
    )


class _Link:
    """The connection to one partition's leader, looked up again after an error."""

    def __init__(self, options: ReaderOptions, topic: str, partition: int) -> None:
        self.options = options
        self.topic = topic
        self.partition = partition
        self.config = options.consumer_config("executor")
        self.security = WireSecurity.from_settings(self.config)
        self.key = _security_key(self.config)
        self.client: WireClient | None = None

    def _connect(self, address: str) -> WireClient:
        cached = _CONNECTIONS.get((address, self.key))
        if cached is not None:
            return cached
        host, _, port = address.rpartition(":")
        client = WireClient(
            host.strip("[]") or "127.0.0.1",
            int(port),
            timeout=max(30.0, self.options.poll_timeout_ms / 1000),
            client_id="tidelog-spark",
            sasl=self.security.sasl,
            tls=self.security.tls,
        )
        _CONNECTIONS[(address, self.key)] = client
        return client

    def drop(self) -> None:
        if self.client is not None:
            for key, client in list(_CONNECTIONS.items()):
                if client is self.client:
                    del _CONNECTIONS[key]
            self.client.close()
            self.client = None

    def leader(self) -> WireClient:
        if self.client is not None:
            return self.client
        errors = []
        for address in self.options.bootstrap_servers.split(","):
            try:
                bootstrap = self._connect(address.strip())
                metadata = bootstrap.call(
                    MetadataRequest(
                        topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)],
                        allow_auto_topic_creation=False,
                    ),
                    min(bootstrap.version_for(MetadataRequest), 12),
                    expect=MetadataResponse,
                )
            except WireError as exc:
                errors.append(str(exc))
                for key, client in list(_CONNECTIONS.items()):
                    if key[0] == address.strip():
                        client.close()
                        del _CONNECTIONS[key]
                continue
            brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
            for topic in metadata.topics:
                for p in topic.partitions:
                    if (
                        topic.name == self.topic
                        and p.partition_index == self.partition
                        and p.leader_id in brokers
                    ):
                        self.client = self._connect(brokers[p.leader_id])
                        return self.client
            raise WireError(f"{self.topic}:{self.partition} has no leader in the metadata")
        raise WireError(errors[-1] if errors else "no bootstrap server")

    def fetch(self, offset: int) -> FetchResponse.PartitionData:
        client = self.leader()
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=int(self.config.get("fetch.max.bytes", _FETCH_MAX_BYTES)),
            isolation_level=1 if self.options.read_committed else 0,
            topics=[
                FetchRequest.FetchTopic(
                    topic=self.topic,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=self.partition,
                            fetch_offset=offset,
                            partition_max_bytes=int(
                                self.config.get("max.partition.fetch.bytes", _PARTITION_FETCH_BYTES)
                            ),
                        )
                    ],
                )
            ],
        )
        response = client.call(
            request, min(client.version_for(FetchRequest), _FETCH_VERSION), expect=FetchResponse
        )
        if response.error_code:
            return FetchResponse.PartitionData(partition_index=self.partition, error_code=response.error_code)
        return response.responses[0].partitions[0]

    def offset_bounds(self) -> tuple[int, int]:
        """(earliest, latest) offsets of the partition now."""
        client = self.leader()
        found = []
        for timestamp in (_EARLIEST, _LATEST):
            response = client.call(
                ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=1 if self.options.read_committed else 0,
                    topics=[
                        ListOffsetsRequest.ListOffsetsTopic(
                            name=self.topic,
                            partitions=[
                                ListOffsetsRequest.ListOffsetsPartition(
                                    partition_index=self.partition, timestamp=timestamp
                                )
                            ],
                        )
                    ],
                ),
                expect=ListOffsetsResponse,
            )
            answer = response.topics[0].partitions[0]
            if answer.error_code:
                raise WireError(
                    f"ListOffsets of {self.topic}:{self.partition}: {ErrorCode.of(answer.error_code).name}"
                )
            found.append(answer.offset)
        return found[0], found[1]


def columns_to_batch(
    records: ColumnRecords, topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """Decoded records of one partition -> one Arrow batch of the source's schema."""
    n = len(records)
    columns = [
        records.keys,
        records.values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(records.offsets, type=pa.int64()),
        pa.array(records.timestamps * 1000, type=pa.int64()).cast(TIMESTAMP_TYPE),
        pa.array(records.timestamp_types, type=pa.int32()),
    ]
    if include_headers:
        assert records.headers is not None
        columns.append(
            pa.array(
                [None if h is None else [{"key": k, "value": v} for k, v in h] for h in records.headers],
                type=HEADERS_TYPE,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _data_loss(options: ReaderOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost because it is no longer available in the broker "
            "(deleted by retention, or the topic was deleted). Set failOnDataLoss=false to skip it."
        )


def read_range_arrow(options: ReaderOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Every record of ``offset_range`` as Arrow batches (see the module invariants)."""
    global _warned_fallback
    topic, partition = offset_range.topic, offset_range.partition
    start, until = offset_range.from_offset, offset_range.until_offset
    if start >= until:
        return
    try:
        link = _Link(options, topic, partition)
    except WireError as exc:
        if not _warned_fallback:
            _warned_fallback = True
            log.warning("arrowDecode: %s; reading with librdkafka instead", exc)
        yield from read_range(options, offset_range)
        return
    position = start
    timeout_s = options.poll_timeout_ms / 1000
    last_progress = time.monotonic()
    rows_per_batch = options.max_poll_records
    try:
        while position < until:
            if time.monotonic() - last_progress > timeout_s:
                raise FetchTimeoutError(
                    f"{topic}:{partition}: nothing received for {options.poll_timeout_ms} ms while reading "
                    f"offsets up to {until - 1} (kafkaConsumer.pollTimeoutMs)"
                )
            try:
                data = link.fetch(position)
                error = ErrorCode.of(data.error_code)
                if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    low, high = link.offset_bounds()
                    resume, lost = resume_after_out_of_range(position, until, low, high)
                    if lost is not None:
                        _data_loss(options, f"{topic}:{partition} {lost}")
                    position = resume
                    continue
            except WireError:
                link.drop()
                time.sleep(_RETRY_BACKOFF_S)
                continue
            if error != ErrorCode.NONE:
                if not error.retriable:
                    raise RuntimeError(f"{topic}:{partition}: {error.name}")
                link.drop()
                time.sleep(_RETRY_BACKOFF_S)
                continue
            raw = data.records
            if raw is not None and not isinstance(raw, bytes | bytearray | memoryview):
                raise TypeError(f"a decoded Fetch answer holds {type(raw).__name__}, not bytes")
            records = decode_columns(
                raw or b"",
                from_offset=position,
                until_offset=until,
                read_committed=options.read_committed,
                aborted=[(a.producer_id, a.first_offset) for a in data.aborted_transactions or ()],
                include_headers=options.include_headers,
            )
            if records.next_offset is None:
                continue
            last_progress = time.monotonic()
            position = max(position, records.next_offset)
            if not len(records):
                continue
            batch = columns_to_batch(records, topic, partition, options.include_headers)
            if rows_per_batch is None:
                yield batch
            else:
                for first in range(0, batch.num_rows, rows_per_batch):
                    yield batch.slice(first, rows_per_batch)
    except BaseException:
        link.drop()
        raise
