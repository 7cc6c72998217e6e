"""Cluster-mode partition health on /metrics: a partition whose follower stopped and left the ISR counts as
under-replicated (and under min ISR) on its leader, and on no other broker."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.server.cluster.inprocess_cluster import InProcessCluster, inprocess_cluster


def _gauges(cluster: InProcessCluster, node_id: int) -> dict[str, float]:
    port = cluster[node_id].broker.metrics_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_under_replicated_after_a_follower_stopped(tmp_path: Path) -> None:
    with inprocess_cluster(tmp_path, (1, 2), **{"metrics.listener": "http://127.0.0.1:0"}) as cluster:
        cluster.create_topic("health", [[1, 2]], configs={"min.insync.replicas": "2"})
        cluster.elect("health", 0, leader=1, leader_epoch=0, isr=[1, 2])
        healthy = _gauges(cluster, 1)
        assert healthy["kafka_server_replicamanager_leadercount"] == 1
        assert healthy["kafka_server_replicamanager_underreplicatedpartitions"] == 0
        assert healthy["kafka_server_replicamanager_underminisrpartitioncount"] == 0
        cluster.stop_node(2)
        cluster.elect(
            "health", 0, leader=1, leader_epoch=0, isr=[1], partition_epoch=1
        )  # the controller's shrink
        degraded = _gauges(cluster, 1)
        assert degraded["kafka_server_replicamanager_underreplicatedpartitions"] == 1
        assert degraded["kafka_server_replicamanager_underminisrpartitioncount"] == 1
        assert degraded["kafka_server_replicamanager_partitioncount"] == 1
