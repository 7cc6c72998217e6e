"""A data dir written by an earlier tidelog loads, shows exactly what it held, and takes new writes.

``tests/data/datadir-v1/`` was written by ``tools/make_legacy_datadir.py`` (the commit is in the manifest,
``tests/data/datadir-v1.expected.json``) and stopped cleanly; it is never regenerated to make this test
pass. Each test starts a broker subprocess, with the manifest's broker config, on a copy of it:

- loading, after the clean stop it was made with and as if that process had crashed instead (no
  clean-shutdown marker, no recovery points: every segment revalidated, indexes and transaction indexes
  rebuilt): every record of every partition, read_uncommitted and read_committed (offsets, keys, values,
  headers, timestamps, leader epochs; the aborted transaction's records only in read_uncommitted), log
  start offsets, high watermarks and last stable offsets (internal partitions too: loading appends
  nothing), the record types ``__consumer_offsets`` holds, the groups (type, state) and their committed
  offsets (offset, metadata, leader epoch), the transactional ids (DescribeTransactions, ListTransactions),
  the producer states that have not expired yet (DescribeProducers), topic configs and the dynamic broker
  configs; the deleted topic and its group stay gone;
- writing on: produces (plain, idempotent, transactional) continue their partitions exactly at the old log
  ends, offsets committed to the old classic and KIP-848 groups replace theirs, InitProducerId for a stored transactional id keeps its producer
  id and bumps its epoch, and a new transaction commits; all of it, and everything loaded, is there again
  after a restart.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from tests.support import datadir_state as state

from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURE = DATA / "datadir-v1"
MANIFEST = DATA / "datadir-v1.expected.json"
NEW_TIMESTAMP_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z, after every timestamp in the fixture
INTERNAL_PREFIX = "__"
HOUR_MS = 3_600_000


def broker_problems(broker: Broker) -> list[str]:
    """Log lines showing that an exception escaped somewhere in the broker (always a bug)."""
    return [
        line
        for line in broker.log_path.read_text(errors="replace").splitlines()
        if "Traceback" in line or "level=ERROR" in line
    ]


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(MANIFEST.read_text())
    assert loaded["format_version"] == 1
    return loaded


@pytest.fixture
def legacy_broker(
    request: pytest.FixtureRequest, tmp_path: Path, manifest: dict[str, Any]
) -> Iterator[Broker]:
    """A broker on a copy of the fixture; ``indirect`` parameter ``"crashed"`` first removes the clean-shutdown
    marker and the recovery points, so every segment is revalidated and every index rebuilt."""
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE, data_dir, symlinks=True)
    if getattr(request, "param", "clean") == "crashed":
        (data_dir / ".kafka_cleanshutdown").unlink()
        (data_dir / "recovery-point-offset-checkpoint").unlink()
    broker = Broker(manifest["broker_config"], data_dir=data_dir, run_dir=tmp_path / "run")
    broker.start()
    try:
        yield broker
        assert broker.is_running, f"the broker died:\n{broker.log_tail()}"
        code = broker.stop(timeout=30)
        assert code == 0, f"broker exit code {code} on SIGTERM:\n{broker.log_tail()}"
        problems = broker_problems(broker)
        assert not problems, "broker logged errors:\n" + "\n".join(problems[:20]) + "\n" + broker.log_tail(80)
    finally:
        broker.close()


def observe(broker: Broker, manifest: dict[str, Any]) -> dict[str, Any]:
    observed: dict[str, Any] = state.observe(
        broker.bootstrap_servers, manifest["node_id"], manifest["groups"], manifest["transactional_ids"]
    )
    return observed


def assert_same(observed: dict[str, Any], expected: dict[str, Any], *, skip: tuple[str, ...] = ()) -> None:
    """Section by section, so that a failure names what differs."""
    assert set(observed) == set(expected)
    for section, value in expected.items():
        if section in skip:
            continue
        if section == "records":
            for isolation, partitions in value.items():
                assert set(observed["records"][isolation]) == set(partitions), isolation
                for name, records in partitions.items():
                    assert observed["records"][isolation][name] == records, f"{isolation} records of {name}"
        else:
            assert observed[section] == value, section


def assert_producers(observed: dict[str, Any], expected: dict[str, Any], expiration_ms: int) -> None:
    """DescribeProducers: each producer the fixture held that has not expired by now (``expiration_ms``
    after its last batch timestamp) is there as it was, each expired one is gone; within an hour of its
    expiry either will do (the broker's clock decided at load time)."""
    now_ms = time.time() * 1000
    assert set(observed) == set(expected)
    for name, rows in expected.items():
        age = {row["producer_id"]: now_ms - row["last_timestamp"] for row in rows}
        doubtful = {pid for pid, ms in age.items() if abs(ms - expiration_ms) <= HOUR_MS}
        kept = [row for row in rows if age[row["producer_id"]] < expiration_ms - HOUR_MS]
        assert [row for row in observed[name] if row["producer_id"] not in doubtful] == kept, name


def cluster_id(broker: Broker) -> str:
    admin = state.admin_client(broker.bootstrap_servers)
    cluster_id: str = state.result(admin.describe_cluster(request_timeout=state.TIMEOUT)).cluster_id
    return cluster_id


@pytest.mark.parametrize("legacy_broker", ["clean", "crashed"], indirect=True)
def test_loads_exactly_what_it_held(legacy_broker: Broker, manifest: dict[str, Any]) -> None:
    expected = manifest["expected"]
    observed = observe(legacy_broker, manifest)
    assert cluster_id(legacy_broker) == manifest["cluster_id"]
    assert_same(observed, expected, skip=("producers",))
    assert_producers(
        observed["producers"],
        expected["producers"],
        int(manifest["broker_config"]["producer.id.expiration.ms"]),
    )
    # What the equality above implies, said outright.
    uncommitted = observed["records"][state.READ_UNCOMMITTED]
    committed = observed["records"][state.READ_COMMITTED]
    assert manifest["aborted"], "the fixture has an aborted transaction"
    for name, offsets in manifest["aborted"].items():
        assert set(offsets) <= {r["offset"] for r in uncommitted[name]}, name
        assert not set(offsets) & {r["offset"] for r in committed[name]}, name
    for topic in manifest["deleted_topics"]:
        assert topic not in observed["topics"]
    for group in manifest["deleted_groups"]:
        assert group not in observed["listed_groups"]
        assert observed["committed_offsets"][group] == {}
    types = {key.split("/")[0] for key in observed["coordinator_record_types"]["__consumer_offsets"]}
    assert types >= {"1", "2", "3", "4", "5", "6", "7", "8"}


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes, **config: Any) -> int:
    """One record (key ``new``, a header, ``NEW_TIMESTAMP_MS``); its offset from the delivery report."""
    offsets: list[int] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3, **config}
    )
    producer.produce(
        topic,
        value=value,
        key=b"new",
        partition=partition,
        headers=[("after", b"load")],
        timestamp=NEW_TIMESTAMP_MS,
        on_delivery=delivered,
    )
    assert producer.flush(30) == 0
    (offset,) = offsets
    return offset


