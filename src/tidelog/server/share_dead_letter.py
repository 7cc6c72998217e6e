"""Writes share groups' dead-letter copies (KIP-1191) onto their dead-letter topics, then archives the records.

A share-partition whose group names a dead-letter topic puts REJECTed records, and records at the
delivery-count limit, in ARCHIVING (see :mod:`tidelog.coordinator.share.share_partition`); the share
runtime tells this writer (:meth:`ShareDeadLetters.changed`) after every request that touched it. One task
per share-partition at a time drains its ARCHIVING records:

1. the share-partition state is written to ``__share_group_state`` (ARCHIVING is persisted, state 3) and its
   commit awaited, then written again (nothing new: no-op) so that whatever changed during the wait is on
   disk too before any copy;
2. the first drain of a share-partition object (after a load, a restart) reads the dead-letter partition's
   tail and archives the pending records already copied there (a crash between 3 and 4);
3. the copies are appended to the dead-letter partition (``source partition % its partitions``), in
   chunks of at most ``_CHUNK_BYTES`` (and half the topic's ``max.message.bytes``), each chunk's records
   archived once appended; a chunk the topic refuses as too large is written with the context headers
   alone (a pointer to the source record);
4. the state is written, in the same synchronous step as 3 (nothing else can append to the dead-letter
   partition between the copies and this write), and its commit awaited.

So kill -9 between any two steps leaves either no copy of a pending record, or its copy as the last of the
share-partition's copies in the dead-letter partition (found by step 2): every dead-lettered record is
copied exactly once, provided fewer than ``_RECOVERY_SLACK`` other records reach that dead-letter partition
after a restart before the share-partition's first drain (its first request).

A missing dead-letter topic is an error, as in KIP-1191, unless the broker's
``errors.deadletterqueue.auto.create.topics.enable`` is true and its name starts with
``errors.deadletterqueue.topic.name.prefix`` (``dlq.``): then it is created (``num.partitions``,
``default.replication.factor``). Otherwise it is logged as a warning once per group and topic, the records
stay ARCHIVING (persisted) and are copied once the topic exists (retried on the share-partition's next
request). A group whose dead-letter topic is unset again archives
its ARCHIVING records without copies.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from tidelog.coordinator.share.config import ShareGroupSettings
from tidelog.coordinator.share.dead_letter import (
    context_headers,
    copied_offsets,
    dead_letter_partition,
    dead_letter_record,
)
from tidelog.coordinator.share.share_partition import PendingDeadLetter, SharePartition
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.records import Record, SimpleRecord, encode_batch
from tidelog.protocol.records_codec import decode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD, RECORD_BATCH_HEADER_SIZE, read_batch_header
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.server.admin_errors import AdminError
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.metadata_cache import MetadataCache, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["ShareDeadLetters"]

log = logging.getLogger(__name__)

ShareKey = tuple[str, str, int]
Persist = Callable[[ShareKey], list[Awaitable[Any]]]
"""Write a share-partition's state now (appended on return); the commits still to await."""

_CHUNK_BYTES = 512 * 1024
_READ_BYTES = 1 << 20
_RECOVERY_SLACK = 10_000
_CONTEXT_HEADERS = len(context_headers("", "", 0, 0, 0, True))


