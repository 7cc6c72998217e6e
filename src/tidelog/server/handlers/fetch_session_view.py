"""Fetch sessions (KIP-227) as the Fetch handler sees them: a request's partitions through its session, and
an answer cut down to what an incremental response carries.

The session cache (:mod:`tidelog.server.fetch_sessions`) names a partition by ``(topic name or None,
topic id, partition)``, the same key for a request's partitions and its forgotten topics, whatever the
version (names up to v12, topic ids from v13). An incremental request is served as a fetch of every
partition in its session, in the session's order; its answer keeps, per topic, only the partitions whose
:meth:`~tidelog.server.fetch_sessions.CachedPartition.must_respond` says so, and drops topics left empty.
A full fetch that opened a session records what each partition's answer told the client.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from tidelog.protocol.messages import FetchRequest, FetchResponse
from tidelog.server.fetch_sessions import CachedPartition, ContextKind, FetchContext, FetchSessionCache

__all__ = ["Wanted", "open_context", "session_answer"]

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
) -> tuple[FetchContext, list[Wanted]]:
    """The request's session context, and the topics to fetch: the request's own, or for an incremental
    request every partition of its session."""
    fetch = [((w.name, w.topic_id, p.partition), p) for w in wanted for p in w.partitions]
    forgotten = []
    for gone in request.forgotten_topics_data:
        if version >= 13:
            key_name, key_id = topic_name(gone.topic_id), gone.topic_id
        else:
            key_name, key_id = gone.topic, topic_id(gone.topic)
        forgotten += [(key_name, key_id, p) for p in gone.partitions]
    context = cache.new_context(
        request.session_id,
        request.session_epoch,
        fetch,
        forgotten,
        privileged=privileged,
        now_ms=now_ms,
    )
    if context.kind is not ContextKind.INCREMENTAL or context.session is None:
        return context, wanted
    by_topic: dict[tuple[str | None, uuid.UUID], Wanted] = {}
    for key, cached in context.session.partitions.items():
        name, tid, _index = cast("tuple[str | None, uuid.UUID, int]", key)
        topic = by_topic.get((name, tid))
        if topic is None:
            topic = by_topic[(name, tid)] = Wanted(name, tid, [])
        topic.partitions.append(cached.request)
    return context, list(by_topic.values())


def session_answer(context: FetchContext, wanted: list[Wanted], response: FetchResponse) -> FetchResponse:
    """``response`` (one entry per wanted topic and partition, in order) as the session answers it."""
    response.session_id = context.response_session_id
    session = context.session
    if session is None:
        return response
    incremental = context.kind is ContextKind.INCREMENTAL
    kept_topics = []
    for topic, answer in zip(wanted, response.responses, strict=True):
        kept = []
        for p, result in zip(topic.partitions, answer.partitions, strict=True):
            cached: CachedPartition | None = session.partitions.get((topic.name, topic.topic_id, p.partition))
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
