"""ProducerIdManager: blocks reserved on disk before use, ids unique across instances, bad files refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import crc32c
import pytest

from tidelog.server.producer_id_manager import (
    ProducerIdBlockError,
    ProducerIdManager,
    ProducerIdsNotReadyError,
)


def test_blocks_are_reserved_before_ids_are_handed_out(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=3, block_size=4)
    assert not path.exists()
    assert manager.generate_producer_id() == 0
    assert json.loads(path.read_text()) == {
        "version": 2,
        "broker": 3,
        "block_start": "0",
        "block_end": "3",
        "crc32c": crc32c.crc32c(b'{"block_end":"3","block_start":"0","broker":3,"version":2}'),
    }
    assert [manager.generate_producer_id() for _ in range(4)] == [1, 2, 3, 4]
    assert json.loads(path.read_text())["block_end"] == "7"
    # a new instance (a restart, clean or not) starts after the last reserved block
    again = ProducerIdManager(path, node_id=3, block_size=4)
    assert again.generate_producer_id() == 8
    assert json.loads(path.read_text())["block_start"] == "8"


def test_default_block_is_a_thousand(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    ProducerIdManager(path, node_id=0).generate_producer_id()
    assert ProducerIdManager(path, node_id=0).generate_producer_id() == 1000


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        '{"version": 1}',
        '{"block_start": "5", "block_end": "2"}',
        '{"block_start": "x", "block_end": "2"}',
    ],
)
def test_unreadable_block_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "producer-id-block"
    path.write_text(content)
    with pytest.raises(ProducerIdBlockError, match=f" {path}"):
        ProducerIdManager(path, node_id=0)


def test_a_block_file_that_is_not_text_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    path.write_bytes(b'{"version":1,"broker":0,"block_start":"0","block_end":"9\x9c\xff"}')
    with pytest.raises(ProducerIdBlockError) as info:
        ProducerIdManager(path, node_id=0)
    assert str(info.value).startswith(f"cannot read the producer id block in {path}: 'utf-8' codec")


# -- the checksum: a flipped digit is refused, even one that leaves the end above the floor ---------------


def digit_changes(text: str) -> list[str]:
    """``text`` with one digit of one stored number replaced by each other digit, every way."""
    return [
        text[:i] + other + text[i + 1 :]
        for i, char in enumerate(text)
        if char.isdigit()
        for other in "0123456789"
        if other != char
    ]


def test_every_single_digit_change_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=3, block_size=4000)
    for _ in range(4001):
        manager.generate_producer_id()  # a second block: [4000, 7999]
    good = path.read_text()
    assert ProducerIdManager(path, node_id=3).generate_producer_id() == 8000
    path.write_text(good)
    changes = digit_changes(good)
    # every digit of version, broker, block_start, block_end and crc32c
    assert len(changes) == 9 * sum(c.isdigit() for c in good) > 9 * 10
    for changed in changes:
        path.write_text(changed)
        with pytest.raises(ProducerIdBlockError, match=f" {re.escape(str(path))}[: ]"):
            ProducerIdManager(path, node_id=3)


def test_a_checksum_mismatch_says_the_file_is_damaged(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    ProducerIdManager(path, node_id=0, block_size=4000).generate_producer_id()
    stored = json.loads(path.read_text())["crc32c"]
    path.write_text(path.read_text().replace('"block_end": "3999"', '"block_end": "2999"'))
    with pytest.raises(ProducerIdBlockError) as info:
        ProducerIdManager(path, node_id=0)
    actual = crc32c.crc32c(b'{"block_end":"2999","block_start":"0","broker":0,"version":2}')
    assert str(info.value) == (
        f"the producer id block in {path} is damaged: CRC32C {actual} of its content, {stored} stored; it is"
        " replaced atomically, so it was damaged on disk, and its end cannot be trusted (reusing producer"
        " ids would break idempotence)"
    )


def test_an_old_format_file_is_read_and_the_next_block_has_a_checksum(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    path.write_text('{"version": 1, "broker": 3, "block_start": "0", "block_end": "3"}')
    manager = ProducerIdManager(path, node_id=3, block_size=4)
    assert path.read_text() == '{"version": 1, "broker": 3, "block_start": "0", "block_end": "3"}'
    assert manager.generate_producer_id() == 4
    assert json.loads(path.read_text()) == {
        "version": 2,
        "broker": 3,
        "block_start": "4",
        "block_end": "7",
        "crc32c": crc32c.crc32c(b'{"block_end":"7","block_start":"4","broker":3,"version":2}'),
    }
    assert ProducerIdManager(path, node_id=3, block_size=4).generate_producer_id() == 8


@pytest.mark.parametrize(
    "content",
    [
        '{"version": 2, "broker": 0, "block_start": "0", "block_end": "3"}',  # version 2 without a checksum
        '{"version": 3, "broker": 0, "block_start": "0", "block_end": "3"}',  # a newer format
    ],
)
def test_a_block_file_without_its_checksum_or_of_an_unknown_version_is_refused(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "producer-id-block"
    path.write_text(content)
    with pytest.raises(
        ProducerIdBlockError, match=f"^cannot parse the producer id block in {re.escape(str(path))}: "
    ):
        ProducerIdManager(path, node_id=0)


# -- the floor: ids seen in use are never handed out, whatever the file says ------------------------------


def write_block(path: Path, start: int, end: int) -> None:
    record = {"version": 1, "broker": 0, "block_start": str(start), "block_end": str(end)}
    path.write_text(json.dumps(record))


def block(path: Path) -> tuple[int, int]:
    data = json.loads(path.read_text())
    return int(data["block_start"]), int(data["block_end"])


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "tidelog.producer_id" and r.levelname == "WARNING"
    ]


def test_a_block_below_the_floor_jumps_a_block_above_it_before_any_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "producer-id-block"
    write_block(path, 0, 3)  # an old copy: ids up to 10 were handed out since
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    assert manager.raise_floor(10, "partition t-0") is True
    assert block(path) == (15, 18)  # on disk before the first id: 11..14 are the margin
    expected = (
        f"producer id 10 is in use (partition t-0) but the producer id block in {path} ends at 3: the file"
        " was lost, damaged or restored from an old copy; producer ids go on from 15 (4 ids above the one"
        " in use are skipped for producers that were given ids and have not written yet)"
    )
    assert warnings_of(caplog) == [expected]
    assert [manager.generate_producer_id() for _ in range(5)] == [15, 16, 17, 18, 19]
    assert block(path) == (19, 22)
    assert ProducerIdManager(path, node_id=0, block_size=4).generate_producer_id() == 23


def test_a_missing_file_takes_the_floor_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    assert manager.raise_floor(7, "transactional id 'etl'") is True
    assert block(path) == (12, 15)
    assert [m.split(":")[0] for m in warnings_of(caplog)] == [
        f"producer id 7 is in use (transactional id 'etl') but the producer id block in {path} is missing"
    ]
    assert manager.generate_producer_id() == 12


@pytest.mark.parametrize("in_use", [-1, 0, 3])
def test_a_floor_at_or_below_the_reserved_end_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, in_use: int
) -> None:
    path = tmp_path / "producer-id-block"
    write_block(path, 0, 3)
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    assert manager.raise_floor(in_use, "partition t-0") is False
    assert block(path) == (0, 3)
    assert manager.generate_producer_id() == 4
    assert warnings_of(caplog) == []


def test_no_floor_on_a_fresh_broker(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    assert manager.raise_floor(-1, "nowhere") is False
    assert not path.exists()
    assert manager.generate_producer_id() == 0


def test_the_floor_applies_within_the_current_block(tmp_path: Path) -> None:
    """Ids already handed out from the block are never handed out again either way."""
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    assert [manager.generate_producer_id() for _ in range(2)] == [0, 1]
    assert manager.raise_floor(1, "partition t-0") is False
    assert manager.raise_floor(2, "partition t-0") is True
    assert block(path) == (7, 10)
    assert manager.generate_producer_id() == 7


def test_no_id_while_a_hold_is_open_then_the_highest_released_floor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "producer-id-block"
    write_block(path, 0, 3)
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    manager.hold("__transaction_state-1")
    manager.hold("__transaction_state-0")
    with pytest.raises(ProducerIdsNotReadyError, match="wait for __transaction_state-0 to load"):
        manager.generate_producer_id()
    manager.release("__transaction_state-0", 20, "transactional id 'a'")
    assert block(path) == (0, 3)  # nothing moves while a hold is open
    with pytest.raises(OSError, match="wait for __transaction_state-1 to load"):  # what callers catch
        manager.generate_producer_id()
    manager.release("__transaction_state-1", 9, "transactional id 'b'")
    assert manager.holds == frozenset()
    assert block(path) == (25, 28)
    assert [m.split(" but ")[0] for m in warnings_of(caplog)] == [
        "producer id 20 is in use (transactional id 'a')"
    ]
    assert manager.generate_producer_id() == 25


def test_releasing_without_ids_in_use_opens_the_block_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    write_block(path, 0, 3)
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    manager.hold("__transaction_state-0")
    manager.release("__transaction_state-0", -1, "nowhere")
    assert manager.generate_producer_id() == 4


def test_a_key_not_held_raises_the_floor_at_once(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    manager.hold("__transaction_state-0")
    manager.release("__transaction_state-7", 5, "transactional id 'c'")
    assert block(path) == (10, 13)
    assert manager.holds == frozenset({"__transaction_state-0"})


def test_a_jump_that_cannot_be_written_is_written_by_the_next_id(tmp_path: Path) -> None:
    path = tmp_path / "gone" / "producer-id-block"
    manager = ProducerIdManager(path, node_id=0, block_size=4)
    with pytest.raises(FileNotFoundError):
        manager.raise_floor(6, "partition t-0")
    with pytest.raises(FileNotFoundError):
        manager.generate_producer_id()  # still no block on disk: still no id
    path.parent.mkdir()
    assert manager.generate_producer_id() == 11
    assert block(path) == (11, 14)
