"""ProducerIdManager: blocks reserved on disk before use, ids unique across instances, bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidelog.server.producer_id_manager import ProducerIdBlockError, ProducerIdManager


def test_blocks_are_reserved_before_ids_are_handed_out(tmp_path: Path) -> None:
    path = tmp_path / "producer-id-block"
    manager = ProducerIdManager(path, node_id=3, block_size=4)
    assert not path.exists()
    assert manager.generate_producer_id() == 0
    assert json.loads(path.read_text()) == {"version": 1, "broker": 3, "block_start": "0", "block_end": "3"}
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
