"""One module per API family; :func:`build_routes` binds each handler to exactly the collaborators it
needs and returns the table the dispatcher (and so ApiVersions) is built from.

No handler sees the broker: each gets a replica manager, a metadata cache, an admin manager, a coordinator
runtime, a clock, ... as its constructor says, so what an API can touch is written in one place.

Version ranges: every version that librdkafka 2.16, kafka-python 3.0 and aiokafka 0.14 send, capped at the
schemas we generate. Produce starts at 3 and Fetch at 4: tidelog stores magic v2 record batches only, and
older versions would need the pre-0.11 message formats (Kafka 4 dropped them too). ApiVersions is the
dispatcher's own route.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.protocol.messages import ApiKey
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.clock import Clock
from tidelog.server.cluster.controller import Controller
from tidelog.server.dispatch import Route
from tidelog.server.entity_configs import EntityConfigs
from tidelog.server.fetch_purgatory import FetchPurgatory
from tidelog.server.fetch_sessions import FetchSessionCache
from tidelog.server.group_configs import GroupConfigStore
from tidelog.server.group_runtime import GroupRuntime
from tidelog.server.log_dir_moves import LogDirMoves
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.producer_id_manager import ProducerIds
from tidelog.server.replica_manager import ReplicaManager
from tidelog.server.replication_quota import ReplicationQuotaManager
from tidelog.server.security.acl_store import AclStore
from tidelog.server.security.client_quotas import ClientQuotas
from tidelog.server.share_admin import ShareAdmin
from tidelog.server.share_routing import ShareRouting
from tidelog.server.share_runtime import ShareRuntime
from tidelog.server.share_state_runtime import ShareStateRuntime
from tidelog.server.txn_runtime import TransactionRuntime

from .acls import AclsHandler
from .authz import Authz
from .client_quotas import ClientQuotasHandler
from .configs import ConfigsHandler
from .controlled_shutdown import ControlledShutdownHandler
from .delete_records import DeleteRecordsHandler
from .describe_producers import DescribeProducersHandler
from .elect_leaders import ElectLeadersHandler
from .fetch import FetchHandler
from .find_coordinator import (
    GROUP_KEY_TYPE,
    TRANSACTION_KEY_TYPE,
    CoordinatorLookup,
    FindCoordinatorHandler,
)
from .groups import GroupsHandler
from .leader_epoch import OffsetForLeaderEpochHandler
from .list_offsets import ListOffsetsHandler
from .log_dirs import LogDirsHandler
from .metadata import DescribeClusterHandler, MetadataHandler
from .produce import ProduceHandler
from .producer_id import InitProducerIdHandler
from .reassignments import ReassignmentsHandler
from .sasl import SaslHandler, ScramCredentialsHandler
from .share import ShareHandler
from .share_admin import ShareAdminHandler, ShareAwareGroups
from .share_state import ShareStateHandler
from .topics import TopicsHandler
from .transactions import TransactionsHandler
from .write_txn_markers import WriteTxnMarkersHandler

__all__ = ["build_routes"]


def build_routes(
    *,
    replicas: ReplicaManager,
    metadata: MetadataCache,
    admin: TopicAdmin,
    groups: GroupRuntime,
    transactions: TransactionRuntime,
    producer_ids: ProducerIds,
    fetch_purgatory: FetchPurgatory,
    clock: Clock,
    controller: Callable[[], Controller | None] = lambda: None,
    acls: AclStore | None = None,
    entity_configs: EntityConfigs | None = None,
    client_quotas: ClientQuotas | None = None,
    group_configs: GroupConfigStore | None = None,
    fetch_sessions: FetchSessionCache | None = None,
    shares: ShareRuntime | None = None,
    share_routing: ShareRouting | None = None,
    share_states: ShareStateRuntime | None = None,
    fetch_max_bytes: int = 0x7FFFFFFF,
    log_dir_moves: LogDirMoves | None = None,
    leader_replication_quota: ReplicationQuotaManager | None = None,
) -> list[Route]:
    """Every API this broker serves, each handler bound to its collaborators.

    ``acls``: the ACL store when ``authorizer.class.name`` is set; its authorizer is what every handler
    checks (``None``: no authorization, and no check costs anything).
    """
    acl_apis = AclsHandler(acls)
    authz = acls.authorizer if acls is not None else None
    produce = ProduceHandler(replicas, metadata, clock, authz)
    fetch = FetchHandler(
        replicas,
        metadata,
        fetch_purgatory,
        authz,
        fetch_sessions,
        clock.now_ms,
        fetch_max_bytes=fetch_max_bytes,
        leader_quota=leader_replication_quota,
    )
    topics = TopicsHandler(
        admin,
        metadata,
        authz,
        mutation_quotas=client_quotas.controller_mutation if client_quotas else None,
        clock=clock,
    )
    configs = ConfigsHandler(admin, metadata, authz, group_configs)
    share_admin = (  # issue 13 hook: share groups' admin side (handlers/share_admin.py)
        ShareAdmin(
            shares=shares,
            state=share_states,
            groups=groups,
            metadata=metadata,
            replicas=replicas,
            clock=clock,
            cluster=share_routing,
        )
        if shares is not None
        else None
    )
    group_apis = GroupsHandler(
        groups if share_admin is None else ShareAwareGroups(groups, share_admin), metadata, authz
    )
    txn_apis = TransactionsHandler(transactions, groups, replicas, metadata, authz)
    find_coordinator = FindCoordinatorHandler(
        metadata,
        {
            GROUP_KEY_TYPE: CoordinatorLookup(groups.ensure_offsets_topic, groups.partition_for),
            TRANSACTION_KEY_TYPE: CoordinatorLookup(
                transactions.ensure_state_topic, transactions.partition_for
            ),
        },
        authz,
    )
    return [
        Route(ApiKey.PRODUCE, 3, 11, produce.handle),
        Route(ApiKey.FETCH, 4, 16, fetch.handle),
        Route(ApiKey.LIST_OFFSETS, 1, 10, ListOffsetsHandler(replicas, authz).handle),
        Route(ApiKey.METADATA, 0, 12, MetadataHandler(metadata, admin, authz).handle),
        Route(ApiKey.CREATE_TOPICS, 0, 7, topics.create_topics),
        Route(ApiKey.DELETE_TOPICS, 0, 6, topics.delete_topics),
        Route(ApiKey.DELETE_RECORDS, 0, 2, DeleteRecordsHandler(replicas, authz).handle),
        Route(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, OffsetForLeaderEpochHandler(replicas, authz).handle),
        Route(ApiKey.DESCRIBE_CONFIGS, 0, 4, configs.describe_configs),
        Route(ApiKey.ALTER_CONFIGS, 0, 2, configs.alter_configs),
        Route(ApiKey.CREATE_PARTITIONS, 0, 3, topics.create_partitions),
        Route(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, configs.incremental_alter_configs),
        Route(ApiKey.DESCRIBE_CLUSTER, 0, 1, DescribeClusterHandler(metadata, authz).handle),
        Route(ApiKey.INIT_PRODUCER_ID, 0, 6, InitProducerIdHandler(producer_ids, transactions, authz).handle),
        Route(ApiKey.FIND_COORDINATOR, 0, 6, find_coordinator.handle),
        Route(ApiKey.JOIN_GROUP, 0, 9, group_apis.handle),
        Route(ApiKey.SYNC_GROUP, 0, 5, group_apis.handle),
        Route(ApiKey.HEARTBEAT, 0, 4, group_apis.handle),
        Route(ApiKey.LEAVE_GROUP, 0, 5, group_apis.handle),
        Route(ApiKey.OFFSET_COMMIT, 0, 9, group_apis.offset_commit),
        Route(ApiKey.OFFSET_FETCH, 0, 9, group_apis.handle),
        Route(ApiKey.OFFSET_DELETE, 0, 0, group_apis.offset_delete),
        Route(ApiKey.LIST_GROUPS, 0, 5, group_apis.handle),
        Route(ApiKey.DESCRIBE_GROUPS, 0, 5, group_apis.handle),
        Route(ApiKey.DELETE_GROUPS, 0, 2, group_apis.handle),
        Route(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, group_apis.handle),
        Route(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 0, group_apis.handle),
        Route(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5, txn_apis.handle),
        Route(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4, txn_apis.handle),
        Route(ApiKey.END_TXN, 0, 4, txn_apis.handle),
        Route(ApiKey.WRITE_TXN_MARKERS, 0, 1, WriteTxnMarkersHandler(transactions, clock, authz).handle),
        Route(ApiKey.TXN_OFFSET_COMMIT, 0, 4, txn_apis.txn_offset_commit),
        Route(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, txn_apis.handle),
        Route(ApiKey.LIST_TRANSACTIONS, 0, 1, txn_apis.handle),
        Route(ApiKey.DESCRIBE_PRODUCERS, 0, 0, DescribeProducersHandler(replicas, authz).handle),
        Route(ApiKey.CONTROLLED_SHUTDOWN, 0, 3, ControlledShutdownHandler(controller, authz).handle),
        Route(ApiKey.ELECT_LEADERS, 0, 2, ElectLeadersHandler(controller, metadata, authz).handle),
        *_reassignment_routes(controller, metadata, authz),
        Route(ApiKey.DESCRIBE_ACLS, 0, 3, acl_apis.describe_acls),
        Route(ApiKey.CREATE_ACLS, 0, 3, acl_apis.create_acls),
        Route(ApiKey.DELETE_ACLS, 0, 3, acl_apis.delete_acls),
        *_sasl_routes(entity_configs, authz),
        *_client_quota_routes(client_quotas, authz),
        *_share_routes(shares, share_admin, authz, share_routing, share_states),
        *_log_dir_routes(log_dir_moves, authz),  # issue 15 hook: JBOD
    ]


def _log_dir_routes(moves: LogDirMoves | None, authz: Authz) -> list[Route]:
    """DescribeLogDirs and AlterReplicaLogDirs, where the broker has its log dirs' moves."""
    if moves is None:
        return []
    handler = LogDirsHandler(moves, authz)
    return [
        Route(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, 2, handler.alter),
        Route(ApiKey.DESCRIBE_LOG_DIRS, 0, 4, handler.describe),
    ]


