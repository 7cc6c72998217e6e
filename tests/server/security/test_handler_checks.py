"""What each API checks, driven through an in-process broker's dispatcher with a request context of any
principal (``User:alice``; ``User:admin`` is a super user): the refusals, their error codes, and that a
principal learns nothing of a topic it may not describe."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.inprocess import ctx, handle, make_broker

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterReplicaLogDirsRequest,
    ApiKey,
    CreateAclsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    ProduceRequest,
)
from tidelog.server.broker import Broker
from tidelog.server.dispatch import KafkaPrincipal
from tidelog.server.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

O = AclOperation  # noqa: E741
ALICE = "User:alice"
ALLOW = AclPermissionType.ALLOW


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    data: Path = tmp_path_factory.mktemp("authz") / "data"
    broker = make_broker(data, **{"authorizer.class.name": "tidelog", "super.users": "User:admin"})
    broker.admin.create_topic_now("u", 1, 1, {})
    assert broker.acls is not None
    broker.acls.authorizer.add(
        [
            AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, ALICE, "*", O.READ, ALLOW),
            AclBinding(ResourceType.TOPIC, "auto-", PatternType.PREFIXED, ALICE, "*", O.DESCRIBE, ALLOW),
            AclBinding(ResourceType.GROUP, "mine", PatternType.LITERAL, ALICE, "*", O.READ, ALLOW),
        ]
    )
    yield broker
    broker.logs.shutdown(broker.clock.now_ms())


def _call(broker: Broker, api_key: int, version: int, request: Any, principal: str = ALICE) -> Any:
    kind, _, name = principal.partition(":")
    context = dataclasses.replace(ctx(api_key, version), principal=KafkaPrincipal(kind, name))
    answer = handle(broker, context, request)
    if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future):
        return asyncio.run(_await(answer))
    return answer


async def _await(answer: Any) -> Any:
    return await answer


def _metadata(broker: Broker, names: list[str] | None, principal: str = ALICE, **kw: Any) -> Any:
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return _call(broker, ApiKey.METADATA, 10, MetadataRequest(topics=topics, **kw), principal)


def test_metadata_lists_only_describable_topics_and_hides_existence(broker: Broker) -> None:
    assert [t.name for t in _metadata(broker, None).topics] == ["t"]
    assert sorted(t.name for t in _metadata(broker, None, "User:admin").topics) == ["t", "u"]
    answer = _metadata(broker, ["t", "u", "missing"], allow_auto_topic_creation=False)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("t", ErrorCode.NONE),
        ("u", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("missing", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]


def test_metadata_authorized_operations(broker: Broker) -> None:
    answer = _metadata(
        broker, ["t"], include_topic_authorized_operations=True, include_cluster_authorized_operations=True
    )
    assert answer.topics[0].topic_authorized_operations == (1 << O.READ) | (1 << O.DESCRIBE)
    assert answer.cluster_authorized_operations == 0
    assert _metadata(broker, ["t"]).topics[0].topic_authorized_operations == -2147483648
    admin = _metadata(broker, ["t"], "User:admin", include_cluster_authorized_operations=True)
    assert admin.cluster_authorized_operations == sum(
        1 << op
        for op in (
            O.CREATE,
            O.CLUSTER_ACTION,
            O.DESCRIBE_CONFIGS,
            O.ALTER_CONFIGS,
            O.IDEMPOTENT_WRITE,
            O.ALTER,
            O.DESCRIBE,
        )
    )
    cluster = _call(
        broker, ApiKey.DESCRIBE_CLUSTER, 0, DescribeClusterRequest(include_cluster_authorized_operations=True)
    )
    assert cluster.cluster_authorized_operations == 0


def test_auto_creation_needs_create(broker: Broker) -> None:
    answer = _metadata(broker, ["auto-one"], allow_auto_topic_creation=True)
    assert answer.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert broker.metadata.topic("auto-one") is None
    broker.acls.authorizer.add(  # type: ignore[union-attr]
        [AclBinding(ResourceType.TOPIC, "auto-two", PatternType.LITERAL, ALICE, "*", O.CREATE, ALLOW)]
    )
    answer = _metadata(broker, ["auto-two"], allow_auto_topic_creation=True)
    assert answer.topics[0].error_code == ErrorCode.NONE
    assert broker.metadata.topic("auto-two") is not None


def test_produce_refuses_before_looking_at_the_topic(broker: Broker) -> None:
    request = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=name, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"")]
            )
            for name in ("t", "missing")
        ],
    )
    answer = _call(broker, ApiKey.PRODUCE, 9, request)
    assert [r.partition_responses[0].error_code for r in answer.responses] == [
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ]
    admin = _call(broker, ApiKey.PRODUCE, 9, request, "User:admin")
    assert [r.partition_responses[0].error_code for r in admin.responses] == [
        ErrorCode.INVALID_RECORD,  # past authorization: the empty payload is what is wrong
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]


def test_list_offsets_needs_describe(broker: Broker) -> None:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=name,
                partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)],
            )
            for name in ("t", "u")
        ],
    )
    answer = _call(broker, ApiKey.LIST_OFFSETS, 7, request)
    assert [t.partitions[0].error_code for t in answer.topics] == [
        ErrorCode.NONE,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ]


def test_admin_apis(broker: Broker) -> None:
    created = _call(
        broker,
        ApiKey.CREATE_TOPICS,
        5,
        CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="new", num_partitions=1, replication_factor=1)],
            timeout_ms=1000,
        ),
    )
    assert (created.topics[0].error_code, created.topics[0].error_message) == (
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        "Authorization failed.",
    )
    deleted = _call(broker, ApiKey.DELETE_TOPICS, 4, DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000))
    assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    described = _call(
        broker,
        ApiKey.DESCRIBE_CONFIGS,
        1,
        DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=4, resource_name="1", configuration_keys=None
                ),
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                ),
            ]
        ),
    )
    assert [r.error_code for r in described.results] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ]
    acl = CreateAclsRequest.AclCreation(
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal=ALICE,
        host="*",
        operation=3,
        permission_type=3,
    )
    answer = _call(broker, ApiKey.CREATE_ACLS, 1, CreateAclsRequest(creations=[acl]))
    assert answer.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_group_apis(broker: Broker) -> None:
    join = JoinGroupRequest(
        group_id="theirs",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[],
    )
    assert _call(broker, ApiKey.JOIN_GROUP, 7, join).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    found = _call(broker, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="theirs", key_type=0))
    assert found.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    commit = OffsetCommitRequest(
        group_id="theirs",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                ],
            )
        ],
    )
    answer = _call(broker, ApiKey.OFFSET_COMMIT, 7, commit)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    described = _call(
        broker,
        ApiKey.DESCRIBE_GROUPS,
        5,
        DescribeGroupsRequest(groups=["theirs", "mine"], include_authorized_operations=True),
    )
    assert [(g.group_id, g.error_code, g.authorized_operations) for g in described.groups] == [
        ("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED, -2147483648),
        # past authorization; the coordinator runtime does not run here, so it answers NOT_COORDINATOR
        ("mine", ErrorCode.NOT_COORDINATOR, (1 << O.READ) | (1 << O.DESCRIBE)),
    ]
    listed = _call(broker, ApiKey.LIST_GROUPS, 4, ListGroupsRequest())
    assert all(g.group_id == "mine" for g in listed.groups)


def test_init_producer_id(broker: Broker) -> None:
    idempotent = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    assert (
        _call(broker, ApiKey.INIT_PRODUCER_ID, 4, idempotent, "User:carol").error_code
        == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )
    broker.acls.authorizer.add(  # type: ignore[union-attr]
        [AclBinding(ResourceType.TOPIC, "c-", PatternType.PREFIXED, "User:carol", "*", O.WRITE, ALLOW)]
    )
    assert (
        _call(broker, ApiKey.INIT_PRODUCER_ID, 4, idempotent, "User:carol").error_code == ErrorCode.NONE
    )  # Kafka 3's rule
    transactional = InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000)
    assert (
        _call(broker, ApiKey.INIT_PRODUCER_ID, 4, transactional).error_code
        == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )


def test_without_an_authorizer_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    plain = make_broker(tmp_path / "data")
    try:
        acl = CreateAclsRequest.AclCreation(
            resource_type=2,
            resource_name="t",
            resource_pattern_type=3,
            principal=ALICE,
            host="*",
            operation=3,
            permission_type=3,
        )
        answer = _call(plain, ApiKey.CREATE_ACLS, 1, CreateAclsRequest(creations=[acl]))
        assert (answer.results[0].error_code, answer.results[0].error_message) == (
            ErrorCode.SECURITY_DISABLED,
            "No Authorizer is configured on the broker",
        )
        assert [t.name for t in _metadata(plain, None).topics] == ["t"]
    finally:
        plain.logs.shutdown(plain.clock.now_ms())


def test_offset_fetch_refuses_groups_and_topics(broker: Broker) -> None:
    from tidelog.protocol.messages import OffsetFetchRequest

    topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=[0]) for n in ("t", "u")]
    refused = _call(broker, ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="theirs", topics=topics))
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    mine = _call(broker, ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id="mine", topics=list(topics)))
    assert ("u", [ErrorCode.TOPIC_AUTHORIZATION_FAILED]) in [
        (t.name, [p.error_code for p in t.partitions]) for t in mine.topics
    ]
    groups = [
        OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=g,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopics(name=n, partition_indexes=[0]) for n in ("t", "u")
            ],
        )
        for g in ("theirs", "mine")
    ]
    answer = _call(broker, ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=groups))
    assert (answer.groups[0].group_id, answer.groups[0].error_code) == (
        "theirs",
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    )
    mine_v8 = answer.groups[1]
    assert mine_v8.group_id == "mine"
    assert ("u", [ErrorCode.TOPIC_AUTHORIZATION_FAILED]) in [
        (t.name, [p.error_code for p in t.partitions]) for t in mine_v8.topics
    ]


def test_topics_named_by_id_keep_their_names_secret(broker: Broker) -> None:
    hidden = broker.metadata.topic("u")
    assert hidden is not None
    answer = _call(
        broker,
        ApiKey.METADATA,
        12,
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=hidden.topic_id)]),
    )
    assert [(t.name, t.error_code) for t in answer.topics] == [(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
    deleted = _call(
        broker,
        ApiKey.DELETE_TOPICS,
        6,
        DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=hidden.topic_id)],
            timeout_ms=1000,
        ),
    )
    assert [(r.name, r.topic_id, r.error_code) for r in deleted.responses] == [
        (None, hidden.topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]
    assert broker.metadata.topic("u") is not None


def test_group_configs_need_describe_configs_and_alter_configs_on_the_group(broker: Broker) -> None:
    assert broker.acls is not None
    grant = AclBinding(
        ResourceType.GROUP, "configured", PatternType.LITERAL, ALICE, "*", O.DESCRIBE_CONFIGS, ALLOW
    )
    broker.acls.authorizer.add([grant])
    resources = [
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=32, resource_name=name)
        for name in ("configured", "other")
    ]
    described = _call(broker, ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=resources))
    assert [(r.resource_name, r.error_code) for r in described.results] == [
        ("configured", ErrorCode.NONE),
        ("other", ErrorCode.GROUP_AUTHORIZATION_FAILED),
    ]
    config = IncrementalAlterConfigsRequest.AlterableConfig(
        name="share.delivery.count.limit", config_operation=0, value="3"
    )
    alter = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=32, resource_name="configured", configs=[config]
            )
        ]
    )
    refused = _call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)
    assert refused.responses[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert broker.group_configs.configs_of("configured") == {}
    broker.acls.authorizer.add([dataclasses.replace(grant, operation=O.ALTER_CONFIGS)])
    assert _call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter).responses[0].error_code == ErrorCode.NONE
    assert broker.group_configs.configs_of("configured") == {"share.delivery.count.limit": "3"}


def test_log_dir_apis_need_the_cluster(broker: Broker) -> None:
    """DescribeLogDirs needs CLUSTER DESCRIBE (refused: nothing, CLUSTER_AUTHORIZATION_FAILED from v3),
    AlterReplicaLogDirs CLUSTER ALTER (refused: every partition CLUSTER_AUTHORIZATION_FAILED)."""
    refused = _call(broker, ApiKey.DESCRIBE_LOG_DIRS, 3, DescribeLogDirsRequest(topics=None))
    assert (refused.error_code, refused.results) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    described = _call(broker, ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None), "User:admin")
    [log_dir] = described.results
    assert (described.error_code, log_dir.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert ("u", [0]) in [(t.name, [p.partition_index for p in t.partitions]) for t in log_dir.topics]
    move = AlterReplicaLogDirsRequest(
        dirs=[
            AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                path=log_dir.log_dir,
                topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name="u", partitions=[0])],
            )
        ]
    )
    for principal, error in (
        ("User:alice", ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ("User:admin", ErrorCode.NONE),
    ):
        answer = _call(broker, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, move, principal)
        assert [
            (r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in answer.results
        ] == [
            ("u", [(0, error)])  # admin: already there, nothing to move
        ]
