"""Random sequences of leader and follower appends in rising leader epochs, truncations, DeleteRecords and
restarts (clean, crashed, with the leader epoch checkpoint lost or damaged), checked after every step against
a model that only knows the batches and the log start offset: offsets, epochs of the batches read back, the
leader epoch cache, and its file."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidelog.protocol.records import SimpleRecord, encode_batch, iter_batch_headers
from tidelog.storage import layout
from tidelog.storage.checkpoint import read_leader_epoch_checkpoint
from tidelog.storage.leader_epoch_cache import EpochEndOffset
from tidelog.storage.partition_log import PartitionLog

from .helpers import SMALL

TS = 1_000_000
Batch = tuple[int, int, int]
"""(base offset, last offset, partition leader epoch) of a batch in the log."""


def records(count: int, tag: int) -> list[SimpleRecord]:
    return [SimpleRecord(key=b"%d" % tag, value=b"v" * (20 + tag % 50), timestamp=TS) for _ in range(count)]


def model_entries(batches: list[Batch], log_start: int, log_end: int) -> tuple[tuple[int, int], ...]:
    """The epochs of the batches, each starting at its first batch, the first moved up to the log start
    offset; only those starting below the log end (an epoch entry at the log end holds nothing)."""
    entries: list[tuple[int, int]] = []
    for base, _, epoch in batches:
        if not entries or epoch > entries[-1][0]:
            entries.append((epoch, base))
    below = [entry for entry in entries if entry[1] <= log_start]
    kept = [(below[-1][0], log_start)] if below else []
    kept += [entry for entry in entries if entry[1] > log_start]
    return tuple(entry for entry in kept if entry[1] < log_end)


def reference_end_offset(entries: tuple[tuple[int, int], ...], epoch: int, log_end: int) -> EpochEndOffset:
    """Kafka's endOffsetFor, written out plainly."""
    if epoch == -1 or not entries:
        return EpochEndOffset(-1, -1)
    if entries[-1][0] == epoch:
        return EpochEndOffset(epoch, log_end)
    higher = [entry for entry in entries if entry[0] > epoch]
    if not higher:
        return EpochEndOffset(-1, -1)
    floor = [entry for entry in entries if entry[0] <= epoch]
    return EpochEndOffset(floor[-1][0] if floor else epoch, higher[0][1])


class ReplicatedLog(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="replication-model-"))
        self.directory = self.root / "t-0"
        self.log = PartitionLog.open(self.directory, SMALL, now_ms=TS, clean_shutdown=False)
        self.batches: list[Batch] = []
        self.log_start = 0
        self.base = 0  # the first segment's base offset
        self.epoch = 0
        self.tag = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def log_end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.base

    # ---- steps ------------------------------------------------------------------------------------

    @rule(count=st.integers(1, 4), bump=st.integers(0, 2))
    def leader_append(self, count: int, bump: int) -> None:
        self.epoch += bump
        self.tag += 1
        info = self.log.append(encode_batch(records(count, self.tag)), leader_epoch=self.epoch, now_ms=TS)
        assert info.first_offset == self.log_end
        self.batches.append((info.first_offset, info.last_offset, self.epoch))

    @rule(counts=st.lists(st.integers(1, 3), min_size=1, max_size=3), bump=st.integers(0, 2))
    def follower_append(self, counts: list[int], bump: int) -> None:
        data = bytearray()
        offset = self.log_end
        fetched: list[Batch] = []
        for count in counts:  # one fetch may span a leader change
            self.epoch += bump
            self.tag += 1
            data += encode_batch(
                records(count, self.tag), base_offset=offset, partition_leader_epoch=self.epoch
            )
            fetched.append((offset, offset + count - 1, self.epoch))
            offset += count
        self.log.append_as_follower(bytes(data), now_ms=TS)
        self.batches.extend(fetched)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log_start, self.log_end + 1), label="truncate to")
        self.log.truncate_to(target)
        if target < self.base:
            self.batches, self.base, self.log_start = [], target, target
        elif target < self.log_end:
            self.batches = [b for b in self.batches if b[1] < target]
            self.log_start = min(self.log_start, self.log_end)

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        self.log.update_high_watermark(self.log.log_end_offset)
        target = data.draw(st.integers(self.log_start + 1, self.log_end), label="delete records before")
        assert self.log.delete_records_before(target) == target
        self.log_start = target
        self.base = self.log.segments[0].base_offset
        assert self.base <= self.log_start
        self.batches = [b for b in self.batches if b[0] >= self.base]

    @rule(kind=st.sampled_from(["clean", "crash", "epoch file lost", "epoch file damaged"]))
    def restart(self, kind: str) -> None:
        clean = kind in ("clean", "epoch file damaged")
        if clean:
            self.log.flush()
            self.log.take_producer_snapshot()
        self.log.close()
        epoch_file = self.directory / layout.LEADER_EPOCH_CHECKPOINT_FILE
        if kind == "epoch file lost":
            epoch_file.unlink()
        elif kind == "epoch file damaged":
            epoch_file.write_text("0\n2\n7\n")
        self.log = PartitionLog.open(
            self.directory,
            SMALL,
            now_ms=TS,
            clean_shutdown=clean,
            recovery_point=self.log_end if clean else 0,
            log_start_offset=self.log_start,
        )

    # ---- checks -----------------------------------------------------------------------------------

    @invariant()
    def log_matches_the_model(self) -> None:
        log = self.log
        log_end = self.log_end
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, log_end)
        assert log.high_watermark <= log_end
        data = log.read(self.log_start, 1 << 30).read_bytes()
        read = [(h.base_offset, h.last_offset, h.partition_leader_epoch) for _, h in iter_batch_headers(data)]
        assert read == [b for b in self.batches if b[1] >= self.log_start]
        entries = tuple(tuple(entry) for entry in log.leader_epoch_entries)
        # at most one epoch entry at the log end (a leader's epoch with nothing in it yet), none beyond
        assert all(start <= log_end for _, start in entries)
        assert tuple(e for e in entries if e[1] < log_end) == model_entries(
            self.batches, self.log_start, log_end
        )
        assert read_leader_epoch_checkpoint(self.directory / layout.LEADER_EPOCH_CHECKPOINT_FILE) == list(
            entries
        )
        for epoch in range(-1, self.epoch + 2):
            assert log.end_offset_for_epoch(epoch) == reference_end_offset(entries, epoch, log_end)


TestReplicatedLog = ReplicatedLog.TestCase
TestReplicatedLog.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
