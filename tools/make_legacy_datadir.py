"""Write ``tests/data/datadir-v1/``: a broker data dir made by this tidelog, kept so later ones must load it.

Usage::

    python tools/make_legacy_datadir.py [--output-dir DIR] [--manifest PATH]

It starts a real broker subprocess (``tidelog.testing.Broker``) on a fresh directory, drives it with
real clients (confluent-kafka; the ``tidelog configs`` CLI for the cluster-wide default, which
confluent-kafka cannot address), observes what clients see (``tests/support/datadir_state.py``), stops the
broker with SIGTERM (a clean shutdown, exit code 0, no error in its log) and only then replaces the output
dir with the result and writes the manifest ``tests/data/datadir-v1.expected.json`` (what clients saw, the
broker config, the tidelog commit, and what each segment holds batch by batch).
``tests/server/test_legacy_datadir.py`` loads a copy and checks that the broker still shows exactly that.

What the dir holds (timestamps are fixed CreateTimes from ``BASE_TIMESTAMP_MS`` unless said otherwise):

- ``plain`` (2 partitions, ``segment.bytes=1024``: several rolled segments; ``index.interval.bytes=128``:
  offset and time index entries): keyed records with headers
  in batches of each compression codec (none, gzip, snappy, lz4, zstd), then odd ones (null key, null
  value, empty value, non-UTF-8 bytes, a repeated header key, a null header value, a timestamp earlier
  than its predecessor); DeleteRecords moved ``plain-1``'s log start offset to 3;
- ``compacted`` (``cleanup.policy=compact``): keys overwritten several times and a tombstone (the cleaner
  never ran on it: its only segment is the active one); ``cleaned`` (compacted, small segments, tombstones
  kept for 100 years): the same over several segments, cleaned once by the log cleaner before the stop
  (offset gaps, a ``cleaner-offset-checkpoint``), with nothing left for the cleaner to do;
- ``retained`` (override ``retention.ms``): the writes of an idempotent producer, in three batches, with
  timestamps of the time they were made (a producer state is only loaded while it has not expired);
- ``txn`` (2 partitions): transactional id ``txn-writer`` commits one transaction and aborts another,
  with non-transactional records written while each was open and after; ``ctp-out``: transactional id
  ``ctp-txn`` read ``txn`` (read_committed, classic group ``ctp-group``), wrote what it read to ``ctp-out``
  and committed that with ``send_offsets_to_transaction`` (a transactional offset commit);
- groups: ``classic-group`` (classic protocol, consumed ``plain`` and ``doomed``, commits with
  metadata), ``consumer-group`` (KIP-848, ``group.protocol=consumer``, consumed ``plain`` and
  ``compacted``), ``simple-group`` (assign and commit only), all Empty at the stop;
- ``doomed`` (deleted): written and committed by ``classic-group`` and by ``doomed-group`` (its only
  offsets), then deleted, which tombstones those offsets and removes ``doomed-group``;
- dynamic broker configs: cluster-wide default ``log.retention.ms=-1`` (so that time never deletes the
  fixed-timestamp records) and broker 1's own ``message.max.bytes``.

The broker config (``BROKER_CONFIG``) is recorded in the manifest: the test starts its broker with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.support import datadir_state as state  # noqa: E402

from tidelog.protocol.records import iter_batch_headers  # noqa: E402
from tidelog.testing import Broker  # noqa: E402

DEFAULT_OUTPUT_DIR = REPO_ROOT / "tests" / "data" / "datadir-v1"
DEFAULT_MANIFEST = REPO_ROOT / "tests" / "data" / "datadir-v1.expected.json"
FORMAT_VERSION = 1

BASE_TIMESTAMP_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NODE_ID = "1"
INT_MAX = 2**31 - 1
BROKER_CONFIG: dict[str, str] = {
    "node.id": NODE_ID,
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    # The fixture is loaded long after it was written. Offsets and transactional ids expire only on timers
    # (every 10 minutes and every hour after a load, never within a test); keep them as long as allowed anyway.
    "offsets.retention.minutes": str(INT_MAX),
    "transactional.id.expiration.ms": str(INT_MAX),
    "producer.id.expiration.ms": str(INT_MAX),
    "log.cleaner.backoff.ms": "200",
}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
HUNDRED_YEARS_MS = "3155760000000"
BROKER_MESSAGE_MAX_BYTES = "2097152"
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "plain": (2, {"segment.bytes": "1024", "index.interval.bytes": "128"}),
    "compacted": (1, {"cleanup.policy": "compact"}),
    "cleaned": (
        1,
        {"cleanup.policy": "compact", "segment.bytes": "400", "delete.retention.ms": HUNDRED_YEARS_MS},
    ),
    "retained": (1, {"retention.ms": HUNDRED_YEARS_MS}),
    "txn": (2, {}),
    "ctp-out": (1, {}),
    "doomed": (1, {}),
}
GROUPS = ("classic-group", "consumer-group", "simple-group", "ctp-group", "doomed-group")
TRANSACTIONAL_IDS = ("txn-writer", "ctp-txn")
DELETED_TOPICS = ("doomed",)
DELETED_GROUPS = ("doomed-group",)
LOG_SIZE_LIMIT_BYTES = 1_000_000
NOTES = [
    (
        "Every group is Empty at the stop: a group with members at the stop is left out (their sessions would"
        " expire while a test runs and rebalance it, so what it shows would depend on timing)."
    ),
    (
        "Only cleaned-0 was cleaned by the log cleaner, and nothing was left for it to clean: compacted-0,"
        " __consumer_offsets and __transaction_state each have their active segment only."
    ),
    (
        "Producer states (expected.producers) expire producer.id.expiration.ms (at most 2^31-1 ms, about 24.8"
        " days) after a producer's last batch timestamp, also when a log is loaded (as in Kafka): a broker shows"
        " those that have not expired at the time it runs. The idempotent producer's records (retained-0) carry"
        " the time they were written for that reason; the transactional producers' last batches are their"
        " markers, also stamped at the time."
    ),
    "This tidelog writes no leader-epoch-checkpoint or partition.metadata files, so the dir has none.",
    "batches: what each segment held at the stop, read with tidelog's own record parser, for the reader.",
]


class Clock:
    """Hands out the fixed CreateTimes, one second apart, in the order records are produced."""

    def __init__(self) -> None:
        self.next_ms = BASE_TIMESTAMP_MS

    def tick(self) -> int:
        now = self.next_ms
        self.next_ms += 1000
        return now


def producer(bootstrap: str, **config: Any) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "log_level": 3, **config}
    )


def send(p: confluent_kafka.Producer, topic: str, partition: int, value: bytes | None, **kw: Any) -> None:
    """Produce one record; a failed delivery stops the script (raised at the next flush)."""

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"delivery to {topic}-{partition} failed: {err}")

    p.produce(topic, value=value, partition=partition, on_delivery=delivered, **kw)


def flush(p: confluent_kafka.Producer) -> None:
    left = p.flush(30)
    if left:
        raise RuntimeError(f"{left} record(s) not delivered")


def consumer(bootstrap: str, group: str, **config: Any) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "log_level": 3,
            **config,
        }
    )


def consume_to_end(c: confluent_kafka.Consumer, partitions: int) -> list[confluent_kafka.Message]:
    """Poll a subscribed consumer until it reached the end of ``partitions`` partitions."""
    messages: list[confluent_kafka.Message] = []
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < partitions:
        if time.monotonic() >= deadline:
            raise RuntimeError(f"the consumer reached the end of {sorted(at_end)} only")
        msg = c.poll(0.2)
        if msg is None:
            continue
        if msg.error() is None:
            messages.append(msg)
        elif msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
            at_end.add((msg.topic(), msg.partition()))
        else:
            raise RuntimeError(f"consumer error: {msg.error()}")
    return messages


# -- the scenario ----------------------------------------------------------------------------------------------


def create_topics(bootstrap: str) -> None:
    admin = state.admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, n, 1, config=config) for name, (n, config) in TOPICS.items()], request_timeout=30
    )
    for future in futures.values():
        state.result(future)


def set_dynamic_broker_configs(bootstrap: str) -> None:
    cli = [sys.executable, "-m", "tidelog", "configs", "alter", "--bootstrap-server", bootstrap]
    subprocess.run(
        [*cli, "--broker-defaults", "--set", "log.retention.ms=-1"], check=True, capture_output=True
    )
    admin = state.admin_client(bootstrap)
    entry = ConfigEntry(
        "message.max.bytes", BROKER_MESSAGE_MAX_BYTES, incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.BROKER, NODE_ID, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        state.result(future)


def write_plain(bootstrap: str, clock: Clock) -> None:
    for codec in CODECS:
        p = producer(bootstrap, **{"compression.type": codec})
        for partition in (0, 1):
            for i in range(4):
                value = f"plain-{partition} {codec} #{i}: " + "the quick brown fox " * (1 + i % 3)
                send(
                    p,
                    "plain",
                    partition,
                    value.encode(),
                    key=f"key-{i % 3}".encode(),
                    headers=[("codec", codec.encode()), ("i", str(i).encode())],
                    timestamp=clock.tick(),
                )
        flush(p)
    p = producer(bootstrap)
    odd: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (None, b"null key", []),
        (b"null-value", None, [("why", b"a null value on a non-compacted topic")]),
        (b"empty-value", b"", [("empty", b"")]),
        (b"\xff\xfe binary key", bytes(range(256)), [("bin", b"\x00\x80\xff")]),
        (b"repeated-header", b"two headers named h", [("h", b"first"), ("h", b"second")]),
        (b"null-header", b"a header without value", [("n", None)]),
    ]
    for partition in (0, 1):
        for key, value, headers in odd:
            send(p, "plain", partition, value, key=key, headers=headers, timestamp=clock.tick())
            flush(p)  # one batch each
        earlier = clock.tick() - 10_000  # older than the record before it: the time index keeps the max
        send(p, "plain", partition, b"earlier timestamp", key=b"late", timestamp=earlier)
        flush(p)
    admin = state.admin_client(bootstrap)
    for future in admin.delete_records([TopicPartition("plain", 1, 3)], request_timeout=30).values():
        state.result(future)


def write_compacted(bootstrap: str, clock: Clock) -> None:
    for round_, codec in enumerate(("none", "lz4", "none")):
        p = producer(bootstrap, **{"compression.type": codec})
        for k in range(4):
            send(
                p, "compacted", 0, f"v{round_} of k{k}".encode(), key=f"k{k}".encode(), timestamp=clock.tick()
            )
        flush(p)
    p = producer(bootstrap)
    send(p, "compacted", 0, None, key=b"k1", timestamp=clock.tick())  # a tombstone
    send(p, "compacted", 0, b"v3 of k2", key=b"k2", timestamp=clock.tick())
    flush(p)


def write_cleaned(bootstrap: str, clock: Clock, data_dir: Path) -> None:
    """Overwritten keys and tombstones over several segments, then wait for the cleaner to have cleaned all
    but the active one (its ``cleaner-offset-checkpoint`` entry), so nothing changes after observing it."""
    p = producer(bootstrap)
    for round_ in range(4):
        for k in range(4):
            send(p, "cleaned", 0, f"v{round_} of k{k}".encode(), key=f"k{k}".encode(), timestamp=clock.tick())
            flush(p)  # one batch each: several segments
    for k in (1, 2):
        send(p, "cleaned", 0, None, key=f"k{k}".encode(), timestamp=clock.tick())
        flush(p)

    def cleaned_up_to() -> int | None:
        try:
            lines = (data_dir / "cleaner-offset-checkpoint").read_text().splitlines()
        except FileNotFoundError:
            return None
        for line in lines[2:]:
            topic, partition, offset = line.split()
            if (topic, partition) == ("cleaned", "0"):
                return int(offset)
        return None

    active = max(int(f.stem) for f in (data_dir / "cleaned-0").glob("*.log"))
    state.wait_for(lambda: cleaned_up_to() == active, "the cleaner to clean cleaned-0", timeout=60)


def write_idempotent(bootstrap: str) -> None:
    """Timestamps of now: a producer's state expires ``producer.id.expiration.ms`` after its last batch's
    timestamp, so only recent ones let the test see this producer's state loaded from its snapshot."""
    p = producer(bootstrap, **{"enable.idempotence": True, "compression.type": "zstd"})
    for batch in range(3):
        for i in range(3):
            value = f"idempotent {batch}.{i}".encode()
            send(p, "retained", 0, value, key=f"id-{i}".encode(), timestamp=int(time.time() * 1000))
        flush(p)


