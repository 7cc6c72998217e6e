"""``tidelog acls`` run as a user runs it (a subprocess) against a broker with the ACL authorizer
(``User:ANONYMOUS`` a super user, so the CLI may administer ACLs): add with kafka-acls.sh's options and
convenience flags, list as JSON (asserted exactly), remove one principal's ACLs and then a resource's."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from tests.cli.cli_support import failed, ok, tidelog_cli

from tidelog.testing import Broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("acls-cli")
    with Broker(
        {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"},
        data_dir=base / "data",
        run_dir=base / "run",
    ) as running:
        yield running


def _acls(broker: Broker, *args: str) -> list[dict[str, str]]:
    out = ok(tidelog_cli("acls", "list", "-b", broker.bootstrap_servers, "--format", "json", *args))
    rows: list[dict[str, str]] = json.loads(out)
    return rows


def _row(
    kind: str, name: str, principal: str, op: str, permission: str = "ALLOW", **kw: str
) -> dict[str, str]:
    return {
        "resource_type": kind,
        "name": name,
        "pattern_type": kw.get("pattern", "LITERAL"),
        "principal": principal,
        "host": kw.get("host", "*"),
        "operation": op,
        "permission": permission,
    }


def test_add_list_remove(broker: Broker) -> None:
    b = ("-b", broker.bootstrap_servers)
    ok(tidelog_cli("acls", "add", *b, "--allow-principal", "User:alice", "--producer", "--topic", "orders",
                   "--transactional-id", "tx-", "--resource-pattern-type", "prefixed"))  # fmt: skip
    bob_consumer = ("--allow-principal", "User:bob", "--consumer", "--topic", "orders", "--group", "app")
    ok(tidelog_cli("acls", "add", *b, *bob_consumer))
    ok(tidelog_cli("acls", "add", *b, "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--operation", "Read",
                   "--topic", "orders"))  # fmt: skip
    assert _acls(broker, "--topic", "orders", "--resource-pattern-type", "prefixed") == [
        _row("TOPIC", "orders", "User:alice", op, pattern="PREFIXED")
        for op in ("CREATE", "DESCRIBE", "WRITE")
    ]
    assert _acls(broker, "--principal", "User:bob") == [
        _row("GROUP", "app", "User:bob", "READ"),
        _row("TOPIC", "orders", "User:bob", "DESCRIBE"),
        _row("TOPIC", "orders", "User:bob", "READ"),
        _row("TOPIC", "orders", "User:bob", "READ", "DENY", host="10.0.0.9"),
    ]
    ok(tidelog_cli("acls", "add", *b, "--allow-principal", "User:ops", "--cluster", "--operation", "Alter",
                   "--operation", "describe-configs"))  # fmt: skip
    assert _acls(broker, "--cluster") == [
        _row("CLUSTER", "kafka-cluster", "User:ops", "ALTER"),
        _row("CLUSTER", "kafka-cluster", "User:ops", "DESCRIBE_CONFIGS"),
    ]
    assert len(_acls(broker)) == 11  # 3 + 2 transactional-id + 3 + 1 + 2
    out = ok(tidelog_cli("acls", "remove", *b, *bob_consumer))
    assert "Removed 3 ACL(s)." in out
    assert _acls(broker, "--principal", "User:bob") == [
        _row("TOPIC", "orders", "User:bob", "READ", "DENY", host="10.0.0.9")
    ]
    out = ok(tidelog_cli("acls", "remove", *b, "--topic", "orders"))  # every literal ACL of the topic
    assert "Removed 1 ACL(s)." in out
    assert _acls(broker, "--principal", "User:bob") == []
    assert _acls(broker, "--transactional-id", "tx-", "--resource-pattern-type", "prefixed") == [
        _row("TRANSACTIONAL_ID", "tx-", "User:alice", op, pattern="PREFIXED") for op in ("DESCRIBE", "WRITE")
    ]


def test_usage_errors(broker: Broker) -> None:
    b = ("-b", broker.bootstrap_servers)
    message = failed(
        tidelog_cli(
            "acls", "add", *b, "--allow-principal", "User:a", "--operation", "IdempotentWrite", "--topic", "t"
        ),
        2,
    )
    assert "ResourceType TOPIC only supports operations" in message
    assert "principal 'alice' must be TYPE:NAME" in failed(
        tidelog_cli("acls", "add", *b, "--allow-principal", "alice", "--topic", "t"), 2
    )
    assert "name a resource" in failed(tidelog_cli("acls", "add", *b, "--allow-principal", "User:a"), 2)


def test_a_broker_without_authorizer_says_so(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("no-authorizer")
    with Broker({}, data_dir=base / "data", run_dir=base / "run") as plain:
        message = failed(
            tidelog_cli(
                "acls", "add", "-b", plain.bootstrap_servers, "--allow-principal", "User:a", "--topic", "t"
            )
        )
        assert "No Authorizer is configured on the broker" in message
