"""Copying a partition's current log into its future log, batch by batch (Kafka's
``ReplicaAlterLogDirsThread``: the future replica follows the current one on the same broker).

Invariants:

- The future log holds a prefix of the current log's batches, byte for byte, offsets and leader epochs as
  the current log has them: each step reads whole batches from the current log at the future's log end
  offset and appends them with ``append_as_follower`` (validated whole, producer state and ``.txnindex``
  rebuilt from them). Nothing is decoded or rewritten.
- A current log that lost what the future already copied (a follower's truncation, a leader epoch the
  future has ending elsewhere) truncates the future to where they agree first; a current log whose start
  moved past the future's end (retention, DeleteRecords) starts the future over at that start.
- :func:`copy_step` copies at most ``max_bytes`` (at least one whole batch) and returns what it copied:
  0 means the future's log end equals the current's, so the caller may swap the two at once (nothing in
  between may append to the current log).
- Blocking file I/O on the caller's thread; no clock (``now_ms`` comes in), no asyncio.
"""

from __future__ import annotations

from tidelog.storage.errors import UnexpectedAppendOffsetError
from tidelog.storage.partition_log import PartitionLog

__all__ = ["align_future", "copy_step"]


def align_future(current: PartitionLog, future: PartitionLog, *, now_ms: int) -> None:
    """Truncate ``future`` to where it agrees with ``current``, or start it over at ``current``'s start."""
    future_end = future.log_end_offset
    epoch = future.latest_epoch
    if epoch is not None and future_end > future.log_start_offset:
        agreed = current.end_offset_for_epoch(epoch)
        if agreed.epoch != epoch or agreed.end_offset < future_end:
            target = max(min(agreed.end_offset, future_end), future.log_start_offset)
            if agreed.epoch != epoch:
                target = min(target, future.end_offset_for_epoch(max(agreed.epoch, 0)).end_offset)
            future.truncate_to(max(target, future.log_start_offset), now_ms=now_ms)
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(current.log_end_offset, now_ms=now_ms)
    if future.log_end_offset < current.log_start_offset or (
        future.log_end_offset == future.log_start_offset
        and future.log_start_offset != current.log_start_offset
    ):
        future.truncate_fully_and_start_at(current.log_start_offset, now_ms=now_ms)


def copy_step(current: PartitionLog, future: PartitionLog, *, max_bytes: int, now_ms: int) -> int:
    """Copy the next whole batches (about ``max_bytes``) of ``current`` into ``future``; the bytes copied,
    0 when ``future`` has caught up with ``current``'s log end offset."""
    align_future(current, future, now_ms=now_ms)
    if future.log_end_offset >= current.log_end_offset:
        return 0
    data = current.read(future.log_end_offset, max_bytes)
    if not data.regions:
        return 0
    records = data.read_bytes()
    try:
        future.append_as_follower(records, now_ms=now_ms)
    except UnexpectedAppendOffsetError as exc:
        # The current log's start fell inside its first batch (DeleteRecords): start over at that batch,
        # as a follower does (Kafka's appendRecordsToFollowerOrFutureReplica).
        if (
            exc.first_offset is None
            or future.log_end_offset != future.log_start_offset
            or exc.first_offset >= future.log_start_offset
        ):
            raise
        future.truncate_fully_and_start_at(exc.first_offset, now_ms=now_ms)
        future.append_as_follower(records, now_ms=now_ms)
    return len(records)
