"""The share runtime in process, on a manual clock: retry backoff (``share.release.backoff.ms``, its
multiplier and maximum, set through the injected group-config lookup) spaces redeliveries exactly; what
joins a share-partition's window: transaction markers and (read_committed) aborted batches archived,
records with a delivery time available only from then and outside the record-lock count."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.support.share_groups import in_process_broker

from tidelog.coordinator.share.share_partition import AcquiredRange, RecordState, SharePartition
from tidelog.protocol.compression import Compression
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import ShareFetchRequest, ShareFetchResponse
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.protocol.records_codec import ControlRecordType, encode_control_batch
from tidelog.server.admin_manager import AdminManager
from tidelog.server.clock import ManualClock
from tidelog.server.share_admission import ReadAhead, admission, scan
from tidelog.storage.fetch_data import FetchDataInfo

GROUP = "g"
CONFIGS = {
    GROUP: {
        "share.auto.offset.reset": "earliest",
        "share.release.backoff.ms": "100",
        "share.release.backoff.multiplier": "2",
        "share.release.backoff.max.ms": "300",
        "share.delivery.count.limit": "10",
    }
}


def test_release_backoff_spacing(tmp_path: Path) -> None:
    clock = ManualClock()
    broker = in_process_broker(tmp_path, clock)
    try:
        assert isinstance(broker.admin, AdminManager)
        topic = broker.admin.create_topic_now("t", 1, 1, {})
        broker.shares.group_configs = lambda group: CONFIGS.get(group, {})
        batch = encode_batch([SimpleRecord(value=b"x", timestamp=clock.now_ms())])
        error, _, _ = broker.replicas.append("t", 0, batch, now_ms=clock.now_ms())
        assert error == ErrorCode.NONE
        member = uuid.uuid4().hex
        epoch = 0

        def fetch(release: int | None = None) -> list[tuple[int, int, int]]:
            nonlocal epoch
            acks = []
            if release is not None:
                acks = [
                    ShareFetchRequest.AcknowledgementBatch(
                        first_offset=release, last_offset=release, acknowledge_types=[2]
                    )
                ]
            request = ShareFetchRequest(
                group_id=GROUP,
                member_id=member,
                share_session_epoch=epoch,
                max_wait_ms=0,
                max_bytes=1 << 20,
                max_records=10,
                topics=[
                    ShareFetchRequest.FetchTopic(
                        topic_id=topic.topic_id,
                        partitions=[
                            ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=acks)
                        ],
                    )
                ],
            )
            epoch += 1
            answer = broker.shares.fetch(request)
            assert isinstance(answer, ShareFetchResponse)
            part = answer.responses[0].partitions[0]
            assert (part.error_code, part.acknowledge_error_code) == (ErrorCode.NONE, ErrorCode.NONE)
            return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]

        assert fetch() == [(0, 0, 1)]
        gaps = []
        for delivery in (2, 3, 4, 5):
            assert fetch(release=0) == []  # released now: not before its backoff
            waited = 0
            while waited < 1000:
                clock.advance(1)
                waited += 1
                got = fetch()
                if got:
                    assert got == [(0, 0, delivery)]
                    break
            gaps.append(waited)
        assert gaps == [100, 200, 300, 300]  # 100 ms, doubled, capped at 300 ms
    finally:
        broker.logs.shutdown(clock.now_ms())


def test_admission_skips_markers_and_aborted_batches_and_finds_delivery_times() -> None:
    plain = encode_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")], base_offset=0)
    aborted = encode_batch(
        [SimpleRecord(value=b"x"), SimpleRecord(value=b"y")],
        base_offset=2,
        producer_id=7,
        producer_epoch=0,
        is_transactional=True,
    )
    marker = encode_control_batch(
        ControlRecordType.ABORT,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=0,
        base_offset=4,
        timestamp_ms=0,
    )
    delayed = encode_batch(
        [SimpleRecord(value=b"d", headers=(("tidelog.deliver.at", b"5000"),), timestamp=1)], base_offset=5
    )
    data = plain + aborted + marker + delayed
    # read_uncommitted: only the marker is skipped
    assert admission(data, 1, 6, 1000, []) == ([(5, 5000)], [(4, 4)])
    # read_committed: the aborted transaction's batch too
    assert admission(data, 1, 6, 1000, [(7, 2)]) == ([(5, 5000)], [(2, 3), (4, 4)])


def test_admission_finds_delivery_times_in_compressed_and_mixed_batches() -> None:
    # the scan that spares batches without a delivery-time header the per-record decode still finds every
    # one: behind plain records, under both header names, and inside a compressed batch
    plain = encode_batch([SimpleRecord(value=b"tidelog.deliver", timestamp=1)] * 3, base_offset=0)
    mixed = encode_batch(
        [
            SimpleRecord(value=b"a", headers=(("other", b"1"),), timestamp=1),
            SimpleRecord(value=b"b", headers=(("tidelog.deliver.after.ms", b"4000"),), timestamp=1000),
        ],
        base_offset=3,
    )
    packed = encode_batch(
        [
            SimpleRecord(value=b"c", timestamp=1),
            SimpleRecord(value=b"d", headers=(("tidelog.deliver.at", b"9000"),), timestamp=1),
        ],
        base_offset=5,
        compression=Compression.GZIP,
    )
    assert admission(plain + mixed + packed, 0, 7, 1000, []) == ([(4, 5000), (6, 9000)], [])
    assert admission(plain, 0, 3, 1000, []) == ([], [])


def test_a_scan_ahead_answers_a_read_it_covers_as_the_read_itself_would() -> None:
    # a share-partition's next batches, scanned between two fetches of its member (share_admission): a
    # fetch reading from the same offset, no further, gets what admitting its own read would give
    plain = encode_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")], base_offset=0)
    marker = encode_control_batch(
        ControlRecordType.COMMIT,
        producer_id=7,
        producer_epoch=0,
        coordinator_epoch=0,
        base_offset=2,
        timestamp_ms=0,
    )
    delayed = encode_batch(
        [
            SimpleRecord(value=b"d", headers=(("tidelog.deliver.at", b"5000"),), timestamp=1),
            SimpleRecord(value=b"e", headers=(("tidelog.deliver.at", b"6000"),), timestamp=1),
        ],
        base_offset=3,
    )
    ahead = scan(plain + marker + delayed, 0, 5, 5, 1000)
    assert ahead.covering(0, 5, 5) == ([(3, 5000), (4, 6000)], [(2, 2)], [1, 2, 4])
    # the whole read, below a lower fetchable end; and a shorter read (a prefix of the batches)
    assert ahead.covering(0, 5, 4) == (*admission(plain + marker + delayed, 0, 4, 1000, []), [1, 2, 4])
    assert ahead.covering(0, 3, 3) == (*admission(plain + marker, 0, 3, 1000, []), [1, 2, 4])
    assert ahead.covering(0, 3, 3)[:2] == ([], [(2, 2)])
    # another start (the window moved, or records before it are read again), or a longer read: not covered
    assert ahead.covering(1, 5, 5) is None
    assert ahead.covering(0, 6, 5) is None
    assert ahead.covering(0, 5, 6) is None
    # the read itself is sent again only by a read with the same bounds at the same fetchable end
    read = ReadAhead(5, 1 << 20, 500, FetchDataInfo(0, (), 0, 5), ahead)
    assert read.same_read(0, 5, 1 << 20, 500)
    assert not read.same_read(0, 6, 1 << 20, 500)  # appended since: the read may go further
    assert not read.same_read(0, 5, 1 << 10, 500)
    assert not read.same_read(0, 5, 1 << 20, 400)
    assert not read.same_read(1, 5, 1 << 20, 500)


def test_skipped_and_delayed_offsets_join_the_window_without_being_acquired() -> None:
    sp = SharePartition(0, max_record_locks=100)
    got = sp.acquire("m", 10, 8, 0, 1000, delays=[(5, 500)], skip=[(2, 4)])
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(6, 7, 1)]
    assert [(r.first, r.last, r.state) for r in sp.ranges] == [
        (0, 1, RecordState.ACQUIRED),
        (2, 4, RecordState.ARCHIVED),
        (5, 5, RecordState.AVAILABLE),
        (6, 7, RecordState.ACQUIRED),
    ]
    assert sp.in_flight == 7  # the delayed record is not counted
    assert sp.acquire("m", 10, 8, 499, 1000) == []
    assert sp.acquire("m", 10, 8, 500, 1000) == [AcquiredRange(5, 5, 1)]
