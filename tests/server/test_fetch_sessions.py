"""The fetch session cache (server/fetch_sessions.py, KIP-227): Kafka's context rules and eviction rules."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tidelog.protocol.errors import ErrorCode
from tidelog.server.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    CachedPartition,
    ContextKind,
    FetchSessionCache,
    next_epoch,
)


def cache(slots: int = 3, eviction_ms: int = 1000) -> FetchSessionCache:
    return FetchSessionCache(max_entries=slots, eviction_ms=eviction_ms, rng=random.Random(7))


def parts(*indexes: int) -> list[tuple[tuple[str, int], str]]:
    return [(("t", i), f"entry-{i}") for i in indexes]


def open_session(sessions: FetchSessionCache, *indexes: int, now: int = 0, privileged: bool = False) -> int:
    context = sessions.new_context(0, INITIAL_EPOCH, parts(*indexes), [], privileged=privileged, now_ms=now)
    assert context.kind is ContextKind.FULL
    return context.response_session_id


def test_epochs_wrap_and_final_stays_final() -> None:
    assert (next_epoch(0), next_epoch(1), next_epoch(0x7FFFFFFF), next_epoch(-1)) == (1, 2, 1, -1)


def test_full_then_incremental_requests_update_the_partition_set() -> None:
    sessions = cache()
    sid = open_session(sessions, 0, 1, 2)
    assert sid != 0
    session = sessions.get(sid)
    assert session is not None
    assert session.epoch == 1
    context = sessions.new_context(
        sid, 1, [(("t", 1), "moved"), (("t", 3), "added")], [("t", 0)], privileged=False, now_ms=5
    )
    assert (context.kind, context.response_session_id, session.epoch) == (ContextKind.INCREMENTAL, sid, 2)
    assert {k: c.request for k, c in session.partitions.items()} == {
        ("t", 1): "moved",
        ("t", 2): "entry-2",
        ("t", 3): "added",
    }
    # a replayed epoch, an unknown id
    assert (
        sessions.new_context(sid, 1, [], [], privileged=False, now_ms=6).error
        is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    )
    assert (
        sessions.new_context(sid + 1, 1, [], [], privileged=False, now_ms=6).error
        is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )
    # forgetting everything closes the session
    context = sessions.new_context(sid, 2, [], [("t", 1), ("t", 2), ("t", 3)], privileged=False, now_ms=7)
    assert (context.kind, context.response_session_id, len(sessions)) == (ContextKind.SESSIONLESS, 0, 0)


def test_a_full_request_closes_the_session_it_names() -> None:
    sessions = cache()
    sid = open_session(sessions, 0)
    context = sessions.new_context(sid, INITIAL_EPOCH, parts(0, 1), [], privileged=False, now_ms=1)
    assert context.kind is ContextKind.FULL
    assert context.response_session_id not in (0, sid)
    assert sessions.get(sid) is None
    assert len(sessions) == 1
    context = sessions.new_context(
        context.response_session_id, FINAL_EPOCH, parts(0), [], privileged=False, now_ms=2
    )
    assert (context.kind, context.response_session_id, len(sessions)) == (ContextKind.SESSIONLESS, 0, 0)


def test_no_slots_means_no_sessions() -> None:
    assert open_session(cache(slots=0), 0, 1) == 0


def test_a_full_cache_evicts_the_least_recently_used_session_once_it_is_stale() -> None:
    sessions = cache(slots=2, eviction_ms=1000)
    first = open_session(sessions, 0, now=0)
    second = open_session(sessions, 0, now=500)
    assert open_session(sessions, 0, now=900) == 0  # nothing stale, nothing old enough: no session
    third = open_session(sessions, 0, now=1001)  # the first was last used 1001 ms ago
    assert (sessions.get(first), sessions.evictions) == (None, 1)
    assert {sessions.get(second) is not None, sessions.get(third) is not None} == {True}


def test_a_session_older_than_the_eviction_time_gives_way_to_a_bigger_one() -> None:
    sessions = cache(slots=2, eviction_ms=1000)
    small = open_session(sessions, 0, now=0)
    big = open_session(sessions, 0, 1, 2, now=0)
    for now in (600, 1200):  # both used recently, so neither is stale; both become old enough at 1200
        for sid in (small, big):
            session = sessions.get(sid)
            assert session is not None
            assert (
                sessions.new_context(sid, session.epoch, [], [], privileged=False, now_ms=now).kind
                is ContextKind.INCREMENTAL
            )
    assert (
        open_session(sessions, 0, now=1300) == 0
    )  # as small as the smallest is not enough (Kafka: id 0 < id)
    assert open_session(sessions, 0, 1, now=1300) != 0  # two partitions are worth more than one
    assert sessions.get(small) is None
    assert sessions.get(big) is not None
    assert open_session(sessions, now=1300) == 0  # an empty full fetch opens nothing


def test_a_followers_session_evicts_a_consumers_at_once() -> None:
    sessions = cache(slots=1, eviction_ms=60_000)
    consumer = open_session(sessions, 0, 1, 2, now=0)
    assert open_session(sessions, 0, now=10) == 0  # another consumer may not
    follower = open_session(sessions, 0, now=10, privileged=True)
    assert follower != 0
    assert sessions.get(consumer) is None
    assert open_session(sessions, 0, 1, 2, 3, now=20, privileged=True) == 0  # a young follower session stays


@pytest.mark.parametrize(
    ("change", "respond"),
    [
        ({}, False),
        ({"has_records": True}, True),
        ({"high_watermark": 11}, True),
        ({"last_stable_offset": 11}, True),
        ({"log_start_offset": 1}, True),
        ({"diverging": True}, True),
        ({"error": ErrorCode.NOT_LEADER_OR_FOLLOWER}, True),
    ],
)
def test_an_incremental_answer_carries_a_partition_only_with_news(
    change: dict[str, object], respond: bool
) -> None:
    cached = CachedPartition("entry", high_watermark=10, last_stable_offset=10, log_start_offset=0)
    now: dict[str, Any] = {
        "has_records": False,
        "error": ErrorCode.NONE,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "diverging": False,
    }
    assert cached.must_respond(**{**now, **change}) is respond
    if "error" in change:  # the high watermark is forgotten: sent again once the error is gone
        assert cached.must_respond(**now) is True
    else:
        assert cached.must_respond(**{**now, **change}) is bool(
            change.get("has_records") or change.get("diverging")
        )
