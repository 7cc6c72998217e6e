"""What a broker holds, observed through real clients, in the JSON shape of a data-dir fixture's manifest.

``tools/make_legacy_datadir.py`` writes ``tests/data/datadir-v1`` with a broker and records, with
:func:`observe`, what clients see in it (``tests/data/datadir-v1.expected.json``);
``tests/server/test_legacy_datadir.py`` starts a broker on a copy of that dir and observes it again with the
same functions. Both sides going through this one module is what makes "the same" mean exactly the same.

Encoding (JSON has no bytes): a key, value or header value is ``null`` for None, a string when the bytes
are UTF-8 (the string's UTF-8 encoding *is* the bytes), else ``{"hex": "..."}``. A record is
``{"offset", "key", "value", "headers": [[key, value], ...], "timestamp": [type, ms], "leader_epoch"}``
with librdkafka's timestamp types (1 = CreateTime, 2 = LogAppendTime). Partitions are named ``topic-N``.

Clients: confluent-kafka (records, watermarks via ListOffsets, groups and committed offsets, configs) and
kafka-python's admin client for DescribeTransactions, ListTransactions and DescribeProducers, which
confluent-kafka's AdminClient lacks. Producer states are observed as they are; which of them a broker still
holds depends on the time (``producer.id.expiration.ms`` after a producer's last batch timestamp, also when
a log is loaded, as in Kafka): comparing them is the caller's business.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, OffsetSpec

Json = Any
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
NON_DEFAULT_SOURCES = (
    ConfigSource.DYNAMIC_TOPIC_CONFIG,
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
)
DYNAMIC_BROKER_SOURCES = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
TIMEOUT = 30.0


# -- encoding --------------------------------------------------------------------------------------------------


def encode_bytes(data: bytes | None) -> Json:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": data.hex()}


def decode_bytes(value: Json) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes.fromhex(value["hex"])


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def split_partition_name(name: str) -> tuple[str, int]:
    topic, _, index = name.rpartition("-")
    return topic, int(index)


def encode_message(msg: confluent_kafka.Message) -> Json:
    timestamp_type, timestamp_ms = msg.timestamp()
    return {
        "offset": msg.offset(),
        "key": encode_bytes(msg.key()),
        "value": encode_bytes(msg.value()),
        "headers": [[key, encode_bytes(value)] for key, value in msg.headers() or []],
        "timestamp": [timestamp_type, timestamp_ms],
        "leader_epoch": msg.leader_epoch(),
    }


# -- clients ---------------------------------------------------------------------------------------------------


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def result(future: Any) -> Any:
    return future.result(timeout=TIMEOUT)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll ``condition`` until it returns something truthy (returned); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if outcome:
            return outcome
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# -- records ---------------------------------------------------------------------------------------------------


def read_records(
    bootstrap: str, partitions: Iterable[tuple[str, int]], isolation: str, *, raw: bool = False
) -> dict[str, list[Any]]:
    """Every record of each partition from its log start to its end (the LSO for read_committed), by
    partition name: encoded records, or the ``confluent_kafka.Message`` objects themselves if ``raw``."""
    wanted = sorted(partitions)
    found: dict[str, list[Any]] = {partition_name(t, p): [] for t, p in wanted}
    if not wanted:
        return found
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "datadir-state-reader",  # assign() only: never joined, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING) for t, p in wanted])
        at_end: set[str] = set()
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < len(wanted):
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{isolation} reads never reached the end of {sorted(set(found) - at_end)}"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            name = partition_name(msg.topic(), msg.partition())
            error = msg.error()
            if error is not None:
                if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(name)
                    continue
                raise AssertionError(f"reading {name}: {error}")
            at_end.discard(name)  # more arrived after an EOF (cannot happen on a quiet broker)
            found[name].append(msg if raw else encode_message(msg))
    finally:
        consumer.close()
    return found


def list_offsets(bootstrap: str, partitions: Iterable[tuple[str, int]]) -> dict[str, Json]:
    """ListOffsets for each partition: log start offset, high watermark, last stable offset."""
    admin = admin_client(bootstrap)
    wanted = sorted(partitions)

    def query(spec: OffsetSpec, isolation: IsolationLevel) -> dict[str, int]:
        futures = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in wanted},
            isolation_level=isolation,
            request_timeout=TIMEOUT,
        )
        return {partition_name(tp.topic, tp.partition): result(f).offset for tp, f in futures.items()}

    start = query(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    high = query(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    stable = query(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    return {
        partition_name(t, p): {
            "log_start_offset": start[partition_name(t, p)],
            "high_watermark": high[partition_name(t, p)],
            "last_stable_offset": stable[partition_name(t, p)],
        }
        for t, p in wanted
    }


def coordinator_record_types(bootstrap: str, topics: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """For each internal ``topic: partition count``, how many records of each key version (Kafka's
    coordinator record type) it holds, tombstones counted apart (``"2/tombstone"``)."""
    counts: dict[str, Counter[str]] = {topic: Counter() for topic in topics}
    partitions = [(topic, p) for topic, n in topics.items() for p in range(n)]
    for name, messages in read_records(bootstrap, partitions, READ_UNCOMMITTED, raw=True).items():
        topic, _ = split_partition_name(name)
        for msg in messages:
            (record_type,) = struct.unpack(">h", msg.key()[:2])
            counts[topic][f"{record_type}/tombstone" if msg.value() is None else str(record_type)] += 1
    return {topic: dict(sorted(c.items())) for topic, c in counts.items()}


# -- topics and configs ----------------------------------------------------------------------------------------


def topic_partition_counts(bootstrap: str) -> dict[str, int]:
    """Every topic the broker lists (internal ones too) and its partition count."""
    metadata = admin_client(bootstrap).list_topics(timeout=TIMEOUT)
    return {name: len(topic.partitions) for name, topic in sorted(metadata.topics.items())}


def _described(bootstrap: str, resource: ConfigResource) -> dict[str, Any]:
    admin = admin_client(bootstrap)  # must outlive its futures
    (future,) = admin.describe_configs([resource], request_timeout=TIMEOUT).values()
    return dict(result(future))


def topic_configs(bootstrap: str, topic: str) -> dict[str, list[Any]]:
    """The topic's configs that do not come from the built-in defaults: ``{key: [value, source name]}``."""
    entries = _described(bootstrap, ConfigResource(ConfigResource.Type.TOPIC, topic))
    return {
        key: [entry.value, ConfigSource(entry.source).name]
        for key, entry in sorted(entries.items())
        if ConfigSource(entry.source) in NON_DEFAULT_SOURCES
    }