def write_transactions(bootstrap: str, clock: Clock) -> None:
    plain = producer(bootstrap)
    txn = producer(bootstrap, **{"transactional.id": "txn-writer", "transaction.timeout.ms": 60_000})
    txn.init_transactions(30)
    txn.begin_transaction()
    for partition in (0, 1):
        for i in range(2):
            send(
                txn, "txn", partition, f"committed {partition}.{i}".encode(), key=b"c", timestamp=clock.tick()
            )
    flush(txn)
    send(plain, "txn", 0, b"plain while the committed one is open", timestamp=clock.tick())
    flush(plain)
    txn.commit_transaction(30)
    send(plain, "txn", 0, b"plain between", timestamp=clock.tick())
    flush(plain)
    txn.begin_transaction()
    for partition, count in ((0, 2), (1, 1)):
        for i in range(count):
            send(txn, "txn", partition, f"aborted {partition}.{i}".encode(), key=b"a", timestamp=clock.tick())
    flush(txn)
    send(plain, "txn", 0, b"plain while the aborted one is open", timestamp=clock.tick())
    flush(plain)
    txn.abort_transaction(30)
    send(plain, "txn", 0, b"plain after the abort", timestamp=clock.tick())
    send(plain, "txn", 1, b"plain after the abort", timestamp=clock.tick())
    flush(plain)


