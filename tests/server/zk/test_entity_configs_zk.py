"""User and client entity configs in a cluster (tidelog.server.entity_configs.ZkEntityConfigs) against a real
ZooKeeper: Kafka's znodes (``/config/users/alice/clients/c1`` nested as Kafka nests it), a change
notification naming the entity path, another broker's store reloading it, and keys of other owners kept;
group configs (tidelog.server.group_configs) in ``/config/groups/<group>``, beside them but apart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tidelog.server.config import BrokerConfig
from tidelog.server.entity_configs import ZkEntityConfigs
from tidelog.server.group_configs import GroupConfigStore
from tidelog.server.zk import KafkaZkClient
from tidelog.testing import ZooKeeper


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    base = tmp_path_factory.mktemp("zk")
    with ZooKeeper(data_dir=base / "data", run_dir=base / "run") as server:
        yield server


def test_a_change_through_one_broker_reaches_another(zk_server: ZooKeeper, tmp_path: Path) -> None:
    connect = f"{zk_server.connect_string}/entities"

    async def scenario() -> tuple[dict[str, object], list[str]]:
        first = await KafkaZkClient.connect(connect, session_timeout_ms=10_000)
        second = await KafkaZkClient.connect(connect, session_timeout_ms=10_000)
        try:
            await first.create_top_level_paths()
            # An entity written by someone else before this broker started (Kafka's kafka-configs.sh).
            await first.change_entity_config("clients", "c%2F1", {"consumer_byte_rate": "100"})
            a, b = ZkEntityConfigs(first), ZkEntityConfigs(second)
            await a.load()
            await b.load()
            loaded = dict(b.all())
            reloaded: list[str] = []
            b.subscribe(reloaded.append)
            notified: asyncio.Queue[list[str]] = asyncio.Queue()
            watch = second.watch_config_change_notifications(notified.put_nowait)
            await a.alter("users/alice/clients/c1", {"producer_byte_rate": "1024"})
            await a.alter(
                "users/alice", {"SCRAM-SHA-256": "salt=eA==,stored_key=a,server_key=b,iterations=4096"}
            )
            await a.alter("users/alice", {"producer_byte_rate": "7"})
            handled: set[str] = set()
            while len(handled) < 4:  # the first one, and the three above
                for sequence in await asyncio.wait_for(notified.get(), 30):
                    if sequence in handled:
                        continue
                    handled.add(sequence)
                    path = await second.get_config_change_notification(sequence)
                    assert path is not None
                    await b.reload(path)
            watch.cancel()
            assert b.all() == a.all()
            return {"loaded": loaded, "all": dict(b.all())}, reloaded
        finally:
            await first.close()
            await second.close()

    result, reloaded = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert result["loaded"] == {"clients/c%2F1": {"consumer_byte_rate": "100"}}
    assert result["all"] == {
        "clients/c%2F1": {"consumer_byte_rate": "100"},
        "users/alice/clients/c1": {"producer_byte_rate": "1024"},
        "users/alice": {
            "SCRAM-SHA-256": "salt=eA==,stored_key=a,server_key=b,iterations=4096",
            "producer_byte_rate": "7",
        },
    }
    assert reloaded[-3:] == ["users/alice/clients/c1", "users/alice", "users/alice"]

    kazoo = KazooClient(hosts=connect)
    kazoo.start()
    try:
        data, _ = kazoo.get("/config/users/alice/clients/c1")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
        data, _ = kazoo.get("/config/users/alice")
        assert json.loads(data)["config"]["producer_byte_rate"] == "7"
    finally:
        kazoo.stop()
        kazoo.close()


def test_group_configs_live_in_config_groups_and_reach_another_broker(zk_server: ZooKeeper) -> None:
    connect = f"{zk_server.connect_string}/groups"
    broker_config = BrokerConfig.from_mapping({})

    async def scenario() -> tuple[dict[str, object], list[str], dict[str, object]]:
        first = await KafkaZkClient.connect(connect, session_timeout_ms=10_000)
        second = await KafkaZkClient.connect(connect, session_timeout_ms=10_000)
        try:
            await first.create_top_level_paths()
            a = GroupConfigStore.in_zookeeper(first, lambda: broker_config)
            b = GroupConfigStore.in_zookeeper(second, lambda: broker_config)
            users_and_clients = ZkEntityConfigs(second)
            await a.load()
            await b.load()
            await users_and_clients.load()
            changed: list[str] = []
            b.subscribe(changed.append)
            notified: asyncio.Queue[list[str]] = asyncio.Queue()
            watch = second.watch_config_change_notifications(notified.put_nowait)
            await a.incremental_alter("orders/eu", [("share.record.lock.duration.ms", 0, "20000")])
            handled: set[str] = set()
            while not handled:
                for sequence in await asyncio.wait_for(notified.get(), 30):
                    handled.add(sequence)
                    path = await second.get_config_change_notification(sequence)
                    assert path is not None
                    await b.reload(path)  # what the metadata watcher does for every broker's stores
                    await users_and_clients.reload(path)
            watch.cancel()
            return dict(b.all()), changed, dict(users_and_clients.all())
        finally:
            await first.close()
            await second.close()

    seen, changed, users_and_clients = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert seen == {"orders/eu": {"share.record.lock.duration.ms": "20000"}}
    assert changed == ["orders/eu"]
    assert users_and_clients == {}
    kazoo = KazooClient(hosts=connect)
    kazoo.start()
    try:
        data, _ = kazoo.get("/config/groups/orders%2Feu")
        assert json.loads(data) == {"version": 1, "config": {"share.record.lock.duration.ms": "20000"}}
    finally:
        kazoo.stop()
        kazoo.close()
