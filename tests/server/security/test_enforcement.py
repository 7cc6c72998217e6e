"""Authorization end to end with real clients: every client here is ``User:ANONYMOUS`` (PLAINTEXT), so the
ACLs below are on ANONYMOUS, on other principals (which make a resource "have ACLs") and on hosts.

The module's broker runs with ``allow.everyone.if.no.acl.found=true``: a resource without ACLs is open (so
the AdminClient may create topics and ACLs), a resource with ACLs only to whom they allow.
"""

from __future__ import annotations

import uuid

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tidelog.testing import Broker

BROKER_CONFIG = {"authorizer.class.name": "tidelog", "allow.everyone.if.no.acl.found": "true"}
ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def _topic(admin: AdminClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 1, 1)], request_timeout=10)[name].result()
    return name


def _acl(
    name: str, op: AclOperation, principal: str = ANONYMOUS, host: str = "*", **kw: object
) -> AclBinding:
    return AclBinding(
        kw.get("rtype", ResourceType.TOPIC),  # type: ignore[arg-type]
        name,
        kw.get("pattern", ResourcePatternType.LITERAL),  # type: ignore[arg-type]
        principal,
        host,
        op,
        kw.get("permission", AclPermissionType.ALLOW),  # type: ignore[arg-type]
    )


def _add(admin: AdminClient, *acls: AclBinding) -> None:
    for future in admin.create_acls(list(acls), request_timeout=10).values():
        future.result()


def _produce(broker: Broker, topic: str) -> KafkaError | None:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "message.timeout.ms": 10000,
            "enable.idempotence": False,
        }
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"value", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert len(outcome) == 1
    return outcome[0]


