"""The topic metadata the group coordinator assigns partitions from (Kafka's ``TopicsImage``, reduced).

The coordinator does not own topics: the server runtime builds a :class:`TopicsImage` from its
metadata and hands it over (``GroupCoordinator.set_topics_image``) whenever topics are created,
deleted or grow partitions. KIP-848 consumer groups name topics by id on the wire and by name in
subscriptions, so the image answers both ways.

Invariants: immutable; names and ids are unique and map to the same :class:`TopicImage`;
``num_partitions`` is positive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from uuid import UUID

__all__ = ["TopicImage", "TopicsImage"]


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: UUID
    num_partitions: int


class TopicsImage:
    """Every topic of the cluster, by name and by id."""

    __slots__ = ("_by_id", "_by_name")

    EMPTY: TopicsImage

    def __init__(self, topics: Iterable[TopicImage] = ()) -> None:
        by_name: dict[str, TopicImage] = {}
        by_id: dict[UUID, TopicImage] = {}
        for topic in topics:
            if topic.num_partitions <= 0:
                raise ValueError(f"topic {topic.name} has {topic.num_partitions} partitions")
            if topic.name in by_name or topic.topic_id in by_id:
                raise ValueError(f"topic {topic.name} ({topic.topic_id}) is listed twice")
            by_name[topic.name] = topic
            by_id[topic.topic_id] = topic
        self._by_name: Mapping[str, TopicImage] = MappingProxyType(by_name)
        self._by_id: Mapping[UUID, TopicImage] = MappingProxyType(by_id)

    @property
    def by_name(self) -> Mapping[str, TopicImage]:
        return self._by_name

    @property
    def by_id(self) -> Mapping[UUID, TopicImage]:
        return self._by_id

    def __len__(self) -> int:
        return len(self._by_name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicsImage) and self._by_name == other._by_name

    def __hash__(self) -> int:
        return hash(frozenset(self._by_name.values()))

    def __repr__(self) -> str:
        return f"TopicsImage({sorted(self._by_name)})"


TopicsImage.EMPTY = TopicsImage()
