"""A partition directory's ``partition.metadata``: the id of the topic the log belongs to (Kafka's
``PartitionMetadataFile``, KIP-516), so a log left behind by a deleted topic is never taken for the log of a
new topic with the same name.

Format (Kafka's, version 0)::

    version: 0
    topic_id: <the topic id in Kafka's base64url form, no padding>

Invariants: written once, temp + fsync + rename (a crash leaves no file or the whole file); never rewritten
with another id (:class:`InconsistentTopicIdError`: the caller decides, e.g. the log belongs to a deleted
topic); a file that does not parse reads as None with a warning (the id is written again by the next
assignment).
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from pathlib import Path

from tidelog.storage import layout
from tidelog.storage.checkpoint import atomic_write
from tidelog.storage.errors import StorageError

__all__ = ["InconsistentTopicIdError", "read_topic_id", "write_topic_id"]

log = logging.getLogger("tidelog.storage.partition_metadata")

_VERSION = 0


class InconsistentTopicIdError(StorageError):
    """The log's ``partition.metadata`` names another topic id than the one assigned."""


def _encode(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def _decode(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id ``directory`` records, None when it has no (readable) ``partition.metadata``."""
    path = directory / layout.PARTITION_METADATA_FILE
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("%s is unreadable (%s); the topic id is assigned again", path, exc)
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if int(fields["version"]) != _VERSION:
            raise ValueError(f"unsupported version {fields['version'].strip()}")
        return _decode(fields["topic_id"].strip())
    except (KeyError, ValueError, binascii.Error) as exc:
        log.warning("%s does not parse (%s); the topic id is assigned again", path, exc)
        return None


def write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Record ``topic_id`` (a no-op if it is recorded already); raises :class:`InconsistentTopicIdError`
    if another one is."""
    current = read_topic_id(directory)
    if current == topic_id:
        return
    if current is not None:
        raise InconsistentTopicIdError(
            f"{directory} belongs to topic id {_encode(current)}, not {_encode(topic_id)}"
        )
    atomic_write(
        directory / layout.PARTITION_METADATA_FILE,
        f"version: {_VERSION}\ntopic_id: {_encode(topic_id)}\n".encode(),
    )
