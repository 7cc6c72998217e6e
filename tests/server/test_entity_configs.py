"""User and client entity configs on a single node (tidelog.server.entity_configs): Kafka's entity paths
and name sanitizing, keys of one owner kept when another alters its own, durability across a restart, the
file's mode, and a damaged file refused by name."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest

from tidelog.server.entity_configs import (
    DEFAULT_ENTITY,
    FILE_NAME,
    EntityConfigsError,
    FileEntityConfigs,
    desanitize,
    entity_path,
    parse_entity_path,
    sanitize,
)


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("alice", "alice"),
        ("user@example.com", "user%40example.com"),
        ("a b*c", "a%20b%2Ac"),
        ("CN=x,O=y/z", "CN%3Dx%2CO%3Dy%2Fz"),
        ("tilde~dash-dot._", "tilde%7Edash-dot._"),
        ("ünï", "%C3%BCn%C3%AF"),
    ],
)
def test_names_are_sanitized_as_kafka_does(name: str, sanitized: str) -> None:
    assert sanitize(name) == sanitized
    assert desanitize(sanitized) == name


def test_entity_paths_round_trip() -> None:
    cases = [
        ({"user": "alice"}, "users/alice", ("alice", None)),
        ({"client_id": "c/1"}, "clients/c%2F1", (None, "c/1")),
        (
            {"user": "alice", "client_id": DEFAULT_ENTITY},
            "users/alice/clients/<default>",
            ("alice", DEFAULT_ENTITY),
        ),
        ({"user": DEFAULT_ENTITY}, "users/<default>", (DEFAULT_ENTITY, None)),
    ]
    for kwargs, path, parsed in cases:
        assert entity_path(**kwargs) == path
        assert parse_entity_path(path) == parsed
    for bad in ["topics/t", "users", "users/", "users/a/clients", "clients/a/users/b", "users/a/b/c"]:
        with pytest.raises(EntityConfigsError):
            parse_entity_path(bad)
    with pytest.raises(EntityConfigsError):
        entity_path()


def test_alter_keeps_other_keys_and_survives_a_restart(tmp_path: Path) -> None:
    store = FileEntityConfigs(tmp_path)
    seen: list[str] = []
    store.subscribe(seen.append)
    asyncio.run(
        store.alter(
            "users/alice", {"SCRAM-SHA-512": "salt=c2FsdA==,stored_key=a,server_key=b,iterations=4096"}
        )
    )
    asyncio.run(store.alter("users/alice", {"producer_byte_rate": "1024"}))
    asyncio.run(store.alter("clients/c1", {"consumer_byte_rate": "2048"}))
    asyncio.run(store.alter("clients/c1", {}, delete=["consumer_byte_rate"]))
    assert seen == ["users/alice", "users/alice", "clients/c1", "clients/c1"]
    expected = {
        "users/alice": {
            "SCRAM-SHA-512": "salt=c2FsdA==,stored_key=a,server_key=b,iterations=4096",
            "producer_byte_rate": "1024",
        }
    }
    assert store.all() == expected
    assert store.get("clients/c1") == {}
    assert stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode) == 0o600

    again = FileEntityConfigs(tmp_path)
    assert again.all() == expected
    again.alter_now("users/alice", {}, delete=["producer_byte_rate", "SCRAM-SHA-512"])
    assert FileEntityConfigs(tmp_path).all() == {}


def test_a_bad_entity_path_changes_nothing(tmp_path: Path) -> None:
    store = FileEntityConfigs(tmp_path)
    with pytest.raises(EntityConfigsError):
        asyncio.run(store.alter("topics/t", {"retention.ms": "1"}))
    assert not (tmp_path / FILE_NAME).exists()


def test_a_damaged_file_is_refused_by_name(tmp_path: Path) -> None:
    FileEntityConfigs(tmp_path).alter_now("users/alice", {"producer_byte_rate": "1024"})
    path = tmp_path / FILE_NAME
    document = json.loads(path.read_text())
    document["entities"]["users/alice"]["producer_byte_rate"] = "9024"  # one digit flipped
    path.write_text(json.dumps(document))
    with pytest.raises(EntityConfigsError, match=FILE_NAME) as info:
        FileEntityConfigs(tmp_path)
    assert "CRC32C" in str(info.value)

    for damaged in ["{not json", "[]", json.dumps({"version": 99, "entities": {}, "crc32c": 0})]:
        path.write_text(damaged)
        with pytest.raises(EntityConfigsError, match=FILE_NAME):
            FileEntityConfigs(tmp_path)
