"""Fetch sessions (KIP-227) as the Fetch handler sees them: a request's partitions through its session, and
an answer cut down to what an incremental response carries.

The session cache (:mod:`tidelog.server.fetch_sessions`) names a partition by :func:`session_key`, the
same key for a request's partitions and its forgotten topics, whatever the version (names up to v12, topic
ids from v13). An incremental request is served as a fetch of every
partition in its session, in the session's order; its answer keeps, per topic, only the partitions whose
:meth:`~tidelog.server.fetch_sessions.CachedPartition.must_respond` says so, and drops topics left empty.
A full fetch that opened a session records what each partition's answer told the client. An incremental
request reads only the partitions that may have news (named by it, changed since the session was last
served, or left with records, an error or data to read); if it must wait, the wait covers the whole
session, and the read at its end only those it read when it began plus those that changed while it waited
(the wait knows them): a wake-up by one partition of a session of thousands reads that partition and the
few named or left to recheck, not the whole session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.server.fetch_sessions import (
    FINAL_EPOCH,
    CachedPartition,
    ContextKind,
    FetchContext,
    FetchSessionCache,
)

__all__ = ["Wanted", "open_context", "session_answer", "session_key"]

_ZERO_UUID = uuid.UUID(int=0)


@dataclass(slots=True)
class Wanted:
    """One topic of a fetch: its name (None: an unknown topic id), id and the partitions asked for."""

    name: str | None
    topic_id: uuid.UUID
    partitions: list[FetchRequest.FetchPartition]
    denied: bool = False
    """Not authorized: every partition is answered TOPIC_AUTHORIZATION_FAILED."""


def open_context(
    cache: FetchSessionCache,
    request: FetchRequest,
    wanted: list[Wanted],
    *,
    version: int,
    topic_name: Callable[[uuid.UUID], str | None],
    topic_id: Callable[[str], uuid.UUID],
    privileged: bool,
    now_ms: int,
    change_count: int = 0,
    last_change: Mapping[Hashable, int] | None = None,
) -> tuple[
    FetchContext, list[Wanted], Callable[[], list[Wanted]], Callable[[Iterable[Hashable]], list[Wanted]]
]:
    """The request's session context, the topics to read now, the topics a wait watches and the topics to
    read when a wait ends. Outside an incremental request all three are the request's own. In one, the wait
    covers every partition of the session, but the read now only those the request names, those in the
    session's ``recheck`` set, and those whose ``last_change`` (the fetch purgatory's count of changes, by
    (topic, partition)) is above the count when the session was last served: an idle, caught-up partition
    costs a dict lookup. The read when a wait ends (given the partitions that changed while it waited)
    covers those read now and those changed: a wake-up costs the partitions that changed, not the
    session."""
    if request.session_epoch == FINAL_EPOCH:  # sessionless (or closing its session): nothing is cached
        context = cache.new_context(
            request.session_id, request.session_epoch, (), (), privileged=privileged, now_ms=now_ms
        )
        return context, wanted, lambda: wanted, lambda _changed: wanted
    last_change = last_change if last_change is not None else {}
    fetch = [(session_key(w.name, w.topic_id, p.partition), p) for w in wanted for p in w.partitions]
    forgotten = []
    for gone in request.forgotten_topics_data:
        if version >= 13:
            key_name, key_id = topic_name(gone.topic_id), gone.topic_id
        else:
            key_name, key_id = gone.topic, topic_id(gone.topic)
        forgotten += [session_key(key_name, key_id, p) for p in gone.partitions]
    context = cache.new_context(
        request.session_id,
        request.session_epoch,
        fetch,
        forgotten,
        privileged=privileged,
        now_ms=now_ms,
    )
    session = context.session
    own = lambda: wanted  # noqa: E731
    own_again = lambda _changed: wanted  # noqa: E731
    if session is None:
        return context, wanted, own, own_again
    seen, session.seen_change = session.seen_change, change_count
    if context.kind is not ContextKind.INCREMENTAL:
        return context, wanted, own, own_again
    partitions = session.partitions

    def everything() -> list[Wanted]:
        return _grouped(partitions.items(), topic_id)

    if privileged:  # a follower's session: every partition every time (its fetch moves the high watermark)
        whole = everything()
        return context, whole, lambda: whole, lambda _changed: whole
    named = {key for key, _ in fetch}
    recheck = session.recheck
    examine = [
        (key, cached)
        for key, cached in partitions.items()
        if key in named or key in recheck or last_change.get(key, 0) > seen
    ]

    def again(changed: Iterable[Hashable]) -> list[Wanted]:
        chosen = dict(examine)
        for key in changed:
            if key not in chosen:
                cached = partitions.get(key)
                if cached is not None:
                    chosen[key] = cached
        return _grouped(chosen.items(), topic_id)

    return context, _grouped(examine, topic_id), everything, again


def session_key(name: str | None, topic_id: uuid.UUID, index: int) -> Hashable:
    """A partition's key in a session: ``(topic, partition)`` as the fetch purgatory counts its changes, or
    ``(None, topic id, partition)`` for a topic id this broker does not know."""
    return (name, index) if name is not None else (None, topic_id, index)


def _grouped(
    partitions: Iterable[tuple[Hashable, CachedPartition]], topic_id: Callable[[str], uuid.UUID]
) -> list[Wanted]:
    by_topic: dict[object, Wanted] = {}
    for key, cached in partitions:
        name = cast("tuple[str | None, int]", key)[0]
        group = name if name is not None else cast("tuple[None, uuid.UUID, int]", key)[1]
        topic = by_topic.get(group)
        if topic is None:
            tid = topic_id(name) if name is not None else cast("tuple[None, uuid.UUID, int]", key)[1]
            topic = by_topic[group] = Wanted(name, tid, [])
        topic.partitions.append(cached.request)
    return list(by_topic.values())


def session_answer(
    context: FetchContext, wanted: list[Wanted], response: FetchResponse, *, committed: bool
) -> FetchResponse:
    """``response`` (one entry per wanted topic and partition, in order) as the session answers it; the
    partitions read that have records, an error or data beyond the fetch offset (under the last stable
    offset if ``committed``, else the high watermark) are looked at again next time."""
    response.session_id = context.response_session_id
    session = context.session
    if session is None:
        return response
    incremental = context.kind is ContextKind.INCREMENTAL
    kept_topics = []
    for topic, answer in zip(wanted, response.responses, strict=True):
        kept = []
        for p, result in zip(topic.partitions, answer.partitions, strict=True):
            key = session_key(topic.name, topic.topic_id, p.partition)
            cached: CachedPartition | None = session.partitions.get(key)
            if cached is None:
                continue
            respond = cached.must_respond(
                has_records=_has_records(result.records),
                error=result.error_code,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                diverging=result.diverging_epoch.epoch >= 0,
            )
            if respond or not incremental:
                kept.append(result)
            bound = result.last_stable_offset if committed else result.high_watermark
            if result.error_code or _has_records(result.records) or p.fetch_offset < bound:
                session.recheck.add(key)
            else:
                session.recheck.discard(key)
        if kept:
            answer.partitions = kept
            kept_topics.append(answer)
    if incremental:
        response.responses = kept_topics
    return response


def _has_records(records: object) -> bool:
    if records is None:
        return False
    nbytes = getattr(records, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes > 0
    return len(records) > 0  # type: ignore[arg-type]