def dynamic_broker_configs(bootstrap: str, node_id: str) -> dict[str, list[Any]]:
    """The broker's configs set dynamically (its own layer or the cluster default): ``{key: [value,
    source name]}``."""
    entries = _described(bootstrap, ConfigResource(ConfigResource.Type.BROKER, node_id))
    return {
        key: [entry.value, ConfigSource(entry.source).name]
        for key, entry in sorted(entries.items())
        if ConfigSource(entry.source) in DYNAMIC_BROKER_SOURCES
    }


# -- groups ----------------------------------------------------------------------------------------------------


def list_groups(bootstrap: str) -> dict[str, Json]:
    """ListGroups: every group id with its type and state."""
    admin = admin_client(bootstrap)  # must outlive its futures
    listed = result(admin.list_consumer_groups(request_timeout=TIMEOUT))
    assert not listed.errors, listed.errors
    return {
        g.group_id: {"type": g.type.name, "state": g.state.name, "is_simple": g.is_simple_consumer_group}
        for g in sorted(listed.valid, key=lambda g: g.group_id)
    }


def describe_group(bootstrap: str, group: str) -> Json:
    """DescribeGroups / ConsumerGroupDescribe: type, state, assignor and member count."""
    admin = admin_client(bootstrap)
    (future,) = admin.describe_consumer_groups([group], request_timeout=TIMEOUT).values()
    described = result(future)
    return {
        "type": described.type.name,
        "state": described.state.name,
        "is_simple": described.is_simple_consumer_group,
        "partition_assignor": described.partition_assignor,
        "members": len(described.members),
    }


