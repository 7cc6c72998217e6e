"""How ACLs are stored: the single-node file (crash-safe, checksummed, refusing to start on a damaged one) and
Kafka's ZooKeeper encodings (names, per-resource JSON, change notifications)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tidelog.server.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tidelog.server.security.acl_codec import decode_resource_acls, encode_resource_acls, parse_operation
from tidelog.server.security.acl_store import ACL_FILE_NAME, AclFileError, LocalAclStore
from tidelog.server.security.authorizer import AclAuthorizer
from tidelog.server.security.zk_acl_store import (
    EXTENDED_ACL_CHANGES,
    LITERAL_ACL_CHANGES,
    acl_change_notification,
    acl_znode_path,
    parse_acl_change_notification,
)

READ = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
DENY = AclBinding(
    ResourceType.GROUP,
    "app-",
    PatternType.PREFIXED,
    "User:bob",
    "10.0.0.1",
    AclOperation.IDEMPOTENT_WRITE,
    AclPermissionType.DENY,
)


def test_the_file_store_round_trips_and_applies_after_writing(tmp_path: Path) -> None:
    store = LocalAclStore(tmp_path, AclAuthorizer())
    asyncio.run(store.create([READ, DENY, READ]))
    assert store.authorizer.bindings() == [READ, DENY]
    reopened = LocalAclStore(tmp_path, AclAuthorizer())
    assert reopened.authorizer.bindings() == [READ, DENY]
    removed = asyncio.run(reopened.delete([AclBindingFilter(ResourceType.GROUP)]))
    assert removed == [[DENY]]
    assert LocalAclStore(tmp_path, AclAuthorizer()).authorizer.bindings() == [READ]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text.replace('"Read"', '"Write"'),  # the checksum no longer matches
        lambda text: text[: len(text) // 2],  # cut off
        lambda text: json.dumps({"version": 99, "resources": [], "crc32c": 0}),
    ],
    ids=["flipped", "truncated", "unknown version"],
)
def test_a_damaged_file_refuses_to_start(tmp_path: Path, damage: object) -> None:
    store = LocalAclStore(tmp_path, AclAuthorizer())
    asyncio.run(store.create([READ]))
    path = tmp_path / ACL_FILE_NAME
    assert callable(damage)
    path.write_text(damage(path.read_text()))
    with pytest.raises(AclFileError, match=f"the ACL file {path} is damaged"):
        LocalAclStore(tmp_path, AclAuthorizer())


def test_kafka_zookeeper_encodings() -> None:
    assert acl_znode_path(ResourceType.TOPIC, "orders", PatternType.LITERAL) == "/kafka-acl/Topic/orders"
    assert (
        acl_znode_path(ResourceType.TRANSACTIONAL_ID, "tx-", PatternType.PREFIXED)
        == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    )
    assert json.loads(encode_resource_acls([READ])) == {
        "version": 1,
        "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}],
    }
    assert decode_resource_acls(
        ResourceType.GROUP, "app-", PatternType.PREFIXED, encode_resource_acls([DENY])
    ) == [DENY]
    assert json.loads(encode_resource_acls([DENY]))["acls"][0]["operation"] == "IdempotentWrite"
    assert (
        parse_operation("IdempotentWrite")
        == parse_operation("idempotent_write")
        == AclOperation.IDEMPOTENT_WRITE
    )
    literal = acl_change_notification(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    assert literal == (LITERAL_ACL_CHANGES, b"TOPIC:orders")
    prefixed = acl_change_notification(ResourceType.GROUP, "app-", PatternType.PREFIXED)
    assert prefixed[0] == EXTENDED_ACL_CHANGES
    assert json.loads(prefixed[1]) == {
        "version": 1,
        "resourceType": "GROUP",
        "name": "app-",
        "patternType": "PREFIXED",
    }
    assert parse_acl_change_notification(*literal) == (ResourceType.TOPIC, "orders", PatternType.LITERAL)
    assert parse_acl_change_notification(*prefixed) == (ResourceType.GROUP, "app-", PatternType.PREFIXED)
    assert parse_acl_change_notification(LITERAL_ACL_CHANGES, b"Topic:a:b") == (
        ResourceType.TOPIC,
        "a:b",
        PatternType.LITERAL,
    )
