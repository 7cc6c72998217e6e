"""One module per API family; ``ROUTES`` is the table the dispatcher (and so ApiVersions) is built from.

Version ranges: every version that librdkafka 2.16, kafka-python 3.0 and aiokafka 0.14 send, capped at the
schemas we generate. Produce starts at 3 and Fetch at 4: tidelog stores magic v2 record batches only, and
older versions would need the pre-0.11 message formats (Kafka 4 dropped them too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.protocol.messages import ApiKey

from .api_versions import handle_api_versions
from .configs import handle_alter_configs, handle_describe_configs, handle_incremental_alter_configs
from .consumer_group import handle_consumer_group_request
from .delete_records import handle_delete_records
from .describe_producers import handle_describe_producers
from .fetch import handle_fetch
from .find_coordinator import handle_find_coordinator
from .groups import handle_group_request, handle_offset_commit, handle_offset_delete
from .leader_epoch import handle_offset_for_leader_epoch
from .list_offsets import handle_list_offsets
from .metadata import handle_describe_cluster, handle_metadata
from .produce import handle_produce
from .producer_id import handle_init_producer_id
from .topics import handle_create_partitions, handle_create_topics, handle_delete_topics
from .transactions import handle_transaction_request, handle_txn_offset_commit
from .write_txn_markers import handle_write_txn_markers

__all__ = ["ROUTES"]

ROUTES: list[tuple[int, int, int, Callable[..., Any]]] = [
    (ApiKey.PRODUCE, 3, 11, handle_produce),
    (ApiKey.FETCH, 4, 16, handle_fetch),
    (ApiKey.LIST_OFFSETS, 1, 10, handle_list_offsets),
    (ApiKey.METADATA, 0, 12, handle_metadata),
    (ApiKey.API_VERSIONS, 0, 4, handle_api_versions),
    (ApiKey.CREATE_TOPICS, 0, 7, handle_create_topics),
    (ApiKey.DELETE_TOPICS, 0, 6, handle_delete_topics),
    (ApiKey.DELETE_RECORDS, 0, 2, handle_delete_records),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, handle_offset_for_leader_epoch),
    (ApiKey.DESCRIBE_CONFIGS, 0, 4, handle_describe_configs),
    (ApiKey.ALTER_CONFIGS, 0, 2, handle_alter_configs),
    (ApiKey.CREATE_PARTITIONS, 0, 3, handle_create_partitions),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, handle_incremental_alter_configs),
    (ApiKey.DESCRIBE_CLUSTER, 0, 1, handle_describe_cluster),
    (ApiKey.INIT_PRODUCER_ID, 0, 5, handle_init_producer_id),
    (ApiKey.FIND_COORDINATOR, 0, 6, handle_find_coordinator),
    (ApiKey.JOIN_GROUP, 0, 9, handle_group_request),
    (ApiKey.SYNC_GROUP, 0, 5, handle_group_request),
    (ApiKey.HEARTBEAT, 0, 4, handle_group_request),
    (ApiKey.LEAVE_GROUP, 0, 5, handle_group_request),
    (ApiKey.OFFSET_COMMIT, 0, 9, handle_offset_commit),
    (ApiKey.OFFSET_FETCH, 0, 9, handle_group_request),
    (ApiKey.OFFSET_DELETE, 0, 0, handle_offset_delete),
    (ApiKey.LIST_GROUPS, 0, 5, handle_group_request),
    (ApiKey.DESCRIBE_GROUPS, 0, 5, handle_group_request),
    (ApiKey.DELETE_GROUPS, 0, 2, handle_group_request),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, handle_consumer_group_request),
    (ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 0, handle_consumer_group_request),
    (ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, handle_transaction_request),
    (ApiKey.ADD_OFFSETS_TO_TXN, 0, 4, handle_transaction_request),
    (ApiKey.END_TXN, 0, 4, handle_transaction_request),
    (ApiKey.WRITE_TXN_MARKERS, 0, 1, handle_write_txn_markers),
    (ApiKey.TXN_OFFSET_COMMIT, 0, 4, handle_txn_offset_commit),
    (ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, handle_transaction_request),
    (ApiKey.LIST_TRANSACTIONS, 0, 1, handle_transaction_request),
    (ApiKey.DESCRIBE_PRODUCERS, 0, 0, handle_describe_producers),
]
