"""MetadataStore: topics persisted atomically and reloaded; a damaged store file is refused, naming the file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tidelog.server.metadata_store import MetadataStore, MetadataStoreError

FILE = "tidelog-metadata.json"


def test_topics_are_persisted_and_reloaded(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    created = store.create("orders", 3, 1, {"cleanup.policy": "compact"})
    store.create("__consumer_offsets", 1, 1, {}, is_internal=True)
    store.set_partitions("orders", 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == [FILE]
    reloaded = MetadataStore(tmp_path)
    assert [t.name for t in reloaded] == ["__consumer_offsets", "orders"]
    orders = reloaded.get("orders")
    assert orders is not None
    assert (orders.topic_id, orders.num_partitions, dict(orders.configs)) == (
        created.topic_id,
        4,
        {"cleanup.policy": "compact"},
    )
    assert reloaded.get_by_id(created.topic_id) == orders
    internal = reloaded.get("__consumer_offsets")
    assert internal is not None
    assert internal.is_internal


def _valid(tmp_path: Path) -> dict[str, object]:
    MetadataStore(tmp_path).create("orders", 3, 1, {})
    document: dict[str, object] = json.loads((tmp_path / FILE).read_text())
    return document


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: b"\x9e\xff" + data[2:], "UnicodeDecodeError"),
        (lambda data: data[: len(data) // 2], "JSONDecodeError"),
        (lambda _data: b"[1, 2]", "AttributeError"),
        (lambda _data: b'{"version": 1}', "KeyError"),
        (lambda _data: b'{"version": 1, "topics": [{"name": "t"}]}', "KeyError"),
        (
            lambda _data: (
                b'{"version": 1, "topics": [{"name": "t", "topic_id": "not-a-uuid", "num_partitions": 1, '
                b'"replication_factor": 1}]}'
            ),
            "ValueError",
        ),
        (
            lambda _data: (
                b'{"version": 1, "topics": [{"name": "t", "topic_id": "00000000-0000-0000-0000-000000000001", '
                b'"num_partitions": "1", "replication_factor": 1}]}'
            ),
            "TypeError",
        ),
    ],
)
def test_a_damaged_store_is_refused_naming_the_file(
    tmp_path: Path, damage: Callable[[bytes], bytes], reason: str
) -> None:
    _valid(tmp_path)
    path = tmp_path / FILE
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(MetadataStoreError) as info:
        MetadataStore(tmp_path)
    message = str(info.value)
    assert message.startswith(f"cannot read the topic metadata store {path} ({reason}: ")
    assert message.endswith(
        "restore it from a backup (starting without it would forget every topic and its configs)"
    )


def test_an_unknown_format_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / FILE).write_text(json.dumps({"version": 99, "topics": []}))
    with pytest.raises(MetadataStoreError, match="unsupported metadata format version 99"):
        MetadataStore(tmp_path)


def _topics(store: MetadataStore) -> list[tuple[str, str, int, int, dict[str, str], bool]]:
    return [
        (t.name, str(t.topic_id), t.num_partitions, t.replication_factor, dict(t.configs), t.is_internal)
        for t in store
    ]


def test_every_single_bit_flip_is_refused_or_changes_nothing(tmp_path: Path) -> None:
    """The CRC32C of the topics: one flipped bit in a name would rename a topic (and its partitions would
    go as strays), in a config would change it silently."""
    store = MetadataStore(tmp_path)
    store.create("alpha", 2, 1, {"cleanup.policy": "compact", "retention.ms": "1000"})
    store.create("beta", 1, 1, {})
    expected = _topics(store)
    path = tmp_path / FILE
    original = path.read_bytes()
    assert json.loads(original)["version"] == 2
    refusals: list[str] = []
    for i in range(len(original)):  # every byte, each bit position in turn
        damaged = bytearray(original)
        damaged[i] ^= 1 << (i % 8)
        path.write_bytes(bytes(damaged))
        try:
            reloaded = MetadataStore(tmp_path)
        except MetadataStoreError as exc:
            refusals.append(str(exc))
            continue
        assert _topics(reloaded) == expected, i  # a flip in layout whitespace, say
    assert len(refusals) > 0.9 * len(original)
    assert all(r.startswith((f"cannot read the topic metadata store {path} ", f"{path}: ")) for r in refusals)


def test_a_version_1_store_without_checksum_is_read_and_rewritten_with_one(tmp_path: Path) -> None:
    topic_id = "00000000-0000-0000-0000-000000000007"
    (tmp_path / FILE).write_text(
        json.dumps(
            {
                "version": 1,
                "topics": [
                    {"name": "old", "topic_id": topic_id, "num_partitions": 2, "replication_factor": 1}
                ],
            }
        )
    )
    store = MetadataStore(tmp_path)
    assert _topics(store) == [("old", topic_id, 2, 1, {}, False)]
    store.set_configs("old", {"retention.ms": "5"})
    document = json.loads((tmp_path / FILE).read_text())
    assert (document["version"], type(document["crc32c"])) == (2, int)
    assert _topics(MetadataStore(tmp_path)) == [("old", topic_id, 2, 1, {"retention.ms": "5"}, False)]


def test_a_change_that_cannot_be_written_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: create, reconfigure and delete raise, and the store (memory and file) is unchanged, so
    creating the topic again later works (it once raised KeyError: the failed create stayed in memory)."""
    import errno
    import os

    store = MetadataStore(tmp_path)
    store.create("orders", 3, 1, {})
    before = (tmp_path / FILE).read_text()
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        store.create("events", 2, 1, {})
    with pytest.raises(OSError, match="No space left"):
        store.set_partitions("orders", 5)
    with pytest.raises(OSError, match="No space left"):
        store.delete("orders")
    assert [(t.name, t.num_partitions) for t in store] == [("orders", 3)]
    assert (tmp_path / FILE).read_text() == before
    monkeypatch.setattr(os, "fsync", real_fsync)
    events = store.create("events", 2, 1, {})
    assert store.get_by_id(events.topic_id) == events
    assert [t.name for t in MetadataStore(tmp_path)] == ["events", "orders"]
