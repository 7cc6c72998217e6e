"""The ACL authorizer's rules, table-driven: each row is (ACLs, principal, host, operation, resource, verdict)."""

from __future__ import annotations

import pytest

from tidelog.server.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_error,
    filter_error,
)
from tidelog.server.security.authorizer import (
    AclAuthorizer,
    authorizer_enabled,
    parse_super_users,
)

O = AclOperation  # noqa: E741
T = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED


def acl(
    op: AclOperation,
    name: str = "orders",
    *,
    perm: AclPermissionType = ALLOW,
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    host: str = "*",
    rtype: ResourceType = T.TOPIC,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


ALICE = "User:alice"
HOST = "10.0.0.1"

CASES = [
    # (id, acls, principal, host, operation, resource type, name, allowed)
    ("no acls denies", [], ALICE, HOST, O.READ, T.TOPIC, "orders", False),
    ("literal allow", [acl(O.READ)], ALICE, HOST, O.READ, T.TOPIC, "orders", True),
    ("literal is exact", [acl(O.READ)], ALICE, HOST, O.READ, T.TOPIC, "orders2", False),
    ("other operation", [acl(O.READ)], ALICE, HOST, O.WRITE, T.TOPIC, "orders", False),
    ("other principal", [acl(O.READ)], "User:bob", HOST, O.READ, T.TOPIC, "orders", False),
    (
        "wildcard principal",
        [acl(O.READ, principal="User:*")],
        "User:bob",
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        True,
    ),
    ("literal wildcard name", [acl(O.READ, "*")], ALICE, HOST, O.READ, T.TOPIC, "anything", True),
    ("prefix matches", [acl(O.READ, "ord", pattern=PRE)], ALICE, HOST, O.READ, T.TOPIC, "orders", True),
    (
        "prefix is the whole name",
        [acl(O.READ, "orders", pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        True,
    ),
    (
        "prefix does not match",
        [acl(O.READ, "pay", pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    (
        "prefixed * is no wildcard",
        [acl(O.READ, "*", pattern=PRE)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    ("other resource type", [acl(O.READ, rtype=T.GROUP)], ALICE, HOST, O.READ, T.TOPIC, "orders", False),
    (
        "deny wins over allow",
        [acl(O.READ), acl(O.READ, perm=DENY)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    (
        "deny by prefix wins",
        [acl(O.READ), acl(O.READ, "o", pattern=PRE, perm=DENY)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    (
        "deny wildcard principal",
        [acl(O.READ), acl(O.READ, perm=DENY, principal="User:*")],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    (
        "deny ALL denies read",
        [acl(O.READ), acl(O.ALL, perm=DENY)],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        False,
    ),
    (
        "deny read keeps describe",
        [acl(O.DESCRIBE), acl(O.READ, perm=DENY)],
        ALICE,
        HOST,
        O.DESCRIBE,
        T.TOPIC,
        "orders",
        True,
    ),
    (
        "deny other host",
        [acl(O.READ), acl(O.READ, perm=DENY, host="10.0.0.2")],
        ALICE,
        HOST,
        O.READ,
        T.TOPIC,
        "orders",
        True,
    ),
    ("allow ALL", [acl(O.ALL)], ALICE, HOST, O.DELETE, T.TOPIC, "orders", True),
    ("read implies describe", [acl(O.READ)], ALICE, HOST, O.DESCRIBE, T.TOPIC, "orders", True),
    ("write implies describe", [acl(O.WRITE)], ALICE, HOST, O.DESCRIBE, T.TOPIC, "orders", True),
    ("delete implies describe", [acl(O.DELETE)], ALICE, HOST, O.DESCRIBE, T.TOPIC, "orders", True),
    ("alter implies describe", [acl(O.ALTER)], ALICE, HOST, O.DESCRIBE, T.TOPIC, "orders", True),
    ("create does not imply describe", [acl(O.CREATE)], ALICE, HOST, O.DESCRIBE, T.TOPIC, "orders", False),
    ("describe implies no read", [acl(O.DESCRIBE)], ALICE, HOST, O.READ, T.TOPIC, "orders", False),
    (
        "alter_configs implies describe_configs",
        [acl(O.ALTER_CONFIGS)],
        ALICE,
        HOST,
        O.DESCRIBE_CONFIGS,
        T.TOPIC,
        "orders",
        True,
    ),
    (
        "describe_configs implies no alter_configs",
        [acl(O.DESCRIBE_CONFIGS)],
        ALICE,
        HOST,
        O.ALTER_CONFIGS,
        T.TOPIC,
        "orders",
        False,
    ),
    ("host matches", [acl(O.READ, host=HOST)], ALICE, HOST, O.READ, T.TOPIC, "orders", True),
    ("host differs", [acl(O.READ, host="10.0.0.2")], ALICE, HOST, O.READ, T.TOPIC, "orders", False),
    (
        "cluster",
        [acl(O.CREATE, "kafka-cluster", rtype=T.CLUSTER)],
        ALICE,
        HOST,
        O.CREATE,
        T.CLUSTER,
        "kafka-cluster",
        True,
    ),
    (
        "transactional id prefix",
        [acl(O.WRITE, "tx-", pattern=PRE, rtype=T.TRANSACTIONAL_ID)],
        ALICE,
        HOST,
        O.WRITE,
        T.TRANSACTIONAL_ID,
        "tx-1",
        True,
    ),
]


@pytest.mark.parametrize(
    ("acls", "principal", "host", "operation", "rtype", "name", "allowed"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_authorize(
    acls: list[AclBinding],
    principal: str,
    host: str,
    operation: AclOperation,
    rtype: ResourceType,
    name: str,
    allowed: bool,
) -> None:
    authorizer = AclAuthorizer()
    authorizer.add(acls)
    assert authorizer.authorize(principal, host, operation, rtype, name) is allowed


def test_super_users_pass_even_a_deny() -> None:
    authorizer = AclAuthorizer(super_users=parse_super_users("User:admin; User:ops"))
    authorizer.add([acl(O.ALL, "*", perm=DENY, principal="User:*")])
    assert authorizer.authorize("User:admin", HOST, O.DELETE, T.TOPIC, "orders")
    assert authorizer.authorize("User:ops", HOST, O.CLUSTER_ACTION, T.CLUSTER, "kafka-cluster")
    assert not authorizer.authorize(ALICE, HOST, O.READ, T.TOPIC, "orders")


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_acls() -> None:
    authorizer = AclAuthorizer(allow_everyone_if_no_acl_found=True)
    authorizer.add([acl(O.READ, "ord", pattern=PRE, principal="User:bob")])
    assert authorizer.authorize(ALICE, HOST, O.WRITE, T.TOPIC, "payments")  # no ACL on it
    assert not authorizer.authorize(ALICE, HOST, O.READ, T.TOPIC, "orders")  # bob's prefix ACL applies
    assert authorizer.authorize("User:bob", HOST, O.READ, T.TOPIC, "orders")


def test_removal_updates_the_index() -> None:
    authorizer = AclAuthorizer()
    prefixed = acl(O.READ, "ord", pattern=PRE)
    authorizer.add([prefixed, acl(O.READ, "orx", pattern=PRE)])
    authorizer.remove([prefixed])
    assert not authorizer.authorize(ALICE, HOST, O.READ, T.TOPIC, "orders")
    assert authorizer.authorize(ALICE, HOST, O.READ, T.TOPIC, "orxy")
    authorizer.replace([])
    assert len(authorizer) == 0
    assert not authorizer.authorize(ALICE, HOST, O.READ, T.TOPIC, "orxy")


def test_authorized_operations_bit_field() -> None:
    authorizer = AclAuthorizer()
    authorizer.add([acl(O.READ), acl(O.ALTER_CONFIGS)])
    bits = authorizer.authorized_operations(ALICE, HOST, T.TOPIC, "orders")
    assert bits == (1 << O.READ) | (1 << O.DESCRIBE) | (1 << O.DESCRIBE_CONFIGS) | (1 << O.ALTER_CONFIGS)
    assert authorizer.authorized_operations("User:bob", HOST, T.TOPIC, "orders") == 0


@pytest.mark.parametrize(
    ("acls", "allowed"),
    [
        pytest.param([], False, id="no acls"),
        pytest.param([acl(O.WRITE, "any-topic")], True, id="write on one topic"),
        pytest.param([acl(O.WRITE, "a", pattern=PRE)], True, id="write on a prefix"),
        pytest.param([acl(O.WRITE, "a"), acl(O.WRITE, "*", perm=DENY)], False, id="denied on the wildcard"),
        pytest.param(
            [acl(O.WRITE, "ab"), acl(O.WRITE, "a", pattern=PRE, perm=DENY)],
            False,
            id="shadowed by a deny prefix",
        ),
        pytest.param(
            [acl(O.WRITE, "ab"), acl(O.WRITE, "ab", perm=DENY)], False, id="shadowed by a literal deny"
        ),
        pytest.param([acl(O.READ, "a")], False, id="read is not write"),
    ],
)
def test_authorize_any(acls: list[AclBinding], allowed: bool) -> None:
    authorizer = AclAuthorizer()
    authorizer.add(acls)
    assert authorizer.authorize_any(ALICE, HOST, O.WRITE, T.TOPIC) is allowed


def test_filters_literal_prefixed_match_and_any() -> None:
    literal = acl(O.READ, "orders")
    wildcard = acl(O.READ, "*")
    prefixed = acl(O.WRITE, "ord", pattern=PRE, perm=DENY)
    other = acl(O.READ, "payments", principal="User:bob")
    authorizer = AclAuthorizer()
    authorizer.add([literal, wildcard, prefixed, other])
    assert authorizer.bindings(AclBindingFilter(T.TOPIC, "orders", PatternType.LITERAL)) == [literal]
    assert authorizer.bindings(AclBindingFilter(T.TOPIC, "orders", PatternType.MATCH)) == [
        wildcard,
        prefixed,
        literal,
    ]
    assert authorizer.bindings(AclBindingFilter(T.TOPIC, None, PatternType.PREFIXED)) == [prefixed]
    assert authorizer.bindings(AclBindingFilter(principal="User:bob")) == [other]
    assert authorizer.bindings(AclBindingFilter(permission=DENY)) == [prefixed]
    assert len(authorizer.bindings(AclBindingFilter())) == 4
    assert authorizer.bindings(AclBindingFilter(T.GROUP)) == []


def test_binding_and_filter_validation() -> None:
    assert binding_error(acl(O.READ)) is None
    assert binding_error(acl(O.READ, rtype=T.DELEGATION_TOKEN)) == (
        "ACLs on DELEGATION_TOKEN resources are not supported: tidelog does not serve delegation tokens"
    )
    assert binding_error(acl(O.ANY)) == "Invalid operation ANY"
    assert binding_error(acl(O.READ, pattern=PatternType.MATCH)) == "Invalid patternType MATCH"
    assert binding_error(acl(O.READ, principal="alice")) is not None
    assert binding_error(acl(O.CREATE, "other", rtype=T.CLUSTER)) is not None
    assert filter_error(AclBindingFilter()) is None
    assert filter_error(AclBindingFilter(T.UNKNOWN)) == "Invalid resource type UNKNOWN in the filter"


def test_authorizer_class_names() -> None:
    assert not authorizer_enabled("")
    assert authorizer_enabled("tidelog")
    assert authorizer_enabled("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert authorizer_enabled("kafka.security.authorizer.AclAuthorizer")
    with pytest.raises(ValueError, match="not supported"):
        authorizer_enabled("com.example.MyAuthorizer")