def write_doomed(bootstrap: str, clock: Clock) -> None:
    p = producer(bootstrap)
    for i in range(3):
        send(p, "doomed", 0, f"doomed {i}".encode(), key=b"d", timestamp=clock.tick())
    flush(p)


def classic_group(bootstrap: str) -> None:
    c = consumer(bootstrap, "classic-group", **{"group.protocol": "classic"})
    try:
        c.subscribe(["plain", "doomed"])
        consume_to_end(c, 3)
        positions = c.position(c.assignment())
        commits = [
            TopicPartition(tp.topic, tp.partition, tp.offset, metadata=f"classic {tp.topic}-{tp.partition}")
            for tp in positions
        ]
        c.commit(offsets=commits, asynchronous=False)
    finally:
        c.close()


def consumer_group(bootstrap: str) -> None:
    c = consumer(bootstrap, "consumer-group", **{"group.protocol": "consumer"})
    try:
        c.subscribe(["plain", "compacted"])
        consume_to_end(c, 3)
        c.commit(asynchronous=False)
    finally:
        c.close()


def simple_commits(bootstrap: str) -> None:
    for group, offsets in (
        (
            "simple-group",
            [TopicPartition("plain", 0, 5, metadata="simple"), TopicPartition("compacted", 0, 2)],
        ),
        ("doomed-group", [TopicPartition("doomed", 0, 2)]),
    ):
        c = consumer(bootstrap, group)
        try:
            c.assign(offsets)
            c.commit(offsets=offsets, asynchronous=False)
        finally:
            c.close()


