"""The broker's topic metadata: names, topic ids, partition counts and per-topic config overrides.

Invariants:
- The store is the source of truth for which topics exist. It lives in ``<first log dir>/tidelog-metadata.json``
  and every change is written to a temp file, fsynced and renamed before the change is visible to clients, so
  a crash leaves either the old or the new file, never a mix.
- Creating a topic persists it *before* its partition directories are made; deleting persists the removal
  *before* the directories go. At start-up, partitions the store names but the disk lacks are created, and
  directories the store does not name are strays from an interrupted delete (the broker removes them).
- A topic id never changes for the life of the topic; a topic deleted and created again gets a new id.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = ["MetadataStore", "TopicMetadata", "topic_id_to_base64"]

_FILE_NAME = "tidelog-metadata.json"
_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as the broker knows it."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=dict)
    is_internal: bool = False


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
        document = json.loads(self._path.read_text(encoding="utf-8"))
        if document.get("version") != _FORMAT_VERSION:
            raise ValueError(f"{self._path}: unsupported metadata format version {document.get('version')!r}")
        for raw in document["topics"]:
            topic = TopicMetadata(
                name=raw["name"],
                topic_id=uuid.UUID(raw["topic_id"]),
                num_partitions=int(raw["num_partitions"]),
                replication_factor=int(raw["replication_factor"]),
                configs=dict(raw.get("configs", {})),
                is_internal=bool(raw.get("is_internal", False)),
            )
            self._topics[topic.name] = topic
            self._by_id[topic.topic_id] = topic

    def _persist(self) -> None:
        document = {
            "version": _FORMAT_VERSION,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "configs": dict(t.configs),
                    "is_internal": t.is_internal,
                }
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            ],
        }
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
        self._persist()
        return topic

    def delete(self, name: str) -> TopicMetadata:
        topic = self._topics.pop(name)
        del self._by_id[topic.topic_id]
        self._persist()
        return topic

    def set_partitions(self, name: str, num_partitions: int) -> TopicMetadata:
        return self._replace(replace(self._topics[name], num_partitions=num_partitions))

    def set_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        return self._replace(replace(self._topics[name], configs=dict(configs)))

    def _replace(self, topic: TopicMetadata) -> TopicMetadata:
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self._persist()
        return topic