def new_record(offset: int, value: str, leader_epoch: int) -> dict[str, Any]:
    return {
        "offset": offset,
        "key": "new",
        "value": value,
        "headers": [["after", "load"]],
        "timestamp": [confluent_kafka.TIMESTAMP_CREATE_TIME, NEW_TIMESTAMP_MS],
        "leader_epoch": leader_epoch,
    }


def alter_offsets(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    admin = state.admin_client(bootstrap)
    (future,) = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=state.TIMEOUT
    ).values()
    altered = state.result(future)
    assert all(tp.error is None for tp in altered.topic_partitions), altered.topic_partitions


def test_writes_continue_where_it_ended_and_survive_a_restart(
    legacy_broker: Broker, manifest: dict[str, Any]
) -> None:
    expected = manifest["expected"]
    bootstrap = legacy_broker.bootstrap_servers
    end = {name: o["high_watermark"] for name, o in expected["offsets"].items()}
    after = copy.deepcopy(expected)

    # A plain produce and an idempotent one continue their partitions at the old log end.
    assert produce_one(bootstrap, "plain", 0, b"after load") == end["plain-0"]
    assert (
        produce_one(bootstrap, "retained", 0, b"idempotent after load", **{"enable.idempotence": True})
        == end["retained-0"]
    )

    # New commits replace the old groups' offsets (a classic group and a KIP-848 one, both Empty).
    alter_offsets(
        bootstrap, "classic-group", [TopicPartition("plain", 0, end["plain-0"] + 1, metadata="new")]
    )
    alter_offsets(bootstrap, "consumer-group", [TopicPartition("plain", 1, 10, metadata="rewound")])
    after["committed_offsets"]["classic-group"]["plain-0"] = {
        "offset": end["plain-0"] + 1,
        "metadata": "new",
        "leader_epoch": None,
    }
    after["committed_offsets"]["consumer-group"]["plain-1"] = {
        "offset": 10,
        "metadata": "rewound",
        "leader_epoch": None,
    }

    # The stored transactional id: InitProducerId keeps its producer id and bumps its epoch.
    stored = expected["transactions"]["txn-writer"]
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "txn-writer", "log_level": 3}
    )
    producer.init_transactions(30)
    described = state.describe_transactions(bootstrap, ["txn-writer"])["txn-writer"]
    assert (described["state"], described["producer_id"], described["producer_epoch"]) == (
        "Empty",
        stored["producer_id"],
        stored["producer_epoch"] + 1,
    )
    offsets: list[int] = []
    producer.begin_transaction()
    producer.produce(
        "txn",
        value=b"committed after load",
        key=b"new",
        partition=0,
        headers=[("after", b"load")],
        timestamp=NEW_TIMESTAMP_MS,
        on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else -1),
    )
    producer.commit_transaction(30)
    assert offsets == [end["txn-0"]]
    after["transactions"]["txn-writer"] = {
        **stored,
        "state": "CompleteCommit",
        "producer_epoch": stored["producer_epoch"] + 1,
    }
    after["listed_transactions"]["txn-writer"]["state"] = "CompleteCommit"

    # The leader epoch a new batch gets is this broker's to choose; read it back before the restart.
    written = state.read_records(bootstrap, [("plain", 0), ("retained", 0), ("txn", 0)], state.READ_COMMITTED)
    for name, value, offset in (
        ("plain-0", "after load", end["plain-0"]),
        ("retained-0", "idempotent after load", end["retained-0"]),
        ("txn-0", "committed after load", end["txn-0"]),
    ):
        last = written[name][-1]
        assert last == new_record(offset, value, last["leader_epoch"]), name
        for isolation in (state.READ_UNCOMMITTED, state.READ_COMMITTED):
            after["records"][isolation][name].append(last)
    for name in ("plain-0", "retained-0"):
        after["offsets"][name]["high_watermark"] = after["offsets"][name]["last_stable_offset"] = (
            end[name] + 1
        )
    after["offsets"]["txn-0"]["high_watermark"] = after["offsets"]["txn-0"]["last_stable_offset"] = (
        end["txn-0"] + 2  # the record and its commit marker
    )

    legacy_broker.restart()
    observed = observe(legacy_broker, manifest)
    # The internal partitions grew by what the coordinators wrote for the above: not pinned here.
    assert_same(observed, after, skip=("offsets", "coordinator_record_types", "producers"))
    assert [
        (p["producer_id"], p["producer_epoch"])
        for p in observed["producers"]["txn-0"]
        if p["producer_id"] == stored["producer_id"]
    ] == [(stored["producer_id"], stored["producer_epoch"] + 1)]
    data_offsets = {
        name: o for name, o in observed["offsets"].items() if not name.startswith(INTERNAL_PREFIX)
    }
    assert data_offsets == {
        name: o for name, o in after["offsets"].items() if not name.startswith(INTERNAL_PREFIX)
    }
    for name, offsets_now in observed["offsets"].items():
        if name.startswith(INTERNAL_PREFIX):
            before = expected["offsets"][name]
            assert offsets_now["log_start_offset"] == before["log_start_offset"], name
            assert offsets_now["high_watermark"] >= before["high_watermark"], name
