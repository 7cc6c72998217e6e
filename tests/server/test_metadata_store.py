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
