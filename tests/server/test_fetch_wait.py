"""Long-poll fetches waking per partition (server/fetch_wait.py, server/appended_bytes.py, issue 17).

- AppendedBytes answers the bytes appended between two offsets from the append sizes alone, and "unknown"
  (None) for offsets older than its history or across a gap.
- Fetches woken by one append read the log once between them, and each gets the same records.
- A fetch parked on many partitions: an append to one of them below ``min_bytes`` reads no log at all, and
  the fetch completes once the appended sizes across partitions reach ``min_bytes``, answered with exactly
  the records appended; a fetch is answered NOT_LEADER_OR_FOLLOWER when this broker stops leading a
  partition it waits on.
- Fetch sessions: an incremental fetch reads a partition the last answer left unread (``max_bytes``) though
  nothing changed in it, answers nothing for caught-up partitions, and refuses a replayed epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from tests.server.inprocess import ctx, handle, make_broker

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ApiKey, FetchRequest, FetchResponse
from tidelog.protocol.records import SimpleRecord, decode_batch, encode_batch
from tidelog.protocol.records_header import LOG_OVERHEAD
from tidelog.replication.partition import Partition
from tidelog.server import fetch_purgatory
from tidelog.server.appended_bytes import HISTORY, AppendedBytes
from tidelog.server.broker import Broker
from tidelog.server.regions import RegionList
from tidelog.server.shared_reads import INLINE_BYTES
from tidelog.storage.fetch_data import FileRegion

pytestmark = [pytest.mark.timeout(60)]

PARTITIONS = 20


def test_appended_bytes_between_offsets() -> None:
    appended = AppendedBytes()
    key = ("t", 0)
    assert appended.between(key, 0, 5) is None  # nothing known
    appended.record(key, 10, 12, 100)
    appended.record(key, 12, 15, 50)
    appended.record(key, 15, 16, 7)
    assert appended.between(key, 10, 16) == 157
    assert appended.between(key, 12, 15) == 50
    assert appended.between(key, 13, 16) == 57  # inside a batch: the whole batch is readable
    assert appended.between(key, 15, 15) == 0
    assert appended.between(key, 9, 16) is None  # older than the history
    appended.record(key, 20, 21, 5)  # a gap (truncation, follower appends): the history starts over
    assert appended.between(key, 15, 21) is None
    assert appended.between(key, 20, 21) == 5
    for offset in range(21, 21 + HISTORY):
        appended.record(key, offset, offset + 1, 1)
    assert appended.between(key, 20, 21 + HISTORY) is None  # fell out of the bounded history
    assert appended.between(key, 22, 21 + HISTORY) == HISTORY - 1
    appended.forget(key)
    assert appended.between(key, 22, 23) is None


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = make_broker(tmp_path_factory.mktemp("fetch-wait"), topic=None)
    yield broker
    broker.replicas.shutdown()
    broker.logs.shutdown(broker.clock.now_ms())


@pytest.fixture
def broker(shared: Broker, request: pytest.FixtureRequest) -> Broker:
    """The shared broker with a fresh topic ``t`` of PARTITIONS partitions (the last test's is deleted)."""
    if shared.metadata.topic("t") is not None:
        shared.admin.delete_topic_now("t")
    shared.admin.create_topic_now("t", PARTITIONS, 1, {})
    return shared


def batch(*values: bytes) -> bytes:
    return encode_batch([SimpleRecord(value=v, timestamp=1_700_000_000_000) for v in values])


def fetch_all(min_bytes: int, *, replica_id: int = -1, offset: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=30_000,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(partition=i, fetch_offset=offset, partition_max_bytes=1 << 20)
                    for i in range(PARTITIONS)
                ],
            )
        ],
    )


