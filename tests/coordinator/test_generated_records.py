"""The generated coordinator record module: up to date with Kafka's specs, complete, and self-contained."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tidelog.coordinator.common._generated import records as generated
from tidelog.protocol import codec
from tidelog.protocol.schema import Message

REPO = Path(__file__).resolve().parents[2]
SPEC_ROOT = REPO.parent / "shared" / "reference"
GENERATED = REPO / "src" / "tidelog" / "coordinator" / "common" / "_generated" / "records.py"
needs_specs = pytest.mark.skipif(
    not (SPEC_ROOT / "kafka-coordinator-record-specs").is_dir(), reason="../shared/reference is not available"
)


def _load_generator() -> ModuleType:
    path = REPO / "tools" / "gen_coordinator_records.py"
    spec = importlib.util.spec_from_file_location("gen_coordinator_records", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_coordinator_records", module)
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
    stale = tmp_path / "records.py"
    stale.write_text("# stale\n", encoding="utf-8")
    assert gen.main([str(SPEC_ROOT), "--check", "--output", str(stale)]) == 1
    assert gen.main([str(SPEC_ROOT), "--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8")


def test_generator_refuses_a_missing_spec_root(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no spec files"):
        gen.main([str(tmp_path), "--output", str(tmp_path / "out.py")])


@needs_specs
def test_every_spec_has_its_class() -> None:
    names = sorted(spec["name"] for spec in _specs())
    assert len(names) == 36
    assert names == sorted(n for n in generated.__all__ if not n.isupper())


def _schemas() -> list[type[Message]]:
    classes = [getattr(generated, name) for name in generated.__all__ if not name.isupper()]
    return [cls for cls in classes if isinstance(cls, type) and issubclass(cls, Message)]


def test_the_record_tables_pair_every_key_with_its_value() -> None:
    paired: set[str] = set()
    for table in (
        generated.CONSUMER_OFFSETS_RECORDS,
        generated.SHARE_GROUP_STATE_RECORDS,
        generated.TRANSACTION_STATE_RECORDS,
    ):
        for record_type, (key, value) in table.items():
            assert key.NAME.removesuffix("Key") == value.NAME.removesuffix("Value")
            lo, hi = key.VALID_VERSIONS
            assert lo <= record_type <= hi, "a key's versions are its record types"
            paired |= {key.NAME, value.NAME}
    assert paired == {cls.NAME for cls in _schemas()}
    assert sorted(generated.CONSUMER_OFFSETS_RECORDS) == list(range(16))
    assert sorted(generated.SHARE_GROUP_STATE_RECORDS) == [0, 1]
    assert sorted(generated.TRANSACTION_STATE_RECORDS) == [0]


@pytest.mark.parametrize("cls", _schemas(), ids=lambda cls: cls.NAME)
def test_every_schema_round_trips_its_defaults_at_every_version(cls: type[Message]) -> None:
    lo, hi = cls.VALID_VERSIONS
    for version in range(lo, hi + 1):
        value = cls()
        assert codec.decode(cls, version, codec.encode(value, version)) == value


def test_tidelogs_consumer_group_partition_metadata_keeps_its_epoch() -> None:
    """The one override of the specs: the Epoch field tidelog's data directories hold (always 0)."""
    (first, *_) = generated.ConsumerGroupPartitionMetadataValue.FIELDS
    assert (first.name, first.type) == ("epoch", "int32")


def test_the_coordinators_read_the_generated_classes() -> None:
    from tidelog.coordinator.group import records as group_records
    from tidelog.coordinator.txn import records as txn_records

    for record_type, pair in group_records.RECORD_SCHEMAS.items():
        assert pair == generated.CONSUMER_OFFSETS_RECORDS[record_type]
    assert generated.TRANSACTION_STATE_RECORDS[txn_records.TRANSACTION_LOG_KEY_TYPE] == (
        txn_records.TransactionLogKey,
        txn_records.TransactionLogValue,
    )
