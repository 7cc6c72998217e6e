"""Child process of the SIGKILL test: appends batches to ``crash-0`` in a loop and prints, for every append
that returned, ``<first_offset> <seq>`` on stdout (flushed), until it is killed.

Usage: python tests/storage/crash_writer.py <log_dir> <first_seq>
"""

from __future__ import annotations

import sys
from pathlib import Path

from tidelog.protocol.records import Compression, SimpleRecord, encode_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log_manager import LogManager

CONFIG = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512, segment_index_bytes=2048)


def payload(seq: int) -> bytes:
    """The batch for ``seq``: 1-8 records whose keys and values are derived from ``seq``."""
    count = 1 + seq % 8
    records = [
        SimpleRecord(key=b"%d/%d" % (seq, i), value=(b"%d." % seq) * (1 + (seq * 7 + i) % 97), timestamp=seq)
        for i in range(count)
    ]
    return encode_batch(records, compression=Compression.LZ4 if seq % 5 == 0 else Compression.NONE)


def main() -> None:
    log_dir, seq = Path(sys.argv[1]), int(sys.argv[2])
    manager = LogManager([log_dir], CONFIG, now_ms=seq)
    log = manager.create("crash", 0)
    out = sys.stdout
    while True:
        info = log.append(payload(seq), leader_epoch=1, now_ms=seq)
        out.write(f"{info.first_offset} {seq}\n")
        out.flush()
        if seq % 64 == 0:
            manager.flush_dirty_logs(seq)
            manager.checkpoint_recovery_points()
        seq += 1


if __name__ == "__main__":
    main()