def records_of(response: FetchResponse) -> dict[int, list[tuple[int, bytes | None]]]:
    out: dict[int, list[tuple[int, bytes | None]]] = {}
    for partition in response.responses[0].partitions:
        assert partition.error_code == ErrorCode.NONE
        data = memoryview(_region_bytes(partition.records))
        pos = 0
        while pos < len(data):
            header, records = decode_batch(data, pos)
            out.setdefault(partition.partition_index, []).extend((r.offset, r.value) for r in records)
            pos += header.batch_length + LOG_OVERHEAD
    return out


def _region_bytes(records: Any) -> bytes:
    """A response's records: bytes, a file region or a list of regions."""
    if isinstance(records, FileRegion):
        return records.read()
    if isinstance(records, RegionList):
        return b"".join(_region_bytes(r) for r in records.regions)
    return bytes(records or b"")


def test_a_wake_up_reads_nothing_until_min_bytes_and_then_answers_once(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[str, int]] = []
    real_read = Partition.read

    def counting_read(self: Partition, *args: Any, **kwargs: Any) -> Any:
        reads.append((self.topic, self.index))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Partition, "read", counting_read)
    small = batch(b"a" * 10)

    async def scenario() -> None:
        parked = handle(broker, ctx(ApiKey.FETCH, 11), fetch_all(3 * len(small)))
        assert isinstance(parked, asyncio.Future)
        assert reads == []  # every partition is caught up: no log lookup at all
        now = broker.clock.now_ms()
        assert broker.replicas.append("t", 7, small, now_ms=now)[0] is ErrorCode.NONE
        assert broker.replicas.append("t", 3, batch(b"b" * 10), now_ms=now)[0] is ErrorCode.NONE
        assert not parked.done()
        assert reads == []  # counted from the append sizes, not read back
        assert broker.replicas.append("t", 7, batch(b"c" * 10), now_ms=now)[0] is ErrorCode.NONE
        assert parked.done()
        assert sorted(reads) == [("t", 3), ("t", 7)]  # the response, built once, reading what has data
        assert records_of(parked.result()) == {3: [(0, b"b" * 10)], 7: [(0, b"a" * 10), (1, b"c" * 10)]}

    asyncio.run(scenario())


def test_a_fetch_is_answered_when_this_broker_stops_leading(broker: Broker) -> None:
    async def scenario() -> None:
        parked = handle(broker, ctx(ApiKey.FETCH, 11), fetch_all(1))
        assert isinstance(parked, asyncio.Future)
        broker.replicas.delete("t", 4)
        errors = {p.partition_index: p.error_code for p in parked.result().responses[0].partitions}
        assert errors == {
            i: ErrorCode.NONE if i != 4 else ErrorCode.NOT_LEADER_OR_FOLLOWER for i in range(PARTITIONS)
        }

    asyncio.run(scenario())


def test_fetches_woken_by_one_append_share_one_read(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    real_read = Partition.read

    def counting_read(self: Partition, *args: Any, **kwargs: Any) -> Any:
        reads.append(self.index)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Partition, "read", counting_read)

    async def scenario() -> None:
        parked = [handle(broker, ctx(ApiKey.FETCH, 11), fetch_all(1)) for _ in range(5)]
        broker.replicas.append("t", 2, batch(b"one", b"two"), now_ms=broker.clock.now_ms())
        assert reads == [2]  # one read for the five consumers
        for fetch in parked:
            assert isinstance(fetch, asyncio.Future)
            assert records_of(fetch.result()) == {2: [(0, b"one"), (1, b"two")]}
            data = fetch.result().responses[0].partitions[2].records
            assert isinstance(data, bytes)  # small: read into memory once, one write per answer
            assert fetch.result() is parked[0].result()  # the same question: one answer, built once
        assert broker.fetch_purgatory.shared_reads is None  # nothing kept after the pass

    asyncio.run(scenario())