def _consume_error(broker: Broker, topic: str) -> int | None:
    """The first error polled by a consumer of ``topic``: None if it got a record, _PARTITION_EOF if it read
    to the end of an empty one."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            return None if error is None else error.code()
        raise AssertionError("neither a record nor an error within 30 s")
    finally:
        consumer.close()


def test_producer_denied_until_allowed(broker: Broker, admin: AdminClient) -> None:
    topic = _topic(admin, "orders")
    _add(admin, _acl(topic, AclOperation.DESCRIBE))  # the topic now has ACLs: WRITE is not among them
    error = _produce(broker, topic)
    assert error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _add(admin, _acl(topic, AclOperation.WRITE))
    assert _produce(broker, topic) is None


def test_deny_on_the_client_host_wins(broker: Broker, admin: AdminClient) -> None:
    topic = _topic(admin, "hosts")
    _add(
        admin,
        _acl(topic, AclOperation.ALL),
        _acl(topic, AclOperation.WRITE, host="127.0.0.1", permission=AclPermissionType.DENY),
        _acl(topic, AclOperation.READ, host="10.9.9.9", permission=AclPermissionType.DENY),
    )
    error = _produce(broker, topic)
    assert error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _consume_error(broker, topic) == KafkaError._PARTITION_EOF  # READ is denied only elsewhere


def test_consumer_denied_then_allowed_by_prefix(broker: Broker, admin: AdminClient) -> None:
    topic = _topic(admin, "secret")
    _add(admin, _acl(topic, AclOperation.WRITE))
    assert _produce(broker, topic) is None
    assert _consume_error(broker, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _add(admin, _acl("secret-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED))
    assert _consume_error(broker, topic) is None


def test_metadata_hides_topics_the_principal_may_not_describe(broker: Broker, admin: AdminClient) -> None:
    hidden = _topic(admin, "hidden")
    visible = _topic(admin, "visible")
    _add(admin, _acl(hidden, AclOperation.READ, principal="User:bob"))
    topics = admin.list_topics(timeout=10).topics
    assert visible in topics
    assert hidden not in topics
    named = admin.list_topics(hidden, timeout=10).topics[hidden]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    _add(admin, _acl(missing, AclOperation.READ, principal="User:bob"))
    # a topic that does not exist answers exactly as one that does: nothing is revealed
    named = admin.list_topics(missing, timeout=10).topics[missing]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_everything_denied_without_acls_or_super_user(tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("closed")
    with Broker(
        {"authorizer.class.name": "tidelog"}, data_dir=workdir / "data", run_dir=workdir / "run"
    ) as closed:
        closed_admin = AdminClient({"bootstrap.servers": closed.bootstrap_servers})
        acl = _acl("t", AclOperation.READ)
        with pytest.raises(KafkaException) as refused:
            closed_admin.create_acls([acl], request_timeout=10)[acl].result()
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(KafkaException) as refused:
            closed_admin.create_topics([NewTopic("t", 1, 1)], request_timeout=10)["t"].result()
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert closed_admin.list_topics(timeout=10).topics == {}


def test_group_and_transactional_id_refusals(broker: Broker, admin: AdminClient) -> None:
    topic = _topic(admin, "grouped")
    group = f"theirs-{uuid.uuid4().hex[:8]}"
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    _add(
        admin,
        _acl(group, AclOperation.READ, principal="User:bob", rtype=ResourceType.GROUP),
        _acl(tid, AclOperation.WRITE, principal="User:bob", rtype=ResourceType.TRANSACTIONAL_ID),
    )
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        codes = set()
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                codes.add(msg.error().code())
                break
        assert codes == {KafkaError.GROUP_AUTHORIZATION_FAILED}
    finally:
        consumer.close()
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": tid}
    )
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _add(admin, _acl(tid, AclOperation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": tid}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(15)


def test_share_group_admin_refusals(broker: Broker, admin: AdminClient) -> None:
    """DescribeShareGroupOffsets needs DESCRIBE on the group and topics, AlterShareGroupOffsets READ on both,
    DeleteShareGroupOffsets DELETE on the group and READ on the topics, DeleteGroups DELETE on the group."""
    from tidelog.client.wire import connect
    from tidelog.protocol.errors import ErrorCode
    from tidelog.protocol.messages import (
        AlterShareGroupOffsetsRequest as Alter,
    )
    from tidelog.protocol.messages import (
        AlterShareGroupOffsetsResponse,
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DeleteShareGroupOffsetsResponse,
        DescribeShareGroupOffsetsResponse,
    )
    from tidelog.protocol.messages import (
        DeleteShareGroupOffsetsRequest as Delete,
    )
    from tidelog.protocol.messages import (
        DescribeShareGroupOffsetsRequest as Describe,
    )

    topic, closed = _topic(admin, "shared"), _topic(admin, "closed")
    theirs, ours = f"theirs-share-{uuid.uuid4().hex[:8]}", f"ours-share-{uuid.uuid4().hex[:8]}"
    _add(
        admin,
        _acl(theirs, AclOperation.READ, principal="User:bob", rtype=ResourceType.GROUP),
        _acl(closed, AclOperation.READ, principal="User:bob"),
    )

    def alter(group: str) -> AlterShareGroupOffsetsResponse:
        return wire.call(
            Alter(
                group_id=group,
                topics=[
                    Alter.AlterShareGroupOffsetsRequestTopic(
                        topic_name=t,
                        partitions=[
                            Alter.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)
                        ],
                    )
                    for t in (topic, closed)
                ],
            ),
            0,
            expect=AlterShareGroupOffsetsResponse,
        )

    def describe(group: str) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
        asked = Describe.DescribeShareGroupOffsetsRequestGroup(
            group_id=group,
            topics=[
                Describe.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=[0])
                for t in (topic, closed)
            ],
        )
        return wire.call(Describe(groups=[asked]), 0, expect=DescribeShareGroupOffsetsResponse).groups[0]

    def delete(group: str) -> DeleteShareGroupOffsetsResponse:
        request = Delete(
            group_id=group,
            topics=[Delete.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in (topic, closed)],
        )
        return wire.call(request, 0, expect=DeleteShareGroupOffsetsResponse)

    gaf, taf = ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with connect(broker.bootstrap_servers, timeout=10) as wire:
        refused = alter(theirs)
        assert (refused.error_code, [p.error_code for t in refused.responses for p in t.partitions]) == (
            gaf,
            [gaf, gaf],
        )
        assert describe(theirs).error_code == gaf
        assert delete(theirs).error_code == gaf
        deleted = wire.call(DeleteGroupsRequest(groups_names=[theirs]), 2, expect=DeleteGroupsResponse)
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(theirs, gaf)]

        altered = alter(ours)
        assert altered.error_code == ErrorCode.NONE
        assert [(t.topic_name, [p.error_code for p in t.partitions]) for t in altered.responses] == [
            (topic, [ErrorCode.NONE]),
            (closed, [taf]),
        ]
        described = describe(ours)
        assert [
            (t.topic_name, [(p.start_offset, p.error_code) for p in t.partitions]) for t in described.topics
        ] == [
            (topic, [(0, ErrorCode.NONE)]),
            (closed, [(-1, taf)]),
        ]
        dropped = delete(ours)
        assert [(t.topic_name, t.error_code) for t in dropped.responses] == [
            (topic, ErrorCode.NONE),
            (closed, taf),
        ]
