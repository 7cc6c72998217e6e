"""One change's log reads, shared by every waiting fetch it completes (fan-out: one append, N consumers).

When an append (or a high-watermark move) completes the fetches parked on a partition, they all complete in
one synchronous pass of :class:`~tidelog.server.fetch_purgatory.FetchPurgatory` and most ask for the same
thing: the partition's new batches from the offset they all stood at. :class:`SharedReads` reads each
``(partition, fetch offset, limit, isolation, first-batch rule)`` once per pass and hands every such fetch
the same answer.

Invariants:

- Lives for one synchronous pass only (the purgatory creates it, and drops it when the pass ends): nothing
  appends, truncates or moves a high watermark meanwhile, so one read is every waiter's read.
- A read whose data is one file region of at most :data:`INLINE_BYTES` is read into memory once (one
  ``pread``) and every waiter's response carries those bytes: its frame is one write instead of a write, a
  ``sendfile`` and a write per waiter. Larger reads (and data spread over segments) stay file regions, sent
  with ``sendfile`` as always; a region that comes back short (the file was cut under the read) stays a
  region too, so the transport reports it as it always does.
- A read_committed read's aborted transactions are looked up once per shared read, and the list is shared
  (responses only encode it).
- Errors are never shared: a read that raises raises for each fetch that asks.
- The same holds for one fetch's own read of a single region of at most :data:`SINGLE_INLINE_BYTES`
  (:func:`inline`, used by the Fetch handler): small answers go out in one write.
- Whole answers are shared too, between fetches that asked the same thing the same way (:func:`answer_key`:
  sessionless consumer fetches of the same version, isolation, ``max_bytes``, listener and partitions at
  the same offsets, limits and epochs): the first builds the :class:`FetchResponse`, the others get the
  same object (nothing downstream changes a consumer's answer: a throttled one is replaced, not edited).
  An answer with an error is never shared. Each fetch still counts its own bytes out.
- A whole answer a second fetch of the pass asks for is frozen in the codec
  (:func:`~tidelog.protocol.codec.freeze_response`) when its records are all bytes (no file region): its
  body is encoded once per version, each fetch's frame is its size, correlation id and those bytes. The
  answers go out after the pass (the connections encode them later), so the purgatory keeps the last
  :data:`FROZEN_ANSWERS` frozen answers across passes and thaws the oldest past that: a thawed answer is
  encoded as any other (the same bytes), so the bound only limits memory, never what is sent.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from tidelog.protocol.codec import freeze_response, thaw_response
from tidelog.protocol.messages import FetchResponse
from tidelog.protocol.schema import RecordsRegion
from tidelog.replication.partition import FetchIsolation, Partition
from tidelog.storage.fetch_data import FileRegion

from .regions import RegionList

__all__ = [
    "FROZEN_ANSWERS",
    "INLINE_BYTES",
    "SINGLE_INLINE_BYTES",
    "SharedRead",
    "SharedReads",
    "answer_key",
    "inline",
]

INLINE_BYTES = 64 * 1024
"""Shared reads up to this size travel as bytes in the response frame."""

SINGLE_INLINE_BYTES = 16 * 1024
"""A fetch's own (unshared) read of one region up to this size travels as bytes too: a consumer that keeps
up reads a few small batches per fetch, and one write of the whole frame (one TCP segment on loopback)
costs far less than a write, a ``sendfile`` and a write; larger reads keep ``sendfile``'s zero copy."""


FROZEN_ANSWERS = 32
"""Shared answers kept frozen across passes (each at most :data:`INLINE_BYTES` of records and its encoding),
long enough for the connections to encode them after their pass."""


class SharedRead:
    """One read's answer: the ``records`` field (bytes, a region or regions; None: no data), its size, where
    it ends, and (read_committed, on first use) its aborted transactions."""

    __slots__ = ("aborted", "nbytes", "next_offset", "records")

    def __init__(self, records: bytes | RecordsRegion | None, nbytes: int, next_offset: int) -> None:
        self.records = records
        self.nbytes = nbytes
        self.next_offset = next_offset
        self.aborted: list[FetchResponse.AbortedTransaction] | None = None