def committed_offsets(bootstrap: str, group: str) -> dict[str, Json]:
    """OffsetFetch of every partition the group has an offset for: ``{partition name: {offset, metadata,
    leader_epoch}}``."""
    admin = admin_client(bootstrap)
    (future,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT
    ).values()
    fetched = result(future)
    offsets = {}
    for tp in fetched.topic_partitions:
        assert tp.error is None, (group, tp)
        offsets[partition_name(tp.topic, tp.partition)] = {
            "offset": tp.offset,
            "metadata": tp.metadata,
            "leader_epoch": tp.leader_epoch,
        }
    return dict(sorted(offsets.items()))


# -- transactions ----------------------------------------------------------------------------------------------


def kafka_python_state(
    bootstrap: str, transactional_ids: Iterable[str], partitions: Iterable[tuple[str, int]]
) -> dict[str, Json]:
    """Through kafka-python's admin client: ``transactions`` (DescribeTransactions of ``transactional_ids``:
    state, producer id and epoch, timeout, partitions), ``listed_transactions`` (ListTransactions: every
    transactional id the broker knows, with producer id and state) and ``producers`` (DescribeProducers of
    ``partitions``: the active producers of each, by producer id)."""
    import kafka

    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    try:
        described = admin.describe_transactions(sorted(transactional_ids))
        listed = admin.list_transactions()
        wanted = [kafka.TopicPartition(t, p) for t, p in sorted(partitions)]
        producers = admin.describe_producers(wanted) if wanted else {}
    finally:
        admin.close()
    rows = [row for rows in listed.values() for row in rows]
    return {
        "transactions": {
            txn_id: {
                "state": d.state.value,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "transaction_timeout_ms": d.transaction_timeout_ms,
                "topic_partitions": sorted(
                    partition_name(tp.topic, tp.partition) for tp in d.topic_partitions
                ),
            }
            for txn_id, d in sorted(described.items())
        },
        "listed_transactions": {
            row.transactional_id: {"producer_id": row.producer_id, "state": row.state.value}
            for row in sorted(rows, key=lambda r: r.transactional_id)
        },
        "producers": {
            partition_name(tp.topic, tp.partition): [
                p._asdict() for p in sorted(found.active_producers, key=lambda p: p.producer_id)
            ]
            for tp, found in sorted(producers.items())
        },
    }


def describe_transactions(bootstrap: str, transactional_ids: Iterable[str]) -> dict[str, Json]:
    """DescribeTransactions only (see :func:`kafka_python_state`)."""
    described: dict[str, Json] = kafka_python_state(bootstrap, transactional_ids, [])["transactions"]
    return described


# -- everything ------------------------------------------------------------------------------------------------

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def observe(bootstrap: str, node_id: str, groups: Iterable[str], transactional_ids: Iterable[str]) -> Json:
    """Everything the manifest's ``expected`` section records, observed now (topics are all that the broker
    lists; ``groups`` and ``transactional_ids`` name what to describe, so that missing ones show). The
    reads that each start a client and wait for a fetch run side by side."""
    topics = topic_partition_counts(bootstrap)
    data_partitions = [(t, p) for t, n in topics.items() if not t.startswith("__") for p in range(n)]
    all_partitions = [(t, p) for t, n in topics.items() for p in range(n)]
    internal = {t: topics[t] for t in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC) if t in topics}
    with ThreadPoolExecutor(max_workers=4) as pool:
        uncommitted = pool.submit(read_records, bootstrap, data_partitions, READ_UNCOMMITTED)
        committed = pool.submit(read_records, bootstrap, data_partitions, READ_COMMITTED)
        record_types = pool.submit(coordinator_record_types, bootstrap, internal)
        from_kafka_python = pool.submit(kafka_python_state, bootstrap, transactional_ids, all_partitions)
        observed = {
            "topics": topics,
            "topic_configs": {t: topic_configs(bootstrap, t) for t in topics if not t.startswith("__")},
            "dynamic_broker_configs": dynamic_broker_configs(bootstrap, node_id),
            "offsets": list_offsets(bootstrap, all_partitions),
            "records": {READ_UNCOMMITTED: uncommitted.result(), READ_COMMITTED: committed.result()},
            "coordinator_record_types": record_types.result(),
            "listed_groups": list_groups(bootstrap),
            "groups": {g: describe_group(bootstrap, g) for g in sorted(groups)},
            "committed_offsets": {g: committed_offsets(bootstrap, g) for g in sorted(groups)},
        }
        observed.update(from_kafka_python.result())
    return observed
