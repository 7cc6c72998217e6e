"""The leader epoch cache (Kafka's LeaderEpochFileCache) and its ``leader-epoch-checkpoint`` file format."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.storage.checkpoint import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from tidelog.storage.errors import CheckpointError
from tidelog.storage.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochFileCache,
    OffsetTruncationState,
)


def cache_of(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(tmp_path / "leader-epoch-checkpoint", entries)


# ---- file format ----------------------------------------------------------------------------------


def test_the_file_is_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(0, 0), (3, 1200), (4, 1300)])
    assert path.read_text() == "0\n3\n0 0\n3 1200\n4 1300\n"
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (3, 1200), (4, 1300)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader-epoch-checkpoint"]  # no temp file left


def test_a_file_written_by_kafka_and_an_empty_one_are_read(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n5 0\n7 4411\n")
    loaded = LeaderEpochFileCache.load(path)
    assert loaded is not None
    assert loaded.entries == (EpochEntry(5, 0), EpochEntry(7, 4411))
    assert not loaded.dirty
    path.write_text("0\n0\n")
    empty = LeaderEpochFileCache.load(path)
    assert empty is not None
    assert empty.entries == ()
    assert LeaderEpochFileCache.load(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "0 lines, need version and count"),
        ("1\n1\n0 0\n", "has version 1, only 0 is known"),
        ("0\n2\n0 0\n", "announces 2 entries, holds 1"),
        ("0\n1\n0 zero\n", "malformed line"),
        ("0\n1\n0 0 0\n", "malformed line"),
        ("0\n2\n3 10\n2 20\n", "does not follow"),  # epochs must increase
        ("0\n2\n2 20\n3 20\n", "does not follow"),  # and start offsets too
        ("0\n1\n-1 0\n", "does not follow"),
    ],
)
def test_a_damaged_file_is_a_checkpoint_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=message):
        LeaderEpochFileCache.load(path)


def test_write_only_when_changed(tmp_path: Path) -> None:
    cache = cache_of(tmp_path)
    assert cache.write()  # a new cache writes once, even empty
    assert cache.path.read_text() == "0\n0\n"
    assert not cache.write()
    assert cache.assign(1, 10)
    assert not cache.assign(1, 20)  # the latest epoch again, later: no change
    assert cache.write()
    assert cache.path.read_text() == "0\n1\n1 10\n"
    assert not cache.truncate_from_end(11)
    assert not cache.write()


# ---- assign -----------------------------------------------------------------------------------------


def test_assign_keeps_epochs_and_offsets_increasing(tmp_path: Path) -> None:
    cache = cache_of(tmp_path)
    assert cache.latest_epoch is None
    assert cache.assign(0, 0)
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 10))
    # the latest epoch at a lower offset: it starts there (the log was truncated below it)
    assert cache.assign(2, 8)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 8))
    # a new epoch at an offset at or below later entries removes them (Kafka's non-monotonic truncation)
    assert cache.assign(3, 8)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(3, 8))
    assert cache.assign(1, 20)  # a lower epoch removes every equal or higher one
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(1, 20))
    assert (cache.latest_epoch, cache.latest_entry, cache.earliest_entry) == (1, (1, 20), (0, 0))
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(-1, 5)
    with pytest.raises(ValueError, match="invalid leader epoch entry"):
        cache.assign(4, -1)


# ---- end_offset_for (OffsetForLeaderEpoch) ----------------------------------------------------------


def test_end_offset_for_answers_as_kafka(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (2, 100), (5, 250), (6, 400))
    log_end = 480
    assert cache.end_offset_for(UNDEFINED_EPOCH, log_end) == EpochEndOffset(-1, -1)
    assert cache.end_offset_for(6, log_end) == (6, 480)  # the latest epoch: the log end
    assert cache.end_offset_for(5, log_end) == (5, 400)  # the start of the next epoch
    assert cache.end_offset_for(2, log_end) == (2, 250)
    assert cache.end_offset_for(3, log_end) == (2, 250)  # unknown epoch in a gap: the one below it
    assert cache.end_offset_for(4, log_end) == (2, 250)
    assert cache.end_offset_for(1, log_end) == (1, 100)  # older than the first: the first's start
    assert cache.end_offset_for(0, log_end) == (0, 100)
    assert cache.end_offset_for(7, log_end) == (-1, -1)  # newer than any
    assert cache_of(tmp_path).end_offset_for(0, log_end) == (-1, -1)


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (2, 100), (5, 250))
    assert [cache.epoch_for_offset(o) for o in (0, 99, 100, 249, 250, 10**9)] == [None, None, 2, 2, 5, 5]


# ---- truncation -------------------------------------------------------------------------------------


def test_truncate_from_end_removes_epochs_starting_at_or_after_the_offset(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (1, 0), (2, 10), (3, 20))
    assert not cache.truncate_from_end(21)
    assert not cache.truncate_from_end(-1)
    assert cache.truncate_from_end(20)
    assert cache.entries == ((1, 0), (2, 10))
    assert cache.truncate_from_end(5)
    assert cache.entries == ((1, 0),)
    assert cache.truncate_from_end(0)
    assert cache.entries == ()


def test_truncate_from_start_moves_the_first_epoch_up(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, (1, 0), (2, 6), (3, 9))
    assert not cache.truncate_from_start(0)  # the first entry starts there already
    assert cache.truncate_from_start(4)
    assert cache.entries == ((1, 4), (2, 6), (3, 9))
    assert not cache.truncate_from_start(2)  # below the first: nothing
    assert cache.truncate_from_start(6)  # exclusive: the epoch starting there stays
    assert cache.entries == ((2, 6), (3, 9))
    assert cache.truncate_from_start(7)
    assert cache.entries == ((2, 7), (3, 9))
    assert cache.truncate_from_start(50)
    assert cache.entries == ((3, 50),)
    cache.clear()
    assert cache.entries == ()
    assert not cache.truncate_from_start(60)


# ---- a follower's truncation offset (KIP-101, KIP-279) ----------------------------------------------


def test_offset_truncation_state(tmp_path: Path) -> None:
    follower = cache_of(tmp_path, (1, 0), (2, 100), (4, 300))
    log_end = 350

    def state(epoch: int, end_offset: int, fetch_offset: int = 77) -> OffsetTruncationState:
        return follower.offset_truncation_state(
            EpochEndOffset(epoch, end_offset), log_end_offset=log_end, fetch_offset=fetch_offset
        )

    # the leader knows the follower's latest epoch, ending earlier: truncate there
    assert state(4, 320) == (320, True)
    assert state(4, 900) == (350, True)  # never above the follower's log end
    # the leader's epoch is one the follower knows, ended earlier here (KIP-101)
    assert state(2, 250) == (250, True)
    assert state(2, 290) == (290, True)
    assert state(2, 310) == (300, True)  # the follower's epoch 2 ended at 300
    # the leader answers an epoch the follower never had: go to the end of the follower's epoch below it and
    # ask again (KIP-279)
    assert state(3, 280) == (300, False)
    # an epoch below everything the follower knows: the follower's epochs all began after it ended
    assert state(0, 40) == (0, True)
    # a follower that knows no epoch at all: the leader's offset
    empty = cache_of(tmp_path)
    assert empty.offset_truncation_state(EpochEndOffset(3, 40), log_end_offset=50, fetch_offset=0) == (
        40,
        True,
    )
    assert empty.offset_truncation_state(EpochEndOffset(3, 90), log_end_offset=50, fetch_offset=0) == (
        50,
        True,
    )
    # the leader has no end offset: the fetch offset (the high watermark); no epoch: the leader's offset
    assert state(-1, -1) == (77, True)
    assert state(-1, 120) == (120, True)
