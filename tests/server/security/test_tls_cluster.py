"""Inter-broker traffic over TLS: three brokers on a real ZooKeeper whose ``inter.broker.listener.name`` is
an SSL listener requiring client certificates (the replica fetchers and coordinators connect with TLS,
verify the peer against the truststore and present the keystore); clients use PLAINTEXT. An acks=all
produce with ``min.insync.replicas=3`` completes only once both followers have fetched the records, so it
proves replication over TLS; the leaders saw each follower's certificate as its principal."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.support.certs import tls_material

from tidelog.testing import Broker, Cluster

pytestmark = pytest.mark.clients


class _InterBrokerTlsBroker(Broker):
    """A cluster broker with an INTERNAL listener (SSL, any free port) after its PLAINTEXT one."""

    def command(self, port: int) -> list[str]:
        plain = f"listeners=PLAINTEXT://{self.host}:{port}"
        return [f"{arg},INTERNAL://{self.host}:0" if arg == plain else arg for arg in super().command(port)]


class _TlsCluster(Cluster):
    def _new_broker(self, broker_id: int) -> Broker:
        broker = super()._new_broker(broker_id)
        broker.__class__ = _InterBrokerTlsBroker  # same state, one more listener on its command line
        return broker


def test_replication_runs_over_an_ssl_inter_broker_listener(tmp_path: Path) -> None:
    pki = tls_material(tmp_path / "pki")
    config = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.location": str(pki.broker.keystore),
        "ssl.truststore.location": str(pki.ca.cert),
        "listener.name.internal.ssl.client.auth": "required",
        "min.insync.replicas": 3,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
    }
    env = {**os.environ, "TIDELOG_LOG_LEVEL": "DEBUG"}  # each TLS connection's principal
    with _TlsCluster(3, data_dir=tmp_path / "cluster", config=config, env=env) as running:
        bootstrap = running.bootstrap_servers
        topic = f"tls-replicated-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, 1, 3)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60_000})
        values = [f"replicated-{i}".encode() for i in range(50)]
        errors: list[object] = []
        for value in values:
            producer.produce(
                topic, value, on_delivery=lambda error, _m: errors.append(error) if error else None
            )
        assert producer.flush(60) == 0
        assert errors == []

        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True}
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition"
            if message.error():
                break
            got.append(message.value())
        consumer.close()
        assert got == values

        inter_broker = set()
        for broker in running.brokers.values():
            inter_broker |= set(re.findall(r"TLS \S+ \S+, principal (\S+)", broker.log_path.read_text()))
        assert inter_broker == {"User:CN=localhost,O=tidelog"}
