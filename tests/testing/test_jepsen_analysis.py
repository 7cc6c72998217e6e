"""The Jepsen checker's analysis on hand-written histories: a faithful history passes, and each anomaly
kind is found and named (so the checker cannot pass silently), with the seed first in the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing.jepsen import ANOMALIES, FinalPartition, History, analyse
from tidelog.testing.jepsen.analysis import Report

T, X = "jepsen", "jepsen-txn"


def v(client: str, seq: int) -> bytes:
    return History.value(client, seq)


def clean_history() -> tuple[History, dict[tuple[str, int], FinalPartition]]:
    """Producer p sends 0..5 to partition 0 (acked at 0..5); consumer c reads them all; transaction t1
    (committed) writes p2's 0 and 1 to txn partitions 0 and 1, t2 (aborted) p2's 2."""
    h = History(77)
    for seq in range(6):
        h.send("p", T, 0, v("p", seq))
    for seq in range(6):
        h.ack("p", T, 0, seq, v("p", seq))
        h.read("c", T, 0, seq, v("p", seq))
    h.send("p2", X, 0, v("p2", 0), txn="t1")
    h.send("p2", X, 1, v("p2", 1), txn="t1")
    h.txn("p2", "t1", "commit", [v("p2", 0), v("p2", 1)])
    h.send("p2", X, 0, v("p2", 2), txn="t2")
    h.txn("p2", "t2", "abort", [v("p2", 2)])
    h.read("rc", X, 0, 0, v("p2", 0))
    h.read("rc", X, 1, 0, v("p2", 1))
    final = {
        (T, 0): FinalPartition(0, 6, {o: v("p", o) for o in range(6)}),
        (X, 0): FinalPartition(0, 4, {0: v("p2", 0)}),  # 1: commit marker, 2: aborted, 3: abort marker
        (X, 1): FinalPartition(0, 2, {0: v("p2", 1)}),
    }
    return h, final


def run(h: History, final: dict[tuple[str, int], FinalPartition]) -> Report:
    return analyse(h, final, gapless_topics={T}, committed_topics={X})


def only(report: Report, kind: str) -> list[str]:
    assert kind in ANOMALIES
    others = {k: lines for k, lines in report.anomalies.items() if lines and k != kind}
    assert not others, others
    assert not report.ok
    return report.anomalies[kind]


def test_a_clean_history_passes() -> None:
    h, final = clean_history()
    report = run(h, final)
    assert report.ok, report.render()
    assert report.stats == {
        "sent": 9,
        "acknowledged": 6,
        "failed": 0,
        "read": 8,
        "transactions": 2,
        "stored": 8,
    }
    assert report.render().splitlines()[0] == "jepsen seed 77"
    assert report.render().splitlines()[-1] == "no anomalies"


def test_an_acknowledged_record_missing_is_lost() -> None:
    h, final = clean_history()
    del final[(T, 0)].records[5]
    final[(T, 0)].high_watermark = 5
    report = run(h, final)
    lost = report.anomalies["lost"]
    assert len(lost) == 1
    assert lost[0].startswith("jepsen-0 offset 5: b'p/00000005' acknowledged to p at ")
    assert lost[0].endswith(", found None")
    # the consumer read it too: that read is gone as well
    assert report.anomalies["read-changed"] == [
        "c read b'p/00000005' at jepsen-0 offset 5, the log now holds None"
    ]


def test_an_acknowledged_record_without_offset_must_be_in_its_partition() -> None:
    h, final = clean_history()
    h.send("p", T, 0, v("p", 6))
    h.ack("p", T, 0, None, v("p", 6))
    assert only(run(h, final), "lost") == [
        "jepsen-0: b'p/00000006' acknowledged (no offset) to p, not stored"
    ]


def test_a_value_stored_twice_is_duplicated() -> None:
    h, final = clean_history()
    final[(T, 0)].records[6] = v("p", 3)
    final[(T, 0)].high_watermark = 7
    assert only(run(h, final), "duplicated") == ["b'p/00000003' (p) stored 2 times: jepsen-0@3, jepsen-0@6"]


def test_stored_out_of_send_order_is_out_of_order() -> None:
    h = History(1)
    for seq in range(3):
        h.send("p", T, 0, v("p", seq))
    final = {(T, 0): FinalPartition(0, 3, {0: v("p", 0), 1: v("p", 2), 2: v("p", 1)})}
    lines = only(run(h, final), "out-of-order")
    assert lines == ["jepsen-0: p's seq 1 stored at offset 2, after its seq 2 at offset 1"]


def test_acknowledged_out_of_send_order_is_out_of_order() -> None:
    h, final = clean_history()
    h.ack("p", T, 0, 2, v("p", 4))  # a second acknowledgement of seq 4, below seq 3's offset
    report = run(h, final)
    assert (
        "jepsen-0: p's seq 4 acknowledged at offset 2, not after its seq 3 at 3"
        in report.anomalies["out-of-order"]
    )


def test_a_value_nobody_sent_is_unexpected() -> None:
    h, final = clean_history()
    final[(T, 0)].records[6] = b"garbage"
    assert only(run(h, final), "unexpected") == ["jepsen-0 offset 6: b'garbage' was never sent"]


def test_a_consumer_going_back_is_non_monotonic() -> None:
    h, final = clean_history()
    h.read("c", T, 0, 2, v("p", 2))
    lines = only(run(h, final), "non-monotonic")
    assert len(lines) == 1
    assert lines[0].startswith("c read jepsen-0 offset 2 after offset 5 at ")


def test_a_consumer_skipping_offsets_is_a_gap_but_not_on_a_transactional_topic() -> None:
    h = History(1)
    for seq in range(4):
        h.send("p", T, 0, v("p", seq))
    h.read("c", T, 0, 0, v("p", 0))
    h.read("c", T, 0, 3, v("p", 3))
    final = {(T, 0): FinalPartition(0, 4, {o: v("p", o) for o in range(4)})}
    lines = only(run(h, final), "gap")
    assert len(lines) == 1
    assert lines[0].startswith("c read jepsen-0 offset 3 right after offset 0: skipped 2 at ")
    # markers and aborted records leave gaps on a transactional topic: not an anomaly there
    _h, clean_final = clean_history()
    assert run(_h, clean_final).ok


def test_a_read_of_a_value_the_log_no_longer_holds_is_read_changed() -> None:
    h, final = clean_history()
    h.send("q", T, 0, v("q", 0))
    final[(T, 0)].records[5] = v("q", 0)  # offset 5 rewritten after c read p's seq 5 there
    report = run(h, final)
    assert report.anomalies["read-changed"] == [
        "c read b'p/00000005' at jepsen-0 offset 5, the log now holds b'q/00000000'"
    ]


def test_reading_an_aborted_value_is_an_aborted_read() -> None:
    h, final = clean_history()
    h.read("rc", X, 0, 2, v("p2", 2))
    lines = run(h, final).anomalies["aborted-read"]
    assert lines == ["rc read b'p2/00000002' of aborted transaction t2 at jepsen-txn-0 offset 2"]


def test_an_aborted_value_in_the_committed_log_is_an_aborted_read() -> None:
    h, final = clean_history()
    final[(X, 0)].records[2] = v("p2", 2)
    assert only(run(h, final), "aborted-read") == [
        "b'p2/00000002' of aborted transaction t2 is in the committed log"
    ]


def test_a_transaction_partly_visible_is_half_visible() -> None:
    h, final = clean_history()
    del final[(X, 1)].records[0]
    h2 = History(77, (op for op in h.ops if not (op.kind == "read" and op.topic == X and op.partition == 1)))
    assert only(run(h2, final), "half-visible") == [
        "transaction t1 (commit): 1 of 2 values visible, missing [b'p2/00000001']"
    ]


def test_a_committed_transaction_with_nothing_left_is_lost() -> None:
    h, final = clean_history()
    final[(X, 0)].records.clear()
    final[(X, 1)].records.clear()
    h2 = History(77, (op for op in h.ops if not (op.kind == "read" and op.topic == X)))
    assert only(run(h2, final), "lost") == ["committed transaction t1: none of its 2 values is stored"]


def test_a_fatal_error_told_to_a_producer_is_reported() -> None:
    h, final = clean_history()
    h.fail("p", v("p", 9), "OUT_OF_ORDER_SEQUENCE_NUMBER", fatal=True)
    h.fail("p", v("p", 8), "_MSG_TIMED_OUT")  # a plain failure is not an anomaly
    lines = only(run(h, final), "fatal")
    assert len(lines) == 1
    assert lines[0].endswith(": OUT_OF_ORDER_SEQUENCE_NUMBER")


def test_a_failing_report_starts_with_the_seed_and_the_rerun_command(tmp_path: Path) -> None:
    h, final = clean_history()
    final[(T, 0)].records[6] = b"garbage"
    report = run(h, final)
    report.rerun = "python -m tidelog.testing.jepsen --seed 77 --cycles 3"
    text = report.render()
    assert (
        text.splitlines()[0]
        == "jepsen seed 77 (rerun: python -m tidelog.testing.jepsen --seed 77 --cycles 3)"
    )
    assert "unexpected: 1\n  jepsen-0 offset 6: b'garbage' was never sent" in text
    # the history round-trips through JSON lines and gives the same report
    path = tmp_path / "history.jsonl"
    h.dump(path)
    again = run(History.load(path), final)
    assert again.anomalies == report.anomalies
    assert again.seed == 77


@pytest.mark.parametrize("kind", ANOMALIES)
def test_every_anomaly_kind_has_a_test_here(kind: str) -> None:
    source = Path(__file__).read_text()
    assert f'"{kind}"' in source