def test_woken_fetches_that_asked_differently_get_their_own_answers(broker: Broker) -> None:
    async def scenario() -> None:
        small = fetch_all(1)
        small.max_bytes = 10
        fetches = [fetch_all(1), fetch_all(1), small, fetch_all(1, offset=1)]
        parked = [handle(broker, ctx(ApiKey.FETCH, 11), f) for f in fetches]
        broker.replicas.append("t", 5, batch(b"a"), now_ms=broker.clock.now_ms())
        assert all(isinstance(f, asyncio.Future) for f in parked[:3])
        first, same, limited = (f.result() for f in parked[:3])
        assert same is first
        assert limited is not first
        assert records_of(first) == records_of(limited) == {5: [(0, b"a")]}  # the first batch goes whole
        assert isinstance(parked[3], FetchResponse)  # offset 1 is out of range: answered at once

    asyncio.run(scenario())


def test_a_large_shared_read_stays_a_file_region_and_read_committed_gets_its_aborted_list(
    broker: Broker,
) -> None:
    big = b"x" * (INLINE_BYTES + 1)

    async def scenario() -> None:
        committed = fetch_all(1)
        committed.isolation_level = 1
        parked = [handle(broker, ctx(ApiKey.FETCH, 11), committed) for _ in range(2)]
        broker.replicas.append("t", 3, batch(big), now_ms=broker.clock.now_ms())
        for fetch in parked:
            assert isinstance(fetch, asyncio.Future)
            result = fetch.result().responses[0].partitions[3]
            assert isinstance(result.records, FileRegion)
            assert result.aborted_transactions == []
            assert records_of(fetch.result()) == {3: [(0, big)]}

    asyncio.run(scenario())


def session_fetch(session_id: int, epoch: int, offsets: dict[int, int], *, max_bytes: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=max_bytes,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(partition=i, fetch_offset=o, partition_max_bytes=1 << 20)
                    for i, o in offsets.items()
                ],
            )
        ]
        if offsets
        else [],
    )


def test_an_incremental_fetch_reads_what_the_last_answer_left_unread(broker: Broker) -> None:
    """A partition left out of an answer by ``max_bytes`` is read by the next incremental fetch, though
    nothing changed in it and the request does not name it; caught-up partitions are not answered."""
    now = broker.clock.now_ms()
    broker.replicas.append("t", 1, batch(b"first"), now_ms=now)
    broker.replicas.append("t", 2, batch(b"second"), now_ms=now)
    full = handle(
        broker, ctx(ApiKey.FETCH, 11), session_fetch(0, 0, dict.fromkeys(range(PARTITIONS), 0), max_bytes=1)
    )
    assert full.session_id != 0
    assert {p: [v for _, v in r] for p, r in records_of(full).items()} == {1: [b"first"]}  # KIP-74: one batch
    step = handle(broker, ctx(ApiKey.FETCH, 11), session_fetch(full.session_id, 1, {1: 1}, max_bytes=1 << 20))
    assert step.session_id == full.session_id
    assert [(p.partition_index, p.high_watermark) for p in step.responses[0].partitions] == [(2, 1)]
    assert records_of(step) == {2: [(0, b"second")]}
    idle = handle(broker, ctx(ApiKey.FETCH, 11), session_fetch(full.session_id, 2, {2: 1}, max_bytes=1 << 20))
    assert (idle.session_id, idle.error_code, idle.responses) == (full.session_id, ErrorCode.NONE, [])
    stale = handle(broker, ctx(ApiKey.FETCH, 11), session_fetch(full.session_id, 2, {}, max_bytes=1 << 20))
    assert (stale.error_code, stale.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])