def inline(region: FileRegion, limit: int) -> bytes | FileRegion:
    """``region``'s bytes when it is at most ``limit`` bytes (one ``pread``), else the region; the region
    too when the read fails or comes back short, so the transport meets (and reports) the trouble as it
    always did."""
    if region.nbytes > limit:
        return region
    try:
        data = os.pread(region.fileno(), region.nbytes, region.position)
    except OSError:
        return region
    return data if len(data) == region.nbytes else region


def answer_key(
    wanted: Iterable[Any], *, version: int, isolation: FetchIsolation, max_bytes: int, listener: str | None
) -> Hashable:
    """What makes two sessionless consumer fetches' answers the same: everything their read depends on
    (``wanted``: :class:`~tidelog.server.handlers.fetch_session_view.Wanted` topics)."""
    return (
        version,
        isolation,
        max_bytes,
        listener,
        tuple(
            (
                w.name,
                w.topic_id,
                w.denied,
                tuple(
                    (
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        p.current_leader_epoch if version >= 9 else -1,
                    )
                    for p in w.partitions
                ),
            )
            for w in wanted
        ),
    )


def _inline_only(response: FetchResponse) -> bool:
    """Whether no partition of ``response`` carries a file region (its encoding can be kept)."""
    for topic in response.responses:
        for p in topic.partitions:
            records = p.records
            if records is not None and not isinstance(records, bytes):
                return False
    return True


class SharedReads:
    """The reads and answers of one pass, by key."""

    __slots__ = ("_answers", "_frozen", "_reads", "_shared")

    def __init__(self, frozen: deque[FetchResponse] | None = None) -> None:
        self._reads: dict[Hashable, SharedRead] = {}
        self._answers: dict[Hashable, FetchResponse] = {}
        self._shared: set[int] = set()
        """The ids of the answers a second fetch asked for (frozen then, if they can be; an id hashes faster
        than a key, and each answer lives as long as the pass, in ``_answers``)."""
        self._frozen = frozen
        """The answers frozen by this and earlier passes, oldest first (None: none is frozen)."""

    def answer(self, key: Hashable, build: Callable[[], tuple[FetchResponse, bool]]) -> FetchResponse:
        """The answer ``key`` names, built (``build`` returns it and whether it has an error) on the first
        ask of the pass; one with an error is not kept. Frozen on the second ask (see the module)."""
        found = self.built(key)
        if found is None:
            found, has_error = build()
            if not has_error:
                self._answers[key] = found
        return found

    def built(self, key: Hashable) -> FetchResponse | None:
        """The answer ``key`` names if an earlier ask of the pass built it (then it is shared: frozen, see the
        module), else None."""
        found = self._answers.get(key)
        if found is not None and id(found) not in self._shared:
            self._shared.add(id(found))
            frozen = self._frozen
            if frozen is not None and _inline_only(found):
                freeze_response(found)
                frozen.append(found)
                if len(frozen) > FROZEN_ANSWERS:
                    thaw_response(frozen.popleft())
        return found

    def read(
        self,
        key: Hashable,
        partition: Partition,
        fetch_offset: int,
        limit: int,
        *,
        isolation: FetchIsolation,
        min_one_batch: bool,
    ) -> SharedRead:
        """The read ``key`` names (``partition`` from ``fetch_offset``, at most ``limit`` bytes), made on
        the first ask of the pass."""
        found = self._reads.get(key)
        if found is not None:
            return found
        data = partition.read(fetch_offset, max(limit, 0), isolation=isolation, min_one_batch=min_one_batch)
        regions = data.regions
        records: bytes | RecordsRegion | None = None
        if len(regions) == 1:
            region = regions[0]
            records = inline(region, INLINE_BYTES)
        elif regions:
            records = RegionList(list(regions))
        found = self._reads[key] = SharedRead(records, data.nbytes, data.next_offset)
        return found

    @staticmethod
    def aborted(
        shared: SharedRead, partition: Partition, fetch_offset: int
    ) -> list[FetchResponse.AbortedTransaction]:
        """The aborted transactions a read_committed answer of ``shared`` carries (looked up once)."""
        if shared.aborted is None:
            shared.aborted = [
                FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in partition.aborted_transactions(fetch_offset, shared.next_offset)
            ]
        return shared.aborted
