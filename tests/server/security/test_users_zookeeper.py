"""``tidelog users add|delete --zookeeper``: a cluster's first admin written straight into ZooKeeper (as
``kafka-configs.sh --zookeeper`` did), in Kafka's format, with a change notification for running brokers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.cli.cli_support import ok, tidelog_cli

from tidelog.protocol.scram import SCRAM_MECHANISMS, ScramCredential
from tidelog.server.zk import KafkaZkClient
from tidelog.testing import ZooKeeper

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    base = tmp_path_factory.mktemp("zk")
    with ZooKeeper(data_dir=base / "data", run_dir=base / "run") as server:
        yield server


def read_user(connect: str, user: str) -> tuple[dict[str, str], list[str]]:
    async def scenario() -> tuple[dict[str, str], list[str]]:
        zk = await KafkaZkClient.connect(connect, session_timeout_ms=10_000)
        try:
            notifications = [
                await zk.get_config_change_notification(n) for n in await zk.get_config_change_notifications()
            ]
            return await zk.get_entity_config("users", user), [n for n in notifications if n is not None]
        finally:
            await zk.close()

    return asyncio.run(scenario())


def test_add_then_delete_through_zookeeper(zk_server: ZooKeeper) -> None:
    connect = f"{zk_server.connect_string}/scram"
    out = ok(
        tidelog_cli(
            "users", "add", "admin", "--zookeeper", connect, "--mechanism", "SCRAM-SHA-512", "--password-stdin",
            stdin="s3cret\n",
        )
    )  # fmt: skip
    assert out.strip() == "user admin: SCRAM-SHA-512 set (8192 iterations)"
    configs, notifications = read_user(connect, "admin")
    assert list(configs) == ["SCRAM-SHA-512"]
    credential = ScramCredential.from_config(configs["SCRAM-SHA-512"])
    assert credential.iterations == 8192
    assert credential.verify_password(SCRAM_MECHANISMS["SCRAM-SHA-512"], "s3cret")
    assert notifications == ["users/admin"]
    assert (
        ok(tidelog_cli("users", "delete", "admin", "--zookeeper", connect)).strip() == "user admin: deleted"
    )
    configs, notifications = read_user(connect, "admin")
    assert configs == {}
    assert notifications == ["users/admin", "users/admin"]
