"""The generated message module: up to date with the specs, complete, and self-contained."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tidelog.protocol import messages
from tidelog.protocol._generated import messages as generated
from tidelog.protocol.messages import (
    DATA_TYPES,
    HEADER_TYPES,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    ApiKey,
    Message,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    Struct,
)

REPO = Path(__file__).resolve().parents[2]
SPEC_ROOT = REPO.parent / "shared" / "reference"
GENERATED = REPO / "src" / "tidelog" / "protocol" / "_generated" / "messages.py"
needs_specs = pytest.mark.skipif(
    not (SPEC_ROOT / "kafka-message-specs").is_dir(), reason="../shared/reference is not available"
)


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_messages", REPO / "tools" / "gen_messages.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_messages", module)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _specs() -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = gen.load_specs(SPEC_ROOT)
    return specs


@needs_specs
def test_committed_module_equals_what_the_generator_produces_today() -> None:
    assert GENERATED.read_text(encoding="utf-8") == gen.render(_specs()), "run `make generate`"


@needs_specs
def test_generator_check_mode(tmp_path: Path) -> None:
    assert gen.main([str(SPEC_ROOT), "--check"]) == 0
    stale = tmp_path / "messages.py"
    stale.write_text("# stale\n", encoding="utf-8")
    assert gen.main([str(SPEC_ROOT), "--check", "--output", str(stale)]) == 1
    assert gen.main([str(SPEC_ROOT), "--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")


def test_generator_refuses_a_missing_spec_root(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no spec files"):
        gen.main([str(tmp_path), "--output", str(tmp_path / "out.py")])


@needs_specs
def test_every_api_in_the_specs_is_covered() -> None:
    specs = _specs()
    by_kind: dict[str, dict[Any, dict[str, Any]]] = {"request": {}, "response": {}, "header": {}, "data": {}}
    for spec in specs:
        key = spec.get("apiKey", spec["name"]) if spec["type"] in ("request", "response") else spec["name"]
        by_kind[spec["type"]][key] = spec
    assert set(REQUEST_TYPES) == set(by_kind["request"])
    assert set(RESPONSE_TYPES) == set(by_kind["response"])
    assert set(HEADER_TYPES) == {"RequestHeader", "ResponseHeader"}
    assert set(DATA_TYPES) == set(by_kind["data"])
    assert {"ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "DefaultPrincipalData"} <= set(
        DATA_TYPES
    )
    registries: list[tuple[str, dict[Any, type[Message]]]] = [
        ("request", dict(REQUEST_TYPES)),
        ("response", dict(RESPONSE_TYPES)),
        ("header", dict(HEADER_TYPES)),
        ("data", dict(DATA_TYPES)),
    ]
    for kind, registry in registries:
        for key, cls in registry.items():
            spec = by_kind[kind][key]
            assert spec["name"] == cls.NAME
            assert kind == cls.KIND
            assert gen.parse_versions(spec["validVersions"]) == cls.VALID_VERSIONS
            flexible = gen.parse_versions(spec["flexibleVersions"])
            assert (flexible[0] if flexible else None) == cls.FLEXIBLE_VERSIONS_FROM
            _check_fields(cls, cls, spec["fields"], spec)


def _check_fields(
    root: type[Message], cls: type[Struct], fields: list[dict[str, Any]], spec: dict[str, Any]
) -> None:
    """Every spec field is in FIELDS and in the dataclass, in order, with its tags; structs recurse."""
    assert [f.kafka_name for f in cls.FIELDS] == [f["name"] for f in fields]
    attributes = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    expected = [f.name for f in cls.FIELDS]
    if root.FLEXIBLE_VERSIONS_FROM is not None:
        expected.append("unknown_tagged_fields")
    assert attributes == expected
    common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
    for field_spec, raw in zip(cls.FIELDS, fields, strict=True):
        assert field_spec.type == raw["type"]
        assert field_spec.tag == (int(raw["tag"]) if "tag" in raw else None)
        assert field_spec.versions == gen.parse_versions(raw["versions"])
        assert field_spec.nullable_versions == gen.parse_versions(raw.get("nullableVersions"))
        if field_spec.is_struct:
            struct_cls = getattr(root, field_spec.element_type)
            _check_fields(root, struct_cls, raw.get("fields") or common[field_spec.element_type], spec)


def test_api_key_enum_names_every_request() -> None:
    assert {int(k) for k in ApiKey} == set(REQUEST_TYPES)
    assert ApiKey.PRODUCE.value == 0
    assert ApiKey.FETCH.value == 1
    assert ApiKey.METADATA.value == 3
    assert ApiKey.API_VERSIONS.value == 18
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH.value == 23
    assert ApiKey.SHARE_ACKNOWLEDGE.value == 79
    for key, cls in REQUEST_TYPES.items():
        assert key == cls.API_KEY
        assert key == RESPONSE_TYPES[key].API_KEY


def test_kip932_share_group_versions_are_merged() -> None:
    assert ShareFetchRequest.VALID_VERSIONS == (1, 2)
    assert ShareFetchResponse.VALID_VERSIONS == (1, 2)
    assert ShareAcknowledgeRequest.VALID_VERSIONS == (1, 2)
    assert ShareAcknowledgeResponse.VALID_VERSIONS == (0, 1)
    assert ShareGroupHeartbeatRequest.VALID_VERSIONS == (0, 1)
    assert ShareGroupHeartbeatResponse.VALID_VERSIONS == (0, 1)
    assert [f.name for f in ShareFetchRequest.FIELDS][:7] == [
        "group_id", "member_id", "share_session_epoch", "max_wait_ms", "min_bytes", "max_bytes", "max_records"
    ]  # fmt: skip
    assert ShareFetchResponse().acquisition_lock_timeout_ms == 0
    records = {f.name: f for f in ShareFetchResponse.PartitionData.FIELDS}["records"]
    assert records.nullable_versions == (0, 0)  # not nullable in v1


def test_generated_module_has_the_banner_and_no_spec_paths() -> None:
    text = GENERATED.read_text(encoding="utf-8")
    assert text.startswith("# AUTOGENERATED by tools/gen_messages.py")
    for path in (REPO / "src").rglob("*.py"):
        assert "shared/reference" not in path.read_text(encoding="utf-8"), path
    assert not list((REPO / "src").rglob("*.json"))


def test_facade_exports_every_generated_class() -> None:
    assert messages.__all__ == generated.__all__
    assert messages.__all__ == sorted(messages.__all__)
    for name in messages.__all__:
        assert getattr(messages, name) is getattr(generated, name)
    for cls in [
        *REQUEST_TYPES.values(),
        *RESPONSE_TYPES.values(),
        *HEADER_TYPES.values(),
        *DATA_TYPES.values(),
    ]:
        assert cls.NAME in messages.__all__


def test_strip_comments_keeps_slashes_inside_strings() -> None:
    text = '{ "about": "see http://x.y // not a comment", // a comment\n "n": 1 }'
    assert json.loads(gen.strip_comments(text)) == {"about": "see http://x.y // not a comment", "n": 1}


@pytest.mark.parametrize(
    ("name", "snake"),
    [("TopicData", "topic_data"), ("KRaftVersion", "kraft_version"), ("isKRaftController", "is_kraft_controller"),
     ("ThrottleTimeMs", "throttle_time_ms"), ("ProducerId", "producer_id")],
)  # fmt: skip
def test_snake_case(name: str, snake: str) -> None:
    assert gen.snake_case(name) == snake


@pytest.mark.parametrize(
    ("text", "versions"), [("0+", (0, 0x7FFF)), ("3-5", (3, 5)), ("7", (7, 7)), ("none", None), (None, None)]
)
def test_parse_versions(text: str | None, versions: tuple[int, int] | None) -> None:
    assert gen.parse_versions(text) == versions


def test_parse_int_defaults() -> None:
    assert gen.parse_int("0x7fffffff") == 0x7FFFFFFF
    assert gen.parse_int("-2147483648") == -(2**31)
    assert gen.parse_int("0") == 0
    assert gen.parse_int("-1") == -1
