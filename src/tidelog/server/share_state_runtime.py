"""The share coordinator on the coordinator runtime: ``__share_group_state`` (compacted, created on first
use, ``share.coordinator.state.topic.num.partitions`` partitions), loaded at start and on leadership like
``__consumer_offsets``, written with ShareSnapshot records (see
:mod:`tidelog.coordinator.share.state_coordinator`). The share groups' runtime reads and writes it with
ReadShareGroupState / WriteShareGroupState requests, as Kafka's share-partition leader does; a write is
answered once committed.
"""

from __future__ import annotations

from tidelog.coordinator.common import CoordinatorRecord
from tidelog.coordinator.share.state_coordinator import SHARE_STATE_TOPIC, ShareStateCoordinator
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.coordinator_runtime import CoordinatorRuntime, KeyFields
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.replica_manager import ReplicaManager
from tidelog.storage.producer_state import AppendOrigin

__all__ = ["ShareStateRuntime"]


class ShareStateRuntime(CoordinatorRuntime[object]):
    """Runs one broker's :class:`ShareStateCoordinator` over its ``__share_group_state`` partitions."""

    what = "share states"
    key_fields = KeyFields(single=("group_id",))
    coordinator: ShareStateCoordinator

    def __init__(
        self, *, admin: TopicAdmin, metadata: MetadataCache, replicas: ReplicaManager, clock: Clock
    ) -> None:
        config = admin.config
        existing = metadata.topic(SHARE_STATE_TOPIC)
        partitions = (
            existing.num_partitions
            if existing is not None
            else config.share_coordinator_state_topic_num_partitions
        )
        super().__init__(
            ShareStateCoordinator(partitions),
            admin=admin,
            metadata=metadata,
            replicas=replicas,
            clock=clock,
            load_buffer_bytes=config.share_coordinator_load_buffer_size,
            topic_configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(config.share_coordinator_state_topic_segment_bytes),
                "compression.type": "producer",
            },
            replication_factor=config.share_coordinator_state_topic_replication_factor,
            commit_timeout_ms=config.offsets_commit_timeout_ms,
        )

    def _batch(
        self, records: list[CoordinatorRecord], now_ms: int, producer: tuple[int, int] | None
    ) -> tuple[bytes, AppendOrigin]:
        del producer  # share state is never transactional
        simple = [SimpleRecord(key=r.key, value=r.value, timestamp=now_ms) for r in records]
        return encode_batch(simple), AppendOrigin.CLIENT