def _reassignment_routes(
    controller: Callable[[], Controller | None], metadata: MetadataCache, authz: Authz
) -> list[Route]:
    """Partition reassignment (KIP-455, issue 15): served by the controller."""
    handler = ReassignmentsHandler(controller, metadata, authz)
    return [
        Route(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, handler.alter),
        Route(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, handler.list),
    ]


def _share_routes(
    shares: ShareRuntime | None,
    share_admin: ShareAdmin | None,
    authz: Authz,
    routing: ShareRouting | None = None,
    states: ShareStateRuntime | None = None,
) -> list[Route]:
    """Share groups (KIP-932), exactly the versions librdkafka's ShareConsumer sends, and the admin APIs'
    v0; in a cluster (``routing``) routed to coordinators and leaders, and the share coordinator's
    inter-broker APIs."""
    if shares is None or share_admin is None:
        return []
    handler = ShareHandler(shares, authz, routing)
    admin = ShareAdminHandler(share_admin, handler, authz)
    routes = [
        Route(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, admin.heartbeat),
        Route(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 0, admin.describe_offsets),
        Route(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, admin.alter_offsets),
        Route(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, admin.delete_offsets),
        Route(ApiKey.SHARE_GROUP_DESCRIBE, 0, 0, admin.describe),
        Route(ApiKey.SHARE_FETCH, 1, 1, handler.fetch),
        Route(ApiKey.SHARE_ACKNOWLEDGE, 1, 1, handler.acknowledge),
    ]
    if routing is not None and states is not None:  # issue 13 cluster hook: the share coordinator's
        # inter-broker APIs
        state_apis = ShareStateHandler(states, authz)
        routes.append(Route(ApiKey.READ_SHARE_GROUP_STATE, 0, 0, state_apis.handle))
        routes.append(Route(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 0, state_apis.handle))
        routes.append(Route(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0, state_apis.handle))
        routes.append(Route(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 0, state_apis.handle))
    return routes


def _sasl_routes(entity_configs: EntityConfigs | None, authz: Authz) -> list[Route]:
    """SASL and SCRAM user APIs (the SASL exchange itself is the connection's, see handlers/sasl.py)."""
    sasl = SaslHandler()
    routes = [
        Route(ApiKey.SASL_HANDSHAKE, 1, 1, sasl.handshake),
        Route(ApiKey.SASL_AUTHENTICATE, 0, 2, sasl.authenticate),
    ]
    if entity_configs is not None:
        scram = ScramCredentialsHandler(entity_configs, authz)
        routes.append(Route(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, scram.describe))
        routes.append(Route(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, scram.alter))
    return routes


def _client_quota_routes(client_quotas: ClientQuotas | None, authz: Authz) -> list[Route]:
    """DescribeClientQuotas and AlterClientQuotas, where the quotas have a store."""
    if client_quotas is None or client_quotas.store is None:
        return []
    handler = ClientQuotasHandler(client_quotas.store, authz)
    return [
        Route(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, handler.describe),
        Route(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, handler.alter),
    ]
