"""Brokers stopped (SIGTERM) after ZooKeeper died: the controlled shutdown cannot complete (the controller
writes its decisions to ZooKeeper), so each attempt gives up after ``replica.socket.timeout.ms`` as a
request to a remote controller does, and after ``controlled.shutdown.max.retries`` the broker stops anyway
with a clean shutdown of its logs. The controller itself used to wait for its own answer forever."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tidelog.testing import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

CONFIG = {
    "offsets.topic.num.partitions": 1,
    "replica.socket.timeout.ms": 2000,
    "controlled.shutdown.max.retries": 1,
    "controlled.shutdown.retry.backoff.ms": 200,
}


def controller_of(c: Cluster) -> int:
    zk = KazooClient(hosts=c.connect_string, timeout=10)
    zk.start(timeout=15)
    try:
        data, _stat = zk.get("/controller")
        return int(json.loads(data)["brokerid"])
    finally:
        zk.stop()
        zk.close()


def test_brokers_stop_cleanly_after_zookeeper_died(tmp_path: Path) -> None:
    with Cluster(3, data_dir=tmp_path / "cluster", config=CONFIG) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("t", 3, 3)])["t"].result(60)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "log_level": 0})
        for i in range(30):
            producer.produce("t", str(i).encode(), partition=i % 3)
        assert producer.flush(30) == 0
        controller = controller_of(c)
        others = [b for b in (1, 2, 3) if b != controller]
        assert c.zookeeper is not None
        c.zookeeper.kill()
        # a broker asking the controller, then the controller itself: each exits by itself (0), not
        # SIGKILLed at the end of the wait (-9)
        for broker_id in [others[0], controller]:
            assert c.broker(broker_id).stop(timeout=60) == 0, c.broker(broker_id).log_tail(40)
            log = c.broker(broker_id).log_path.read_text(errors="replace")
            assert "controlled shutdown did not complete; stopping anyway" in log
            assert "shut down cleanly" in log