def consume_transform_produce(bootstrap: str) -> None:
    c = consumer(bootstrap, "ctp-group", **{"group.protocol": "classic", "isolation.level": "read_committed"})
    p = producer(bootstrap, **{"transactional.id": "ctp-txn", "transaction.timeout.ms": 60_000})
    try:
        p.init_transactions(30)
        c.subscribe(["txn"])
        messages = consume_to_end(c, 2)
        p.begin_transaction()
        for msg in messages:
            _type, timestamp = msg.timestamp()
            send(
                p,
                "ctp-out",
                0,
                b"ctp: " + msg.value(),
                key=f"{msg.topic()}-{msg.partition()}@{msg.offset()}".encode(),
                headers=[("source", f"{msg.topic()}-{msg.partition()}".encode())],
                timestamp=timestamp,
            )
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    finally:
        c.close()


def delete_doomed(bootstrap: str) -> None:
    admin = state.admin_client(bootstrap)
    for future in admin.delete_topics(list(DELETED_TOPICS), request_timeout=30).values():
        state.result(future)
    state.wait_for(lambda: "doomed" not in state.topic_partition_counts(bootstrap), "doomed to go")
    state.wait_for(
        lambda: "doomed-0" not in state.committed_offsets(bootstrap, "classic-group"),
        "classic-group's offsets of doomed to go",
    )


