"""The settings one share group runs with: its group configs (Kafka's names, as the group-config store
returns them) over the broker's ``group.share.*`` defaults.

Invariants: a key the group did not set, or set to a value that does not parse, takes the broker's
default; the record lock duration is clamped into ``[group.share.min.record.lock.duration.ms,
group.share.max.record.lock.duration.ms]`` and the delivery count limit into Kafka's ``[2, 10]``. The
group's ``share.session.timeout.ms``, ``share.heartbeat.interval.ms`` and
``share.partition.max.record.locks`` were bounded by the group-config store when set (Kafka's
``group.share.min/max.*`` keys); a value that is not a positive integer takes the broker's default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "ACQUIRE_MODE",
    "AUTO_OFFSET_RESET",
    "DEAD_LETTER_COPY_RECORD",
    "DEAD_LETTER_TOPIC",
    "DELIVERY_COUNT_LIMIT",
    "HEARTBEAT_INTERVAL_MS",
    "ISOLATION_LEVEL",
    "PARTITION_MAX_RECORD_LOCKS",
    "RECORD_LOCK_DURATION_MS",
    "RELEASE_BACKOFF_MAX_MS",
    "RELEASE_BACKOFF_MS",
    "RELEASE_BACKOFF_MULTIPLIER",
    "SESSION_TIMEOUT_MS",
    "iso_duration_ms",
    "ShareBrokerDefaults",
    "ShareGroupSettings",
    "resolve_settings",
]

RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
RELEASE_BACKOFF_MS = "share.release.backoff.ms"
RELEASE_BACKOFF_MULTIPLIER = "share.release.backoff.multiplier"
RELEASE_BACKOFF_MAX_MS = "share.release.backoff.max.ms"
SESSION_TIMEOUT_MS = "share.session.timeout.ms"
HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"
PARTITION_MAX_RECORD_LOCKS = "share.partition.max.record.locks"
ACQUIRE_MODE = "share.acquire.mode"
"""KIP-1206: ``batch_optimized`` (default: a fetch's record limit is soft, whole batches are acquired) or
``record_limit`` (at most the limit)."""
DEAD_LETTER_TOPIC = "errors.deadletterqueue.topic.name"
"""KIP-1191's group config naming the group's dead-letter topic."""
DEAD_LETTER_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
"""KIP-1191: a dead-letter copy carries the record's key, value and headers (else context headers only)."""


@dataclass(frozen=True, slots=True)
class ShareBrokerDefaults:
    """The broker's ``group.share.*`` configs."""

    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    max_size: int = 200


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    record_lock_duration_ms: int
    delivery_count_limit: int
    max_record_locks: int
    auto_offset_reset: str
    """``latest`` (Kafka's default), ``earliest`` or ``by_duration``: where a share-partition starts when it
    has no state (``by_duration``: at the first record no older than ``reset_duration_ms``, else latest)."""
    read_committed: bool
    release_backoff_ms: int = 0
    release_backoff_multiplier: float = 1.0
    release_backoff_max_ms: int = 0
    dead_letter_topic: str | None = None
    dead_letter_copy_record: bool = False
    session_timeout_ms: int = 45_000
    """A member that has not heartbeated for this long is removed and its records released."""
    heartbeat_interval_ms: int = 5000
    reset_duration_ms: int = 0
    record_limit: bool = False
    """``share.acquire.mode=record_limit``: a fetch acquires at most its MaxRecords (else whole batches)."""

    def backoff(self, delivery_count: int) -> int:
        """ms before a record released after ``delivery_count`` deliveries is acquirable again."""
        if self.release_backoff_ms <= 0:
            return 0
        delay = self.release_backoff_ms * self.release_backoff_multiplier ** max(delivery_count - 1, 0)
        if self.release_backoff_max_ms > 0:
            delay = min(delay, self.release_backoff_max_ms)
        return int(delay)


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?", re.IGNORECASE
)


def iso_duration_ms(text: str) -> int | None:
    """``PnDTnHnMn.nS`` (the form ``share.auto.offset.reset=by_duration:`` takes) in ms; None if malformed."""
    match = _ISO_DURATION.fullmatch(text.strip())
    if match is None or not any(c.isdigit() for c in text):
        return None
    days, hours, minutes = (int(match.group(g) or 0) for g in "dhm")
    seconds = float(match.group("s") or 0)
    return round((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _int(keys: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(keys[key])
    except (KeyError, ValueError):
        return default


def _positive(keys: Mapping[str, str], key: str, default: int) -> int:
    value = _int(keys, key, default)
    return value if value > 0 else default


def _float(keys: Mapping[str, str], key: str, default: float) -> float:
    try:
        return float(keys[key])
    except (KeyError, ValueError):
        return default


def resolve_settings(keys: Mapping[str, str], broker: ShareBrokerDefaults) -> ShareGroupSettings:
    """The settings of a group whose explicitly set group configs are ``keys``."""
    lock = _int(keys, RECORD_LOCK_DURATION_MS, broker.record_lock_duration_ms)
    lock = min(max(lock, broker.min_record_lock_duration_ms), broker.max_record_lock_duration_ms)
    limit = min(max(_int(keys, DELIVERY_COUNT_LIMIT, broker.delivery_count_limit), 2), 10)
    reset = keys.get(AUTO_OFFSET_RESET, "latest").strip().lower()
    duration_ms = iso_duration_ms(reset.split(":", 1)[1]) if reset.startswith("by_duration:") else None
    isolation = keys.get(ISOLATION_LEVEL, "read_uncommitted").strip().lower()
    dlq = keys.get(DEAD_LETTER_TOPIC, "").strip()
    return ShareGroupSettings(
        record_lock_duration_ms=lock,
        delivery_count_limit=limit,
        max_record_locks=_positive(keys, PARTITION_MAX_RECORD_LOCKS, broker.partition_max_record_locks),
        session_timeout_ms=_positive(keys, SESSION_TIMEOUT_MS, broker.session_timeout_ms),
        heartbeat_interval_ms=_positive(keys, HEARTBEAT_INTERVAL_MS, broker.heartbeat_interval_ms),
        auto_offset_reset=(
            "by_duration" if duration_ms is not None else "earliest" if reset == "earliest" else "latest"
        ),
        reset_duration_ms=duration_ms or 0,
        read_committed=isolation == "read_committed",
        release_backoff_ms=max(_int(keys, RELEASE_BACKOFF_MS, 0), 0),
        release_backoff_multiplier=max(_float(keys, RELEASE_BACKOFF_MULTIPLIER, 1.0), 1.0),
        release_backoff_max_ms=max(_int(keys, RELEASE_BACKOFF_MAX_MS, 0), 0),
        dead_letter_topic=dlq or None,
        dead_letter_copy_record=keys.get(DEAD_LETTER_COPY_RECORD, "false").strip().lower() == "true",
        record_limit=keys.get(ACQUIRE_MODE, "batch_optimized").strip().lower() == "record_limit",
    )
