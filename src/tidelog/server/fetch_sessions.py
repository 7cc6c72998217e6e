"""Incremental fetch sessions (KIP-227): the broker's cache of sessions and the context of one request.

A consumer that fetches many partitions opens a session with a full fetch (session id 0, epoch 0); the
answer carries a session id, and from then on each request (epoch 1, 2, ...) names only the partitions
whose fetch position changed, or are added (``topics``) or removed (``forgotten_topics_data``), and each
answer carries only the partitions that have something to say: records, an error, or a high watermark,
last stable offset or log start offset the client has not been told yet.

Kafka's rules (``FetchSession.scala``, ``FetchManager.newContext``), kept here:

- Epoch -1 (FINAL): no session; a session id given is closed. Epoch 0 (INITIAL): a full fetch; a session
  id given is closed, and a new session is created if the cache has room (else the answer's session id is
  0 and the client goes on with full fetches). Any other epoch: the session must exist
  (FETCH_SESSION_ID_NOT_FOUND) and expect exactly that epoch (INVALID_FETCH_SESSION_EPOCH); its partition
  set is updated (added, changed, forgotten), an emptied session is closed, and its epoch moves on
  (wrapping from 2^31-1 to 1).
- The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. When it is full, a new
  session may take the place of the least recently used one if that one is idle for longer than
  ``min.incremental.fetch.session.eviction.ms``; otherwise of the least valuable evictable session, where a
  session is evictable by anyone once it is older than the eviction time, and a follower's (privileged)
  session may also evict any consumer's; value orders by (privileged, number of partitions, id), and the new
  session must be worth at least as much as the one it replaces. If nothing may be evicted, no session.
- A partition is answered in an incremental response when it carries records, an error, a diverging
  epoch, or a high watermark / last stable offset / log start offset that differs from what the session
  last sent; an error also resets the remembered high watermark, so the partition is sent again once it
  recovers.

Pure: no asyncio, no clock (``now_ms`` comes in), randomness from an injected :class:`random.Random`.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tidelog.protocol.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "ContextKind",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF

PartitionKey = Hashable
"""How the handler names a partition in a session (the same key for a request's and a forgotten entry)."""


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the request entry last sent for it, and what the client was last told."""

    request: Any
    """The request's partition entry (fetch offset, max bytes, epochs), as last sent by the client."""
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(
        self,
        *,
        has_records: bool,
        error: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
        diverging: bool,
    ) -> bool:
        """Whether an incremental response carries this partition now; records what the client is told."""
        respond = has_records or diverging
        if high_watermark != self.high_watermark:
            respond = True
            self.high_watermark = high_watermark
        if last_stable_offset != self.last_stable_offset:
            respond = True
            self.last_stable_offset = last_stable_offset
        if log_start_offset != self.log_start_offset:
            respond = True
            self.log_start_offset = log_start_offset
        if error != ErrorCode.NONE:
            self.high_watermark = -1  # sent again once the error is gone
            respond = True
        return respond


@dataclass(slots=True, eq=False)
class FetchSession:
    id: int
    privileged: bool
    """A follower's session (may evict consumers' sessions)."""
    partitions: dict[PartitionKey, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int = 1
    """The epoch the next request must carry."""
    seen_change: int = -1
    """The broker's change count when the last request was served: partitions not changed since, not in
    :attr:`recheck` and not named by a request need no look (the caller keeps the change counts)."""
    recheck: set[PartitionKey] = field(default_factory=set)
    """Partitions whose last answer had records, an error, or data left to read: looked at every time."""

    def value_key(self) -> tuple[bool, int, int]:
        """Kafka's ``EvictableKey``: the least valuable session sorts first."""
        return (self.privileged, len(self.partitions), self.id)


class ContextKind(Enum):
    SESSIONLESS = "sessionless"
    """Epoch -1: a full fetch, answered with session id 0."""
    FULL = "full"
    """Epoch 0: a full fetch; ``session`` is the new session, or None if the cache had no room."""
    INCREMENTAL = "incremental"
    """A request in ``session``: fetch every partition of it, answer only those with news."""
    ERROR = "error"
    """``error`` (FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH): answered with no partitions."""


@dataclass(slots=True)
class FetchContext:
    kind: ContextKind
    session: FetchSession | None = None
    error: ErrorCode = ErrorCode.NONE

    @property
    def response_session_id(self) -> int:
        return self.session.id if self.session is not None else INVALID_SESSION_ID


@dataclass
class FetchSessionCache:
    """The broker's fetch sessions; see the module docstring."""

    max_entries: int = 1000
    eviction_ms: int = 120_000
    rng: random.Random = field(default_factory=random.Random)
    _sessions: dict[int, FetchSession] = field(default_factory=dict)
    _last_used: OrderedDict[int, FetchSession] = field(default_factory=OrderedDict)
    """Sessions, least recently used first."""
    _evictable_by_all: dict[int, FetchSession] = field(default_factory=dict)
    _evictable_by_privileged: dict[int, FetchSession] = field(default_factory=dict)
    evictions: int = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def session_ids(self) -> list[int]:
        return list(self._sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    # -- a request's context ---------------------------------------------------------------------------

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetch: Iterable[tuple[PartitionKey, Any]],
        forgotten: Iterable[PartitionKey],
        *,
        privileged: bool,
        now_ms: int,
    ) -> FetchContext:
        """The context of one Fetch request (v7+): ``fetch`` its partition entries by key, ``forgotten`` the
        keys of its forgotten topics' partitions."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(ContextKind.SESSIONLESS)
            partitions = {key: CachedPartition(entry) for key, entry in fetch}
            return FetchContext(ContextKind.FULL, self._maybe_create(partitions, privileged, now_ms))
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ContextKind.ERROR, error=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for key, entry in fetch:
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(entry)
            else:
                cached.request = entry
        for key in forgotten:
            session.partitions.pop(key, None)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(ContextKind.SESSIONLESS)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(ContextKind.INCREMENTAL, session)

    # -- the cache -------------------------------------------------------------------------------------

    def _maybe_create(
        self, partitions: dict[PartitionKey, CachedPartition], privileged: bool, now_ms: int
    ) -> FetchSession | None:
        if self.max_entries <= 0 or not partitions:
            return None
        if len(self._sessions) >= self.max_entries and not self._try_evict(
            privileged, (privileged, len(partitions), 0), now_ms
        ):
            return None
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self.rng.randint(1, _MAX_EPOCH)
        session = FetchSession(session_id, privileged, partitions, creation_ms=now_ms, last_used_ms=now_ms)
        self._sessions[session_id] = session
        self._touch(session, now_ms)
        return session

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        """Make room for a session worth ``key`` (Kafka's ``tryEvict``)."""
        if not self._last_used:
            return False
        oldest = next(iter(self._last_used.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self.remove(oldest.id)
            self.evictions += 1
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates:
            return False
        victim = min(candidates.values(), key=FetchSession.value_key)
        if key < victim.value_key():
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        """Kafka's ``touch``: the session was used now; re-decide who may evict it."""
        session.last_used_ms = now_ms
        self._last_used.pop(session.id, None)
        self._last_used[session.id] = session
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or old_enough:
            self._evictable_by_privileged[session.id] = session
        else:
            self._evictable_by_privileged.pop(session.id, None)
        if old_enough:
            self._evictable_by_all[session.id] = session
        else:
            self._evictable_by_all.pop(session.id, None)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        self._last_used.pop(session_id, None)
        self._evictable_by_all.pop(session_id, None)
        self._evictable_by_privileged.pop(session_id, None)
        return session
