"""Cluster mode: an ACL created through one broker is enforced by another, and ZooKeeper holds it in Kafka's
layout (``/kafka-acl/Topic/<name>`` with Kafka's JSON, a ``/kafka-acl-changes`` notification)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tidelog.client.wire import connect
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    MetadataRequest,
    MetadataResponse,
)
from tidelog.testing import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]


def _topic_error(address: str, topic: str) -> int:
    with connect(address, timeout=10) as client:
        answer = client.call(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
            ),
            expect=MetadataResponse,
        )
    return answer.topics[0].error_code


def test_an_acl_created_through_one_broker_is_enforced_by_the_other(tmp_path: Path) -> None:
    config = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",  # the brokers talk to each other as User:ANONYMOUS
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.num.partitions": 1,
    }
    with Cluster(2, data_dir=tmp_path / "cluster", config=config) as cluster:
        first, second = (cluster.broker(i).bootstrap_servers for i in (1, 2))
        with connect(first, timeout=10) as client:
            created = client.call(
                CreateTopicsRequest(
                    topics=[
                        CreateTopicsRequest.CreatableTopic(
                            name="orders", num_partitions=1, replication_factor=2
                        )
                    ],
                    timeout_ms=30000,
                ),
                expect=CreateTopicsResponse,
            )
            assert created.topics[0].error_code == ErrorCode.NONE
        assert _topic_error(second, "orders") == ErrorCode.NONE
        with connect(first, timeout=10) as client:
            answer = client.call(
                CreateAclsRequest(
                    creations=[
                        CreateAclsRequest.AclCreation(
                            resource_type=2,
                            resource_name="orders",
                            resource_pattern_type=3,
                            principal="User:bob",
                            host="*",
                            operation=3,
                            permission_type=3,
                        )
                    ]
                ),
                expect=CreateAclsResponse,
            )
            assert answer.results[0].error_code == ErrorCode.NONE
        # the ACL gives the topic ACLs: ANONYMOUS may no longer describe it, on the other broker too
        deadline = time.monotonic() + 30
        while _topic_error(second, "orders") != ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            assert time.monotonic() < deadline, "broker 2 never applied the ACL"
            time.sleep(0.05)
        with connect(second, timeout=10) as client:
            described = client.call(
                DescribeAclsRequest(
                    resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                    principal_filter=None, host_filter=None, operation=1, permission_type=1,
                ),
                expect=DescribeAclsResponse,
            )  # fmt: skip
        assert [
            (r.resource_name, [(a.principal, a.operation) for a in r.acls]) for r in described.resources
        ] == [("orders", [("User:bob", 3)])]
        zk = KazooClient(hosts=cluster.connect_string)
        zk.start(timeout=15)
        try:
            data, _stat = zk.get("/kafka-acl/Topic/orders")
            assert json.loads(data) == {
                "version": 1,
                "acls": [
                    {"principal": "User:bob", "permissionType": "Allow", "operation": "Read", "host": "*"}
                ],
            }
            changes = zk.get_children("/kafka-acl-changes")
            assert [zk.get(f"/kafka-acl-changes/{c}")[0] for c in changes] == [b"TOPIC:orders"]
            # a PREFIXED ACL through the second broker lets ANONYMOUS describe the topic again, on the first
            with connect(second, timeout=10) as client:
                answer = client.call(
                    CreateAclsRequest(
                        creations=[
                            CreateAclsRequest.AclCreation(
                                resource_type=2, resource_name="ord", resource_pattern_type=4,
                                principal="User:ANONYMOUS", host="*", operation=8, permission_type=3,
                            )
                        ]
                    ),
                    expect=CreateAclsResponse,
                )  # fmt: skip
                assert answer.results[0].error_code == ErrorCode.NONE
            deadline = time.monotonic() + 30
            while _topic_error(first, "orders") != ErrorCode.NONE:
                assert time.monotonic() < deadline, "broker 1 never applied the prefixed ACL"
                time.sleep(0.05)
            data, _stat = zk.get("/kafka-acl-extended/prefixed/Topic/ord")
            assert json.loads(data)["acls"] == [
                {
                    "principal": "User:ANONYMOUS",
                    "permissionType": "Allow",
                    "operation": "Describe",
                    "host": "*",
                }
            ]
            changes = zk.get_children("/kafka-acl-extended-changes")
            assert [json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0]) for c in changes] == [
                {"version": 1, "resourceType": "TOPIC", "name": "ord", "patternType": "PREFIXED"}
            ]
            # deleting the last ACL of a resource deletes its znode
            with connect(first, timeout=10) as client:
                deleted = client.call(
                    DeleteAclsRequest(
                        filters=[
                            DeleteAclsRequest.DeleteAclsFilter(
                                resource_type_filter=2, resource_name_filter="orders", pattern_type_filter=3,
                                principal_filter=None, host_filter=None, operation=1, permission_type=1,
                            )
                        ]
                    ),
                    expect=DeleteAclsResponse,
                )  # fmt: skip
            assert [a.principal for a in deleted.filter_results[0].matching_acls] == ["User:bob"]
            assert zk.exists("/kafka-acl/Topic/orders") is None
        finally:
            zk.stop()
            zk.close()
