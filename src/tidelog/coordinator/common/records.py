"""A record of a coordinator's internal topic, and the error for one that does not parse.

Every record of ``__consumer_offsets`` and ``__transaction_state`` is a key and a value (``None`` for a
tombstone), each framed as Kafka's ``CoordinatorRecordSerde`` frames them: the key is an int16 *record
type* (which key schema follows, and which value schema goes with it) then the key body; the value is
an int16 *version* of the value schema then the value body. The coordinators encode and decode their
own schemas (:mod:`tidelog.coordinator.group.records`, :mod:`tidelog.coordinator.txn.records`); the
runtime only moves :class:`CoordinatorRecord` s between them and the log.

Invariant: a :class:`CoordinatorRecordError` (or a subclass) is the only exception decoding raises for
bytes that are not a record of the coordinator's format; the runtime skips such a record with a
warning while loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.protocol.errors import ErrorCode, KafkaProtocolError

__all__ = ["CoordinatorRecord", "CoordinatorRecordError"]


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record for a coordinator partition: encoded key, and value or ``None`` (tombstone)."""

    key: bytes
    value: bytes | None


class CoordinatorRecordError(KafkaProtocolError):
    """A coordinator record that does not parse: the partition's log is not Kafka's format."""

    error_code = ErrorCode.CORRUPT_MESSAGE