def wait_until_quiet(bootstrap: str) -> None:
    """Every transaction complete (markers written) and every group Empty, before the stop."""
    state.wait_for(
        lambda: all(
            t["state"] in ("CompleteCommit", "CompleteAbort")
            for t in state.describe_transactions(bootstrap, TRANSACTIONAL_IDS).values()
        ),
        "transactions to complete",
    )
    live = [g for g in GROUPS if g not in DELETED_GROUPS]
    state.wait_for(
        lambda: all(state.describe_group(bootstrap, g)["state"] == "EMPTY" for g in live),
        "groups to be Empty",
    )


# -- output ----------------------------------------------------------------------------------------------------


def tidelog_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True
        ).stdout

    return {
        "commit": git("rev-parse", "HEAD").strip(),
        "src_modified": bool(git("status", "--porcelain", "src")),
    }


def check_expected(expected: dict[str, Any]) -> None:
    """What the scenario must have produced, so that a fixture missing a case is never written."""
    types = expected["coordinator_record_types"]
    offsets_types = {key.split("/")[0] for key in types["__consumer_offsets"]}
    missing = {"1", "2", "3", "4", "5", "6", "7", "8"} - offsets_types
    assert not missing, f"__consumer_offsets lacks record types {sorted(missing)}: {types}"
    assert "0" in types["__transaction_state"], types
    assert set(expected["transactions"]) == set(TRANSACTIONAL_IDS), expected["transactions"]
    assert "doomed" not in expected["topics"]
    assert "doomed-group" not in expected["listed_groups"], expected["listed_groups"]
    assert expected["offsets"]["plain-1"]["log_start_offset"] == 3
    uncommitted = expected["records"][state.READ_UNCOMMITTED]
    committed = expected["records"][state.READ_COMMITTED]
    assert any(r["value"].startswith("aborted") for r in uncommitted["txn-0"] if r["value"])
    assert not any(r["value"].startswith("aborted") for r in committed["txn-0"] if r["value"])
    for group in GROUPS:
        if group not in DELETED_GROUPS:
            assert expected["committed_offsets"][group], f"{group} has no committed offsets"


def aborted_records(expected: dict[str, Any]) -> dict[str, list[int]]:
    """The offsets read_uncommitted shows and read_committed does not (the aborted transaction)."""
    aborted = {}
    for name, records in expected["records"][state.READ_UNCOMMITTED].items():
        visible = {r["offset"] for r in expected["records"][state.READ_COMMITTED][name]}
        hidden = [r["offset"] for r in records if r["offset"] not in visible]
        if hidden:
            aborted[name] = hidden
    return aborted


def batches(data_dir: Path) -> dict[str, dict[str, list[str]]]:
    """What each segment file holds, batch by batch, read with tidelog's own parser: ``{partition: {segment:
    ["<first>-<last> <codec> pid=<id> epoch=<e> seq=<s> [txn] [control]", ...]}}``. For the reader of the
    manifest (and the checks below); the test looks through clients only."""
    found: dict[str, dict[str, list[str]]] = {}
    for partition_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        segments: dict[str, list[str]] = {}
        for segment in sorted(partition_dir.glob("*.log")):
            rows = []
            for _position, h in iter_batch_headers(segment.read_bytes()):
                flags = (" txn" if h.is_transactional else "") + (" control" if h.is_control else "")
                rows.append(
                    f"{h.base_offset}-{h.base_offset + h.last_offset_delta} {h.compression.name.lower()}"
                    f" pid={h.producer_id} epoch={h.producer_epoch} seq={h.base_sequence}{flags}"
                )
            segments[segment.stem] = rows
        found[partition_dir.name] = segments
    return found