def count_lookups(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """From now on, every ``leader_partition`` lookup of ``broker`` is appended to the returned list (a read
    that would find a led partition in ``hosted_for_lookup`` asks ``leader_partition`` instead)."""
    looked_up: list[tuple[str, int]] = []
    real_lookup = broker.replicas.leader_partition

    def counting_lookup(topic: str, index: int) -> Any:
        looked_up.append((topic, index))
        return real_lookup(topic, index)

    monkeypatch.setattr(broker.replicas, "leader_partition", counting_lookup)
    monkeypatch.setattr(broker.replicas, "hosted_for_lookup", lambda: None)
    return looked_up


def test_a_woken_incremental_fetch_reads_only_the_partitions_that_changed(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An incremental fetch parked on its whole session (20 partitions) looks up, when appends wake it,
    only the partitions that changed while it waited (not the session), and answers exactly their records;
    the idle partitions are neither read nor answered."""
    full = handle(
        broker,
        ctx(ApiKey.FETCH, 11),
        session_fetch(0, 0, dict.fromkeys(range(PARTITIONS), 0), max_bytes=1 << 20),
    )
    assert (full.session_id != 0, full.responses[0].partitions[0].records) == (True, b"")
    first, second = batch(b"a" * 10), batch(b"b" * 10, b"c" * 10)
    looked_up = count_lookups(broker, monkeypatch)

    async def scenario() -> None:
        waiting = session_fetch(full.session_id, 1, {}, max_bytes=1 << 20)
        waiting.max_wait_ms, waiting.min_bytes = 30_000, len(first) + len(second)
        parked = handle(broker, ctx(ApiKey.FETCH, 11), waiting)
        assert isinstance(parked, asyncio.Future)
        assert len(looked_up) == PARTITIONS  # parking watches the whole session
        looked_up.clear()
        now = broker.clock.now_ms()
        assert broker.replicas.append("t", 6, first, now_ms=now)[0] is ErrorCode.NONE
        assert not parked.done()  # below min_bytes: counted, nothing read
        assert broker.replicas.append("t", 13, second, now_ms=now)[0] is ErrorCode.NONE
        assert parked.done()
        # per changed partition: the wake-up check and the answer's read (the append finds its partition
        # without this lookup); the 18 idle partitions of the session are not looked at
        assert sorted(looked_up) == [("t", 6)] * 2 + [("t", 13)] * 2
        answer = parked.result()
        assert answer.session_id == full.session_id
        assert [(p.partition_index, p.high_watermark) for p in answer.responses[0].partitions] == [
            (6, 1),
            (13, 2),
        ]
        assert records_of(answer) == {6: [(0, b"a" * 10)], 13: [(0, b"b" * 10), (1, b"c" * 10)]}

    asyncio.run(scenario())
    # the session goes on from there: partition 6 at offset 1 is caught up, nothing else changed
    looked_up.clear()
    step = handle(
        broker, ctx(ApiKey.FETCH, 11), session_fetch(full.session_id, 2, {6: 1, 13: 2}, max_bytes=1 << 20)
    )
    assert (step.error_code, step.responses) == (ErrorCode.NONE, [])


def test_a_woken_consumer_fetch_reads_only_what_changed_and_answers_every_partition(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sessionless consumer parked on 20 partitions: the appends that wake it cost lookups of the
    partitions appended to only; the answer still lists all 20 (a full fetch answers every partition), the
    unchanged ones as they were when it parked and the changed ones with exactly their new records. One that
    ends without a change (here: shutdown's complete_all, as an expiry) reads nothing at all."""
    looked_up = count_lookups(broker, monkeypatch)

    async def scenario() -> None:
        woken = handle(broker, ctx(ApiKey.FETCH, 11), fetch_all(2 * len(batch(b"a"))))
        idle = handle(broker, ctx(ApiKey.FETCH, 11), fetch_all(1, offset=0))
        assert isinstance(woken, asyncio.Future)
        assert isinstance(idle, asyncio.Future)
        looked_up.clear()
        now = broker.clock.now_ms()
        assert broker.replicas.append("t", 4, batch(b"a"), now_ms=now)[0] is ErrorCode.NONE
        assert idle.done()  # min_bytes 1: woken by the first append
        assert not woken.done()
        assert broker.replicas.append("t", 4, batch(b"b"), now_ms=now)[0] is ErrorCode.NONE
        assert woken.done()
        # the appends' own lookups, the wake-up checks and one read per answer: partition 4 alone
        assert set(looked_up) == {("t", 4)}
        for fetch, values in ((idle, [(0, b"a")]), (woken, [(0, b"a"), (1, b"b")])):
            answer = fetch.result()
            assert [
                (p.partition_index, p.error_code, p.high_watermark) for p in answer.responses[0].partitions
            ] == [(i, ErrorCode.NONE, 0 if i != 4 else len(values)) for i in range(PARTITIONS)]
            assert records_of(answer) == {4: values}
        looked_up.clear()
        caught_up = fetch_all(1)
        caught_up.topics[0].partitions[4].fetch_offset = 2
        unwoken = handle(broker, ctx(ApiKey.FETCH, 11), caught_up)
        assert isinstance(unwoken, asyncio.Future)
        assert len(looked_up) == PARTITIONS  # its first read watches each partition from the same lookup
        looked_up.clear()
        broker.fetch_purgatory.complete_all()
        assert looked_up == []  # nothing changed: answered as it was when it parked
        answer = unwoken.result()
        assert [(p.partition_index, p.high_watermark) for p in answer.responses[0].partitions] == [
            (i, 0 if i != 4 else 2) for i in range(PARTITIONS)
        ]
        assert records_of(answer) == {}

    asyncio.run(scenario())


def test_an_append_nothing_waits_on_starts_no_pass_yet_counts(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append to a partition no fetch waits on starts no pass of the fetch purgatory (no shared reads are
    made for it), yet it counts: its size for later waits, its change for fetch sessions (the next
    incremental fetch answers the partition though the request does not name it), and fetches parked right
    after it, in one step or in the general purgatory, are woken by the next append."""
    passes: list[int] = []
    real_shared_reads = fetch_purgatory.SharedReads

    def counting(*args: Any) -> Any:
        passes.append(1)
        return real_shared_reads(*args)

    monkeypatch.setattr(fetch_purgatory, "SharedReads", counting)
    purgatory = broker.fetch_purgatory
    full = handle(
        broker,
        ctx(ApiKey.FETCH, 11),
        session_fetch(0, 0, dict.fromkeys(range(PARTITIONS), 0), max_bytes=1 << 20),
    )
    assert full.session_id != 0
    count = purgatory.change_count
    first = batch(b"a")
    assert broker.replicas.append("t", 4, first, now_ms=broker.clock.now_ms())[0] is ErrorCode.NONE
    assert passes == []
    assert (purgatory.change_count, purgatory.last_change[("t", 4)]) == (count + 1, count + 1)
    assert purgatory.appended_bytes.between(("t", 4), 0, 1) == len(first)
    step = handle(broker, ctx(ApiKey.FETCH, 11), session_fetch(full.session_id, 1, {}, max_bytes=1 << 20))
    assert [(p.partition_index, p.high_watermark) for p in step.responses[0].partitions] == [(4, 1)]
    assert records_of(step) == {4: [(0, b"a")]}

    def at_end(*partitions: int) -> FetchRequest:
        request = fetch_all(1)
        request.topics[0].partitions = [p for p in request.topics[0].partitions if p.partition in partitions]
        request.topics[0].partitions[0].fetch_offset = 1  # partition 4's end
        return request

    async def scenario() -> None:
        one_step = handle(broker, ctx(ApiKey.FETCH, 11), at_end(4))
        general = handle(broker, ctx(ApiKey.FETCH, 11), at_end(4, 5))
        assert isinstance(one_step, asyncio.Future)
        assert isinstance(general, asyncio.Future)
        assert (purgatory.delayed, purgatory._parked) == (2, 1)
        assert broker.replicas.append("t", 4, batch(b"b"), now_ms=broker.clock.now_ms())[0] is ErrorCode.NONE
        assert passes == [1]
        assert one_step.done()
        assert general.done()
        assert records_of(one_step.result()) == records_of(general.result()) == {4: [(1, b"b")]}
        assert purgatory.delayed == 0

    asyncio.run(scenario())
