"""The failover checker itself (no cluster): each property it asserts fails with a readable diff when the
data breaks it, and a faithful history passes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.cluster.checker import (
    CheckFailed,
    History,
    PartitionLog,
    check,
    check_order,
    compare_replicas,
    replica_batches,
)

from tidelog.protocol.records_codec import SimpleRecord, encode_batch

pytestmark = pytest.mark.cluster

T = "orders"


def history_of(values_by_offset: dict[int, bytes], *, idempotent: bool = True) -> History:
    """Producer "p" sent and got acknowledged each value at its offset (partition 0)."""
    history = History(4242, "s4242")
    for offset, value in sorted(values_by_offset.items()):
        history.record_sent("p", value, idempotent=idempotent)
        history.record_ack("p", value, T, 0, offset)
    return history


def log(
    records: dict[int, bytes | None], high_watermark: int | None = None
) -> dict[tuple[str, int], PartitionLog]:
    hw = max(records, default=-1) + 1 if high_watermark is None else high_watermark
    return {(T, 0): PartitionLog(0, hw, dict(records))}


VALUES = {i: f"s4242/p/{i:07d}".encode() for i in range(20)}


def test_a_faithful_history_passes() -> None:
    history = history_of(VALUES)
    for offset, value in VALUES.items():
        history.record_read(T, 0, offset, value)
    check(history, log(VALUES))


def test_a_missing_acknowledged_record_is_named_with_its_offset_and_the_seed() -> None:
    history = history_of(VALUES)
    final = {o: v for o, v in VALUES.items() if o < 15}
    with pytest.raises(CheckFailed) as failure:
        check(history, log(final))
    text = str(failure.value)
    assert text.startswith("cluster scenario seed 4242 (rerun exactly this one with --cluster-seed=4242)")
    assert "orders-0 [log start 0, high watermark 15]:\n  5 acknowledged records missing or moved:" in text
    assert "    offset 15: acknowledged b's4242/p/0000015', found nothing" in text


def test_an_acknowledged_record_at_another_offset_says_where_it_is() -> None:
    history = history_of(VALUES)
    final = dict(VALUES)
    final[3], final[4] = VALUES[4], VALUES[3]
    with pytest.raises(CheckFailed) as failure:
        check(history, log(final))
    text = str(failure.value)
    assert "2 acknowledged records missing or moved:" in text
    assert (
        "offset 3: acknowledged b's4242/p/0000003', found b's4242/p/0000004' (it is at [(('orders', 0), 4)])"
        in text
    )


def test_a_record_nobody_sent_is_reported() -> None:
    history = history_of(VALUES)
    final = {**VALUES, 20: b"garbage"}
    with pytest.raises(
        CheckFailed, match=re.escape("1 records nobody sent, first at offsets:\n    offset 20: b'garbage'")
    ):
        check(history, log(final))
    history.allow([b"garbage"])
    check(history, log(final))


def test_a_record_read_then_gone_or_changed_is_reported() -> None:
    history = History(1, "s1")
    history.record_sent("p", b"a", idempotent=False)
    history.record_sent("p", b"b", idempotent=False)
    history.record_read(T, 0, 0, b"a")  # read but never acknowledged (acks=all still pending)
    history.record_read(T, 0, 1, b"b")
    with pytest.raises(CheckFailed) as failure:
        check(history, log({0: b"b"}, high_watermark=1))
    text = str(failure.value)
    assert "2 records read by a consumer are gone or changed:" in text
    assert "offset 0: read b'a', now b'b'" in text
    assert "offset 1: read b'b', now nothing" in text


def test_two_values_read_at_one_offset_are_a_conflict() -> None:
    history = history_of(VALUES)
    history.record_read(T, 0, 2, VALUES[2])
    history.record_read(T, 0, 2, VALUES[5])
    with pytest.raises(
        CheckFailed, match=re.escape("orders-0 offset 2: b's4242/p/0000002' then b's4242/p/0000005'")
    ):
        check(history, log(VALUES))


def test_an_idempotent_producers_value_twice_is_a_duplicate_but_a_plain_ones_is_not() -> None:
    history = history_of(VALUES)
    final = {**VALUES, 20: VALUES[7]}
    with pytest.raises(CheckFailed, match="1 values of idempotent producers written more than once"):
        check(history, log(final))
    check(history_of(VALUES, idempotent=False), log(final))


def test_a_copy_under_a_higher_producer_epoch_is_the_clients_resend_but_one_epoch_twice_fails() -> None:
    """librdkafka re-sends records it had not seen acknowledged under a bumped producer epoch: the broker
    cannot deduplicate across epochs (nor can Kafka's). Two copies under one epoch are the broker's fault."""

    def history() -> History:  # offset 3 written, never acknowledged; acknowledged when written again at 20
        resent = history_of({o: v for o, v in VALUES.items() if o != 3})
        resent.record_sent("p", VALUES[3], idempotent=True)
        resent.record_ack("p", VALUES[3], T, 0, 20)
        return resent

    records = {**VALUES, 20: VALUES[3]}
    bumped = dict.fromkeys(VALUES, (7, 0)) | {20: (7, 1)}
    accepted = history()
    check(accepted, log(records), producers={(T, 0): bumped})
    assert accepted.resent_under_new_epoch == [(VALUES[3], [((T, 0), 3), ((T, 0), 20)])]
    assert "re-sent by a client under a new producer epoch: 1" in accepted.summary()
    for stamps in ({**bumped, 20: (7, 0)}, {**bumped, 20: (8, 1)}, {**bumped, 3: (7, 2)}):
        with pytest.raises(CheckFailed, match="1 values of idempotent producers written more than once"):
            check(history(), log(records), producers={(T, 0): stamps})
    with pytest.raises(CheckFailed, match="1 values of idempotent producers written more than once"):
        check(history(), log(records))


def test_an_acknowledgement_without_offset_needs_the_value_in_the_partition() -> None:
    history = history_of({0: VALUES[0]})
    history.record_sent("p", VALUES[1], idempotent=True)
    history.record_ack("p", VALUES[1], T, 0, None)
    check(history, log({0: VALUES[0], 1: VALUES[1]}))
    with pytest.raises(
        CheckFailed, match="1 records acknowledged without an offset are not in the partition"
    ):
        check(history, log({0: VALUES[0]}))


def test_a_fatal_error_told_to_an_idempotent_producer_fails() -> None:
    history = history_of(VALUES)
    history.record_failure("p", b"x", "OUT_OF_ORDER_SEQUENCE_NUMBER", fatal=True)
    with pytest.raises(CheckFailed, match="idempotent producers were told fatal errors"):
        check(history, log(VALUES))


# ---- replicas on disk ----


def write_segments(data_dir: Path, segments: dict[int, list[bytes]]) -> None:
    directory = data_dir / f"{T}-0"
    directory.mkdir(parents=True)
    for base, batches in segments.items():
        (directory / f"{base:020d}.log").write_bytes(b"".join(batches))


def batch(base: int, count: int, epoch: int, tag: bytes = b"v") -> bytes:
    return encode_batch(
        [SimpleRecord(value=tag + str(base + i).encode(), timestamp=1000) for i in range(count)],
        base_offset=base,
        partition_leader_epoch=epoch,
    )


def test_identical_replicas_with_different_segment_boundaries_and_retention_agree(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_segments(a, {0: [batch(0, 5, 0), batch(5, 5, 0)], 10: [batch(10, 5, 1), batch(15, 5, 1)]})
    # b rolled elsewhere, deleted its first segment already, and has a torn, zeroed tail past the HW
    write_segments(
        b, {5: [batch(5, 5, 0), batch(10, 5, 1)], 15: [batch(15, 5, 1), batch(20, 3, 1)[:30], bytes(64)]}
    )
    assert compare_replicas({1: a, 2: b}, T, 0, 20) == []
    assert [x.base_offset for x in replica_batches(b, T, 0, 20)] == [5, 10, 15]


def test_a_replica_that_diverged_or_stops_short_is_reported(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_segments(a, {0: [batch(0, 5, 0), batch(5, 5, 1)]})
    write_segments(b, {0: [batch(0, 5, 0), batch(5, 5, 2, tag=b"other")]})
    write_segments(c, {0: [batch(0, 5, 0)]})
    problems = compare_replicas({1: a, 2: b, 3: c}, T, 0, 10)
    assert problems[0] == "orders-0: broker 3's log ends at 5, below the high watermark 10"
    assert problems[1].startswith("orders-0: brokers 1 and 2 differ at offset 5: batch [5, 9] epoch 1")
    assert " vs batch [5, 9] epoch 2 " in problems[1]


def test_reads_in_offset_order_exactly_once_and_values_in_send_order_pass() -> None:
    history = history_of(VALUES)
    for offset, value in VALUES.items():
        history.record_read(T, 0, offset, value, reader="r")
    check_order(history, log(VALUES), in_send_order=["p"])


@pytest.mark.parametrize(
    ("offsets", "difference"),
    [
        ([0, 1, 2, 4, 5], "first difference at position 3: read [1, 2, 4, 5], expected [1, 2, 3, 4, 5]"),
        (
            [0, 1, 2, 2, 3, 4, 5],
            "first difference at position 3: read [1, 2, 2, 3, 4], expected [1, 2, 3, 4, 5]",
        ),
        (
            [0, 1, 3, 2, 4, 5],
            "first difference at position 2: read [0, 1, 3, 2, 4], expected [0, 1, 2, 3, 4]",
        ),
        ([0, 1, 2, 3], "first difference at position 4: read [2, 3], expected [2, 3, 4, 5]"),
    ],
    ids=["gap", "repeat", "step-back", "short"],
)
def test_a_reader_that_skipped_repeated_or_reordered_offsets_is_named(
    offsets: list[int], difference: str
) -> None:
    values = {o: v for o, v in VALUES.items() if o < 6}
    history = history_of(values)
    for offset in offsets:
        history.record_read(T, 0, offset, values[offset], reader="reader-0")
    with pytest.raises(CheckFailed) as failure:
        check_order(history, log(values))
    assert (
        f"reader-0 on orders-0: read {len(offsets)} offsets ({len(set(offsets))} distinct), expected 6 [0, 6); "
        f"{difference}" in str(failure.value)
    )


def test_values_out_of_send_order_are_named_for_producers_that_keep_order_only() -> None:
    swapped = dict(VALUES)
    swapped[3], swapped[4] = VALUES[4], VALUES[3]
    history = history_of(VALUES)
    check_order(history, log(swapped))  # not asked for "p"
    with pytest.raises(CheckFailed) as failure:
        check_order(history, log(swapped), in_send_order=["p"])
    assert "orders-0: p's seq 3 at offset 4 after its seq 4 at offset 3 (sent in the other order)" in str(
        failure.value
    )