def check_batches(found: dict[str, dict[str, list[str]]]) -> None:
    """The files hold what the scenario meant to write: each codec, rolled segments, idempotent,
    transactional and control batches."""

    def rows(partition: str) -> list[str]:
        return [row for segment in found[partition].values() for row in segment]

    for partition in ("plain-0", "plain-1"):
        assert len(found[partition]) >= 3, f"{partition} has no rolled segments: {found[partition]}"
        codecs = {row.split()[1] for row in rows(partition)}
        assert codecs == set(CODECS), f"{partition} holds codecs {codecs}"
    assert all(" pid=-1 " not in row and " txn" not in row for row in rows("retained-0")), rows("retained-0")
    for partition in ("txn-0", "txn-1", "ctp-out-0"):
        assert any(row.endswith(" txn") for row in rows(partition)), rows(partition)
        assert any(row.endswith(" txn control") for row in rows(partition)), rows(partition)
    assert len(found["cleaned-0"]) >= 2, found["cleaned-0"]


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-legacy-") as scratch:
        data_dir = Path(scratch) / "data"
        broker = Broker(BROKER_CONFIG, data_dir=data_dir, run_dir=Path(scratch) / "run")
        broker.start()
        try:
            bootstrap = broker.bootstrap_servers
            clock = Clock()
            create_topics(bootstrap)
            set_dynamic_broker_configs(bootstrap)
            write_plain(bootstrap, clock)
            write_compacted(bootstrap, clock)
            write_cleaned(bootstrap, clock, data_dir)
            write_idempotent(bootstrap)
            write_transactions(bootstrap, clock)
            write_doomed(bootstrap, clock)
            classic_group(bootstrap)
            consumer_group(bootstrap)
            simple_commits(bootstrap)
            consume_transform_produce(bootstrap)
            delete_doomed(bootstrap)
            wait_until_quiet(bootstrap)
            expected = state.observe(bootstrap, NODE_ID, GROUPS, TRANSACTIONAL_IDS)
            check_expected(expected)
            code = broker.stop(timeout=30)
            log = broker.log_path.read_text(errors="replace")
        finally:
            broker.close()
        problems = [line for line in log.splitlines() if "Traceback" in line or "level=ERROR" in line]
        if code != 0 or problems:
            print(
                f"the broker exit code was {code}; errors in its log:\n" + "\n".join(problems),
                file=sys.stderr,
            )
            return 1
        size = dir_size(data_dir)
        if size > LOG_SIZE_LIMIT_BYTES:
            big = sorted(data_dir.rglob("*"), key=lambda f: f.stat().st_size if f.is_file() else 0)[-5:]
            print(f"the data dir holds {size} bytes; largest: {[(str(f), f.stat().st_size) for f in big]}")
            return 1
        found_batches = batches(data_dir)
        check_batches(found_batches)
        meta = dict(
            line.split("=", 1)
            for line in (data_dir / "meta.properties").read_text().splitlines()
            if "=" in line
        )
        if args.output_dir.exists():
            shutil.rmtree(args.output_dir)
        shutil.copytree(data_dir, args.output_dir, symlinks=True)
    manifest = {
        "format_version": FORMAT_VERSION,
        "made_with": {
            "tidelog": tidelog_commit(),
            "confluent_kafka": confluent_kafka.version(),
            "librdkafka": confluent_kafka.libversion()[0],
            "generator": "tools/make_legacy_datadir.py",
        },
        "broker_config": BROKER_CONFIG,
        "node_id": NODE_ID,
        "cluster_id": meta.get("cluster.id"),
        "groups": list(GROUPS),
        "transactional_ids": list(TRANSACTIONAL_IDS),
        "deleted_topics": list(DELETED_TOPICS),
        "deleted_groups": list(DELETED_GROUPS),
        "aborted": aborted_records(expected),
        "notes": NOTES,
        "batches": found_batches,
        "expected": expected,
    }
    args.manifest.write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.output_dir} ({dir_size(args.output_dir)} bytes) and {args.manifest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
