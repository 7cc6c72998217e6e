"""Inter-broker traffic over SASL: two brokers on a real ZooKeeper whose ``inter.broker.listener.name`` is a
SASL_PLAINTEXT listener (SCRAM-SHA-512, the broker's login in Kafka's per-listener JAAS key). The brokers'
user is written into ZooKeeper with ``tidelog users add --zookeeper`` before any broker starts, as a
cluster's first user is. An acks=all produce with ``min.insync.replicas=2`` completes only once the follower
has fetched the records, and the follower's fetcher can only fetch after logging in: it proves the login."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.cli.cli_support import ok, tidelog_cli

from tidelog.testing import Broker, Cluster

pytestmark = pytest.mark.clients

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{}";'


class _InterBrokerSaslBroker(Broker):
    """A cluster broker with an INTERNAL listener (SASL_PLAINTEXT, any free port) after its PLAINTEXT one."""

    def command(self, port: int) -> list[str]:
        plain = f"listeners=PLAINTEXT://{self.host}:{port}"
        return [f"{arg},INTERNAL://{self.host}:0" if arg == plain else arg for arg in super().command(port)]


class _SaslCluster(Cluster):
    def _new_broker(self, broker_id: int) -> Broker:
        if broker_id == 1:  # ZooKeeper is up, no broker yet: the brokers' own user first
            ok(tidelog_cli("users", "add", "broker", "--zookeeper", self.connect_string, "--password-stdin",
                           stdin="broker-secret\n"))  # fmt: skip
        broker = super()._new_broker(broker_id)
        broker.__class__ = _InterBrokerSaslBroker  # same state, one more listener on its command line
        return broker


def test_replication_runs_over_a_sasl_inter_broker_listener(tmp_path: Path) -> None:
    config = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": JAAS.format("broker-secret"),
        "min.insync.replicas": 2,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
    }
    with _SaslCluster(2, data_dir=tmp_path / "cluster", config=config) as running:
        bootstrap = running.bootstrap_servers
        topic = f"sasl-replicated-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, 1, 2)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60_000})
        delivered: list[tuple[int, bytes]] = []
        for i in range(20):
            producer.produce(
                topic,
                f"replicated-{i}".encode(),
                on_delivery=lambda e, m: delivered.append((-1, b"") if e else (m.offset(), m.value())),
            )
        assert producer.flush(60) == 0
        assert delivered == [(i, f"replicated-{i}".encode()) for i in range(20)]
        for broker in running.brokers.values():
            assert "failed SASL authentication" not in broker.log_path.read_text()
