"""tidelog.testing.Cluster: brokers started again after a kill keep their ports; closing it stops the
last broker at once (a controlled shutdown does not retry for partitions no live broker could lead)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidelog.testing import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]


def test_brokers_started_after_the_whole_cluster_died_keep_their_ports(tmp_path: Path) -> None:
    """Every broker killed, then started again: the same addresses, so a producer that knew only the
    first ones produces again."""
    with Cluster(3, data_dir=tmp_path / "cluster", config={"offsets.topic.num.partitions": 1}) as c:
        before = c.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": before})
        admin.create_topics([NewTopic("t", 1, 3)])["t"].result(60)
        producer = Producer({"bootstrap.servers": before, "acks": "all", "log_level": 0})
        delivered: list[int] = []
        producer.produce("t", b"before", on_delivery=lambda err, msg: delivered.append(msg.offset()))
        assert producer.flush(30) == 0
        for broker_id in (1, 2, 3):
            c.kill(broker_id)
        for broker_id in (3, 1, 2):
            c.start_broker(broker_id)
        assert c.bootstrap_servers == before
        with pytest.raises(RuntimeError, match="already running"):
            c.start_broker(1)
        producer.produce("t", b"after", on_delivery=lambda err, msg: delivered.append(msg.offset()))
        assert producer.flush(60) == 0
        assert delivered == [0, 1]
    # close() stops brokers 1, 2, 3 in turn: broker 3, leading t-0 alone, had no live replica to move it to
    last = c.brokers[3].log_path.read_text(errors="replace")
    done = re.findall(r"controlled shutdown done: leading (\d+) partitions with no other live replica", last)
    assert done, last[-3000:]
    assert int(done[-1]) >= 1
    assert "controlled shutdown: still leading" not in last
    assert "controlled shutdown did not complete" not in last