class ShareDeadLetters:
    """The dead-letter writer of one broker's share groups."""

    def __init__(
        self,
        *,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        clock: Clock,
        settings: Callable[[str], ShareGroupSettings],
        persist: Persist,
        lookup: Callable[[ShareKey], SharePartition | None],
    ) -> None:
        self._replicas = replicas
        self._metadata = metadata
        self._clock = clock
        self._settings = settings
        self._persist = persist
        self._lookup = lookup
        """The share-partition the runtime now has for a key (a drain stops when it is another one)."""
        self._tasks: dict[ShareKey, asyncio.Task[None]] = {}
        self._checked: dict[ShareKey, SharePartition] = {}
        """The share-partition objects whose dead-letter tail was checked (step 2) in this process."""
        self._warned: set[tuple[str, str]] = set()
        self._failed: set[tuple[str, int, ErrorCode]] = set()
        self.admin: TopicAdmin | None = None
        """Creates a missing dead-letter topic when ``errors.deadletterqueue.auto.create.topics.enable`` (set
        by the broker; None: never)."""

    def changed(self, key: ShareKey, sp: SharePartition | None) -> None:
        """A request touched ``key``: start its drain if it has ARCHIVING records and none is running."""
        if sp is None or key in self._tasks:
            return
        if not sp.archiving:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # driven without a loop (in-process tests): nothing is copied
        task = loop.create_task(self._drain(key, sp))
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._tasks.pop(key, None))

    def shutdown(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()

    # -- the drain ---------------------------------------------------------------------------------------

    async def _drain(self, key: ShareKey, sp: SharePartition) -> None:
        try:
            while self._lookup(key) is sp and sp.pending_dead_letters():
                await asyncio.gather(*self._persist(key))
                if self._lookup(key) is not sp or not self._copy_pending(key, sp):
                    return
                await asyncio.gather(*self._persist(key))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dead-lettering the records of share-partition %s failed", key)

    def _copy_pending(self, key: ShareKey, sp: SharePartition) -> bool:
        """Steps 1 (again), 2, 3 and 4 in one synchronous step; False when nothing more can be done now."""
        self._discard(self._persist(key))
        group_id, topic, index = key
        settings = self._settings(group_id)
        pending = sp.pending_dead_letters()
        if settings.dead_letter_topic is None:
            for p in pending:
                sp.archive_dead_letters(p.first_offset, p.last_offset)
            log.info("share group %s has no dead-letter topic: %s-%d archived without copies", *key)
            self._discard(self._persist(key))
            return True
        target = self._target(group_id, settings.dead_letter_topic, index)
        if target is None:
            return False
        dlq_topic, dlq_index, dlq = target
        if self._checked.get(key) is not sp:
            ranges = [(p.first_offset, p.last_offset) for p in pending]
            size = sum(last - first + 1 for first, last in ranges)
            for offset in sorted(copied_offsets(self._tail(dlq, size), group_id, topic, index, ranges)):
                sp.archive_dead_letters(offset, offset)
            self._checked[key] = sp
            pending = sp.pending_dead_letters()
        now = self._clock.now_ms()
        limit = min(_CHUNK_BYTES, dlq.config.max_message_bytes // 2)
        chunk: list[SimpleRecord] = []
        chunk_offsets: list[int] = []
        chunk_bytes = 0
        for p in pending:
            for offset, source in self._sources(topic, index, p, settings.dead_letter_copy_record):
                copy = dead_letter_record(
                    source,
                    group_id=group_id,
                    topic=topic,
                    partition=index,
                    offset=offset,
                    delivery_count=p.delivery_count,
                    rejected=p.rejected,
                    copy_record=settings.dead_letter_copy_record,
                    now_ms=now,
                )
                size = (
                    64
                    + len(copy.key or b"")
                    + len(copy.value or b"")
                    + sum(len(k) + len(v or b"") for k, v in copy.headers)
                )
                if chunk and chunk_bytes + size > limit:
                    if not self._append(sp, dlq_topic, dlq_index, chunk, chunk_offsets, now):
                        self._discard(self._persist(key))
                        return False
                    chunk, chunk_offsets, chunk_bytes = [], [], 0
                chunk.append(copy)
                chunk_offsets.append(offset)
                chunk_bytes += size
        ok = not chunk or self._append(sp, dlq_topic, dlq_index, chunk, chunk_offsets, now)
        self._discard(self._persist(key))  # step 4
        return ok

    def _target(self, group_id: str, dlq_topic: str, index: int) -> tuple[str, int, Partition] | None:
        info = self._metadata.topic(dlq_topic) or self._create(dlq_topic)
        if info is None:
            if (group_id, dlq_topic) not in self._warned:
                self._warned.add((group_id, dlq_topic))
                log.warning(
                    "share group %s: dead-letter topic %s does not exist (%s): its REJECTed and "
                    "delivery-limit records wait in ARCHIVING until it does",
                    group_id,
                    dlq_topic,
                    self._why_not_created(dlq_topic),
                )
            return None
        dlq_index = dead_letter_partition(index, info.num_partitions)
        partition = self._replicas.leader_partition(dlq_topic, dlq_index)
        if isinstance(partition, ErrorCode):
            if (group_id, dlq_topic) not in self._warned:
                self._warned.add((group_id, dlq_topic))
                log.warning(
                    "share group %s: dead-letter partition %s-%d is not writable here (%s): its records "
                    "wait in ARCHIVING",
                    group_id,
                    dlq_topic,
                    dlq_index,
                    partition.name,
                )
            return None
        self._warned.discard((group_id, dlq_topic))
        return dlq_topic, dlq_index, partition

    def _create(self, dlq_topic: str) -> TopicInfo | None:
        """The dead-letter topic, created as KIP-1191 allows; None when it may not be (or is not ready)."""
        if self.admin is None or self._why_not_created(dlq_topic):
            return None
        config = self.admin.config
        try:
            info = self.admin.ensure_topic(
                dlq_topic,
                config.num_partitions,
                config.default_replication_factor,
                {},
                is_internal=False,
            )
        except AdminError as exc:
            log.warning("creating dead-letter topic %s failed: %s", dlq_topic, exc)
            return None
        if info is not None:
            log.info("created dead-letter topic %s (%d partitions)", dlq_topic, info.num_partitions)
        return info

    def _why_not_created(self, dlq_topic: str) -> str:
        """Why a missing dead-letter topic is not created (KIP-1191's rules); empty when it is."""
        if self.admin is None or not self.admin.config.errors_deadletterqueue_auto_create_topics_enable:
            return "create it, or set errors.deadletterqueue.auto.create.topics.enable=true"
        prefix = self.admin.config.errors_deadletterqueue_topic_name_prefix
        if prefix and not dlq_topic.startswith(prefix):
            return f"not created: its name lacks errors.deadletterqueue.topic.name.prefix {prefix!r}"
        return ""

    def _append(
        self,
        sp: SharePartition,
        dlq_topic: str,
        dlq_index: int,
        chunk: list[SimpleRecord],
        offsets: list[int],
        now_ms: int,
    ) -> bool:
        acks = -1 if self._replicas.cluster_mode else 1
        batch = encode_batch(chunk)
        error, _info, message = self._replicas.append(
            dlq_topic, dlq_index, batch, now_ms=now_ms, origin=AppendOrigin.CLIENT, required_acks=acks
        )
        if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
            # too large for the dead-letter topic with the records: their context headers alone
            log.warning(
                "%d dead-letter copies for %s-%d are too large (%s): written without key, value and headers",
                len(chunk),
                dlq_topic,
                dlq_index,
                ErrorCode(error).name,
            )
            bare = [SimpleRecord(None, None, r.headers[-_CONTEXT_HEADERS:], r.timestamp) for r in chunk]
            error, _info, message = self._replicas.append(
                dlq_topic,
                dlq_index,
                encode_batch(bare),
                now_ms=now_ms,
                origin=AppendOrigin.CLIENT,
                required_acks=acks,
            )
        failure = (dlq_topic, dlq_index, ErrorCode(error))
        if error is not ErrorCode.NONE:
            if failure not in self._failed:  # once until it succeeds: retried at every request
                self._failed.add(failure)
                log.warning(
                    "writing %d dead-letter copies to %s-%d failed: %s %s (retried; the records wait)",
                    len(chunk),
                    dlq_topic,
                    dlq_index,
                    failure[2].name,
                    message or "",
                )
            return False
        self._failed = {f for f in self._failed if f[:2] != (dlq_topic, dlq_index)}
        for offset in offsets:
            sp.archive_dead_letters(offset, offset)
        return True

    # -- reading the logs --------------------------------------------------------------------------------

    def _sources(
        self, topic: str, index: int, pending: PendingDeadLetter, copy_record: bool
    ) -> Iterator[tuple[int, Record | None]]:
        """Each offset of ``pending`` with its record (None: headers-only copy, or gone from the log)."""
        found: dict[int, Record] = {}
        if copy_record:
            partition = self._replicas.leader_partition(topic, index)
            if not isinstance(partition, ErrorCode):
                for record in _read(partition, pending.first_offset, pending.last_offset + 1):
                    found[record.offset] = record
        for offset in range(pending.first_offset, pending.last_offset + 1):
            yield offset, found.get(offset)

    def _tail(self, dlq: Partition, pending_records: int) -> list[Record]:
        """The dead-letter partition's last ``pending_records + _RECOVERY_SLACK`` records (or fewer)."""
        end = dlq.log_end_offset
        start = max(dlq.log_start_offset, end - pending_records - _RECOVERY_SLACK)
        return list(_read(dlq, start, end, FetchIsolation.LOG_END))

    @staticmethod
    def _discard(waits: list[Awaitable[Any]]) -> None:
        """Commits this step does not wait for (the next step awaits a later write)."""
        for wait in waits:
            if inspect.iscoroutine(wait):
                wait.close()
            elif isinstance(wait, asyncio.Future):
                wait.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _read(
    partition: Partition, first: int, upto: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
) -> Iterator[Record]:
    """The records of ``partition`` at ``first .. upto - 1`` (what the log still has of them)."""
    pos_offset = first
    while pos_offset < upto:
        try:
            data = partition.read(pos_offset, _READ_BYTES, isolation=isolation, min_one_batch=True)
        except KafkaProtocolError:
            return
        if not data.regions or data.next_offset <= pos_offset:
            return
        raw = data.read_bytes()
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
        pos_offset = data.next_offset
