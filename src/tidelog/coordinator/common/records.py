"""A record of a coordinator's internal topic, its framing, and the error for one that does not parse.

Every record of ``__consumer_offsets`` and ``__transaction_state`` is a key and a value (``None`` for a
tombstone), each framed as Kafka's ``CoordinatorRecordSerde`` frames them: the key is an int16 *record
type* (which key schema follows, and which value schema goes with it) then the key body; the value is
an int16 *version* of the value schema then the value body. The schemas are generated from Kafka's specs
(:mod:`tidelog.coordinator.common._generated.records`); each coordinator picks the record types it
implements and their versions (:mod:`tidelog.coordinator.group.records`,
:mod:`tidelog.coordinator.txn.records`) and frames them with :func:`encode_framed` /
:func:`read_prefix` / :func:`decode_body`. The runtime only moves :class:`CoordinatorRecord` s between
the coordinators and the log.

Invariant: a :class:`CoordinatorRecordError` (or a subclass) is the only exception decoding raises for
bytes that are not a record of the coordinator's format; the runtime skips such a record with a
warning while loading.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeVar

from tidelog.protocol import codec
from tidelog.protocol.errors import ErrorCode, KafkaProtocolError
from tidelog.protocol.primitives import RemoteProtocolError
from tidelog.protocol.schema import Message

__all__ = ["CoordinatorRecord", "CoordinatorRecordError", "decode_body", "encode_framed", "read_prefix"]

M = TypeVar("M", bound=Message)

_INT16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One record for a coordinator partition: encoded key, and value or ``None`` (tombstone)."""

    key: bytes
    value: bytes | None


class CoordinatorRecordError(KafkaProtocolError):
    """A coordinator record that does not parse: the partition's log is not Kafka's format."""

    error_code = ErrorCode.CORRUPT_MESSAGE


def encode_framed(prefix: int, message: Message, version: int) -> bytes:
    """The int16 ``prefix`` (a key's record type, a value's version), then ``message`` at ``version``."""
    return _INT16.pack(prefix) + codec.encode(message, version)


def read_prefix(buf: bytes | memoryview, what: str, error: type[CoordinatorRecordError]) -> int:
    """The int16 that opens a framed key or value; ``error`` (``what`` names the part) if it is cut."""
    if len(buf) < 2:
        raise error(f"truncated {what}: {len(buf)} bytes")
    return int(_INT16.unpack_from(buf, 0)[0])


def decode_body(
    cls: type[M], version: int, buf: bytes | memoryview, error: type[CoordinatorRecordError], what: str
) -> M:
    """The ``cls`` body after the int16 prefix of ``buf``, at ``version``; ``error`` naming ``what`` if it
    does not parse."""
    try:
        return codec.decode(cls, version, memoryview(buf)[2:])
    except RemoteProtocolError as exc:
        raise error(f"malformed {what}: {exc}") from None
