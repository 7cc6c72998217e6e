"""The outcome of an append to a partition log (Kafka's ``LogAppendInfo``): what the produce response needs.

Invariants: ``first_offset <= last_offset``; offsets are absolute; ``log_append_time`` is -1 unless the
topic uses ``message.timestamp.type=LogAppendTime``, in which case it is the ``now_ms`` the batches were
stamped with; ``max_timestamp`` is -1 when no batch carries a timestamp. ``duplicate`` marks the answer to
a retried idempotent batch: nothing was written and the offsets are those of the original append.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LogAppendInfo"]


@dataclass(slots=True)  # not frozen: one is built per append, and frozen costs ~4x (treat it as a value)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    """Last offset of the (first) batch carrying ``max_timestamp``."""
    log_append_time: int
    log_start_offset: int
    shallow_count: int
    """Number of batches."""
    records_count: int
    valid_bytes: int
    duplicate: bool = False
