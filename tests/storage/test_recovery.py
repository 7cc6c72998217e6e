"""Loading and recovery: index rebuilds, torn tails, random truncation and byte flips, leftovers, swaps.

Corruption runs are seeded (one seed per case), so a failure names a reproducible case. The property: the
recovered log is exactly a prefix of what was written (batch headers and every record), nothing before the
recovery point is lost when the damage lies after it, and the log accepts appends again. A batch's
partition_leader_epoch is compared apart: it lies outside the CRC (Kafka's format), so a flip there is
undetectable by design and the test only requires the other fields to match.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest
from tests.storage.helpers import SMALL, batch, decode_all, headers, open_log, read_everything

from tidelog.protocol.records import Compression, Record, RecordBatchHeader, SimpleRecord, encode_batch
from tidelog.storage import layout
from tidelog.storage.config import LogConfig
from tidelog.storage.partition_log import PartitionLog

Batch = tuple[RecordBatchHeader, list[Record]]

# More seeds under the "thorough" hypothesis profile (see tests/conftest.py).
SCALE = 30 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 1


def normalized(batches: list[Batch]) -> list[Batch]:
    return [(dataclasses.replace(h, partition_leader_epoch=0), records) for h, records in batches]


def write_random_log(directory: Path, rng: random.Random, config: LogConfig = SMALL) -> list[Batch]:
    """A log of 5-40 batches of random shapes; returns its decoded batches. The log is left unclosed
    (as after a crash: preallocated indexes, no final time index entries)."""
    log = open_log(directory, config)
    for seq in range(rng.randint(5, 40)):
        codec = rng.choice(
            [Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
        )
        data = batch(
            seq,
            records=rng.randint(1, 6),
            value_size=rng.randint(0, 120),
            compression=codec,
            timestamp=seq * 100,
        )
        log.append(data, leader_epoch=rng.randint(0, 3), now_ms=seq)
    written = decode_all(log.read(0, 10**9).read_bytes())
    del log  # no close: a crash of the process
    return written


def segment_files(
    directory: Path, suffixes: tuple[str, ...] = (".log", ".index", ".timeindex")
) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in suffixes)


def damage(rng: random.Random, path: Path, *, not_before: int = 0) -> str:
    """Truncate, flip bytes, zero a range or append garbage at/after ``not_before``; returns what it did."""
    data = bytearray(path.read_bytes())
    size = len(data)
    actions = (
        ["garbage_tail"] if size <= not_before else ["truncate", "flip", "flips", "zero", "garbage_tail"]
    )
    action = rng.choice(actions)
    if action == "truncate":
        cut = rng.randint(not_before, size - 1)
        del data[cut:]
        what = f"truncate {path.name} to {cut}"
    elif action == "flip":
        pos = rng.randint(not_before, size - 1)
        data[pos] ^= 1 << rng.randint(0, 7)
        what = f"flip a bit of {path.name} at {pos}"
    elif action == "flips":
        positions = sorted(rng.randint(not_before, size - 1) for _ in range(rng.randint(2, 8)))
        for pos in positions:
            data[pos] = rng.randint(0, 255)
        what = f"overwrite {path.name} at {positions}"
    elif action == "zero":
        start = rng.randint(not_before, size - 1)
        end = min(size, start + rng.randint(1, 200))
        data[start:end] = bytes(end - start)
        what = f"zero {path.name}[{start}:{end}]"
    else:
        extra = rng.randbytes(rng.randint(1, 300))
        data += extra
        what = f"append {len(extra)} garbage bytes to {path.name}"
    path.write_bytes(bytes(data))
    return what


def check_prefix(log: PartitionLog, written: list[Batch], what: str) -> int:
    """Assert the log holds exactly a prefix of ``written``; return its length in batches."""
    recovered = decode_all(read_everything(log))
    k = len(recovered)
    assert k <= len(written), what
    assert normalized(recovered) == normalized(written[:k]), what
    expected_end = written[k - 1][0].next_offset if k else 0
    assert log.log_end_offset == expected_end, what
    for _, records in recovered:  # timestamp lookups answer from the recovered data only
        assert log.offset_for_timestamp(records[0].timestamp) == (records[0].offset, records[0].timestamp), (
            what
        )
    assert log.offset_for_timestamp(10**9) is None, what
    return k


def check_appendable(log: PartitionLog, written_prefix: int) -> None:
    end = log.log_end_offset
    info = log.append(batch(999), leader_epoch=9, now_ms=10**6)
    assert info.first_offset == end
    assert decode_all(log.read(end, 10**6).read_bytes())[0][1][0].key == b"k000999-0"
    assert written_prefix >= 0


@pytest.mark.parametrize("seed", range(60 * SCALE))
def test_random_damage_then_unclean_recovery_leaves_a_prefix(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "t-0"
    written = write_random_log(directory, rng)
    what = "; ".join(damage(rng, rng.choice(segment_files(directory))) for _ in range(rng.randint(1, 3)))
    log = open_log(directory, SMALL, now_ms=10**6, clean=False, recovery_point=0)
    k = check_prefix(log, written, what)
    check_appendable(log, k)
    log.close()
    reopened = open_log(directory, SMALL, now_ms=10**6, clean=True)
    assert normalized(decode_all(read_everything(reopened)))[:k] == normalized(written[:k]), what
    reopened.close()


@pytest.mark.parametrize("seed", range(40 * SCALE))
def test_damage_after_the_recovery_point_keeps_everything_before_it(tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    flushed_batches = rng.randint(1, 25)
    total = flushed_batches + rng.randint(1, 20)
    for seq in range(total):
        log.append(
            batch(seq, records=rng.randint(1, 5), value_size=rng.randint(0, 100), timestamp=seq * 100),
            leader_epoch=0,
            now_ms=0,
        )
        if seq + 1 == flushed_batches:
            log.flush()
    recovery_point = log.recovery_point
    written = decode_all(log.read(0, 10**9).read_bytes())
    # Where the recovery point lies: damage only bytes at or after it (any index file may be damaged).
    rp_segment = [s for s in log.segments if s.base_offset <= recovery_point][-1]
    rp_position = (
        log.read(recovery_point, 10**9).regions[0].position
        if recovery_point < log.log_end_offset
        else rp_segment.size
    )
    bases = [s.base_offset for s in log.segments]
    del log
    what = []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(segment_files(directory))
        base = layout.offset_from_file_name(path.name)
        assert base is not None
        if path.suffix == ".log":
            if base < rp_segment.base_offset:
                continue
            what.append(damage(rng, path, not_before=rp_position if base == rp_segment.base_offset else 0))
        else:
            what.append(damage(rng, path))
    log = open_log(directory, SMALL, clean=False, recovery_point=recovery_point)
    k = check_prefix(log, written, f"{what}, recovery point {recovery_point} in {bases}")
    assert (written[k - 1][0].next_offset if k else 0) >= recovery_point, what
    assert log.recovery_point <= log.log_end_offset
    check_appendable(log, k)
    log.close()


@pytest.mark.parametrize("seed", range(30 * SCALE))
def test_damaged_indexes_after_a_clean_shutdown_lose_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(2000 + seed)
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(rng.randint(10, 40)):
        log.append(batch(seq, records=rng.randint(1, 4), timestamp=seq * 100), leader_epoch=0, now_ms=0)
    written = decode_all(log.read(0, 10**9).read_bytes())
    log.close()
    what = [damage(rng, rng.choice(segment_files(directory, (".index", ".timeindex")))) for _ in range(3)]
    if rng.random() < 0.3:
        victim = rng.choice(segment_files(directory, (".index", ".timeindex")))
        victim.unlink()
        what.append(f"delete {victim.name}")
    log = open_log(directory, SMALL, clean=True)
    assert check_prefix(log, written, str(what)) == len(written)
    for h, _ in written:  # every offset reads back from its own batch
        for offset in (h.base_offset, h.last_offset):
            assert headers(log.read(offset, 1).read_bytes())[0].base_offset == h.base_offset, what
    log.close()


def test_missing_and_garbage_indexes_are_rebuilt_identically(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(30):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    log.close()
    originals = {p.name: p.read_bytes() for p in segment_files(directory, (".index", ".timeindex"))}
    names = sorted(originals)
    (directory / names[0]).unlink()
    (directory / names[1]).write_bytes(b"\xff" * 13)
    (directory / names[2]).write_bytes(originals[names[2]] + bytes(8 * 5))  # untrimmed, zero tail
    reopened = open_log(directory, SMALL, clean=True)
    reopened.close()
    assert {p.name: p.read_bytes() for p in segment_files(directory, (".index", ".timeindex"))} == originals


def test_index_entry_pointing_at_the_wrong_batch_is_caught_on_lookup(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig(index_interval_bytes=200))
    for seq in range(40):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    written = log.read(0, 10**9).read_bytes()
    log.close()
    index_path = directory / "00000000000000000000.index"
    raw = bytearray(index_path.read_bytes())
    original = bytes(raw)
    raw[8 * 5 + 7] += 1  # position of entry 5 moves one byte: still monotonic, passes the sanity check
    index_path.write_bytes(bytes(raw))
    entry_offset = int.from_bytes(raw[40:44], "big")
    log = open_log(directory, LogConfig(index_interval_bytes=200), clean=True)
    data = log.read(entry_offset, 1).read_bytes()  # looked up through entry 5
    assert headers(data)[0].last_offset == entry_offset
    assert index_path.read_bytes()[: len(original)] == original  # rebuilt on that use
    assert read_everything(log) == written
    log.close()
    assert index_path.read_bytes() == original


def test_clean_shutdown_cuts_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(4):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    written = log.read(0, 10**9).read_bytes()
    log.close()
    active = directory / "00000000000000000000.log"
    with active.open("ab") as f:
        f.write(batch(4)[:50])
    log = open_log(directory, SMALL, clean=True)
    assert log.log_end_offset == 12
    assert active.stat().st_size == len(written)
    assert read_everything(log) == written
    log.close()


def test_unclean_recovery_deletes_segments_after_a_corrupt_one(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(40):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    bases = [s.base_offset for s in log.segments]
    second = log.segments[1]
    written = decode_all(log.read(0, 10**9).read_bytes())
    del log
    raw = bytearray(second.log_path.read_bytes())
    batch_size = len(batch(0))
    raw[batch_size * 2 + 70] ^= 0x40  # inside the third batch's records: CRC mismatch
    second.log_path.write_bytes(bytes(raw))
    log = open_log(directory, SMALL, clean=False)
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert log.log_end_offset == bases[1] + 6
    assert decode_all(read_everything(log)) == written[: bases[1] // 3 + 2]
    assert sorted(p.name for p in directory.iterdir() if p.suffix == ".log") == [
        layout.file_name(b, ".log") for b in bases[:2]
    ]
    log.close()


def test_a_base_offset_out_of_sequence_ends_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig())
    for seq in range(5):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    del log
    path = directory / "00000000000000000000.log"
    raw = bytearray(path.read_bytes())
    raw[len(batch(0)) * 3 + 6] = 0x01  # base offset of the fourth batch jumps by 256: outside the CRC
    path.write_bytes(bytes(raw))
    log = open_log(directory, LogConfig(), clean=False)
    assert log.log_end_offset == 9
    log.close()
    compacted = LogConfig(cleanup_policy="compact")  # gaps are legal in compacted logs
    log = open_log(tmp_path / "c-0", compacted)
    log.append(
        encode_batch([SimpleRecord(value=b"a")], base_offset=0),
        leader_epoch=0,
        now_ms=0,
        assign_offsets=False,
    )
    log.append(encode_batch([SimpleRecord(value=b"b")], base_offset=0), leader_epoch=0, now_ms=0)
    del log
    path = tmp_path / "c-0" / "00000000000000000000.log"
    raw = bytearray(path.read_bytes())
    raw[len(encode_batch([SimpleRecord(value=b"a")])) + 7] = 5  # second batch now at offset 5
    path.write_bytes(bytes(raw))
    log = open_log(tmp_path / "c-0", compacted, clean=False)
    assert log.log_end_offset == 6
    assert [h.base_offset for h in headers(log.read(0, 1000).read_bytes())] == [0, 5]
    log.close()


def test_leftover_deleted_cleaned_swap_and_orphan_files(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(20):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    bases = [s.base_offset for s in log.segments]
    written = decode_all(log.read(0, 10**9).read_bytes())
    log.close()
    assert len(bases) >= 3
    # A cleaner replaced segments 1 and 2 by one swap segment holding the same batches, then crashed
    # before renaming; it also left a .cleaned file above, a .deleted file and an orphaned index.
    seg1 = directory / layout.file_name(bases[1], ".log")
    seg2 = directory / layout.file_name(bases[2], ".log")
    (directory / layout.file_name(bases[1], ".log.swap")).write_bytes(seg1.read_bytes() + seg2.read_bytes())
    (directory / layout.file_name(bases[1], ".index.swap")).write_bytes(b"junk")
    (directory / layout.file_name(9999, ".log.cleaned")).write_bytes(b"junk")
    (directory / layout.file_name(9999, ".log.swap")).write_bytes(b"junk")  # above a .cleaned: incomplete
    (directory / layout.file_name(5, ".log.deleted")).write_bytes(b"junk")
    (directory / layout.file_name(7777, ".index")).write_bytes(b"junk")
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")
    log = open_log(directory, SMALL, clean=True)
    assert [s.base_offset for s in log.segments] == [bases[0], bases[1], *bases[3:]]
    assert decode_all(read_everything(log)) == written
    names = {p.name for p in directory.iterdir()}
    assert not any(n.endswith((".swap", ".cleaned", ".deleted")) for n in names)
    assert layout.file_name(7777, ".index") not in names
    assert "leader-epoch-checkpoint" in names
    log.close()


def test_overlapping_segment_is_dropped_in_unclean_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(20):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    bases = [s.base_offset for s in log.segments]
    written = decode_all(log.read(0, 10**9).read_bytes())
    del log
    last = directory / layout.file_name(bases[-1], ".log")
    last.rename(directory / layout.file_name(bases[-1] - 1, ".log"))
    log = open_log(directory, SMALL, clean=False)
    assert [s.base_offset for s in log.segments] == bases[:-1]
    assert decode_all(read_everything(log)) == written[: bases[-1] // 3]
    log.close()


def test_empty_and_missing_directories(tmp_path: Path) -> None:
    log = open_log(tmp_path / "new-0", SMALL, log_start_offset=42)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (42, 42, 42)
    log.close()
    empty = tmp_path / "e-0"
    empty.mkdir()
    (empty / "00000000000000000000.log").write_bytes(b"")
    log = open_log(empty, SMALL, clean=False)
    assert (log.log_end_offset, len(log.segments)) == (0, 1)
    log.close()


def test_recovery_point_does_not_advance_after_unclean_recovery(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, SMALL)
    for seq in range(10):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    log.flush()
    for seq in range(10, 20):
        log.append(batch(seq), leader_epoch=0, now_ms=0)
    del log
    log = open_log(directory, SMALL, clean=False, recovery_point=30)
    assert (log.recovery_point, log.log_end_offset) == (30, 60)
    log.close()
    log = open_log(directory, SMALL, clean=True, recovery_point=30)
    assert log.recovery_point == 60
    log.close()
