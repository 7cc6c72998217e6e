"""Writes share groups' dead-letter copies (KIP-1191) onto their dead-letter topics, then archives the records.

A share-partition whose group names a dead-letter topic puts REJECTed records, and records at the
delivery-count limit, in ARCHIVING (see :mod:`tidelog.coordinator.share.share_partition`); the share
runtime tells this writer (:meth:`ShareDeadLetters.changed`) after every request that touched it. One task
per share-partition at a time drains its ARCHIVING records:

1. the share-partition state is written to ``__share_group_state`` (ARCHIVING is persisted, state 3) and its
   commit awaited, then written again (nothing new: no-op) so that whatever changed during the wait is on
   disk too before any copy;
2. the first drain of a share-partition object (after a load, a restart, a leadership change, or an append
   whose outcome stayed unknown) reads the dead-letter partition's committed tail and archives the pending
   records already copied there (a crash between 3 and 4);
3. the copies are appended to the dead-letter partition (``source partition % its partitions``) at its
   leader, this broker or another (:class:`~tidelog.server.share_dead_letter_producer.DeadLetterProducer`:
   acks=all in a cluster, idempotent, retried with the same sequence), in chunks of at most
   ``_CHUNK_BYTES`` (and half the topic's ``max.message.bytes``), each chunk's records archived once it is
   committed; a chunk the topic refuses as too large is written with the context headers alone (a pointer
   to the source record);
4. the state is written and its commit awaited.

So kill -9 between any two steps leaves either no copy of a pending record, or its copy among the
share-partition's last copies in the dead-letter partition (found by step 2; copies of other
share-partitions in between are skipped): every dead-lettered record is copied exactly once, provided fewer
than ``_RECOVERY_SLACK`` other records reach that dead-letter partition after the copy before the
share-partition's next first drain. Not covered: a share-partition leader that lost its leadership while a
copy of it was in flight to another broker, if that copy lands after the new leader's tail check (the old
leader's state writes are fenced, its produce is not).

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
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.records import Record, SimpleRecord
from tidelog.server.admin_errors import AdminError
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.metadata_cache import NO_LEADER, MetadataCache, TopicInfo
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.share_dead_letter_producer import DeadLetterProducer, read_local

__all__ = ["ShareDeadLetters"]

log = logging.getLogger(__name__)

ShareKey = tuple[str, str, int]
Persist = Callable[[ShareKey], list[Awaitable[Any]]]
"""Write a share-partition's state now (appended on return); the commits still to await."""

_CHUNK_BYTES = 512 * 1024
_MESSAGE_MAX_BYTES = 1_048_588  # Kafka's message.max.bytes default
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
        self.producer = DeadLetterProducer(replicas=replicas, metadata=metadata, clock=clock)
        """Writes the copies at the dead-letter partition's leader; the broker gives it its producer ids and,
        in a cluster, the inter-broker client."""
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
                if self._lookup(key) is not sp or not await self._copy_pending(key, sp):
                    return
                await asyncio.gather(*self._persist(key))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("dead-lettering the records of share-partition %s failed", key)

    async def _copy_pending(self, key: ShareKey, sp: SharePartition) -> bool:
        """Steps 1 (again), 2, 3 and 4; False when nothing more can be done now."""
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
        dlq_topic, dlq_index, max_message_bytes = target
        if self._checked.get(key) is not sp:
            ranges = [(p.first_offset, p.last_offset) for p in pending]
            size = sum(last - first + 1 for first, last in ranges)
            tail = await self.producer.tail(dlq_topic, dlq_index, size + _RECOVERY_SLACK)
            if tail is None or self._lookup(key) is not sp:
                return False
            for offset in sorted(copied_offsets(tail, group_id, topic, index, ranges)):
                sp.archive_dead_letters(offset, offset)
            self._checked[key] = sp
            pending = sp.pending_dead_letters()
        now = self._clock.now_ms()
        limit = min(_CHUNK_BYTES, max_message_bytes // 2)
        chunks: list[tuple[list[SimpleRecord], list[int]]] = [([], [])]
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
                if chunks[-1][0] and chunk_bytes + size > limit:
                    chunks.append(([], []))
                    chunk_bytes = 0
                chunks[-1][0].append(copy)
                chunks[-1][1].append(offset)
                chunk_bytes += size
        ok = True
        for records, offsets in chunks:
            if not records:
                continue
            if not await self._append(key, sp, dlq_topic, dlq_index, records, offsets):
                ok = False
                break
            if self._lookup(key) is not sp:
                return False  # the share-partition was dropped (reset, deleted, leadership lost) meanwhile
        self._discard(self._persist(key))  # step 4
        return ok

    def _target(self, group_id: str, dlq_topic: str, index: int) -> tuple[str, int, int] | None:
        """The dead-letter partition for source partition ``index`` and its topic's ``max.message.bytes``;
        None while the topic does not exist or the partition has no leader."""
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
        leader = info.partitions[dlq_index].leader
        writable = leader != NO_LEADER and (
            leader == self._metadata.node_id or self.producer.client is not None
        )
        if not writable:
            if (group_id, dlq_topic) not in self._warned:
                self._warned.add((group_id, dlq_topic))
                log.warning(
                    "share group %s: dead-letter partition %s-%d has no leader: its records wait in ARCHIVING",
                    group_id,
                    dlq_topic,
                    dlq_index,
                )
            return None
        self._warned.discard((group_id, dlq_topic))
        default = self.admin.config.message_max_bytes if self.admin is not None else _MESSAGE_MAX_BYTES
        try:
            max_message_bytes = int(info.configs.get("max.message.bytes", default))
        except ValueError:
            max_message_bytes = default
        return dlq_topic, dlq_index, max_message_bytes

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

    async def _append(
        self,
        key: ShareKey,
        sp: SharePartition,
        dlq_topic: str,
        dlq_index: int,
        chunk: list[SimpleRecord],
        offsets: list[int],
    ) -> bool:
        error = await self.producer.append(dlq_topic, dlq_index, chunk)
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
            error = await self.producer.append(dlq_topic, dlq_index, bare)
        if (
            error is None
        ):  # the outcome is unknown: the copies may be there, read the tail before copying again
            self._checked.pop(key, None)
            return False
        failure = (dlq_topic, dlq_index, error)
        if error is not ErrorCode.NONE:
            if failure not in self._failed:  # once until it succeeds: retried at every request
                self._failed.add(failure)
                log.warning(
                    "writing %d dead-letter copies to %s-%d failed: %s (retried; the records wait)",
                    len(chunk),
                    dlq_topic,
                    dlq_index,
                    error.name,
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
                for record in read_local(partition, pending.first_offset, pending.last_offset + 1):
                    found[record.offset] = record
        for offset in range(pending.first_offset, pending.last_offset + 1):
            yield offset, found.get(offset)

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
