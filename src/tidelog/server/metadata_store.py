"""The broker's topic metadata: names, topic ids, partition counts and per-topic config overrides.

Invariants:
- The store is the source of truth for which topics exist. It lives in ``<first log dir>/tidelog-metadata.json``
  and every change is written to a temp file, fsynced and renamed before the change is visible to clients, so
  a crash leaves either the old or the new file, never a mix.
- Creating a topic persists it *before* its partition directories are made; deleting persists the removal
  *before* the directories go. At start-up, partitions the store names but the disk lacks are created, and
  directories the store does not name are strays (an interrupted delete; or a store restored from an older
  copy): the broker renames them ``-stray`` and keeps them, never deletes them.
- A change whose write fails (a full disk, an I/O error) raises and leaves the store as it was, in
  memory as on disk.
- A topic id never changes for the life of the topic; a topic deleted and created again gets a new id.
- The file carries a CRC32C of its topics (format version 2; a version-1 file, written before, has none and
  gets one at the next change). A store file that cannot be read whole (not UTF-8, not JSON, a field missing
  or of the wrong type, a checksum that does not match) raises :class:`MetadataStoreError` naming the file:
  being replaced atomically, it can only be damaged on disk, and starting on it would forget topics and
  their configs (one flipped bit in a name renames a topic, whose partitions would then be set aside as
  strays), so the broker refuses to start until it is restored.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tidelog.server.json_checksum import json_crc32c

__all__ = ["MetadataStore", "MetadataStoreError", "TopicMetadata", "topic_id_to_base64"]

_FILE_NAME = "tidelog-metadata.json"
_FORMAT_VERSION = 2
_FORMAT_VERSIONS = (1, 2)
"""Version 1 has no checksum."""


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as the broker knows it."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False


class MetadataStoreError(ValueError):
    """The topic metadata store file exists but cannot be read."""


def _checksum(topics: Sequence[object]) -> int:
    """CRC32C of the topics' canonical JSON: the same for the list written and the list read back."""
    return json_crc32c(topics)


def topic_id_to_base64(topic_id: uuid.UUID) -> str:
    """Kafka's textual topic id (``Uuid.toString``): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


class MetadataStore:
    """Topics of this broker, persisted atomically in one JSON file."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / _FILE_NAME
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        if self._path.exists():
            self._load()

    def _load(self) -> None:
        try:
            document = json.loads(self._path.read_text(encoding="utf-8"))
            version = document.get("version")
        except (OSError, ValueError, AttributeError) as exc:
            raise self._unreadable(exc) from exc
        if version not in _FORMAT_VERSIONS:
            raise MetadataStoreError(f"{self._path}: unsupported metadata format version {version!r}")
        try:
            raw_topics = document["topics"]
            if version >= 2 and document["crc32c"] != _checksum(raw_topics):
                raise ValueError(f"CRC32C {_checksum(raw_topics)} of the topics, {document['crc32c']} stored")
            topics = [self._topic(raw) for raw in raw_topics]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._unreadable(exc) from exc
        for topic in topics:
            self._topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic

    @staticmethod
    def _topic(raw: Mapping[str, object]) -> TopicMetadata:
        name, topic_id, configs = raw["name"], raw["topic_id"], raw.get("configs", {})
        partitions, replication = raw["num_partitions"], raw["replication_factor"]
        if not (
            isinstance(name, str)
            and isinstance(topic_id, str)
            and isinstance(configs, dict)
            and isinstance(partitions, int)
            and isinstance(replication, int)
            and partitions > 0
        ):
            raise TypeError(f"topic entry {raw!r} has a field of the wrong type or out of range")
        return TopicMetadata(
            name=name,
            topic_id=uuid.UUID(topic_id),
            num_partitions=partitions,
            replication_factor=replication,
            configs={str(k): str(v) for k, v in configs.items()},
            is_internal=bool(raw.get("is_internal", False)),
        )

    def _unreadable(self, exc: BaseException) -> MetadataStoreError:
        return MetadataStoreError(
            f"cannot read the topic metadata store {self._path} ({type(exc).__name__}: {exc}); it is replaced "
            "atomically, so the file was damaged on disk: restore it from a backup (starting without it "
            "would forget every topic and its configs)"
        )

    def _persist(self) -> None:
        topics = [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "configs": dict(t.configs),
                "is_internal": t.is_internal,
            }
            for t in sorted(self._topics.values(), key=lambda t: t.name)
        ]
        document = {"version": _FORMAT_VERSION, "topics": topics, "crc32c": _checksum(topics)}
        tmp = self._path.with_name(self._path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- queries ---------------------------------------------------------------------------------------

    def get(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def __iter__(self) -> Iterator[TopicMetadata]:
        return iter(sorted(self._topics.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._topics)

    # -- changes (each persisted before it returns) ------------------------------------------------------

    def create(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        is_internal: bool = False,
    ) -> TopicMetadata:
        if name in self._topics:
            raise KeyError(name)
        topic = TopicMetadata(
            name, uuid.uuid4(), num_partitions, replication_factor, dict(configs), is_internal
        )
        self._topics[name] = topic
        self._by_id[topic.topic_id] = topic
        try:
            self._persist()
        except OSError:  # not stored (a full disk): not created
            del self._topics[name]
            del self._by_id[topic.topic_id]
            raise
        return topic

    def delete(self, name: str) -> TopicMetadata:
        topic = self._topics.pop(name)
        del self._by_id[topic.topic_id]
        try:
            self._persist()
        except OSError:  # not stored: the topic still exists
            self._topics[name] = topic
            self._by_id[topic.topic_id] = topic
            raise
        return topic

    def set_partitions(self, name: str, num_partitions: int) -> TopicMetadata:
        return self._replace(replace(self._topics[name], num_partitions=num_partitions))

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        return self._replace(replace(self._topics[name], configs=dict(configs)))

    def _replace(self, topic: TopicMetadata) -> TopicMetadata:
        before = self._topics[topic.name]
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        try:
            self._persist()
        except OSError:  # not stored: the change did not happen
            self._topics[topic.name] = before
            self._by_id[topic.topic_id] = before
            raise
        return topic
